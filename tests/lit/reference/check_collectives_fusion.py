# RUN: %python %s
#
# Collectives on the interpreter's single rank (world size 1) are the
# identity: all_reduce of every kind, all_gather and reduce_scatter whose
# result shape is the operand's, collective_broadcast from root 0, with or
# without groups = [[0]]. kiln.fusion evaluates its body: a multi-output
# fusion mixing elementwise ops, a reduction and a matmul must equal the
# same ops computed unfused by NumPy, rounded to f32 after every op.
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, __file__.rsplit("/", 1)[0] + "/support")

import numpy as np

from harness import FLOAT_TYPES, INT_TYPES, Suite, random_shape, random_values, round_to, tensor_type

suite = Suite("collectives and fusion")
rng = suite.rng
GROUPS = " {groups = dense<[[0]]> : tensor<1x1xi64>}"

for dtype in FLOAT_TYPES + INT_TYPES:
    shape = random_shape(rng, 1, 3)
    x = random_values(rng, dtype, shape, -50, 50)
    t = tensor_type(shape, dtype)
    dim = int(rng.integers(0, len(shape)))
    f = suite.function("collectives_%s" % dtype)
    a = f.const(x, dtype)
    for kind in ("sum", "max", "min", "mean"):
        for groups in ("", GROUPS):
            r = f.op("kiln.all_reduce %s %s%s : %s" % (kind, a, groups, t))
            f.expect(r, shape, dtype, x, mode="exact")
    for groups in ("", GROUPS):
        r = f.op("kiln.all_gather %s, dim = %d%s : %s -> %s" % (a, dim, groups, t, t))
        f.expect(r, shape, dtype, x, mode="exact")
        r = f.op("kiln.reduce_scatter sum %s, dim = %d%s : %s -> %s" % (a, dim, groups, t, t))
        f.expect(r, shape, dtype, x, mode="exact")
        r = f.op("kiln.collective_broadcast %s, root = 0%s : %s" % (a, groups, t))
        f.expect(r, shape, dtype, x, mode="exact")

# A multi-output fusion: relu(a * b + c), its row sums, and a matmul of it.
m, k, n = (int(v) for v in rng.integers(1, 6, size=3))
a = random_values(rng, "f32", (m, k), -2, 2)
b = random_values(rng, "f32", (m, k), -2, 2)
c = random_values(rng, "f32", (m, k), -2, 2)
w = random_values(rng, "f32", (k, n), -2, 2)
f32 = lambda v: round_to("f32", v)
h = f32(np.maximum(f32(f32(a * b) + c), 0))
sums = f32(h.sum(axis=1))
mm = f32(h @ w)
tmk, tkn, tm, tmn = (tensor_type(s, "f32") for s in ((m, k), (k, n), (m,), (m, n)))
f = suite.function("fusion_multi_output")
ca, cb, cc, cw = (f.const(v, "f32") for v in (a, b, c, w))
f.raw("%%fused:3 = kiln.fusion multi_output (%s, %s, %s, %s) : (%s, %s, %s, %s) -> (%s, %s, %s) {" % (
    ca, cb, cc, cw, tmk, tmk, tmk, tkn, tmk, tm, tmn))
f.raw("^bb0(%%x: %s, %%y: %s, %%z: %s, %%v: %s):" % (tmk, tmk, tmk, tkn))
f.raw("  %%p = kiln.mul %%x, %%y : %s" % tmk)
f.raw("  %%q = kiln.add %%p, %%z : %s" % tmk)
f.raw("  %%r = kiln.relu %%q : %s" % tmk)
f.raw("  %%s = kiln.reduce sum %%r, dims = [1] : %s -> %s" % (tmk, tm))
f.raw("  %%t = kiln.dot_general %%r, %%v, batch = [] x [], contract = [1] x [0] : (%s, %s) -> %s" % (
    tmk, tkn, tmn))
f.raw("  kiln.yield %%r, %%s, %%t : %s, %s, %s" % (tmk, tm, tmn))
f.raw("}")
f.expect("%fused#0", (m, k), "f32", h, mode="exact")
f.expect("%fused#1", (m,), "f32", h.sum(axis=1), scale=np.abs(h).sum(axis=1))
f.expect("%fused#2", (m, n), "f32", h @ w, scale=np.abs(h) @ np.abs(w))

# In bf16 every op of the body rounds to bf16, as the unfused ops would.
x = random_values(rng, "bf16", (8,), -3, 3)
y = random_values(rng, "bf16", (8,), -3, 3)
bf = lambda v: round_to("bf16", v)
f = suite.function("fusion_bf16_rounds_each_op")
cx, cy = f.const(x, "bf16"), f.const(y, "bf16")
f.raw("%%fused = kiln.fusion loop (%s, %s) : (tensor<8xbf16>, tensor<8xbf16>) -> tensor<8xbf16> {" % (cx, cy))
f.raw("^bb0(%x: tensor<8xbf16>, %y: tensor<8xbf16>):")
f.raw("  %p = kiln.mul %x, %y : tensor<8xbf16>")
f.raw("  %q = kiln.mul %p, %p : tensor<8xbf16>")
f.raw("  kiln.yield %q : tensor<8xbf16>")
f.raw("}")
# x*y and its square are exact in f32 for bf16 inputs, so each op's only
# rounding is the one to bf16.
f.expect("%fused", (8,), "bf16", bf(bf(x * y) ** 2), mode="exact")

suite.run()
