#!/usr/bin/env bash
# The quantization-aware MLP of tests/lit/import/onnx_peer.py (model qat)
# over N random seeds (default 30) with each exporter, and the same MLP
# post-training quantized (model ptq: INT8 weights, INT32 biases; the
# TorchScript exporter): exported, imported with kiln import, trained 8
# steps on the CPU backend and compared with PyTorch loss for loss
# (relative 1e-5; ptq also its final state dict). Prints how many runs
# matched and how many exports drew another seed to keep away from a
# rounding tie.
#
#   bash bench/onnx/qat_sweep.sh [N] [DIR]      (kiln from build/bin)
set -euo pipefail
n=${1:-30}
dir=${2:-$(mktemp -d)}
root=$(cd "$(dirname "$0")/../.." && pwd)
export PATH="$root/build/bin:$PATH"
peer=$root/tests/lit/import/onnx_peer.py
mkdir -p "$dir" && cd "$dir"
args=()
for i in $(seq 1 "$n"); do
  mkdir -p "q${i}ts" "q${i}dynamo" "p${i}ts"
  args+=(+ export qat "q${i}ts" + export qat "q${i}dynamo" dynamo + export ptq "p${i}ts")
done
python3 "$peer" "${args[@]:1}" > exports.log 2>&1
: > checks
for d in q* p*; do
  kiln import "$d/model.onnx" -o "$d/model.kiln" --optimizer=momentum --lr=0.05 > /dev/null
  kiln train "$d/model.kiln" --init-from="$d/model.safetensors" --data="npy:$d/data" \
    --eval-data=none --no-shuffle --max-steps=8 --checkpoint-dir="$d/ck" > "$d/cpu.log"
  case $d in
    q*) echo "qat $d $d/cpu.log 1e-5" >> checks ;;
    *) echo "ptq $d $d/cpu.log 1e-5 --checkpoint=$d/ck/step-8.safetensors" >> checks ;;
  esac
done
python3 "$peer" checks checks > result.log 2>&1 || true
echo "$(grep -c 'losses match' result.log) of $((3 * n)) runs match PyTorch"
echo "$(grep -c 'checkpoint matches' result.log) of $n ptq checkpoints match PyTorch's state dict"
grep -v 'losses match\|checkpoint matches' result.log || true
echo "$(grep -c 'drawing seed' exports.log) exports drew another seed"
