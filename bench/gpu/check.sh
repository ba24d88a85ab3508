#!/usr/bin/env bash
# The GPU check (issue 7), for an H200 machine with CUDA 13 but no MLIR and
# no network, in at most 8 minutes. Uses what bench/gpu/prepare.sh built on
# the CPU machine (binaries and packages in --in DIR). Each step prints
# PASS, FAIL or SKIP with the reason; the script exits non-zero when a step
# fails. Record the output in bench/RESULTS.md.
#
#   1. the GPU: nvidia-smi and Kiln's device discovery (runtime/cuda), the
#      gtest label `gpu` (kiln-cuda-device-tests).
#   2. GPU kernel tests: every fusion kind against the reference on fresh
#      random data. SKIP until the CUDA runtime can launch package kernels
#      (runtime/cuda has discovery only); the same kernels' arithmetic is
#      checked on the CPU by kiln-cuda-emulation-tests, run here too.
#   3. kiln train --device=cuda on the MLP for one epoch: SKIP until the
#      CUDA training runtime exists (kiln train says so).
#   4. the GPT step (12 layers, hidden 768, 12 heads, sequence 1024, bf16):
#      PyTorch eager and torch.compile (bench/gpu/peers.py), tokens/s and
#      MFU; Kiln's row SKIPs until its runtime exists.
#
# Usage: bench/gpu/check.sh [--in DIR] [--steps N]
# Not yet run on a GPU: it was prepared on a machine without one.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
in=$root/bench/gpu/out
steps=20
while [ $# -gt 0 ]; do
  case $1 in
    --in) in=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    *) echo "check.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
failed=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failed=1; }
skip() { echo "SKIP $*"; }
deadline=$((SECONDS + 480))
left() { echo $((deadline - SECONDS)); }

# 1. The GPU.
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
    && pass "nvidia-smi" || fail "nvidia-smi"
else
  fail "nvidia-smi: not found"
fi
if [ -x "$in/bin/kiln-cuda-device-tests" ]; then
  timeout 60 "$in/bin/kiln-cuda-device-tests" --gtest_brief=1 \
    && pass "device discovery (kiln-cuda-device-tests, gpu label)" \
    || fail "device discovery"
else
  skip "device discovery: $in/bin/kiln-cuda-device-tests missing (run prepare.sh)"
fi

# 2. Kernels.
skip "GPU kernel tests: the CUDA runtime cannot launch package kernels yet"
if [ -x "$in/bin/kiln-cuda-emulation-tests" ] && command -v clang++ > /dev/null; then
  timeout "$(left)" "$in/bin/kiln-cuda-emulation-tests" --gtest_brief=1 \
    && pass "emitted kernels on host threads vs the interpreter" \
    || fail "emitted kernels on host threads"
else
  skip "emulation tests: binary or clang++ missing"
fi

# 3. Training.
if [ -x "$in/bin/kiln" ] && [ -f "$in/mlp.kpkg" ]; then
  "$in/bin/kiln" train "$in/mlp.kpkg" --device=cuda --epochs=1 --data=synthetic 2>&1 \
    | tail -3
  skip "MLP one epoch on the GPU: the CUDA training runtime does not exist yet"
else
  skip "MLP training: $in/bin/kiln or $in/mlp.kpkg missing"
fi

# 4. The GPT step against peers.
if command -v python3 > /dev/null; then
  timeout "$(left)" python3 "$root/bench/gpu/peers.py" --steps "$steps" \
    && pass "peers (PyTorch eager, torch.compile)" || fail "peers"
else
  skip "peers: no python3"
fi
skip "Kiln GPT step: the CUDA runtime does not exist yet"
exit $failed
