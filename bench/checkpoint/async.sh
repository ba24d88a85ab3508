#!/usr/bin/env bash
# kiln train --checkpoint-async against synchronous checkpoints: the wall
# time of the same run (an MLP 784-2048-2048-10 with Adam, about 5.8M
# parameters, so a checkpoint of about 67 MiB with its two moments, batch
# 128 on synthetic data), checkpointing every 10 steps, and without
# checkpoints but the last. Each configuration runs $REPEATS times (default
# 3); the minimum counts. Prints each time and the ratios; the files of the
# two checkpointing runs are compared byte for byte.
#
#   bench/checkpoint/async.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
kiln=$build/bin/kiln
repeats=${REPEATS:-3}
steps=${STEPS:-60}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$kiln" models mlp --layers=784,2048,2048,10 --batch=128 --optimizer=adam \
  -o "$work/mlp.kiln" > /dev/null
# Compiled once, so that every run times training only.
"$kiln" train "$work/mlp.kiln" --data=synthetic --max-steps=1 --eval-data=none \
  --dump-dir="$work/pkg" > /dev/null
run() { # NAME FLAGS...: the minimum wall time in seconds
  local name=$1 best=""
  shift
  for _ in $(seq "$repeats"); do
    rm -rf "$work/$name"
    local start end
    start=$(date +%s.%N)
    "$kiln" train "$work/pkg/step.kpkg" --data=synthetic --max-steps="$steps" \
      --eval-data=none --log-every="$steps" --checkpoint-dir="$work/$name" "$@" \
      > "$work/$name.log"
    end=$(date +%s.%N)
    best=$(python3 -c "import sys; t=$end-$start; b='$best'; print(min(t, float(b)) if b else t)")
  done
  echo "$best"
}
none=$(run none)
sync=$(run sync --checkpoint-every=10)
async=$(run async --checkpoint-every=10 --checkpoint-async)
for k in $(seq 10 10 "$steps"); do
  cmp "$work/sync/step-$k.safetensors" "$work/async/step-$k.safetensors"
done
size=$(stat -c %s "$work/sync/step-$steps.safetensors")
python3 - "$none" "$sync" "$async" "$size" "$steps" <<'PY'
import sys
none, sync, asyn, size, steps = map(float, sys.argv[1:])
print(f"{int(steps)} steps, a checkpoint of {size / 2**20:.1f} MiB every 10 steps (min of runs):")
print(f"  checkpoint at the end only: {none:.2f} s")
print(f"  synchronous checkpoints:    {sync:.2f} s ({(sync - none) / (steps / 10):.3f} s per checkpoint beyond the run)")
print(f"  --checkpoint-async:         {asyn:.2f} s ({(asyn - none) / (steps / 10):.3f} s per checkpoint beyond the run)")
print(f"  async / sync: {asyn / sync:.3f}; checkpoint files identical")
PY
