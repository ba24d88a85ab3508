#!/usr/bin/env bash
# The main job on a fresh machine: install, build, write the zoo MLP
# (784-512-256-10, Adam 1e-3, batch 128), compile it into a package, train it
# on Fashion-MNIST on the CPU for one epoch data-parallel on two processes
# (kiln launch) and then for 10 epochs in one, with an eval pass after each,
# and check the test accuracy reaches 88%; then pack it into a standalone
# trainer (kiln pack) and run that; on the way, where its step's time goes
# (--profile). Prints where the package, the checkpoints, the metrics, the
# trainer and the IR dumps are.
#
# KILN_OUT (default out/quickstart) is where everything goes;
# KILN_EPOCHS (default 10) shortens a trial run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KILN_BUILD_DIR:-$root/build}
"$root/scripts/build.sh"
# build/tools/kiln is the CLI folder's build directory; the tool is build/bin/kiln.
kiln="$build/bin/kiln"
out=${KILN_OUT:-$root/out/quickstart}
epochs=${KILN_EPOCHS:-10}
rm -rf "$out"
mkdir -p "$out"

"$kiln" models mlp -o "$out/mlp.kiln"
"$kiln" inspect "$out/mlp.kiln"
# The compiled step as a package, with the IR after every pass.
"$kiln" compile "$out/mlp.kiln" -o "$out/mlp.kpkg" --dump-dir="$out/dumps" 2>/dev/null
"$kiln" compile "$out/mlp.kiln" --report 2>/dev/null
echo
"$kiln" train "$out/mlp.kpkg" --data=fashion-mnist --epochs=1 --max-steps=50 \
  --log-every=25 | tail -n 3
echo
# Where the step's time goes: each kernel and GEMM, timed over 5 steps.
"$kiln" train "$out/mlp.kpkg" --data=fashion-mnist --max-steps=8 --log-every=8 \
  --eval-data=none --profile="$out/profile.csv" | grep -A 6 "profile of"
echo
# Data parallelism: kiln launch starts two processes; each trains on its half
# of the epoch with batch 128 (global batch 256), the gradients all-reduced
# in buckets during the backward pass (docs/distributed.md). One epoch.
"$kiln" launch --nproc-per-node=2 -- "$kiln" train "$out/mlp.kiln" \
  --strategy=data-parallel --data=fashion-mnist --epochs=1 --log-every=117 \
  --checkpoint-dir="$out/checkpoints-data-parallel"
echo
"$kiln" train "$out/mlp.kiln" --data=fashion-mnist --epochs="$epochs" --log-every=468 \
  --checkpoint-dir="$out/checkpoints" --checkpoint-every=1000 \
  --metrics-file="$out/metrics.jsonl" --tensorboard-dir="$out/tensorboard"

# The same model as one standalone trainer (kiln pack: the step, its eval
# step and its kernels compiled ahead of time; no MLIR or LLVM needed to run
# it), trained for 50 steps.
echo
"$kiln" pack "$out/mlp.kiln" -o "$out/mlp-trainer"
"$out/mlp-trainer" --data=fashion-mnist --max-steps=50 --log-every=25 --eval-data=none | tail -n 2

accuracy=$(tail -n 1 "$out/metrics.jsonl" | sed -E 's/.*"test_accuracy": ([0-9.]+).*/\1/')
echo
echo "quickstart: test accuracy after $epochs epochs: $accuracy (target 0.88)"
echo "quickstart: graph file      $out/mlp.kiln"
echo "            package         $out/mlp.kpkg (kiln train $out/mlp.kpkg trains it as it is)"
echo "            IR dumps        $out/dumps (IR after every pass, buffer report, step.dot)"
echo "            checkpoints     $out/checkpoints (latest: $(cat "$out/checkpoints/latest"))"
echo "            data-parallel   $out/checkpoints-data-parallel (2 ranks, 1 epoch)"
echo "            metrics         $out/metrics.jsonl"
echo "            profile         $out/profile.csv (each thunk's milliseconds per step)"
echo "            trainer         $out/mlp-trainer (kiln pack: a standalone executable; --help)"
echo "            TensorBoard     $out/tensorboard (tensorboard --logdir $out/tensorboard)"
if [ "$epochs" -ge 10 ]; then
  awk -v a="$accuracy" 'BEGIN { exit !(a >= 0.88) }' ||
    { echo "quickstart: error: test accuracy $accuracy is below 0.88" >&2; exit 1; }
fi
