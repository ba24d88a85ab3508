#!/usr/bin/env bash
# Writes a seed corpus for kiln-onnx-fuzzer: the ONNX models the lit import
# tests wrote (both PyTorch exporters' models, the onnx.helper variants and
# the refused models), each under 64 KiB. Run the lit import suite of
# BUILD_DIR first (it needs torch and onnx).
#
#   tests/fuzz/make-onnx-corpus.sh BUILD_DIR OUT_DIR
set -euo pipefail
build=${1:?usage: make-onnx-corpus.sh BUILD_DIR OUT_DIR}
out=${2:?usage: make-onnx-corpus.sh BUILD_DIR OUT_DIR}
lit_out=$build/tests/lit/import/Output
if [ ! -d "$lit_out" ]; then
  echo "make-onnx-corpus: $lit_out does not exist: run the lit import tests first" >&2
  exit 1
fi
mkdir -p "$out"
cd "$lit_out"
find . -name '*.onnx' -size -64k | while read -r f; do
  name=${f#./}
  cp "$f" "$out/${name//\//_}"
done
ls "$out" | wc -l | xargs echo "make-onnx-corpus: seeds:"
