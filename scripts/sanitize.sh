#!/usr/bin/env bash
# Builds Kiln with sanitizers and runs its tests: AddressSanitizer,
# LeakSanitizer and UndefinedBehaviorSanitizer in build-asan/ (the test
# suites of the runtime, package loader, serializer, reference interpreter
# and BLAS calls; the CUDA suites whose kernels run on the host under
# codegen/cuda/CudaEmulation.h, the kernels instrumented as well, so that
# every load and store a generated or runtime kernel makes is checked
# against the buffer it belongs to; and the lit suite, all but its NVRTC
# run over every zoo kernel, through instrumented kiln, kiln-opt,
# kiln-translate and kiln-cuda-run), then
# ThreadSanitizer over the threaded runtime (thread pool, asynchronous
# collectives, Gloo, the TCP store, the NCCL fake, the data pipeline) in
# build-tsan/, and with KILN_TSAN_CLI=1 over `kiln train` and `kiln launch`
# too (lit's train/ and tools/launch* tests: mirrored replicas as threads,
# prefetching, checkpoints, several processes), which needs the whole
# compiler built under TSan: about 4 minutes more on two cores (the build
# 224 s instead of 110 s, the lit tests 128 s), which CI's 40 minutes
# no longer hold, so it is off by default. A report ends its
# process with a non-zero status, which fails its test. The suites run
# $KILN_JOBS (default: one per core) at a time.
#
#   scripts/sanitize.sh                 both
#   scripts/sanitize.sh address         ASan + UBSan only
#   scripts/sanitize.sh thread          TSan only
#
# scripts/test.sh runs it after ctest. Build directories:
# $KILN_ASAN_BUILD_DIR, $KILN_TSAN_BUILD_DIR.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
modes=("$@")
[ ${#modes[@]} -eq 0 ] && modes=(address thread)

# The instrumented code is Kiln's own; MLIR and LLVM come from Debian as
# they are.
address_targets=(kiln-package-tests kiln-runtime-tests kiln-runtime-cpu-tests
  kiln-runtime-dist-tests kiln-nccl-fake-tests kiln-serialize-tests
  kiln-reference-tests kiln-cpu-blas-tests)
# What the lit suite runs.
lit_tools=(kiln kiln-opt kiln-translate kiln-package-info kiln-trainer)
thread_targets=(kiln-runtime-tests kiln-runtime-cpu-tests
  kiln-runtime-dist-tests kiln-nccl-fake-tests)
if [ -x /usr/local/cuda/bin/nvcc ] || command -v nvcc >/dev/null; then
  # The emulated kernels first (the longest; tests/unit/cuda/HostKernels.h
  # builds them with the suite's sanitizers). Each of their arguments is
  # then an allocation of its own size (FakeCudaApi's isolateKernels): a
  # kernel's stray read is a heap-buffer-overflow where it happens. The
  # attention suite starts first and builds the runtime's attention
  # kernels (about 90 s under ASan) while the emulation suite, which needs
  # none of them, takes the other core; the step emulations, which wait
  # for that build, start after it (with the step emulations beside the
  # attention suite, one core sat idle for that build).
  address_targets=(kiln-cuda-attention-tests kiln-cuda-emulation-tests
    kiln-cuda-step-emulation-tests kiln-cuda-epilogue-fallback-tests
    kiln-cuda-backend-tests kiln-cuda-emulation-device-tests
    kiln-cuda-conv-tests kiln-cuda-nccl-step-tests kiln-cuda-runtime-tests
    "${address_targets[@]}")
  # nvtx.test loads the fake NVTX tool into kiln.
  lit_tools+=(kiln-cuda-run kiln-fake-nvtx)
fi
# NVRTC and ptxas (uninstrumented libraries) compiling every kernel for
# sm_90 say nothing about Kiln's memory: ctest runs those tests. Nor do
# the attention tests that compare two kernel variants' bits (two stages
# or one, 128 query rows or 64, dQ from stored scores or recomputed):
# each variant runs against the reference in a test of its own
# (TwoStagesInDynamicSharedMemory, ForwardAndDqOn128QueryRows,
# DqFromStoredScores), which ASan checks.
gtest_filter='-*Nvrtc*:CudaAttentionTest.*GiveTheSameBitsAs*:CudaAttentionTest.*GivesTheSameBitsAs*'
jobs=${KILN_JOBS:-$(nproc)}

# allow_user_poisoning=0: LLVM's BumpPtrAllocator, inlined into Kiln's
# instrumented code, poisons its slabs, and libMLIR's uninstrumented copy
# hands out the same slabs without unpoisoning them (a false
# use-after-poison in every MLIR parse).
export ASAN_OPTIONS="detect_leaks=1:allow_user_poisoning=0"
export LSAN_OPTIONS="suppressions=$root/scripts/sanitizers/lsan.supp"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/scripts/sanitizers/tsan.supp"

# Runs suite |3| of build |2| under sanitizer |1| from the build tree (as
# ctest runs it), leaving in directory |4| its line, its log, and a .failed
# mark if it failed.
run_suite() {
  local mode=$1 build=$2 t=$3 results=$4 binary start
  binary=$(find "$build/tests" -type f -name "$t" -perm -u+x | head -n 1)
  if [ -z "$binary" ]; then
    echo "sanitize.sh: $t was not built in $build" >"$results/$t.line"
    : >"$results/$t.log"
    touch "$results/$t.failed"
    return 0
  fi
  start=$(date +%s)
  if (cd "$(dirname "$binary")" && "$binary" --gtest_filter="$gtest_filter") \
      >"$results/$t.log" 2>&1; then
    echo "sanitize.sh: $mode: $t passed ($(grep -E '^\[  PASSED  \]' "$results/$t.log" | tail -1 | sed -e 's/\[  PASSED  \] //' -e 's/\.$//'), $(( $(date +%s) - start )) s)" >"$results/$t.line"
  else
    echo "sanitize.sh: $mode: $t FAILED; the end of its output:" >"$results/$t.line"
    touch "$results/$t.failed"
  fi
}

# The gist of failed log |1| for the end of the output (CI shows its
# tail): the failed tests, the first two assertion failures, and the first
# sanitizer report's headings with the top three frames of each stack.
gist() {
  grep -E '^\[  FAILED  \] .+\([0-9]+ ms\)$' "$1" | sort -u | head -n 8 || true
  grep -m 2 -A 6 -E ': Failure$' "$1" | cut -c 1-300 || true
  awk '/WARNING: ThreadSanitizer|ERROR: (Address|Leak)Sanitizer|runtime error/ {
         on = 1; n = 0 }
       on && /^ *#[0-9]+ / { split($1, f, "#"); if (f[2] + 0 > 2) next }
       on && /^SUMMARY|^====|^  Mutex / && n > 0 { exit }
       on { print substr($0, 1, 300); if (++n >= 24) exit }' "$1"
}

failed=0
ran=0
gists=$(mktemp)
for mode in "${modes[@]}"; do
  case "$mode" in
  address)
    build=${KILN_ASAN_BUILD_DIR:-$root/build-asan}
    flags=address,undefined
    targets=("${address_targets[@]}" "${lit_tools[@]}")
    ;;
  thread)
    build=${KILN_TSAN_BUILD_DIR:-$root/build-tsan}
    flags=thread
    targets=("${thread_targets[@]}")
    [ "${KILN_TSAN_CLI:-0}" = 1 ] && targets+=("${lit_tools[@]}")
    ;;
  *)
    echo "sanitize.sh: unknown mode '$mode': expected address or thread" >&2
    exit 2
    ;;
  esac
  if [ ! -f "$build/build.ninja" ]; then
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
      -DKILN_SANITIZE="$flags" >/dev/null
  fi
  start=$(date +%s)
  ninja -C "$build" -j "$jobs" "${targets[@]}"
  echo "sanitize.sh: $mode build took $(( $(date +%s) - start )) s"
  results=$(mktemp -d)
  suites=()
  for t in "${targets[@]}"; do
    case " ${lit_tools[*]} " in *" $t "*) continue ;; esac
    suites+=("$t")
  done
  # $jobs suites at a time; each leaves its line (and, failed, its log) in
  # $results, printed in order once all are done.
  running=0
  start=$(date +%s)
  for t in "${suites[@]}"; do
    if [ "$running" -ge "$jobs" ]; then
      wait -n || true
      running=$((running - 1))
    fi
    run_suite "$mode" "$build" "$t" "$results" &
    running=$((running + 1))
  done
  wait
  echo "sanitize.sh: $mode suites took $(( $(date +%s) - start )) s ($jobs at a time)"
  for t in "${suites[@]}"; do
    ran=$((ran + 1))
    cat "$results/$t.line"
    if [ -f "$results/$t.failed" ]; then
      failed=$((failed + 1))
      tail -n 60 "$results/$t.log"
      { echo "sanitize.sh: $mode: $t failed:"; gist "$results/$t.log"; } >>"$gists"
    fi
  done
  rm -rf "$results"
  # lit passes the sanitizers' options through to the tools it runs: all
  # of it under ASan but tools/compile-cuda.test (a minute of NVRTC and
  # ptxas on every zoo kernel; the step emulations emit the same kernels
  # under ASan), train/memory-budget-cuda.test and
  # train/memory-budget-resnet.test (memory-budget.test's budget search
  # again, for a CUDA step and a ResNet's) and peers/bench-gpu-peers.test
  # (PyTorch and JAX alone, no Kiln tool), the threaded commands under
  # TSan (with KILN_TSAN_CLI=1).
  filter=.
  filter_out='tools/compile-cuda\.test|train/memory-budget-(cuda|resnet)\.test|peers/bench-gpu-peers\.test'
  if [ "$mode" = thread ]; then
    [ "${KILN_TSAN_CLI:-0}" = 1 ] || continue
    filter='train/|tools/launch'
  fi
  # The kernel caches the plain build's lit run filled (NVRTC's cubins,
  # the CPU kernels' -O3 bitcode and objects): the same kernels compiled
  # by the same uninstrumented NVRTC and LLVM, which a sanitizer has
  # nothing to say about (about three minutes of the ASan run on two
  # cores). The tests of the caches themselves name caches of their own.
  cache=()
  plain=${KILN_BUILD_DIR:-$root/build}/tests/lit
  [ -d "$plain/kiln-cache" ] && cache=(--param "kiln_cache_dir=$plain/kiln-cache")
  # lit starts the tests that took longest last time first; a fresh tree
  # has no times and would start them in path order, the longest (train/)
  # last, leaving a core idle at the end (about 80 s of a clean
  # checkout's ASan run on two cores). The plain run's times order them
  # nearly as well.
  if [ ! -f "$build/tests/lit/.lit_test_times.txt" ] && [ -f "$plain/.lit_test_times.txt" ]; then
    cp "$plain/.lit_test_times.txt" "$build/tests/lit/.lit_test_times.txt"
  fi
  ran=$((ran + 1))
  log=$(mktemp)
  start=$(date +%s)
  if python3 /usr/lib/llvm-19/build/utils/lit/lit.py -j "$(nproc)" "${cache[@]}" \
      --filter "$filter" --filter-out "$filter_out" "$build/tests/lit" >"$log" 2>&1; then
    echo "sanitize.sh: $mode: lit passed ($(grep -E '^ *Passed *:' "$log" | tr -s ' '| sed 's/^ //'), $(( $(date +%s) - start )) s)"
  else
    failed=$((failed + 1))
    echo "sanitize.sh: $mode: lit FAILED; its failures:"
    sed -n '/^Failed Tests/,$p' "$log"
    grep -m 3 -B 2 -A 30 -E 'ERROR: (Address|Leak)Sanitizer|WARNING: ThreadSanitizer|runtime error' "$log" || true
    { echo "sanitize.sh: $mode: lit failed:"; sed -n '/^Failed Tests/,/^$/p' "$log" | head -n 12
      gist "$log"; } >>"$gists"
  fi
  rm -f "$log"
done
# What failed, again at the end, where a CI log's tail shows it.
cat "$gists"
rm -f "$gists"
echo "sanitize.sh: $((ran - failed)) of $ran sanitized test runs passed"
[ "$failed" -eq 0 ]
