#!/usr/bin/env bash
# Compile time of a GPT training step (Adam), Kiln beside XLA in one run:
# for each depth (default 12 and 24 blocks; hidden 768, 12 heads, sequence
# 1024, vocabulary 50304, batch 8: GPT-2 124M at 12), the wall time of
#   - kiln compile --target=cuda:sm_90 --amp=bf16 --emit=cuda (the pass
#     pipeline and the CUDA C++ of every kernel; NVRTC is not run), and its
#     kiln-fuse time (--timing);
#   - the same compiled to a package with a cold NVRTC cache
#     (KILN_CACHE_DIR=off: NVRTC and ptxas for every distinct kernel, on
#     every core);
#   - kiln compile -o step.kpkg for the CPU with a cold cache
#     (KILN_CACHE_DIR=off: the pipeline and every distinct kernel through
#     MLIR to -O3 LLVM bitcode, the -O3 on every core: --jobs' default),
#     again with --jobs=1, and a second compile with a cache the first
#     filled (the -O3 bitcode read from $KILN_CACHE_DIR/cpu-bitcode,
#     codegen/cpu/BitcodeCache.h);
#   - jax.jit's lower and compile of the same step for the CPU (XLA's passes
#     and its LLVM code generation; bench/fusion/xla_hlo.py --time, f32),
# and the ratio of Kiln's CPU compile to XLA's.
# Usage: bench/fusion/compile_time.sh [BUILD_DIR] [DEPTH...]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
shift || true
depths=("$@")
[ ${#depths[@]} -gt 0 ] || depths=(12 24)
kiln="$build/bin/kiln"
[ -x "$kiln" ] || { echo "compile_time.sh: $kiln not built" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

seconds() { # the wall time of "$@" in seconds, its output discarded
  local start end
  start=$(date +%s.%N)
  "$@" >/dev/null 2>&1
  end=$(date +%s.%N)
  python3 -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$start" "$end"
}

printf '%-6s %11s %7s %12s %10s %13s %15s %10s %9s\n' blocks kiln_cuda_s fuse_s cuda_pkg_s kiln_cpu_s kiln_cpu_j1_s kiln_cpu_warm_s xla_cpu_s kiln/xla
for L in "${depths[@]}"; do
  "$kiln" models gpt --layers="$L" --hidden=768 --heads=12 --seq=1024 --vocab=50304 \
    --batch=8 --optimizer=adam -o "$out/gpt$L.kiln" >/dev/null
  cuda=$(seconds "$kiln" compile "$out/gpt$L.kiln" --target=cuda:sm_90 --amp=bf16 \
    --emit=cuda -o "$out/cuda$L")
  fuse=$("$kiln" compile "$out/gpt$L.kiln" --target=cuda:sm_90 --amp=bf16 --timing \
    -o "$out/timed$L.mlir" 2>&1 | sed -n 's/^ *\([0-9.]*\) (.*KilnFuse$/\1/p')
  cudapkg=$(seconds env KILN_CACHE_DIR=off "$kiln" compile "$out/gpt$L.kiln" --target=cuda:sm_90 \
    --amp=bf16 -o "$out/cuda$L.kpkg")
  cpu=$(seconds env KILN_CACHE_DIR=off "$kiln" compile "$out/gpt$L.kiln" -o "$out/gpt$L.kpkg")
  cpu1=$(seconds env KILN_CACHE_DIR=off "$kiln" compile "$out/gpt$L.kiln" -o "$out/gpt$L-j1.kpkg" --jobs=1)
  seconds env KILN_CACHE_DIR="$out/cache$L" "$kiln" compile "$out/gpt$L.kiln" -o "$out/gpt$L-fill.kpkg" >/dev/null
  warm=$(seconds env KILN_CACHE_DIR="$out/cache$L" "$kiln" compile "$out/gpt$L.kiln" -o "$out/gpt$L-warm.kpkg")
  xla=$(python3 "$root/bench/fusion/xla_hlo.py" --model gpt --gpt "$L,768,12,1024,50304,8" --time \
    | python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['compile_s'])")
  python3 -c "import sys; L,c,f,p,k,k1,w,x=sys.argv[1:]; print('%-6s %11s %7.2f %12s %10s %13s %15s %10s %9.2f' % (L,c,float(f),p,k,k1,w,x,float(k)/float(x)))" \
    "$L" "$cuda" "$fuse" "$cudapkg" "$cpu" "$cpu1" "$warm" "$xla"
done
