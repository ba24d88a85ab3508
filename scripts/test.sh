#!/usr/bin/env bash
# Installs what is missing, builds everything, runs every test (lit and
# GoogleTest, through ctest), then the runtime's suites under sanitizers
# (scripts/sanitize.sh), and ends with a pass/fail count.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KILN_BUILD_DIR:-$root/build}
# Each phase prints its wall time (CI's limit is on the sum).
start=$(date +%s)
"$root/scripts/build.sh"
echo "test.sh: build took $(( $(date +%s) - start )) s"
# Peer libraries (numpy, JAX, PyTorch) for the comparison tests; without
# them those tests skip and say so.
start=$(date +%s)
"$root/scripts/install-peers.sh" || echo "test.sh: peer libraries unavailable; peer tests will skip"
echo "test.sh: peer libraries took $(( $(date +%s) - start )) s"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
start=$(date +%s)
(cd "$build" && ctest --output-on-failure -j "$(nproc)" --timeout 1200) 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
echo "test.sh: ctest took $(( $(date +%s) - start )) s"

# ctest counts the lit suite as one test; report lit's own counts too.
# The status is the word after the dots (test names may contain "Failed").
passed=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .* +Passed +[0-9.]+ sec' "$log" || true)
failed=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*\*\*\*(Failed|Exception|Timeout|Not Run)' "$log" || true)
skipped=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*\*\*\*Skipped' "$log" || true)
lit_summary=$(grep -E '^ *(Passed|Failed|Unsupported|Expectedly Failed) *:' "$log" | tr -s ' ' | paste -sd ',' - || true)
[ -n "$lit_summary" ] && echo "lit:$lit_summary"

# The runtime's suites again under AddressSanitizer, UBSan and
# ThreadSanitizer, in their own build trees (KILN_SANITIZERS=off skips them).
sanitizers=0
if [ "${KILN_SANITIZERS:-on}" != off ]; then
  start=$(date +%s)
  "$root/scripts/sanitize.sh" || sanitizers=$?
  echo "test.sh: sanitizers took $(( $(date +%s) - start )) s"
fi

# ctest's list of failures once more, after the sanitizers' output (CI
# shows a log's tail).
if [ "$status" -ne 0 ]; then
  sed -n '/^The following tests FAILED:/,$p' "$log" | head -n 20
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$sanitizers" -eq 0 ] || echo "test.sh: a sanitized test failed (above)"
[ "$status" -eq 0 ] || exit "$status"
exit "$sanitizers"
