# RUN: %python %s
#
# Every elementwise kiln op (their scalar semantics, run by the reference
# interpreter) against NumPy, in every float type and, where the op takes
# them, the integer types, on fresh random shapes and values each run.
# Integer results must match NumPy's wrapping arithmetic exactly; float
# results within the "elementwise" tolerance of support/harness.py.
import math
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, __file__.rsplit("/", 1)[0] + "/support")

import numpy as np

from harness import FLOAT_TYPES, INT_TYPES, Suite, random_shape, random_values, round_to, tensor_type

suite = Suite("elementwise ops")
rng = suite.rng

erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


# name: (numpy function, input range, takes integers)
UNARY = {
    "neg": (np.negative, (-3, 3), True),
    "abs": (np.abs, (-3, 3), True),
    "relu": (lambda x: np.maximum(x, 0), (-3, 3), True),
    "stop_gradient": (lambda x: x, (-3, 3), True),
    "exp": (np.exp, (-4, 4), False),
    "log": (np.log, (0.05, 5), False),
    "log1p": (np.log1p, (-0.9, 3), False),
    "sqrt": (np.sqrt, (0, 5), False),
    "rsqrt": (lambda x: 1 / np.sqrt(x), (0.05, 5), False),
    "tanh": (np.tanh, (-4, 4), False),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), (-6, 6), False),
    "erf": (erf, (-3, 3), False),
    "sin": (np.sin, (-4, 4), False),
    "cos": (np.cos, (-4, 4), False),
    "reciprocal": (lambda x: 1 / x, (0.25, 4), False),
    "atan": (np.arctan, (-8, 8), False),
    "floor": (np.floor, (-6, 6), False),
    "ceil": (np.ceil, (-6, 6), False),
    "round": (np.round, (-6, 6), False),  # NumPy's round takes halves to even
}

for name, (fn, (lo, hi), takes_ints) in UNARY.items():
    for dtype in FLOAT_TYPES + (INT_TYPES if takes_ints else ()):
        shape = random_shape(rng, 0, 3)
        if dtype in INT_TYPES:
            x = random_values(rng, dtype, shape, -100, 100)
        else:
            x = random_values(rng, dtype, shape, lo, hi)
            if name == "reciprocal":
                x = x * rng.choice([-1.0, 1.0], size=shape)
        f = suite.function("%s_%s" % (name, dtype))
        a = f.const(x, dtype)
        t = tensor_type(shape, dtype)
        r = f.op("kiln.%s %s : %s" % (name, a, t))
        f.expect(r, shape, dtype, fn(x), mode="elementwise")

# Random values are never halves or integers: the rounding ops on values
# that are, in every float type (halves go to the even neighbour).
EDGES = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, -3.0, 0.0, 2.0, -0.25, 0.75])
for name, fn in (("floor", np.floor), ("ceil", np.ceil), ("round", np.round)):
    for dtype in FLOAT_TYPES:
        x = round_to(dtype, EDGES)
        f = suite.function("%s_edges_%s" % (name, dtype))
        a = f.const(x, dtype)
        r = f.op("kiln.%s %s : %s" % (name, a, tensor_type(x.shape, dtype)))
        f.expect(r, x.shape, dtype, fn(x), mode="elementwise")

for approx, fn in (("erf", lambda x: 0.5 * x * (1 + erf(x / math.sqrt(2)))), ("tanh", gelu_tanh)):
    for dtype in FLOAT_TYPES:
        shape = random_shape(rng, 0, 3)
        x = random_values(rng, dtype, shape, -4, 4)
        f = suite.function("gelu_%s_%s" % (approx, dtype))
        a = f.const(x, dtype)
        r = f.op("kiln.gelu %s, %s : %s" % (approx, a, tensor_type(shape, dtype)))
        f.expect(r, shape, dtype, fn(x), mode="elementwise")


def gelu_prime(approx, x):
    """d gelu / dx in float64 (the derivative of the two functions above)."""
    if approx == "erf":
        return 0.5 * (1 + erf(x / math.sqrt(2))) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    k = math.sqrt(2 / math.pi)
    u = k * (x + 0.044715 * x ** 3)
    return 0.5 * (1 + np.tanh(u)) + 0.5 * x * (1 - np.tanh(u) ** 2) * k * (1 + 3 * 0.044715 * x * x)


# gelu_grad(x, dy) = dy * gelu'(x), computed in f32 for f16 and bf16 and
# rounded once.
for approx in ("erf", "tanh"):
    for dtype in FLOAT_TYPES:
        shape = random_shape(rng, 0, 3)
        x = random_values(rng, dtype, shape, -4, 4)
        dy = random_values(rng, dtype, shape, -1.5, 1.5)
        f = suite.function("gelu_grad_%s_%s" % (approx, dtype))
        a, g = f.const(x, dtype), f.const(dy, dtype)
        r = f.op("kiln.gelu_grad %s, %s, %s : %s" % (approx, a, g, tensor_type(shape, dtype)))
        f.expect(r, shape, dtype, dy * gelu_prime(approx, x), mode="elementwise")

# Integer results wrap as two's complement; NumPy's fixed-width arithmetic
# does the same, and round_to wraps the exact float64 value likewise.
BINARY = {
    "add": (np.add, True),
    "sub": (np.subtract, True),
    "mul": (np.multiply, True),
    "div": (None, True),
    "max": (np.maximum, True),
    "min": (np.minimum, True),
    "pow": (np.power, False),
    "rem": (np.fmod, True),  # C's fmod and %: the dividend's sign
}

for name, (fn, takes_ints) in BINARY.items():
    for dtype in FLOAT_TYPES + (INT_TYPES if takes_ints else ()):
        shape = random_shape(rng, 0, 3)
        if dtype in INT_TYPES:
            # i8 covers wrap-around; i32 products reach 2^40 (they wrap, and
            # stay exact in the interpreter's doubles); i64 stays below 2^53.
            bound = {"i8": 128, "i32": 1 << 20, "i64": 1 << 25}[dtype]
            x = random_values(rng, dtype, shape, -bound, bound)
            y = random_values(rng, dtype, shape, -bound, bound)
            if name == "div":
                x = np.clip(x, -bound + 1, bound - 1)
                y = np.where(y == 0, 7, y)
                want = np.trunc(x / y)
            elif name == "rem":
                y = np.where(y == 0, 7, y)
                want = np.fmod(x, y)
            else:
                want = fn(x, y)
        else:
            x = random_values(rng, dtype, shape, -3, 3)
            y = random_values(rng, dtype, shape, -3, 3)
            if name == "div":
                y = np.where(np.abs(y) < 0.25, 0.5, y)
                want = x / y
            elif name == "pow":
                x = random_values(rng, dtype, shape, 0.1, 3)
                want = np.power(x, y)
            elif name == "rem":
                y = np.where(np.abs(y) < 0.25, 0.5, y)
                want = np.fmod(x, y)
            else:
                want = fn(x, y)
        f = suite.function("%s_%s" % (name, dtype))
        a, b = f.const(x, dtype), f.const(y, dtype)
        r = f.op("kiln.%s %s, %s : %s" % (name, a, b, tensor_type(shape, dtype)))
        f.expect(r, shape, dtype, want, mode="elementwise")

# max and min propagate NaN (arith.maximumf / minimumf), as np.maximum does.
for name, fn in (("max", np.maximum), ("min", np.minimum)):
    f = suite.function("%s_nan" % name)
    x = np.array([1.0, np.nan, -2.0, np.nan])
    y = np.array([np.nan, 3.0, 5.0, np.nan])
    a, b = f.const(x, "f32"), f.const(y, "f32")
    r = f.op("kiln.%s %s, %s : tensor<4xf32>" % (name, a, b))
    f.expect(r, (4,), "f32", fn(x, y), mode="exact")

# compare: ties come from drawing small integers; NaN compares false except
# under ne.
DIRECTIONS = {"eq": np.equal, "ne": np.not_equal, "lt": np.less,
              "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal}
for direction, fn in DIRECTIONS.items():
    for dtype in FLOAT_TYPES + INT_TYPES:
        shape = random_shape(rng, 1, 3)
        x = rng.integers(-2, 3, size=shape).astype(np.float64)
        y = rng.integers(-2, 3, size=shape).astype(np.float64)
        if dtype in FLOAT_TYPES:
            x = np.where(rng.random(shape) < 0.15, np.nan, x)
            x = x + rng.choice([0.0, 0.5], size=shape)
        f = suite.function("compare_%s_%s" % (direction, dtype))
        a, b = f.const(x, dtype), f.const(y, dtype)
        r = f.op("kiln.compare %s, %s, %s : %s" % (direction, a, b, tensor_type(shape, dtype)))
        with np.errstate(invalid="ignore"):
            f.expect(r, shape, "i1", fn(x, y).astype(np.float64), mode="exact")

for dtype in FLOAT_TYPES + INT_TYPES:
    shape = random_shape(rng, 0, 3)
    p = (rng.random(shape) < 0.5).astype(np.float64)
    x = random_values(rng, dtype, shape, -50, 50)
    y = random_values(rng, dtype, shape, -50, 50)
    f = suite.function("select_%s" % dtype)
    c, a, b = f.const(p, "i1"), f.const(x, dtype), f.const(y, dtype)
    r = f.op("kiln.select %s, %s, %s : %s, %s" % (
        c, a, b, tensor_type(shape, "i1"), tensor_type(shape, dtype)))
    f.expect(r, shape, dtype, np.where(p != 0, x, y), mode="exact")

# convert: float narrowing rounds to nearest even, float to integer truncates
# toward zero, integer narrowing wraps, nonzero is true.
CONVERSIONS = [("f64", "f32"), ("f64", "bf16"), ("f64", "f16"), ("f32", "bf16"),
               ("f32", "f16"), ("bf16", "f32"), ("f16", "f64"), ("bf16", "f16"),
               ("f32", "i32"), ("f64", "i64"), ("f32", "i8"), ("i32", "f32"),
               ("i8", "f64"), ("i64", "bf16"), ("i32", "i8"), ("i64", "i32"),
               ("i8", "i64"), ("f32", "i1"), ("i32", "i1"), ("i1", "f32"), ("i1", "i32")]
for src, dst in CONVERSIONS:
    shape = random_shape(rng, 1, 3)
    if src == "i1":
        x = (rng.random(shape) < 0.5).astype(np.float64)
    elif src in INT_TYPES:
        x = random_values(rng, src, shape, -300, 300)
        x = round_to(src, x)
    else:
        x = random_values(rng, src, shape, -100, 100)
        x = np.where(rng.random(shape) < 0.2, np.trunc(x), x)  # exact integers and zeros
    f = suite.function("convert_%s_%s" % (src, dst))
    a = f.const(x, src)
    r = f.op("kiln.convert %s : %s -> %s" % (a, tensor_type(shape, src), tensor_type(shape, dst)))
    want = np.trunc(x) if dst in INT_TYPES else x
    f.expect(r, shape, dst, want, mode="exact")

suite.run()
