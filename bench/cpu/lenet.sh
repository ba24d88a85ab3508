#!/usr/bin/env bash
# The CPU LeNet-5 training-step benchmark: milliseconds per step of the
# zoo's lenet5 (batch 128, f32, Adam 1e-3) for Kiln (kiln compile, run by
# kiln-bench-step), PyTorch eager, torch.compile and JAX jit
# (bench/cpu/lenet_peers.py), in one run, on the same CPUs (taskset) and
# thread count, in --rounds interleaved rounds (this VM's step times move by
# tens of percent from one run to the next; interleaving shares that out).
# Kiln's parameters and data are its own (kiln-bench-step: the package's
# initializers, random data); the peers share theirs. The numbers compared
# are step times only.
#
# Usage: bench/cpu/lenet.sh [--threads T] [--steps N] [--warmup W]
#                           [--rounds R] [--build DIR] [--model M]
#   --threads  threads for every contender (default 2)
#   --rounds   interleaved rounds (default 3); each contender's median step
#              time per round, then the median over rounds is compared
#   --build    the build directory holding bin/kiln and bin/kiln-bench-step
#   --model    lenet5 (default) or resnet: the zoo's ResNet-8 (width 16,
#              batch 128, batch norms in train mode)
# Needs scripts/install-peers.sh for PyTorch and JAX. Exits non-zero when a
# contender fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build
threads=2
steps=50
warmup=5
rounds=3
model=lenet5
while [[ $# -gt 0 ]]; do
  case $1 in
    --threads) threads=$2; shift 2 ;;
    --threads=*) threads=${1#*=}; shift ;;
    --steps) steps=$2; shift 2 ;;
    --steps=*) steps=${1#*=}; shift ;;
    --warmup) warmup=$2; shift 2 ;;
    --warmup=*) warmup=${1#*=}; shift ;;
    --rounds) rounds=$2; shift 2 ;;
    --rounds=*) rounds=${1#*=}; shift ;;
    --build) build=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --model=*) model=${1#*=}; shift ;;
    --build=*) build=${1#*=}; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "lenet.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for v in threads steps warmup rounds; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "lenet.sh: --$v: expected a number of at least 1, got '${!v}'" >&2; exit 2; }
done
for tool in kiln kiln-bench-step; do
  [[ -x $build/bin/$tool ]] || { echo "lenet.sh: missing $build/bin/$tool (scripts/build.sh builds it)" >&2; exit 1; }
done
cpus=$(python3 -c "import os,sys; a=sorted(os.sched_getaffinity(0)); t=int(sys.argv[1])
if t>len(a): sys.exit('lenet.sh: --threads %d but only %d CPUs are available' % (t,len(a)))
print(','.join(map(str,a[:t])))" "$threads")
pin=(taskset -c "$cpus")

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
[[ $model == lenet5 || $model == resnet ]] || { echo "lenet.sh: --model: expected lenet5 or resnet, got '$model'" >&2; exit 2; }
"$build/bin/kiln" models "$model" -o "$out/lenet.kiln" >/dev/null
"$build/bin/kiln" compile "$out/lenet.kiln" -o "$out/lenet.kpkg" 2>"$out/compile.err" ||
  { cat "$out/compile.err" >&2; exit 1; }
for ((r = 1; r <= rounds; ++r)); do
  "${pin[@]}" "$build/bin/kiln-bench-step" "$out/lenet.kpkg" --steps "$steps" \
    --warmup "$warmup" --threads "$threads" | grep '^{' | sed 's/^{/{"peer": "kiln", /' >>"$out/results"
  "${pin[@]}" python3 "$root/bench/cpu/lenet_peers.py" --threads "$threads" \
    --steps "$steps" --warmup "$warmup" --model "$model" --json | grep '^{' >>"$out/results"
done
echo "CPU cores: $cpus (taskset), threads $threads, $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')"
python3 - "$out/results" "$rounds" "$model" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    rows.setdefault(r["peer"], []).append(r["median_ms"])
rounds = int(sys.argv[2])
print(f"{'':<14} {'median ms/step (per round)':<40} {'median':>8}")
med = {}
for name in ("kiln", "torch", "torch.compile", "jax"):
    if name not in rows:
        print(f"{name:<14} n/a")
        continue
    med[name] = statistics.median(rows[name])
    per = " ".join(f"{v:.2f}" for v in rows[name])
    print(f"{name:<14} {per:<40} {med[name]:8.2f}")
peers = {k: v for k, v in med.items() if k != "kiln"}
if "kiln" in med and peers:
    best = min(peers, key=peers.get)
    print(f"kiln / fastest peer ({best}): {med['kiln'] / peers[best]:.3f}")
expected = ("kiln", "torch", "torch.compile", "jax")
missing = [n for n in expected if len(rows.get(n, [])) != rounds]
sys.exit(1 if missing else 0)
PY
