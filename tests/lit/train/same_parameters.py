"""Checks that two `kiln train` checkpoints hold bit-identical parameters
and optimizer moments (every tensor except slot 'state', where the fp16
loss scale lives). Prints 'unchanged: N tensors' or exits non-zero naming
the first difference. Used by amp.test for a skipped step.

usage: same_parameters.py CHECKPOINT_A CHECKPOINT_B"""
import sys

from safetensors.numpy import load_file

a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
names = sorted(k for k in a if not k.startswith("optimizer/state/"))
if names != sorted(k for k in b if not k.startswith("optimizer/state/")):
    sys.exit("different tensors: %s vs %s" % (sorted(a), sorted(b)))
for name in names:
    if a[name].tobytes() != b[name].tobytes():
        sys.exit("tensor %s changed" % name)
print("unchanged: %d tensors" % len(names))
