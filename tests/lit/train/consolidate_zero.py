"""Consolidates a ZeRO checkpoint (step-K.index.json and one
step-K.rank-R-of-N.safetensors per rank) into one checkpoint with full
tensors, independently of kiln's own loader (runtime/checkpoint/Sharded.cpp):
each bucket's flat tensor is the ranks' blocks concatenated in rank order,
cut at the index's offsets into the parameters; optimizer state
"optimizer/SLOT/zero.bucketK" likewise into "optimizer/SLOT/PARAM". Rank 0's
other tensors are kept; a full parameter rank 0 already holds (zero1/2, or
gathered under zero3) must equal the one cut from the shards.

usage: consolidate_zero.py INDEX OUT.safetensors"""
import json
import os
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

index_path, out_path = sys.argv[1:3]
index = json.load(open(index_path))
assert index["format"] == "kiln-sharded-checkpoint-1", index["format"]
directory = os.path.dirname(index_path)
ranks = []
meta = None
for r, name in enumerate(index["files"]):
    with safe_open(os.path.join(directory, name), framework="numpy") as f:
        ranks.append({k: f.get_tensor(k) for k in f.keys()})
        if r == 0:
            meta = f.metadata()
world = index["world_size"]
assert len(ranks) == world
out = {}
buckets = {b["name"]: b for b in index["buckets"]}
def is_shard(key):
    return key.split("/")[-1] in buckets
for k, v in ranks[0].items():
    if not is_shard(k):
        out[k] = v
full_params = 0
for b in index["buckets"]:
    for key in [k for k in ranks[0] if k.split("/")[-1] == b["name"]]:
        blocks = [rank[key] for rank in ranks]
        per = -(-b["length"] // world)
        assert all(x.shape == (per,) for x in blocks), (key, [x.shape for x in blocks])
        flat = np.concatenate(blocks)
        prefix = key[: -len(b["name"])]
        for p in b["params"]:
            n = int(np.prod(p["shape"], dtype=np.int64))
            t = flat[p["offset"]: p["offset"] + n].reshape(p["shape"])
            name = prefix + p["name"]
            if name in out:
                if not np.array_equal(out[name], t):
                    sys.exit("%s: rank 0's full copy differs from the shards" % name)
                full_params += 1
            out[name] = t
save_file(out, out_path, metadata=meta)
print("consolidated %d tensors from %d ranks (%d full copies checked)"
      % (len(out), world, full_params))
