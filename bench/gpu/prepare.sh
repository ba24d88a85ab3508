#!/usr/bin/env bash
# Prepares bench/gpu/check.sh's inputs on the CPU build machine (which has
# MLIR and the CUDA toolkit but no GPU): the CUDA packages of the zoo MLP
# (f32) and of the benchmark GPT (12 layers, hidden 768, 12 heads, sequence
# 1024, vocabulary 50304, batch 8, --amp=bf16) for sm_90, their kernel
# sources and PTX, and the test binaries check.sh runs. Everything goes to
# OUT (default bench/gpu/out), which is what to copy to the GPU machine
# together with the build's bin/ and tests/unit/cuda/.
#
# Usage: bench/gpu/prepare.sh [--build DIR] [--out DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build
out=$root/bench/gpu/out
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "prepare.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
kiln=$build/bin/kiln
[ -x "$kiln" ] || { echo "prepare.sh: $kiln not built" >&2; exit 1; }
mkdir -p "$out"
"$kiln" models mlp -o "$out/mlp.kiln"
"$kiln" models gpt --layers=12 --hidden=768 --heads=12 --seq=1024 \
  --vocab=50304 --batch=8 -o "$out/gpt.kiln"
"$kiln" compile "$out/mlp.kiln" --target=cuda:sm_90 -o "$out/mlp.kpkg" --report \
  > "$out/mlp.report.txt"
"$kiln" compile "$out/gpt.kiln" --amp=bf16 --target=cuda:sm_90 \
  -o "$out/gpt-bf16.kpkg" --report > "$out/gpt-bf16.report.txt"
"$kiln" compile "$out/gpt.kiln" --amp=bf16 --target=cuda:sm_90 --emit=cuda \
  -o "$out/gpt-bf16-src"
mkdir -p "$out/bin"
cp "$kiln" "$out/bin/"
for t in kiln-cuda-device-tests kiln-cuda-emulation-tests; do
  [ -x "$build/tests/unit/cuda/$t" ] && cp "$build/tests/unit/cuda/$t" "$out/bin/"
done
echo "prepared $out: copy it to the GPU machine and run bench/gpu/check.sh --in $out"
