#!/usr/bin/env bash
# The GPU check (issue 7), for an H200 machine with CUDA 13 but no MLIR and
# no network, in at most 8 minutes. Uses what bench/gpu/prepare.sh built on
# the CPU machine (--in DIR): binaries that link no LLVM or MLIR, packages
# and reference numbers. Each step prints PASS, FAIL or SKIP with the
# reason; the script exits non-zero when a step fails. Record the output in
# bench/RESULTS.md.
#
#   1. the GPU: nvidia-smi, Kiln's device discovery (kiln-cuda-device-tests).
#   2. GPU tests: kiln-cuda-runtime-tests, the gpu-labelled ones included:
#      cuBLASLt GEMMs with every epilogue (f32/bf16/fp16, both transposes)
#      against a host GEMM, an NVRTC kernel through the driver, the MLP
#      package stepped with a falling loss, the three convolutions
#      (CudaConv.h) against their definitions, the fused attention
#      (CudaAttention.h: forward and backward, mma.sync (and again with
#      KILN_CUDA_ATTENTION=wmma, the wmma kernels, and with =pairs,
#      =stages, =q128, =occupancy, =q128,occupancy and =stored, the
#      autotuner's other candidates), wmma and CUDA-core kernels,
#      f32/f64/bf16/fp16, causal, GPT-2's head dim 64) against its
#      definition in double precision, and the golden steps (small
#      mlp, lenet5 and gpt, f32 and bf16, every fusion kind and the
#      convolutions, kernels re-JITted by NVRTC) against the reference
#      interpreter's outputs on fixed random data, and what a stream
#      capture refuses, against what the fake CUDA table says it refuses;
#      the CudaExecutable tests on the fake table run too; then NCCL inside
#      the step's CUDA Graph (kiln-cuda-nccl-gpu-tests: one rank per GPU,
#      at most two, a sum all-reduce thunk captured and replayed, values
#      checked; the communicators made per rank as under kiln launch, and
#      all at once as --strategy=mirrored makes them).
#   3. The MLP on the GPU: its first 20 losses against the reference
#      interpreter's (prepare.sh), step by step within 1e-3 (the packed
#      GPU trainer's too, and within 1e-2 with --tf32=on; the trainer's
#      --profile through CUDA events as a Chrome trace); then one epoch
#      (Fashion-MNIST when prepared, else synthetic) with kiln-cuda-run, the
#      runtime half of `kiln train --device=cuda` (kiln itself needs MLIR).
#   4. The GPT step (12 layers, hidden 768, 12 heads, sequence 1024, bf16):
#      Kiln (kiln-cuda-run --time), PyTorch eager, torch.compile and JAX
#      (peers.py), tokens/s and MFU with the same FLOPs formula;
#      kiln-cuda-run prints the step's device memory as the runtime counts
#      it (runtime/cuda/CudaMemory.h) beside what the load took from the
#      device's free memory (cudaMemGetInfo). The
#      runtime times cuBLASLt's algorithms for each GEMM shape (the
#      convolutions' too), and the attention's variants, forward and
#      backward, at load
#      (Autotune.h; a fresh cache under the log directory, so they are
#      timed here): their times and choices are printed, and the step is
#      timed again with --autotune=off, and with --cuda-pdl=off (no
#      programmatic dependent launch), when time allows.
#
# Usage: bench/gpu/check.sh [--in DIR] [--steps N]
#
# Through the device tool, from a tree where scripts/build.sh and
# bench/gpu/prepare.sh have run (its output, bench/gpu/out, is ignored by
# git, so it must be carried; with the tracked files it is about 61 MiB
# of the 64 the tool takes):
#   run(command="set -o pipefail; bash bench/gpu/check.sh --in bench/gpu/out
#       2>&1 | tee $OUT/check.txt", carry=["bench/gpu/out"], timeout_s=560)
# What comes back: check.txt (the whole output), gpt-profile.json and
# check-logs.tar.gz (every step's log). Then, while the machine is warm,
# bench/gpu/sanitize.sh (compute-sanitizer over the kernels, 4 minutes).
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
budget=470
. "$root/bench/gpu/common.sh"
# judge RC FILE LINES LABEL: PASS, or FAIL with FILE's last LINES lines,
# for a gtest run that exited RC with its output in FILE; one whose tests
# skipped (no GPU after all) fails too.
judge() {
  if [ "$1" -ne 0 ]; then
    tail -"$3" "$2"
    fail "$4"
  elif grep -q "SKIPPED" "$2"; then
    fail "$4: skipped on a GPU machine"
  else
    pass "$4"
  fi
}

# 1. The GPU.
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
    && pass "nvidia-smi" || fail "nvidia-smi"
else
  fail "nvidia-smi: not found"
fi
if [ -x "$bin/kiln-cuda-device-tests" ]; then
  timeout 60 "$bin/kiln-cuda-device-tests" --gtest_brief=1 > "$log/device-tests.txt" 2>&1
  rc=$?
  grep -E "^CUDA: " "$log/device-tests.txt" | head -5
  judge $rc "$log/device-tests.txt" 20 "device discovery (kiln-cuda-device-tests)"
else
  fail "device discovery: $bin/kiln-cuda-device-tests missing (run prepare.sh)"
fi

# 2. GPU tests.
if [ -x "$bin/kiln-cuda-runtime-tests" ]; then
  KILN_CUDA_TEST_PACKAGE=$in/mlp.kpkg KILN_CUDA_GOLDEN_DIR=$in/golden \
    timeout 150 "$bin/kiln-cuda-runtime-tests" \
    --gtest_brief=1 > "$log/runtime-tests.txt" 2>&1
  rc=$?
  grep -E "note:|Skipped|FAILED|PASSED|^attention " "$log/runtime-tests.txt" | head -30
  judge $rc "$log/runtime-tests.txt" 40 "GPU runtime tests (kiln-cuda-runtime-tests: cuBLASLt epilogues, NVRTC + driver launch, MLP package, convolutions, fused attention, golden steps vs the interpreter)"
else
  fail "GPU tests: $bin/kiln-cuda-runtime-tests missing"
fi

# The attention again on the wmma kernels (KILN_CUDA_ATTENTION=wmma), the
# sm_80+ default being the mma.sync ones: both against the definition, so a
# failure above says which kernels are wrong (and the GPT step below can be
# rerun with the variable set). And with the autotuner's other candidates
# forced: dK/dV on warp pairs (head dims up to 64), two stages in dynamic
# shared memory (past 64), the forward and dQ on 128 query rows (up to
# 64), those compiled for more blocks per SM, and dQ from the dS tiles
# dK/dV stores (up to 64), so every variant is checked whichever the
# autotuner keeps. Each run that skips its tests (no GPU after all) fails,
# as the first one does.
for variant in wmma pairs stages q128 occupancy q128,occupancy stored; do
  [ -x "$bin/kiln-cuda-runtime-tests" ] || break
  file=$log/attention-${variant//,/-}.txt
  KILN_CUDA_ATTENTION=$variant timeout 60 "$bin/kiln-cuda-runtime-tests" \
    --gtest_brief=1 --gtest_filter='CudaGpuTest.*Attention*' > "$file" 2>&1
  rc=$?
  grep -E "^attention " "$file" | sed "s/^/  $variant: /"
  judge $rc "$file" 20 "fused attention with KILN_CUDA_ATTENTION=$variant"
done

if [ -x "$bin/kiln-cuda-nccl-gpu-tests" ]; then
  timeout 60 "$bin/kiln-cuda-nccl-gpu-tests" --gtest_brief=1 \
    > "$log/nccl-tests.txt" 2>&1
  rc=$?
  grep -E "no NCCL|Skipped|FAILED|PASSED" "$log/nccl-tests.txt" | head -5
  if [ $rc -ne 0 ]; then
    tail -20 "$log/nccl-tests.txt"
    fail "NCCL in the step graph (kiln-cuda-nccl-gpu-tests)"
  elif grep -q "SKIPPED" "$log/nccl-tests.txt"; then
    skip "NCCL in the step graph: skipped (no NCCL library on this machine?)"
  else
    pass "NCCL in the step graph: all-reduce captured and replayed (per-rank and mirrored communicators)"
  fi
else
  fail "NCCL GPU test: $bin/kiln-cuda-nccl-gpu-tests missing (run prepare.sh)"
fi

# 3. The MLP.
# Whether the "step N loss X" lines of $2 (a GPU run) equal the reference
# interpreter's in $1 within 1e-3, for its 20 steps.
# losses_match REF GPU [TOL]: every step's loss within TOL (default 1e-3)
# relative.
losses_match() {
  python3 - "$1" "$2" "${3:-1e-3}" <<'PY'
import re, sys
def losses(path):
    return {int(m[1]): float(m[2]) for m in
            re.finditer(r"^(?:\[rank 0\] )?step (\d+) loss (\S+)", open(path).read(), re.M)}
ref, gpu = losses(sys.argv[1]), losses(sys.argv[2])
bad = [(s, ref[s], gpu.get(s)) for s in sorted(ref)
       if gpu.get(s) is None or abs(ref[s] - gpu[s]) > float(sys.argv[3]) * max(1, abs(ref[s]))]
print(f"MLP losses, {len(ref)} steps: reference {ref[1]:.6f} -> {ref[max(ref)]:.6f}, "
      f"GPU {gpu.get(1)} -> {gpu.get(max(ref))}")
for s, r, g in bad[:5]:
    print(f"  step {s}: reference {r}, GPU {g}")
sys.exit(1 if bad or len(ref) < 20 else 0)
PY
}
run=$bin/kiln-cuda-run
if [ -x "$run" ] && [ -f "$in/mlp.kpkg" ] && [ -f "$in/mlp.reference-losses.txt" ]; then
  timeout 60 "$run" "$in/mlp.kpkg" --data=synthetic --synthetic-size=1024 \
    --no-shuffle=1 --steps=20 --log-every=1 > "$log/mlp20.txt" 2>&1
  rc=$?
  head -1 "$log/mlp20.txt"
  if [ $rc -ne 0 ]; then
    tail -5 "$log/mlp20.txt"
    fail "MLP 20 steps on the GPU"
  elif losses_match "$in/mlp.reference-losses.txt" "$log/mlp20.txt"; then
    pass "MLP: 20 GPU steps equal the reference interpreter's losses within 1e-3"
  else
    fail "MLP: GPU losses differ from the reference interpreter's"
  fi
  data=synthetic
  [ -f "$in/fashion-mnist/train-images-idx3-ubyte.gz" ] && data=fashion-mnist:$in/fashion-mnist
  timeout "$(left)" "$run" "$in/mlp.kpkg" --data="$data" --epochs=1 --log-every=100 \
    > "$log/mlp-epoch.txt" 2>&1 && { tail -3 "$log/mlp-epoch.txt";
    pass "MLP one epoch on the GPU ($data)"; } || { tail -5 "$log/mlp-epoch.txt";
    fail "MLP one epoch on the GPU"; }
else
  fail "MLP: $run, $in/mlp.kpkg or the reference losses missing (run prepare.sh)"
fi

# 3b. The same MLP as a standalone GPU trainer (kiln pack --target=cuda):
# kiln train's loop on the GPU runtime, the same 20 batches.
trainer=$bin/mlp-gpu-trainer
if [ -x "$trainer" ] && [ -f "$in/mlp.reference-losses.txt" ]; then
  timeout 120 "$trainer" --data=synthetic --no-shuffle --max-steps=20 --log-every=1 \
    --eval-data=none > "$log/mlp-trainer.txt" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then
    tail -5 "$log/mlp-trainer.txt"
    fail "MLP GPU trainer (kiln pack --target=cuda): 20 steps"
  elif head -2 "$log/mlp-trainer.txt" &&
       losses_match "$in/mlp.reference-losses.txt" "$log/mlp-trainer.txt"; then
    pass "MLP GPU trainer: 20 steps equal the reference interpreter's losses within 1e-3"
  else
    fail "MLP GPU trainer: losses differ from the reference interpreter's"
  fi
else
  fail "MLP GPU trainer: $trainer or the reference losses missing (run prepare.sh)"
fi

# 3b'. The same with --tf32=on: the f32 GEMMs on tensor cores in TF32 (10-bit
# mantissa inputs), so the losses only within 1e-2 of the reference's.
if [ -x "$trainer" ] && [ -f "$in/mlp.reference-losses.txt" ]; then
  timeout 120 "$trainer" --data=synthetic --no-shuffle --max-steps=20 --log-every=1 \
    --eval-data=none --tf32=on > "$log/mlp-trainer-tf32.txt" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then
    tail -5 "$log/mlp-trainer-tf32.txt"
    fail "MLP GPU trainer --tf32=on: 20 steps"
  elif grep -q "f32 matmuls in TF32" "$log/mlp-trainer-tf32.txt" &&
       losses_match "$in/mlp.reference-losses.txt" "$log/mlp-trainer-tf32.txt" 1e-2; then
    pass "MLP GPU trainer --tf32=on: 20 steps within 1e-2 of the reference interpreter's losses"
  else
    fail "MLP GPU trainer --tf32=on: losses (or its TF32 line) differ"
  fi
fi

# 3b''. kiln train --profile with CUDA events: the trainer's last profiled
# step as a Chrome trace, one event per thunk, each after the one before,
# all ending inside the host's span of the step.
if [ -x "$trainer" ]; then
  timeout 120 "$trainer" --data=synthetic --max-steps=8 --log-every=8 \
    --eval-data=none --profile="$log/mlp-profile.json" > "$log/mlp-profile.txt" 2>&1
  rc=$?
  grep -A 6 "profile of" "$log/mlp-profile.txt"
  if [ $rc -eq 0 ] && python3 - "$log/mlp-profile.json" <<'PY'
import json, sys
every = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X"]
events = [e for e in every if e["cat"] != "host"]
host = [e for e in every if e["cat"] == "host"]
compute = [e for e in events if e["tid"] == 0]
ordered = all(b["ts"] >= a["ts"] + a["dur"] - 1e-3 for a, b in zip(compute, compute[1:]))
timed = all(e["args"]["calls"] == 5 and e["dur"] >= 0 for e in events)
# The host's row: the batch, then the step's call, which waits for the
# device, so every thunk ends inside it.
step = host[-1] if len(host) == 2 else None
inside = step is not None and all(
    e["ts"] + e["dur"] <= step["ts"] + step["dur"] + 1e-3 for e in events)
print(f"{len(events)} thunks in the trace, in order: {ordered}, each timed 5 times: {timed}, "
      f"inside the host's step span: {inside}")
sys.exit(0 if events and ordered and timed and inside else 1)
PY
  then
    pass "kiln train --profile on the GPU (CUDA events): every thunk timed, the timeline in order"
  else
    tail -5 "$log/mlp-profile.txt"
    fail "kiln train --profile on the GPU"
  fi
fi

# 3c. The trainer's eval step, which runs in the training step's memory
# (runtime/package/SharedArena.h) and computes its predictions on the GPU:
# its loss and accuracy after the same 20 steps against the reference's.
if [ -x "$trainer" ] && [ -f "$in/mlp.reference-eval.txt" ]; then
  timeout 120 "$trainer" --data=synthetic --no-shuffle --max-steps=20 --log-every=20 \
    --eval-data=synthetic --eval-subset=256 > "$log/mlp-trainer-eval.txt" 2>&1
  rc=$?
  grep -E "device memory|eval " "$log/mlp-trainer-eval.txt"
  if [ $rc -ne 0 ]; then
    tail -5 "$log/mlp-trainer-eval.txt"
    fail "MLP GPU trainer's eval step"
  elif python3 - "$in/mlp.reference-eval.txt" "$log/mlp-trainer-eval.txt" <<'PY'
import re, sys
def ev(path):
    m = re.search(r"^eval epoch \d+ step 20 loss (\S+) accuracy (\S+) \((\d+) samples\)",
                  open(path).read(), re.M)
    return (float(m[1]), float(m[2]), int(m[3])) if m else None
ref, gpu = ev(sys.argv[1]), ev(sys.argv[2])
print(f"eval after 20 steps: reference {ref}, GPU {gpu}")
sys.exit(0 if ref and gpu and ref[2] == gpu[2] and abs(ref[0] - gpu[0]) <= 1e-3 * max(1, ref[0])
         and abs(ref[1] - gpu[1]) <= 2 / ref[2] else 1)
PY
  then
    pass "MLP GPU trainer's eval step (in the training step's memory): loss within 1e-3, accuracy within 2 samples of the reference's"
  else
    fail "MLP GPU trainer's eval step: differs from the reference's"
  fi
else
  fail "MLP GPU trainer's eval: $trainer or the reference eval missing (run prepare.sh)"
fi

# 4. The GPT step against peers.
read -r tokens flops < "$in/gpt.flops" 2>/dev/null || { tokens=8192; flops=0; }
# Each thunk's time in one profiled step, as a Chrome trace (the step's
# timeline: open it in Perfetto): bring it back (the device tool's $OUT)
# and compare it with the prediction on the CPU machine:
#   kiln inspect bench/gpu/out/gpt-bf16.kpkg --roofline --measured=gpt-profile.json
profile=${OUT:-$in}/gpt-profile.json
if [ -x "$run" ] && [ -f "$in/gpt-bf16.kpkg" ]; then
  timeout "$(left)" "$run" "$in/gpt-bf16.kpkg" --data=synthetic --classes=50304 \
    --synthetic-size=64 --steps=5 --log-every=5 --time="$steps" \
    --tokens-per-step="$tokens" --flops-per-step="$flops" --peak-tflops=989 \
    --profile="$profile" > "$log/gpt.txt" 2>&1
  rc=$?
  # The autotuner's note, each shape's candidate times, where the
  # attention and epilogue kernels came from (NVRTC or the cubin cache),
  # and how many kernels' parameters the driver let the runtime check.
  grep -E "autotuning|^kiln-cuda-run: .*kernels (compiled|read)|^kiln-cuda-run: tuned |parameters checked" \
    "$log/gpt.txt" | head -40
  cat "$log/gpt.txt" | tail -12
  [ $rc -eq 0 ] && pass "Kiln GPT step (bf16)" || fail "Kiln GPT step"
  [ -f "$profile" ] && echo "  thunk times: $profile (kiln inspect gpt-bf16.kpkg --roofline --measured=...)"
  # What the package roofline predicted here (kiln inspect --roofline).
  [ -f "$in/gpt-bf16.roofline.txt" ] && grep -E "^  (step|tokens/s|model FLOPs)" \
    "$in/gpt-bf16.roofline.txt" | sed 's/^/  predicted /'
  # (the attention backward's tuned line above says whether it kept "ds")
  [ -f "$in/gpt-bf16.roofline-ds.txt" ] && grep -E "^  step" \
    "$in/gpt-bf16.roofline-ds.txt" | sed 's/^/  predicted with dQ from stored dS /'
else
  fail "Kiln GPT step: $run or $in/gpt-bf16.kpkg missing"
fi
# A variant of the timed GPT step: gpt_variant LABEL PACKAGE LOG SECONDS
# [FLAGS...] (the caller's environment passes through, as
# KILN_CUDA_ATTENTION below).
gpt_variant() {
  local label=$1 package=$2 out=$log/$3.txt seconds=$4
  shift 4
  timeout "$seconds" "$run" "$package" --data=synthetic \
    --classes=50304 --synthetic-size=64 --steps=5 --log-every=5 --time="$steps" \
    --tokens-per-step="$tokens" --flops-per-step="$flops" --peak-tflops=989 \
    "$@" > "$out" 2>&1 \
    && { grep -iE "tokens/s|step time|MFU|utilization" "$out" | sed "s/^/  $label: /";
         pass "Kiln GPT step, $label"; } \
    || { tail -5 "$out"; fail "Kiln GPT step, $label"; }
}
# The same step on cuBLASLt's heuristic choices (what the autotuning
# gains), and without programmatic dependent launch (what it gains); each
# only while four minutes are left, three of them for the peers.
for variant in autotune cuda-pdl; do
  if [ -x "$run" ] && [ -f "$in/gpt-bf16.kpkg" ] && [ "$(left)" -gt 240 ]; then
    gpt_variant "--$variant=off" "$in/gpt-bf16.kpkg" "gpt-$variant-off" 60 \
      "--$variant=off"
  fi
done
# The same step with the layer norms' gradient partials in kernels of their
# own (kiln compile --row-groups=off): which layout is faster on the GPU.
if [ -x "$run" ] && [ -f "$in/gpt-bf16-rowgroups-off.kpkg" ]; then
  gpt_variant --row-groups=off "$in/gpt-bf16-rowgroups-off.kpkg" gpt-rowgroups-off "$(left)"
  [ -f "$in/gpt-bf16-rowgroups-off.roofline.txt" ] && grep -E "^  step" \
    "$in/gpt-bf16-rowgroups-off.roofline.txt" | sed 's/^/  --row-groups=off predicted /'
fi
# The same step under --memory-budget=4.2GiB: what recomputing 130
# activations costs on the device (skipped under four minutes left).
if [ -x "$run" ] && [ -f "$in/gpt-bf16-budget.kpkg" ] && [ "$(left)" -gt 240 ]; then
  gpt_variant --memory-budget=4.2GiB "$in/gpt-bf16-budget.kpkg" gpt-budget 60
  [ -f "$in/gpt-bf16-budget.roofline.txt" ] && grep -E "^  step" \
    "$in/gpt-bf16-budget.roofline.txt" | sed 's/^/  --memory-budget=4.2GiB predicted /'
fi
# The same step on the wmma attention kernels: what the mma.sync kernels
# gain (skipped when less than three minutes are left for the peers).
if [ -x "$run" ] && [ -f "$in/gpt-bf16.kpkg" ] && [ "$(left)" -gt 180 ]; then
  KILN_CUDA_ATTENTION=wmma gpt_variant KILN_CUDA_ATTENTION=wmma "$in/gpt-bf16.kpkg" \
    gpt-attention-wmma 60
fi
# The peers in two processes, PyTorch's (eager, then torch.compile) with
# all but 75 s of what is left, then JAX's: a peer that crashes or runs
# out of time leaves the other's numbers (unbuffered, so a timeout keeps
# what was printed).
if command -v python3 > /dev/null; then
  torch_seconds=$(( $(left) - 75 ))
  [ $torch_seconds -lt 60 ] && torch_seconds=60
  PYTHONUNBUFFERED=1 timeout "$torch_seconds" python3 "$root/bench/gpu/peers.py" \
    --steps "$steps" --only torch \
    && pass "peers: PyTorch eager and torch.compile" || fail "peers: PyTorch"
  PYTHONUNBUFFERED=1 timeout "$(left)" python3 "$root/bench/gpu/peers.py" \
    --steps "$steps" --only jax \
    && pass "peers: JAX" || fail "peers: JAX"
else
  skip "peers: no python3"
fi
# Every step's whole log beside the profile, as one archive: the device
# tool brings back at most 8 files from $OUT, and there are about 17 logs
# (the output above keeps only their tails).
if [ -n "${OUT:-}" ]; then
  tar -czf "$OUT/check-logs.tar.gz" -C "$log" . 2>/dev/null
fi
rm -rf "$log"
exit $failed
