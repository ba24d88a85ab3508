"""Compares two `kiln train` runs: the 'step N loss X' and 'eval ... loss X'
lines of two logs and, when given, two checkpoints tensor by tensor, each
to a relative tolerance (for tensors, relative to the tensor's largest
magnitude). Prints 'losses agree: N lines' and 'checkpoints agree: N
tensors', or exits non-zero naming the first difference. Used by cpu.test.

usage: compare_runs.py LOG_A LOG_B TOLERANCE [CHECKPOINT_A CHECKPOINT_B]"""
import re
import sys

import numpy as np
from safetensors.numpy import load_file

log_a, log_b, tol = sys.argv[1:4]
tol = float(tol)

def losses(path):
    return [float(m.group(1)) for m in
            (re.match(r"^(?:step \d+|eval epoch \d+ step \d+) loss (\S+)", l)
             for l in open(path)) if m]

la, lb = losses(log_a), losses(log_b)
if len(la) != len(lb) or not la:
    sys.exit("different step counts: %d vs %d" % (len(la), len(lb)))
for i, (a, b) in enumerate(zip(la, lb)):
    if abs(a - b) > tol * max(abs(a), abs(b), 1e-3) + 1e-6:
        sys.exit("line %d: loss %g vs %g" % (i + 1, a, b))
print("losses agree: %d lines" % len(la))
if len(sys.argv) < 6:
    sys.exit(0)
ck_a, ck_b = sys.argv[4:6]

a, b = load_file(ck_a), load_file(ck_b)
if sorted(a) != sorted(b):
    sys.exit("different tensor names")
for name in sorted(a):
    x, y = a[name].astype(np.float64), b[name].astype(np.float64)
    scale = max(np.abs(x).max(initial=0), np.abs(y).max(initial=0), 1e-30)
    err = np.abs(x - y).max(initial=0)
    if x.shape != y.shape or err > tol * scale:
        sys.exit("tensor %s differs: max error %g, scale %g" % (name, err, scale))
print("checkpoints agree: %d tensors" % len(a))
