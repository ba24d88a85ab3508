#!/usr/bin/env bash
# The main job on a fresh machine: install, build, write the zoo MLP, compile
# it and print its summary and IR.
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
"$kiln" compile "$out/mlp.kiln" --emit=mlir -o "$out/mlp.mlir"
cat "$out/mlp.mlir"
echo
echo "quickstart: graph file $out/mlp.kiln, IR $out/mlp.mlir"
