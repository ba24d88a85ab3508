# What bench/gpu/check.sh and bench/gpu/sanitize.sh share; sourced after
# they set |budget| (seconds for the whole run) and parsed --in into |in|.
# Each step prints PASS, FAIL or SKIP with its reason; a FAIL makes the
# script exit non-zero (|failed|). left() says how many seconds of the
# budget remain (at least 5, for a last timeout). bin: the prepared
# binaries; log: a fresh directory for the steps' logs, holding the
# runtime's NVRTC and autotuning cache (KILN_CACHE_DIR), so a run compiles
# and times everything afresh. NVRTC (the golden packages hold kernel
# source) needs cuda_fp16.h and cuda_bf16.h: the toolkit's include
# directory, found beside nvcc.
failed=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failed=1; }
skip() { echo "SKIP $*"; }
deadline=$((SECONDS + budget))
left() { local l=$((deadline - SECONDS)); [ $l -gt 5 ] && echo $l || echo 5; }
bin=$in/bin
log=$(mktemp -d)
export KILN_CACHE_DIR=$log/cache
if [ -z "${KILN_CUDA_INCLUDE_DIR:-}" ] && command -v nvcc > /dev/null; then
  export KILN_CUDA_INCLUDE_DIR=$(cd "$(dirname "$(command -v nvcc)")/../include" && pwd)
fi
