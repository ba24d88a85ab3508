"""Compares two kiln checkpoints tensor by tensor (bytewise) and their
metadata; prints 'identical: N tensors, step S' or exits non-zero naming
the first difference. Used by checkpoint.test."""
import sys

from safetensors import safe_open

def load(path):
    with safe_open(path, framework="numpy") as f:
        return f.metadata(), {k: f.get_tensor(k) for k in f.keys()}

(meta_a, a), (meta_b, b) = load(sys.argv[1]), load(sys.argv[2])
if sorted(a) != sorted(b):
    sys.exit("different tensor names: %s vs %s" % (sorted(a), sorted(b)))
for name in sorted(a):
    if a[name].shape != b[name].shape or a[name].tobytes() != b[name].tobytes():
        sys.exit("tensor %s differs" % name)
if meta_a != meta_b:
    sys.exit("metadata differs: %s vs %s" % (meta_a, meta_b))
if not any(name.startswith("optimizer/") for name in a):
    sys.exit("no optimizer state in %s" % sys.argv[1])
print("identical: %d tensors, step %s" % (len(a), meta_a.get("step")))
