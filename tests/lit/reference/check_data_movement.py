# RUN: %python %s
#
# constant, iota, broadcast_in_dim, reshape, transpose, slice, concatenate,
# pad and gather against NumPy, on every element type, with fresh random
# shapes, attributes and values each run. These ops copy values, so results
# must match exactly.
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, __file__.rsplit("/", 1)[0] + "/support")

import numpy as np

from harness import FLOAT_TYPES, INT_TYPES, Suite, float_attr, random_shape, random_values, tensor_type

suite = Suite("data movement ops")
rng = suite.rng
ALL_TYPES = FLOAT_TYPES + INT_TYPES + ("i1",)


def values(dtype, shape):
    if dtype == "i1":
        return (rng.random(shape) < 0.5).astype(np.float64)
    return random_values(rng, dtype, shape, -100, 100)


def ints(values):
    return "[" + ", ".join(str(int(v)) for v in values) + "]"


for dtype in ALL_TYPES:
    # constant: what goes in comes out.
    shape = random_shape(rng, 0, 3)
    x = values(dtype, shape)
    f = suite.function("constant_%s" % dtype)
    f.expect(f.const(x, dtype), shape, dtype, x, mode="exact")

    # broadcast_in_dim: operand dimension i maps to result dimension dims[i]
    # and is either 1 or that dimension's size.
    result_shape = random_shape(rng, 1, 4)
    rank = int(rng.integers(0, len(result_shape) + 1))
    dims = sorted(rng.choice(len(result_shape), size=rank, replace=False).tolist())
    operand_shape = tuple(1 if rng.random() < 0.3 else result_shape[d] for d in dims)
    x = values(dtype, operand_shape)
    f = suite.function("broadcast_in_dim_%s" % dtype)
    a = f.const(x, dtype)
    r = f.op("kiln.broadcast_in_dim %s, dims = %s : %s -> %s" % (
        a, ints(dims), tensor_type(operand_shape, dtype), tensor_type(result_shape, dtype)))
    keep = [1] * len(result_shape)
    for i, d in enumerate(dims):
        keep[d] = operand_shape[i]
    f.expect(r, result_shape, dtype, np.broadcast_to(x.reshape(keep), result_shape), mode="exact")

    # reshape: regroup the prime factors of the element count.
    shape = random_shape(rng, 1, 3)
    x = values(dtype, shape)
    factors = []
    for d in shape:
        p = 2
        while d > 1:
            while d % p == 0:
                factors.append(p)
                d //= p
            p += 1
    rng.shuffle(factors)
    new_shape = []
    for p in factors:
        if new_shape and rng.random() < 0.5:
            new_shape[-1] *= p
        else:
            new_shape.append(p)
    if rng.random() < 0.3:
        new_shape.insert(int(rng.integers(0, len(new_shape) + 1)), 1)
    new_shape = tuple(new_shape)
    f = suite.function("reshape_%s" % dtype)
    a = f.const(x, dtype)
    r = f.op("kiln.reshape %s : %s -> %s" % (a, tensor_type(shape, dtype), tensor_type(new_shape, dtype)))
    f.expect(r, new_shape, dtype, x.reshape(new_shape), mode="exact")

    # transpose: result dimension i is operand dimension perm[i].
    shape = random_shape(rng, 1, 4)
    perm = rng.permutation(len(shape)).tolist()
    x = values(dtype, shape)
    f = suite.function("transpose_%s" % dtype)
    a = f.const(x, dtype)
    out_shape = tuple(shape[p] for p in perm)
    r = f.op("kiln.transpose %s, permutation = %s : %s -> %s" % (
        a, ints(perm), tensor_type(shape, dtype), tensor_type(out_shape, dtype)))
    f.expect(r, out_shape, dtype, np.transpose(x, perm), mode="exact")

    # slice: start <= limit, any positive stride, results never empty.
    shape = random_shape(rng, 1, 3, 1, 7)
    start = [int(rng.integers(0, d)) for d in shape]
    limit = [int(rng.integers(s + 1, d + 1)) for s, d in zip(start, shape)]
    strides = [int(rng.integers(1, 4)) for _ in shape]
    x = values(dtype, shape)
    want = x[tuple(slice(s, l, k) for s, l, k in zip(start, limit, strides))]
    f = suite.function("slice_%s" % dtype)
    a = f.const(x, dtype)
    r = f.op("kiln.slice %s, start = %s, limit = %s, strides = %s : %s -> %s" % (
        a, ints(start), ints(limit), ints(strides), tensor_type(shape, dtype),
        tensor_type(want.shape, dtype)))
    f.expect(r, want.shape, dtype, want, mode="exact")

    # concatenate: one to three inputs along a random dimension.
    shape = random_shape(rng, 1, 3)
    dim = int(rng.integers(0, len(shape)))
    inputs = []
    for _ in range(int(rng.integers(1, 4))):
        s = list(shape)
        s[dim] = int(rng.integers(1, 4))
        inputs.append(values(dtype, tuple(s)))
    want = np.concatenate(inputs, axis=dim)
    f = suite.function("concatenate_%s" % dtype)
    names = [f.const(v, dtype) for v in inputs]
    r = f.op('kiln.concatenate(%s), dim = %d : (%s) -> %s' % (
        ", ".join(names), dim, ", ".join(tensor_type(v.shape, dtype) for v in inputs),
        tensor_type(want.shape, dtype)))
    f.expect(r, want.shape, dtype, want, mode="exact")

    # pad: edges of 0..2 elements filled with a value of the element type.
    shape = random_shape(rng, 1, 3)
    low = [int(rng.integers(0, 3)) for _ in shape]
    high = [int(rng.integers(0, 3)) for _ in shape]
    pad_value = {"i1": 1.0}.get(dtype, float(values(dtype, ())))
    x = values(dtype, shape)
    want = np.pad(x, list(zip(low, high)), constant_values=pad_value)
    f = suite.function("pad_%s" % dtype)
    a = f.const(x, dtype)
    r = f.op("kiln.pad %s, low = %s, high = %s, value = %s : %s -> %s" % (
        a, ints(low), ints(high), float_attr(pad_value), tensor_type(shape, dtype),
        tensor_type(want.shape, dtype)))
    f.expect(r, want.shape, dtype, want, mode="exact")

    # gather: rows of a [V, D...] table by i32 or i64 indices of any shape.
    table_shape = random_shape(rng, 1, 3)
    index_shape = random_shape(rng, 0, 2)
    index_type = "i32" if rng.random() < 0.5 else "i64"
    table = values(dtype, table_shape)
    idx = rng.integers(0, table_shape[0], size=index_shape).astype(np.float64)
    want = table[idx.astype(np.int64)]
    f = suite.function("gather_%s_%s" % (dtype, index_type))
    t, i = f.const(table, dtype), f.const(idx, index_type)
    r = f.op("kiln.gather %s, %s : (%s, %s) -> %s" % (
        t, i, tensor_type(table_shape, dtype), tensor_type(index_shape, index_type),
        tensor_type(want.shape, dtype)))
    f.expect(r, want.shape, dtype, want, mode="exact")

# iota along each dimension, in float and integer types.
for dtype in ("f64", "f32", "bf16", "i64", "i32", "i8"):
    shape = random_shape(rng, 1, 3)
    dim = int(rng.integers(0, len(shape)))
    f = suite.function("iota_%s" % dtype)
    r = f.op("kiln.iota dim = %d : %s" % (dim, tensor_type(shape, dtype)))
    f.expect(r, shape, dtype, np.indices(shape)[dim].astype(np.float64), mode="exact")

suite.run()
