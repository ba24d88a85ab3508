# RUN: %python %s
#
# softmax, log_softmax, layer_norm, scatter_add (adding, max and min) and
# softmax_cross_entropy
# against NumPy in float64, in every float type, on fresh random shapes and
# values each run. Logits are offset by hundreds so an implementation that
# does not subtract the maximum first overflows. Each op computes in double
# and rounds once, so results must equal NumPy's value rounded to the type;
# the tolerance scale is the magnitude of the terms that cancel.
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, __file__.rsplit("/", 1)[0] + "/support")

import numpy as np

from harness import FLOAT_TYPES, Suite, float_attr, random_shape, random_values, round_to, tensor_type

suite = Suite("neural-network composites")
rng = suite.rng

for dtype in FLOAT_TYPES:
    for trial in range(2):
        shape = random_shape(rng, 1, 3, 1, 6)
        dim = int(rng.integers(0, len(shape)))
        offset = {"f16": 0.0}.get(dtype, 600.0 * trial)  # exp(600) overflows f64
        x = round_to(dtype, random_values(rng, dtype, shape, -4, 4) + offset)
        m = x.max(axis=dim, keepdims=True)
        e = np.exp(x - m)
        log_sum = np.log(e.sum(axis=dim, keepdims=True))
        t = tensor_type(shape, dtype)
        f = suite.function("softmax_%s_%d" % (dtype, trial))
        a = f.const(x, dtype)
        r = f.op("kiln.softmax %s, dim = %d : %s" % (a, dim, t))
        f.expect(r, shape, dtype, e / e.sum(axis=dim, keepdims=True))
        r = f.op("kiln.log_softmax %s, dim = %d : %s" % (a, dim, t))
        f.expect(r, shape, dtype, x - m - log_sum, scale=np.abs(x - m) + log_sum)

for dtype in FLOAT_TYPES:
    shape = random_shape(rng, 1, 4, 1, 6)
    axis = int(rng.integers(0, len(shape)))
    eps = float(rng.choice([1e-5, 1e-3, 0.5]))
    x = random_values(rng, dtype, shape, -3, 3) + float(rng.uniform(-5, 5))
    x = round_to(dtype, x)
    g = random_values(rng, dtype, shape[axis:], -2, 2)
    b = random_values(rng, dtype, shape[axis:], -2, 2)
    axes = tuple(range(axis, len(shape)))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    normalized = (x - mean) / np.sqrt(var + eps) * g
    f = suite.function("layer_norm_%s" % dtype)
    cx, cg, cb = f.const(x, dtype), f.const(g, dtype), f.const(b, dtype)
    r = f.op("kiln.layer_norm %s, %s, %s, axis = %d, epsilon = %s : %s, %s" % (
        cx, cg, cb, axis, float_attr(eps), tensor_type(shape, dtype), tensor_type(shape[axis:], dtype)))
    # The centred values lose what the mean cancels: scale by |x| as well.
    f.expect(r, shape, dtype, normalized + b,
             scale=np.abs(normalized) + np.abs(b) + np.abs(x) / np.sqrt(var + eps) * np.abs(g))

for dtype in FLOAT_TYPES + ("i32", "i64"):
    for index_type in ("i32", "i64"):
        table_shape = random_shape(rng, 1, 3)
        index_shape = random_shape(rng, 0, 2, 1, 6)  # more indices than rows: repeats
        operand = random_values(rng, dtype, table_shape, -5, 5)
        idx = rng.integers(0, table_shape[0], size=index_shape)
        updates = random_values(rng, dtype, tuple(index_shape) + tuple(table_shape[1:]), -5, 5)
        want = operand.copy()
        np.add.at(want, idx, updates)
        scale = np.abs(operand)
        np.add.at(scale, idx, np.abs(updates))
        f = suite.function("scatter_add_%s_%s" % (dtype, index_type))
        co, ci, cu = f.const(operand, dtype), f.const(idx, index_type), f.const(updates, dtype)
        r = f.op("kiln.scatter_add %s, %s, %s : (%s, %s, %s) -> %s" % (
            co, ci, cu, tensor_type(table_shape, dtype), tensor_type(index_shape, index_type),
            tensor_type(updates.shape, dtype), tensor_type(table_shape, dtype)))
        f.expect(r, table_shape, dtype, want, scale=scale)

# combine = max and min: np.maximum.at and np.minimum.at (a NaN wins, as in
# np.maximum); small integer values so that ties are common.
for combine, ufunc in (("max", np.maximum), ("min", np.minimum)):
    for dtype in FLOAT_TYPES + ("i32", "i64"):
        table_shape = random_shape(rng, 1, 3)
        index_shape = random_shape(rng, 0, 2, 1, 6)
        operand = np.round(random_values(rng, dtype, table_shape, -3, 3))
        idx = rng.integers(0, table_shape[0], size=index_shape)
        updates = np.round(random_values(rng, dtype, tuple(index_shape) + tuple(table_shape[1:]), -3, 3))
        if dtype in FLOAT_TYPES and updates.size > 1:
            updates.flat[int(rng.integers(0, updates.size))] = np.nan
        want = operand.copy()
        ufunc.at(want, idx, updates)
        f = suite.function("scatter_%s_%s" % (combine, dtype))
        co, ci, cu = f.const(operand, dtype), f.const(idx, "i64"), f.const(updates, dtype)
        r = f.op("kiln.scatter_add %s, %s, %s combine = %s : (%s, %s, %s) -> %s" % (
            co, ci, cu, combine, tensor_type(table_shape, dtype), tensor_type(index_shape, "i64"),
            tensor_type(updates.shape, dtype), tensor_type(table_shape, dtype)))
        f.expect(r, table_shape, dtype, want, scale=np.abs(np.nan_to_num(want)))

for dtype in FLOAT_TYPES:
    for index_type in ("i32", "i64"):
        n, c = int(rng.integers(1, 8)), int(rng.integers(1, 12))
        offset = 0.0 if dtype == "f16" else 500.0
        logits = round_to(dtype, random_values(rng, dtype, (n, c), -5, 5) + offset)
        labels = rng.integers(0, c, size=(n,))
        m = logits.max(axis=1)
        lse = m + np.log(np.exp(logits - m[:, None]).sum(axis=1))
        picked = logits[np.arange(n), labels]
        f = suite.function("softmax_cross_entropy_%s_%s" % (dtype, index_type))
        cl, cy = f.const(logits, dtype), f.const(labels, index_type)
        r = f.op("kiln.softmax_cross_entropy %s, %s : (%s, %s) -> %s" % (
            cl, cy, tensor_type((n, c), dtype), tensor_type((n,), index_type), tensor_type((n,), dtype)))
        f.expect(r, (n,), dtype, lse - picked, scale=np.abs(lse) + np.abs(picked))

suite.run()
