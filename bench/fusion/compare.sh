#!/usr/bin/env bash
# The fusion and buffer-planning benchmark: for the training steps of the
# zoo's mlp, lenet5 and gpt, Kiln's kernels per step, modelled bytes and
# planned peak (kiln compile --report) beside XLA's kernel count for the same
# models in JAX (bench/fusion/xla_hlo.py), in one run.
# Usage: bench/fusion/compare.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
kiln="$build/bin/kiln"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

"$kiln" models mlp -o "$out/mlp.kiln" >/dev/null
"$kiln" models lenet5 -o "$out/lenet5.kiln" >/dev/null
"$kiln" models gpt --layers=2 --hidden=128 --heads=4 --seq=64 --vocab=512 --batch=8 \
  -o "$out/gpt.kiln" >/dev/null

python3 "$root/bench/fusion/xla_hlo.py" > "$out/xla.jsonl"
printf '%-7s %14s %14s %16s %14s %16s %8s\n' model kiln_kernels xla_kernels \
  kiln_MB_moved arena_MB lower_bound_MB ratio
for m in mlp lenet5 gpt; do
  report=$("$kiln" compile "$out/$m.kiln" --report 2>/dev/null)
  kernels=$(sed -n 's/^  kernels per step: *\([0-9]*\).*/\1/p' <<<"$report")
  bytes=$(sed -n 's/^  modelled bytes: *\([0-9]*\).*/\1/p' <<<"$report")
  arena=$(sed -n 's/^  planned arena: *\([0-9]*\) bytes.*/\1/p' <<<"$report")
  bound=$(sed -n 's/^  planned arena:.*lower bound \([0-9]*\),.*/\1/p' <<<"$report")
  xla=$(python3 -c "import json,sys; print(next(json.loads(l)['kernels'] for l in open(sys.argv[1]) if json.loads(l)['model']==sys.argv[2]))" "$out/xla.jsonl" "$m")
  python3 -c "import sys; m,k,x,b,a,lb=sys.argv[1:]; print('%-7s %14s %14s %16.2f %14.2f %16.2f %8.4f' % (m,k,x,int(b)/2**20,int(a)/2**20,int(lb)/2**20,int(a)/int(lb)))" \
    "$m" "$kernels" "$xla" "$bytes" "$arena" "$bound"
done
