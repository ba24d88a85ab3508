#!/usr/bin/env bash
# Configures and builds Kiln into build/ (or $KILN_BUILD_DIR). Used by the
# other scripts; safe to run again (Ninja only rebuilds what changed).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
build=${KILN_BUILD_DIR:-$root/build}
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
fi
# Two jobs per core fits 2 cores and 24 GiB; MLIR translation units are heavy.
ninja -C "$build" -j "${KILN_JOBS:-$(nproc)}"
