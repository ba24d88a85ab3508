#!/usr/bin/env bash
# The 2-rank data-parallel step of bench/RESULTS.md ("Data-parallel on the
# CPU"): zoo MLP (784-512-256-10, Adam), 2 ranks x 64 through kiln launch,
# synthetic data, with the collectives overlapping the thunks after them
# (the default) and in the thunk loop (KILN_ASYNC_COLLECTIVES=0), with the
# default buckets (one 2.1 MB bucket, issued after the last gradient) and
# with --bucket-mb=0.25 (the first buckets issued inside the backward
# pass). The modes alternate within each round so that load on the machine
# hits them alike; each line is the median samples/s of one run's epoch
# records (the first two dropped), and the summary the median over rounds.
#
# usage: bench/dist/overlap.sh [KILN] [STEPS] [ROUNDS]
set -euo pipefail
kiln=${1:-kiln}; steps=${2:-400}; rounds=${3:-5}
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
"$kiln" models mlp --batch=64 -o "$dir/m64.kiln" > /dev/null
for round in $(seq "$rounds"); do
  for buckets in 25 0.25; do
    for async in 1 0; do
      rm -f "$dir/m.jsonl"
      KILN_ASYNC_COLLECTIVES=$async "$kiln" launch --nproc-per-node=2 -- \
        "$kiln" train "$dir/m64.kiln" --strategy=data-parallel \
        --bucket-mb=$buckets --data=synthetic --max-steps="$steps" \
        --metrics-file="$dir/m.jsonl" > /dev/null
      python3 -c "
import json, statistics, sys
r = [json.loads(l)['samples_per_second'] for l in open(sys.argv[1])][2:]
print(sys.argv[2], sys.argv[3], '%.0f' % statistics.median(r))" \
        "$dir/m.jsonl" "$buckets" "$async" | tee -a "$dir/all"
    done
  done
done
python3 - "$dir/all" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    buckets, async_, rate = line.split()
    runs[(buckets, async_)].append(float(rate))
for buckets in ("25", "0.25"):
    row = []
    for async_ in ("0", "1"):
        rate = statistics.median(runs[(buckets, async_)])
        row.append("%s %.0f samples/s (%.2f ms/step)" % (
            "async" if async_ == "1" else "sync", rate, 128e3 / rate))
    print("bucket-mb %-5s" % buckets, " | ".join(row))
PY
