# RUN: %python %s
#
# kiln.reduce (sum, max, min, mean over any subset of dimensions, the empty
# one included) and kiln.argmax (first index on ties, NaN counts as largest)
# against NumPy, in every numeric type, on fresh random data each run. Sums
# and means are computed once in double and rounded, so they must equal
# NumPy's float64 result rounded to the type; max, min and argmax exactly.
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, __file__.rsplit("/", 1)[0] + "/support")

import numpy as np

from harness import FLOAT_TYPES, INT_TYPES, Suite, random_shape, random_values, tensor_type

suite = Suite("reductions")
rng = suite.rng


def ints(values):
    return "[" + ", ".join(str(int(v)) for v in values) + "]"


for kind in ("sum", "max", "min", "mean"):
    for dtype in FLOAT_TYPES + INT_TYPES:
        for trial in range(2):
            shape = random_shape(rng, 1, 4)
            count = int(rng.integers(0, len(shape) + 1))
            dims = sorted(rng.choice(len(shape), size=count, replace=False).tolist())
            if dtype in INT_TYPES:
                # i8 sums stay in range; mean truncates toward zero.
                x = random_values(rng, dtype, shape, -5, 6)
            else:
                x = random_values(rng, dtype, shape, -10, 10)
            axes = tuple(dims)
            want = {"sum": np.sum, "max": np.max, "min": np.min, "mean": np.mean}[kind](x, axis=axes)
            scale = None
            if kind in ("sum", "mean"):
                scale = {"sum": np.sum, "mean": np.mean}[kind](np.abs(x), axis=axes)
            out_shape = tuple(d for i, d in enumerate(shape) if i not in dims)
            f = suite.function("reduce_%s_%s_%d" % (kind, dtype, trial))
            a = f.const(x, dtype)
            r = f.op("kiln.reduce %s %s, dims = %s : %s -> %s" % (
                kind, a, ints(dims), tensor_type(shape, dtype), tensor_type(out_shape, dtype)))
            f.expect(r, out_shape, dtype, want, mode="exact" if kind in ("max", "min") else "rounded",
                     scale=scale)

# A long f32 sum: accumulating in f32 would drift by far more than one
# rounding; the result must be NumPy's float64 sum rounded once.
x = random_values(rng, "f32", (4, 4096), 0, 1)
f = suite.function("reduce_sum_f32_long")
a = f.const(x, "f32")
r = f.op("kiln.reduce sum %s, dims = [1] : tensor<4x4096xf32> -> tensor<4xf32>" % a)
f.expect(r, (4,), "f32", x.sum(axis=1), scale=np.abs(x).sum(axis=1))

# max and min propagate NaN.
x = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, -1.0]])
for kind, fn in (("max", np.max), ("min", np.min)):
    f = suite.function("reduce_%s_nan" % kind)
    a = f.const(x, "f32")
    r = f.op("kiln.reduce %s %s, dims = [1] : tensor<2x3xf32> -> tensor<2xf32>" % (kind, a))
    f.expect(r, (2,), "f32", fn(x, axis=1), mode="exact")

for dtype in FLOAT_TYPES + INT_TYPES:
    for index_type in ("i32", "i64"):
        shape = random_shape(rng, 1, 4)
        dim = int(rng.integers(0, len(shape)))
        # Few distinct values, so ties are common; np.argmax returns the
        # first maximum and treats NaN as the largest (first NaN wins).
        x = rng.integers(-2, 3, size=shape).astype(np.float64)
        if dtype in FLOAT_TYPES:
            x = np.where(rng.random(shape) < 0.1, np.nan, x)
        out_shape = tuple(d for i, d in enumerate(shape) if i != dim)
        f = suite.function("argmax_%s_%s" % (dtype, index_type))
        a = f.const(x, dtype)
        r = f.op("kiln.argmax %s, dim = %d : %s -> %s" % (
            a, dim, tensor_type(shape, dtype), tensor_type(out_shape, index_type)))
        f.expect(r, out_shape, index_type, np.argmax(x, axis=dim).astype(np.float64), mode="exact")

suite.run()
