#!/usr/bin/env bash
# The main job on a fresh machine: install, build, write the zoo MLP, compile
# it into its fused and planned training step, and print its summary, the IR
# and the compile report. (Training it on the CPU comes with the CPU backend;
# until then `kiln train --backend=reference` trains on the interpreter.)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KILN_BUILD_DIR:-$root/build}
"$root/scripts/build.sh"
# build/tools/kiln is the CLI folder's build directory; the tool is build/bin/kiln.
kiln="$build/bin/kiln"
out=${KILN_OUT:-$root/out/quickstart}
mkdir -p "$out"

"$kiln" models mlp -o "$out/mlp.kiln"
"$kiln" inspect "$out/mlp.kiln"
"$kiln" compile "$out/mlp.kiln" --emit=mlir -o "$out/mlp.mlir" --dump-dir="$out/dumps"
cat "$out/mlp.mlir"
echo
"$kiln" compile "$out/mlp.kiln" --report 2>/dev/null
echo
echo "quickstart: graph file $out/mlp.kiln, compiled training step $out/mlp.mlir,"
echo "            IR after every pass, buffer report and step.dot in $out/dumps"
