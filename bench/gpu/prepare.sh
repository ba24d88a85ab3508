#!/usr/bin/env bash
# Prepares bench/gpu/check.sh's inputs on the CPU build machine (which has
# MLIR and the CUDA toolkit but no GPU): the CUDA packages of the zoo MLP
# (f32) and of the benchmark GPT (12 layers, hidden 768, 12 heads, sequence
# 1024, vocabulary 50304, batch 8, --amp=bf16) for sm_90; the MLP's first 20
# losses on the reference interpreter (the GPU must reproduce them step by
# step); golden steps (small mlp, lenet5 and gpt packages, f32 and bf16,
# with the interpreter's outputs); the GPT step's tokens and model FLOPs (peers.py's formula); the
# binaries that run there, none of which links LLVM or MLIR
# (kiln-cuda-run, kiln-cuda-runtime-tests, kiln-cuda-device-tests, and the
# MLP packed as a GPU trainer by kiln pack --target=cuda); and
# Fashion-MNIST's training split when it is at hand and fits. Everything
# goes to OUT (default bench/gpu/out, ignored by git), which is what to copy
# to the GPU machine beside the repository's bench/gpu (at most 64 MiB; a
# remote runner that copies the working tree must be told to carry it).
#
# Usage: bench/gpu/prepare.sh [--build DIR] [--out DIR] [--no-data]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build
out=$root/bench/gpu/out
data=1
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --no-data) data=0; shift ;;
    *) echo "prepare.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
kiln=$build/bin/kiln
[ -x "$kiln" ] || { echo "prepare.sh: $kiln not built" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out/bin"
"$kiln" models mlp -o "$out/mlp.kiln"
"$kiln" models gpt --layers=12 --hidden=768 --heads=12 --seq=1024 \
  --vocab=50304 --batch=8 -o "$out/gpt.kiln"
"$kiln" compile "$out/mlp.kiln" --target=cuda:sm_90 -o "$out/mlp.kpkg" --report \
  > "$out/mlp.report.txt" 2>&1
# The same model as a standalone GPU trainer (kiln pack --target=cuda).
"$kiln" pack "$out/mlp.kiln" --target=cuda:sm_90 -o "$out/bin/mlp-gpu-trainer" > /dev/null
"$kiln" compile "$out/gpt.kiln" --amp=bf16 --target=cuda:sm_90 \
  -o "$out/gpt-bf16.kpkg" --report > "$out/gpt-bf16.report.txt" 2>&1
# The step's roofline prediction, for check.sh to print beside the measurement.
"$kiln" inspect "$out/gpt-bf16.kpkg" --roofline --top=25 > "$out/gpt-bf16.roofline.txt"
# And with the attention backward's "ds" variant (dQ from the dS tiles
# dK/dV stores), which the autotuner may choose there.
"$kiln" inspect "$out/gpt-bf16.kpkg" --roofline --top=25 --assume=attention-dq=stored \
  > "$out/gpt-bf16.roofline-ds.txt"
# The same step with each layer norm's dx and its scale/bias gradients'
# first stage in two kernels (--row-groups=off): the rowgroup.block layout
# walks a group's 32 rows in order behind barriers, which only a GPU can
# say is faster than re-reading x and dy (check.sh times both).
"$kiln" compile "$out/gpt.kiln" --amp=bf16 --target=cuda:sm_90 --row-groups=off \
  -o "$out/gpt-bf16-rowgroups-off.kpkg"
"$kiln" inspect "$out/gpt-bf16-rowgroups-off.kpkg" --roofline --top=25 \
  > "$out/gpt-bf16-rowgroups-off.roofline.txt"
# The same step under --memory-budget=4.2GiB (130 of its 159 activations
# recomputed, predicted +7% over no recomputation where --remat=full is
# +20%): what the recomputation costs on the GPU (check.sh times it).
"$kiln" compile "$out/gpt.kiln" --amp=bf16 --target=cuda:sm_90 --memory-budget=4.2GiB \
  -o "$out/gpt-bf16-budget.kpkg" > "$out/gpt-bf16-budget.report.txt" 2>&1
"$kiln" inspect "$out/gpt-bf16-budget.kpkg" --roofline --top=25 \
  > "$out/gpt-bf16-budget.roofline.txt"
# The reference: the MLP's first 20 steps on the interpreter, synthetic data
# in file order (kiln-cuda-run --no-shuffle=1 --synthetic-size=1024 draws the
# same batches).
"$kiln" train "$out/mlp.kiln" --backend=reference --data=synthetic --no-shuffle \
  --max-steps=20 --log-every=1 --eval-data=none > "$out/mlp.reference-losses.txt"
# And its eval after those 20 steps on 256 synthetic samples (check.sh runs
# the GPU trainer's eval step, in the training step's memory, against it).
"$kiln" train "$out/mlp.kiln" --backend=reference --data=synthetic --no-shuffle \
  --max-steps=20 --log-every=20 --eval-data=synthetic --eval-subset=256 \
  > "$out/mlp.reference-eval.txt"
python3 "$root/bench/gpu/peers.py" --flops > "$out/gpt.flops"
# Golden steps: small mlp, lenet5 and gpt steps (f32, bf16; every fusion
# kind and the convolutions) with
# the reference interpreter's outputs, checked here on the emulated kernels.
KILN_CUDA_GOLDEN_DIR=$out/golden "$build/tests/unit/cuda/kiln-cuda-step-emulation-tests" \
  --gtest_brief=1 > "$out/golden.log" 2>&1 \
  || { cat "$out/golden.log" >&2; echo "prepare.sh: the golden steps failed" >&2; exit 1; }
for t in bin/kiln-cuda-run tests/unit/cuda/kiln-cuda-runtime-tests \
         tests/unit/cuda/kiln-cuda-device-tests \
         tests/unit/cuda/kiln-cuda-nccl-gpu-tests; do
  [ -x "$build/$t" ] || { echo "prepare.sh: $build/$t not built" >&2; exit 1; }
  cp "$build/$t" "$out/bin/"
  if ldd "$out/bin/$(basename "$t")" | grep -qiE 'libLLVM|libMLIR|libcuda\.so'; then
    echo "prepare.sh: $t links LLVM, MLIR or libcuda: it cannot run on the GPU machine" >&2
    exit 1
  fi
done
fm=/usr/share/datasets/fashion-mnist
if [ "$data" = 1 ] && [ -f "$fm/train-images-idx3-ubyte.gz" ]; then
  mkdir -p "$out/fashion-mnist"
  cp "$fm"/train-*-ubyte.gz "$out/fashion-mnist/"
fi
size=$(du -sm "$out" | cut -f1)
echo "prepared $out ($size MiB): copy it to the GPU machine and run bench/gpu/check.sh --in $out"
if [ "$size" -gt 64 ]; then
  echo "prepare.sh: $out is over 64 MiB: rerun with --no-data" >&2
  exit 1
fi
