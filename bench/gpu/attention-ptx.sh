#!/usr/bin/env bash
# Static instruction counts of the fused attention's kernels, without a GPU:
# the runtime's kernel source for sm_90 (attentionKernelSource(90),
# runtime/cuda/CudaAttention.h) through `nvcc -ptx`, and per entry point
# matching REGEX the PTX instructions, ex2 (P's exponentials) and mma.sync
# (tensor-core products) it holds. Static counts, not a timing: an unrolled
# loop's body counts once per copy. bench/RESULTS.md records what they
# were before and after a change to the kernels.
#
# Usage: bench/gpu/attention-ptx.sh [REGEX]   (default: bf16 head dim 64)
# Needs scripts/build.sh's build tree ($KILN_BUILD_DIR, default build/) and
# the CUDA toolkit's nvcc.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${KILN_BUILD_DIR:-$root/build}
regex=${1:-'^kiln_attn_(fwd|bwd_dkdv|bwd_dq)_bf16_mma64(p|ds|q128)?$'}
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/dump.cpp" <<'CPP'
#include "runtime/cuda/CudaAttention.h"
#include <cstdio>
int main() { std::fputs(kiln::runtime::cuda::attentionKernelSource(90).c_str(), stdout); }
CPP
libs=$(find "$build/runtime" "$build/serialize" -maxdepth 1 -name '*.a' | tr '\n' ' ')
${CXX:-clang++} -std=c++20 -O1 -I"$root" -I"$build" "$work/dump.cpp" \
  -Wl,--start-group $libs -Wl,--end-group -ldl -lpthread -lz -o "$work/dump"
"$work/dump" > "$work/attention.cu"
"$nvcc" -std=c++17 -arch=sm_90 -ptx -w -o "$work/attention.ptx" -x cu "$work/attention.cu"
printf '%-36s %8s %5s %9s\n' kernel ptx ex2 mma.sync
grep -oE '^\.visible \.entry [a-z0-9_]+' "$work/attention.ptx" | awk '{print $3}' |
  grep -E "$regex" | sort | while read -r k; do
    awk -v k="$k" '$0 ~ "^.visible .entry "k"\\(" {on=1} on && /^}/ {on=0} on' \
      "$work/attention.ptx" > "$work/body"
    printf '%-36s %8d %5d %9d\n' "$k" "$(grep -cE '^\s+[a-z@]' "$work/body")" \
      "$(grep -c 'ex2\.approx' "$work/body")" "$(grep -c 'mma\.sync' "$work/body")"
  done
