#!/usr/bin/env bash
# Writes a seed corpus of step packages for kiln-package-fuzzer: the zoo's
# MLP, GPT and LeNet-5 compiled small for the CPU and for CUDA (f32 and
# bf16; data-parallel and ZeRO packages with collectives), each without its
# kernels' code (kiln-package-strip).
#
#   tests/fuzz/make-package-corpus.sh BUILD_DIR OUT_DIR
#
# BUILD_DIR is a -DKILN_FUZZ=ON build with kiln; OUT_DIR is created.
set -euo pipefail
build=${1:?usage: make-package-corpus.sh BUILD_DIR OUT_DIR}
out=${2:?usage: make-package-corpus.sh BUILD_DIR OUT_DIR}
kiln="$build/bin/kiln"
strip="$build/tests/fuzz/kiln-package-strip"
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export KILN_CACHE_DIR="$work/cache"

"$kiln" models mlp --layers=8,6,4 --batch=2 -o "$work/mlp.kiln"
"$kiln" models gpt --layers=1 --hidden=16 --heads=2 --seq=8 --vocab=16 \
  --batch=1 -o "$work/gpt.kiln"
"$kiln" models lenet5 --batch=1 -o "$work/lenet.kiln"
compile() { # NAME MODEL FLAGS...
  local name=$1 model=$2
  shift 2
  "$kiln" compile "$work/$model.kiln" "$@" -o "$work/$name.kpkg" 2>/dev/null
  "$strip" "$work/$name.kpkg" "$out/$name.kpkg"
}
compile cpu-mlp mlp
compile cpu-zero mlp --strategy=zero1 --world-size=2
compile cpu-gpt gpt
compile cuda-mlp mlp --target=cuda
compile cuda-mlp-bf16 mlp --target=cuda --amp=bf16
compile cuda-dp mlp --target=cuda --strategy=data-parallel --world-size=2
compile cuda-gpt gpt --target=cuda --amp=bf16
compile cuda-lenet lenet --target=cuda
ls "$out" | wc -l | xargs echo "make-package-corpus: seeds:"
