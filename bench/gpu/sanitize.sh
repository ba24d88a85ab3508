#!/usr/bin/env bash
# compute-sanitizer over Kiln's kernels on a GPU (issue 7): what the fake
# CUDA table's kernel isolation and the host emulation under ASan check
# without a GPU (tests/unit/cuda/FakeCudaApi.h), checked on the hardware.
# For the machine bench/gpu/check.sh runs on, after it, from the same
# inputs (bench/gpu/prepare.sh's --in DIR), in at most 4 minutes:
#
#   1. memcheck over the golden steps (small mlp, lenet5 and gpt packages,
#      f32/bf16/fp16: every fusion kind, the convolutions, cuBLASLt with its
#      epilogues, the fused attention; the kernels NVRTC-compiled there) and
#      the three convolutions' own test: every global load and store of a
#      generated or runtime kernel within its allocation;
#   2. racecheck over the fused attention's tests (its kernels share tiles
#      through shared memory behind barriers): no shared-memory hazard;
#   3. memcheck over the attention's tests (every variant the default
#      chooses, both layouts, forward and backward, and the backward's
#      "ds" variant, whose dK/dV stores dS tiles in the workspace and
#      whose dQ reads them: CudaGpuTest.AttentionDqFromStoredScores...);
#   4. memcheck over kiln-cuda-run stepping the MLP package (pinned staging
#      on a second stream, the step as a CUDA Graph).
#
# Each prints PASS, FAIL (the sanitizer's first reports) or SKIP: no
# compute-sanitizer, or it could not attach here (on gVisor it cannot;
# .library/device/KINDS.md). Exits non-zero when a step fails. Record the
# output in bench/RESULTS.md. Through the device tool, on the machine
# check.sh ran on (still warm):
#   run(command="set -o pipefail; bash bench/gpu/sanitize.sh --in
#       bench/gpu/out 2>&1 | tee $OUT/sanitize.txt", carry=["bench/gpu/out"],
#       timeout_s=280)
#
# Usage: bench/gpu/sanitize.sh [--in DIR]
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
in=$root/bench/gpu/out
while [ $# -gt 0 ]; do
  case $1 in
    --in) in=$2; shift 2 ;;
    *) echo "sanitize.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
budget=230
# (One NVRTC cache for the four runs: the kernels are compiled by the first.)
. "$root/bench/gpu/common.sh"
export KILN_CUDA_TEST_PACKAGE=$in/mlp.kpkg KILN_CUDA_GOLDEN_DIR=$in/golden

sanitizer=$(command -v compute-sanitizer || true)
if [ -z "$sanitizer" ] && command -v nvcc > /dev/null; then
  candidate=$(dirname "$(command -v nvcc)")/compute-sanitizer
  [ -x "$candidate" ] && sanitizer=$candidate
fi
[ -z "$sanitizer" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ] &&
  sanitizer=/usr/local/cuda/bin/compute-sanitizer
if [ -z "$sanitizer" ]; then
  skip "compute-sanitizer: not found beside nvcc or in /usr/local/cuda/bin"
  exit 0
fi

# check TOOL LABEL SECONDS COMMAND...: runs COMMAND under the sanitizer's
# TOOL. PASS when it ran, reported nothing and the command passed; FAIL on
# a report or a failing command; SKIP when the sanitizer never got to run
# it (it could not attach, or the GPU tests skipped under it).
check() {
  local tool=$1 label=$2 seconds=$3 file=$log/$1-$2.txt
  shift 3
  if [ "$(left)" -lt 20 ]; then
    skip "$tool $label: out of time"
    return
  fi
  [ "$seconds" -gt "$(left)" ] && seconds=$(left)
  timeout "$seconds" "$sanitizer" --tool "$tool" --error-exitcode 99 \
    --print-limit 10 "$@" > "$file" 2>&1
  local rc=$?
  local summary
  summary=$(grep -E "(ERROR|RACECHECK) SUMMARY" "$file" | tail -1 | sed 's/^=* *//')
  if grep -qE "ERROR SUMMARY: [1-9]|RACECHECK SUMMARY: [1-9]" "$file" ||
     [ $rc -eq 99 ]; then
    grep -E "^=========" "$file" | head -30
    fail "$tool $label: $summary"
  elif [ $rc -eq 124 ]; then
    tail -5 "$file"
    fail "$tool $label: still running after $seconds s"
  elif [ -z "$summary" ]; then
    tail -8 "$file"
    skip "$tool $label: compute-sanitizer did not run it here (rc $rc)"
  elif grep -q "SKIPPED" "$file"; then
    grep -E "Skipped|SKIPPED|no GPU|no CUDA" "$file" | head -5
    skip "$tool $label: the GPU tests skipped under the sanitizer"
  elif [ $rc -ne 0 ]; then
    tail -20 "$file"
    fail "$tool $label: the command failed (rc $rc) with $summary"
  else
    pass "$tool $label: $summary"
  fi
}

tests=$bin/kiln-cuda-runtime-tests
if [ -x "$tests" ]; then
  check memcheck golden-steps 120 "$tests" --gtest_brief=1 \
    --gtest_filter='CudaGpuTest.GoldenStepsMatchTheInterpreter:CudaGpuTest.ConvolutionsMatchTheirDefinition'
  check racecheck attention 80 "$tests" --gtest_brief=1 \
    --gtest_filter='CudaGpuTest.*Attention*'
  check memcheck attention 60 "$tests" --gtest_brief=1 \
    --gtest_filter='CudaGpuTest.*Attention*'
else
  fail "$tests missing (run prepare.sh)"
fi
if [ -x "$bin/kiln-cuda-run" ] && [ -f "$in/mlp.kpkg" ]; then
  check memcheck mlp-steps 40 "$bin/kiln-cuda-run" "$in/mlp.kpkg" \
    --data=synthetic --synthetic-size=256 --steps=4 --log-every=1
else
  fail "kiln-cuda-run or mlp.kpkg missing (run prepare.sh)"
fi
if [ -n "${OUT:-}" ]; then
  tar -czf "$OUT/sanitize-logs.tar.gz" -C "$log" --exclude=cache . 2>/dev/null
fi
rm -rf "$log"
exit $failed
