# RUN: %python %s
#
# kiln.dot_general with random batching, contracting and free dimensions in
# random positions (checked against np.einsum), and kiln.conv2d with its
# input and filter gradients over random strides, padding, dilation and
# groups (checked against the direct NumPy loops of support/windows.py).
# All compute in double and round once, so float results must equal NumPy's
# float64 result rounded to the type; the tolerance scale is the same
# computation on absolute values, which bounds the cancellation.
import string
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, __file__.rsplit("/", 1)[0] + "/support")

import numpy as np

import windows
from harness import FLOAT_TYPES, Suite, random_values, tensor_type

suite = Suite("dot_general and conv2d")
rng = suite.rng


def ints(values):
    return "[" + ", ".join(str(int(v)) for v in values) + "]"


def random_dot(name, dtype):
    """A dot_general with 0-2 batching, 0-2 contracting and 0-2 free
    dimensions per side, in random positions and pairings."""
    nb, nc = int(rng.integers(0, 3)), int(rng.integers(0, 3))
    nlf, nrf = int(rng.integers(0, 3)), int(rng.integers(0, 3))
    letters = iter(string.ascii_lowercase)
    batch = [(next(letters), int(rng.integers(1, 5))) for _ in range(nb)]
    contract = [(next(letters), int(rng.integers(1, 6))) for _ in range(nc)]
    lfree = [(next(letters), int(rng.integers(1, 5))) for _ in range(nlf)]
    rfree = [(next(letters), int(rng.integers(1, 5))) for _ in range(nrf)]
    lhs = batch + contract + lfree
    rhs = batch + contract + rfree
    lhs = [lhs[i] for i in rng.permutation(len(lhs))]
    rhs = [rhs[i] for i in rng.permutation(len(rhs))]
    # Pairing order: the batching pairs in a random order (it fixes the
    # result's batch order), the contracting pairs likewise.
    batch = [batch[i] for i in rng.permutation(len(batch))]
    contract = [contract[i] for i in rng.permutation(len(contract))]
    pos = lambda side, letter: [l for l, _ in side].index(letter)
    lb = [pos(lhs, l) for l, _ in batch]
    rb = [pos(rhs, l) for l, _ in batch]
    lc = [pos(lhs, l) for l, _ in contract]
    rc = [pos(rhs, l) for l, _ in contract]
    # Result: batch (lhs batching order), lhs free, rhs free (each increasing).
    lf = [l for l in lhs if l in lfree]
    rf = [l for l in rhs if l in rfree]
    out = batch + lf + rf
    lshape = tuple(s for _, s in lhs)
    rshape = tuple(s for _, s in rhs)
    oshape = tuple(s for _, s in out)
    a = random_values(rng, dtype, lshape, -2, 2)
    b = random_values(rng, dtype, rshape, -2, 2)
    spec = "%s,%s->%s" % ("".join(l for l, _ in lhs), "".join(l for l, _ in rhs),
                          "".join(l for l, _ in out))
    f = suite.function(name)
    x, y = f.const(a, dtype), f.const(b, dtype)
    r = f.op("kiln.dot_general %s, %s, batch = %s x %s, contract = %s x %s : (%s, %s) -> %s" % (
        x, y, ints(lb), ints(rb), ints(lc), ints(rc), tensor_type(lshape, dtype),
        tensor_type(rshape, dtype), tensor_type(oshape, dtype)))
    f.expect(r, oshape, dtype, np.einsum(spec, a, b),
             scale=np.einsum(spec, np.abs(a), np.abs(b)))


for dtype in FLOAT_TYPES:
    for trial in range(4):
        random_dot("dot_%s_%d" % (dtype, trial), dtype)
for dtype in ("i64", "i32"):
    for trial in range(2):
        random_dot("dot_%s_%d" % (dtype, trial), dtype)

# A plain MLP-sized matmul, with a long contraction.
a = random_values(rng, "f32", (16, 784), -1, 1)
b = random_values(rng, "f32", (784, 32), -1, 1)
f = suite.function("matmul_f32_784")
x, y = f.const(a, "f32"), f.const(b, "f32")
r = f.op("kiln.dot_general %s, %s, batch = [] x [], contract = [1] x [0] : "
         "(tensor<16x784xf32>, tensor<784x32xf32>) -> tensor<16x32xf32>" % (x, y))
f.expect(r, (16, 32), "f32", a @ b, scale=np.abs(a) @ np.abs(b))


def random_conv():
    """Random conv2d geometry whose output is not empty."""
    while True:
        groups = int(rng.integers(1, 4))
        n = int(rng.integers(1, 3))
        cg, og = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        h, w = int(rng.integers(3, 9)), int(rng.integers(3, 9))
        kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        strides = [int(rng.integers(1, 3)), int(rng.integers(1, 3))]
        padding = [int(rng.integers(0, 3)) for _ in range(4)]
        dilation = [int(rng.integers(1, 3)), int(rng.integers(1, 3))]
        oh = windows.out_size(h, padding[0], padding[1], kh, strides[0], dilation[0])
        ow = windows.out_size(w, padding[2], padding[3], kw, strides[1], dilation[1])
        if oh >= 1 and ow >= 1:
            return ((n, groups * cg, h, w), (groups * og, cg, kh, kw), (n, groups * og, oh, ow),
                    strides, padding, dilation, groups)


for dtype in FLOAT_TYPES:
    for trial in range(3):
        xs, ws, ys, strides, padding, dilation, groups = random_conv()
        attrs = "strides = %s, padding = %s, dilation = %s, groups = %d" % (
            ints(strides), ints(padding), ints(dilation), groups)
        x = random_values(rng, dtype, xs, -2, 2)
        w = random_values(rng, dtype, ws, -2, 2)
        dy = random_values(rng, dtype, ys, -2, 2)
        tx, tw, ty = (tensor_type(s, dtype) for s in (xs, ws, ys))
        f = suite.function("conv2d_%s_%d" % (dtype, trial))
        cx, cw, cdy = f.const(x, dtype), f.const(w, dtype), f.const(dy, dtype)
        r = f.op("kiln.conv2d %s, %s, %s : (%s, %s) -> %s" % (cx, cw, attrs, tx, tw, ty))
        f.expect(r, ys, dtype, windows.conv2d(x, w, strides, padding, dilation, groups),
                 scale=windows.conv2d(np.abs(x), np.abs(w), strides, padding, dilation, groups))
        r = f.op("kiln.conv2d_input_grad %s, %s, %s : (%s, %s) -> %s" % (cdy, cw, attrs, ty, tw, tx))
        f.expect(r, xs, dtype,
                 windows.conv2d_input_grad(dy, w, xs, strides, padding, dilation, groups),
                 scale=windows.conv2d_input_grad(np.abs(dy), np.abs(w), xs, strides, padding,
                                                 dilation, groups))
        r = f.op("kiln.conv2d_filter_grad %s, %s, %s : (%s, %s) -> %s" % (cx, cdy, attrs, tx, ty, tw))
        f.expect(r, ws, dtype,
                 windows.conv2d_filter_grad(x, dy, ws, strides, padding, dilation, groups),
                 scale=windows.conv2d_filter_grad(np.abs(x), np.abs(dy), ws, strides, padding,
                                                  dilation, groups))

suite.run()
