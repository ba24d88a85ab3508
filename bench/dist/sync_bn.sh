#!/usr/bin/env bash
# The cost of --sync-batch-norm (bench/RESULTS.md, "Synchronized batch
# norm"): the zoo's ResNet-8 (width 16, batch 32 per rank), 2 ranks through
# kiln launch, synthetic data, with and without --sync-batch-norm (one
# all-gather per batch norm forward, one reduce-scatter backward). The two
# modes alternate within each round so that load on the machine hits them
# alike; each line is the median samples/s of one run's epoch records (the
# first dropped), and the summary the median over rounds and the ratio.
# PyTorch's SyncBatchNorm runs only on GPUs (it refuses CPU tensors), so
# the peer here is kiln's own unsynchronized step.
#
# usage: bench/dist/sync_bn.sh [KILN] [STEPS] [ROUNDS]
set -euo pipefail
kiln=${1:-kiln}; steps=${2:-60}; rounds=${3:-5}
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
"$kiln" models resnet --batch=32 -o "$dir/r32.kiln" > /dev/null
for round in $(seq "$rounds"); do
  for mode in local sync; do
    flag=; [ "$mode" = sync ] && flag=--sync-batch-norm
    rm -f "$dir/m.jsonl"
    "$kiln" launch --nproc-per-node=2 -- "$kiln" train "$dir/r32.kiln" \
      --strategy=data-parallel $flag --data=synthetic --max-steps="$steps" \
      --metrics-file="$dir/m.jsonl" > /dev/null
    python3 -c "
import json, statistics, sys
r = [json.loads(l)['samples_per_second'] for l in open(sys.argv[1])]
r = r[1:] or r
print(sys.argv[2], '%.0f' % statistics.median(r))" "$dir/m.jsonl" "$mode" | tee -a "$dir/all"
  done
done
python3 -c "
import statistics, sys
by = {}
for line in open(sys.argv[1]):
    mode, v = line.split(); by.setdefault(mode, []).append(float(v))
local, sync = (statistics.median(by[m]) for m in ('local', 'sync'))
print(f'median samples/s: local {local:.0f}, sync {sync:.0f}, sync/local {sync / local:.2f}')" "$dir/all"
