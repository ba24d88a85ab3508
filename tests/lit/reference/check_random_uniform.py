# RUN: %python %s
#
# kiln.random_uniform: element i is the Philox-4x32-10 number of
# ir/reference/Philox.h that kiln.dropout compares with its rate (recomputed
# by an independent NumPy Philox, itself checked against Random123's known
# answers), rounded to the result's type; the numbers lie in [0, 1) with the
# moments of a uniform; the same seed and counter give the same numbers, and
# a different counter or seed different ones. Seeds and counters are fresh
# each run.
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, __file__.rsplit("/", 1)[0] + "/support")

import numpy as np

from harness import FLOAT_TYPES, Suite, round_to, tensor_type
from philox import dropout_uniform

suite = Suite("random_uniform")
rng = suite.rng

SHAPE = (64, 512)
N = SHAPE[0] * SHAPE[1]


def uniform(f, counter, seed, dtype, shape=SHAPE):
    c = f.const(np.array(counter, dtype=np.float64), "i64")
    return f.op("kiln.random_uniform %s, seed = %d : %s" % (
        c, seed, tensor_type(shape, dtype)))


for dtype in FLOAT_TYPES:
    seed = int(rng.integers(-2 ** 62, 2 ** 62))
    # Counters past 2^32 exercise the high counter word.
    counter = int(rng.integers(0, 2 ** 40))
    f = suite.function("random_uniform_%s" % dtype)
    same = uniform(f, counter, seed, dtype)
    again = uniform(f, counter, seed, dtype)
    other_counter = uniform(f, counter + 1, seed, dtype)
    other_seed = uniform(f, counter, seed ^ 1, dtype)
    u = dropout_uniform(seed, counter, N).reshape(SHAPE)
    f.expect(same, SHAPE, dtype, round_to(dtype, u), mode="exact")

    def moments(got, u=u, dtype=dtype):
        if not np.array_equal(got, round_to(dtype, u)):
            return "the same seed and counter gave different numbers"
        # A uniform on [0, 1): mean 1/2 and variance 1/12, each within five
        # standard errors (bf16 and f16 round it, which moves neither by
        # more than their spacing near 1).
        if got.min() < 0 or got.max() > 1:
            return "numbers outside [0, 1]: %g to %g" % (got.min(), got.max())
        mean, variance = got.mean(), got.var()
        if abs(mean - 0.5) > 5 * np.sqrt(1 / 12 / N) + 2 ** -9:
            return "mean %.5f, expected 0.5" % mean
        if abs(variance - 1 / 12) > 5 * np.sqrt(1 / 180 / N) + 2 ** -8:
            return "variance %.5f, expected %.5f" % (variance, 1 / 12)
        return None

    f.check(again, SHAPE, dtype, moments)
    kept = {}

    def remember(got):
        kept["counter"] = got
        return None

    f.check(other_counter, SHAPE, dtype, remember)

    def differs(got, u=u, dtype=dtype):
        mine = round_to(dtype, u)
        for label, other in (("counter + 1", kept["counter"]), ("seed ^ 1", got)):
            # Independent uniforms correlate by about 0.
            if abs(np.corrcoef(mine.ravel(), other.ravel())[0, 1]) > 0.05:
                return "%s gave correlated numbers" % label
        return None

    f.check(other_seed, SHAPE, dtype, differs)

suite.run()
