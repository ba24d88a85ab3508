"""Recomputes a zoo MLP's eval from a checkpoint with numpy: logits of every
sample of the eval .npy files (x @ W + b, ReLU between layers), accuracy over
all of them, and the mean cross-entropy over the whole batches, compared
with the 'eval epoch E step S loss L accuracy A (N samples)' line of a
`kiln train` log: the loss to 1e-5 (kiln computes in f32), the accuracy
and the sample count exactly. Prints 'eval agrees: ...' or exits non-zero.

usage: eval_numpy.py CHECKPOINT NPY_DIR BATCH LAYERS LOG"""
import re
import sys

import numpy as np
from safetensors.numpy import load_file

ck, npy, batch, layers, log = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
params = load_file(ck)
x = np.load(npy + "/x.npy").astype(np.float64)
labels = np.load(npy + "/labels.npy")
h = x
for i in range(1, layers):
    h = h @ params["fc%d.weight" % i].astype(np.float64) + params["fc%d.bias" % i]
    if i + 1 < layers:
        h = np.maximum(h, 0)
logz = np.log(np.exp(h - h.max(1, keepdims=True)).sum(1)) + h.max(1)
ce = logz - h[np.arange(len(labels)), labels]
full = len(labels) // batch * batch
accuracy = (h.argmax(1) == labels).mean()
loss = ce[:full].mean()
lines = [m for m in (re.match(r"eval epoch \d+ step \d+ loss (\S+) accuracy (\S+) \((\d+) samples\)", l)
                     for l in open(log)) if m]
if not lines:
    sys.exit("no eval line with an accuracy in " + log)
kl, ka, kn = float(lines[-1].group(1)), float(lines[-1].group(2)), int(lines[-1].group(3))
if abs(kl - loss) > 1e-5 * max(1, abs(loss)) + 1e-6:
    sys.exit("loss %.6f, numpy %.8f" % (kl, loss))
if kn != len(labels) or abs(ka - round(accuracy, 4)) > 1e-9:
    sys.exit("accuracy %.4f over %d, numpy %.4f over %d" % (ka, kn, accuracy, len(labels)))
print("eval agrees: loss %.6f accuracy %.4f (%d samples)" % (loss, accuracy, len(labels)))
