#!/usr/bin/env bash
# Writes a seed corpus of valid (and a few deliberately broken) graph files
# for kiln-graph-fuzzer: the lit round-trip graphs, the lit JSON inputs, and
# the model zoo when the kiln CLI is built.
#
#   tests/fuzz/make-corpus.sh BUILD_DIR OUT_DIR
#
# BUILD_DIR is a normal build (with tools/kiln-translate); OUT_DIR is created.
set -euo pipefail
build=${1:?usage: make-corpus.sh BUILD_DIR OUT_DIR}
out=${2:?usage: make-corpus.sh BUILD_DIR OUT_DIR}
src=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"

for f in "$src"/tests/lit/serialize/*.mlir; do
  "$build/tools/kiln-translate" --mlir-to-kiln "$f" -o "$out/$(basename "$f" .mlir).kiln"
done
for f in "$src"/tests/lit/serialize/Inputs/*.json; do
  # future-attrs.json needs the extended schema of malformed-enums.test.
  flatc -b -o "$out" "$src/serialize/schema/graph.fbs" "$f" 2>/dev/null || true
done
if [ -x "$build/bin/kiln" ]; then
  "$build/bin/kiln" models mlp -o "$out/mlp.kiln" || true
  "$build/bin/kiln" models lenet5 -o "$out/lenet5.kiln" || true
  "$build/bin/kiln" models gpt --layers=1 --hidden=16 --heads=2 --seq=8 \
    --vocab=32 --batch=2 -o "$out/gpt.kiln" || true
fi
ls "$out" | wc -l | xargs echo "make-corpus: seeds:"
