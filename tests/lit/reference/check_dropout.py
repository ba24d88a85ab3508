# RUN: %python %s
#
# kiln.dropout: the mask is exactly the Philox-4x32-10 recipe documented in
# ir/reference/Philox.h (recomputed by an independent NumPy Philox that is
# itself checked against Random123's known answers); about 1 - rate of the
# elements are kept; kept elements are scaled by exactly 1 / (1 - rate);
# the same seed and counter give the same mask, and a different counter or
# seed a different one. Seeds, counters and rates are fresh each run.
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, __file__.rsplit("/", 1)[0] + "/support")

import numpy as np

from harness import FLOAT_TYPES, Suite, float_attr, random_values, round_to, tensor_type
from philox import dropout_uniform

suite = Suite("dropout")
rng = suite.rng

SHAPE = (64, 512)
N = SHAPE[0] * SHAPE[1]


def dropout(f, x_ssa, counter, rate, seed, dtype, shape=SHAPE):
    c = f.const(np.array(counter, dtype=np.float64), "i64")
    return f.op("kiln.dropout %s, %s, rate = %s, seed = %d : %s" % (
        x_ssa, c, float_attr(rate), seed, tensor_type(shape, dtype)))


def expected(x, counter, rate, seed, dtype):
    u = dropout_uniform(seed, counter, x.size).reshape(x.shape)
    return np.where(u >= rate, round_to(dtype, x * (1.0 / (1.0 - rate))), 0.0)


for dtype in FLOAT_TYPES:
    rate = float(rng.choice([0.1, 0.25, 0.5, 0.9]))
    seed = int(rng.integers(-2 ** 62, 2 ** 62))
    # Counters past 2^32 exercise the high counter word.
    counter = int(rng.integers(0, 2 ** 40))
    # Values away from zero, so "dropped" and "kept" are told apart.
    x = random_values(rng, dtype, SHAPE, 0.5, 2) * rng.choice([-1.0, 1.0], size=SHAPE)
    x = round_to(dtype, x)
    f = suite.function("dropout_%s" % dtype)
    a = f.const(x, dtype)
    same = dropout(f, a, counter, rate, seed, dtype)
    again = dropout(f, a, counter, rate, seed, dtype)
    other_counter = dropout(f, a, counter + 1, rate, seed, dtype)
    other_seed = dropout(f, a, counter, rate, seed ^ 1, dtype)
    f.expect(same, SHAPE, dtype, expected(x, counter, rate, seed, dtype), mode="exact")

    def statistics(got, x=x, rate=rate, dtype=dtype):
        kept = got != 0
        fraction = kept.mean()
        sigma = np.sqrt(rate * (1 - rate) / N)
        if abs(fraction - (1 - rate)) > 5 * sigma:
            return "kept %.4f of the elements, expected %.4f +- %.4f" % (fraction, 1 - rate, 5 * sigma)
        scaled = round_to(dtype, x * (1.0 / (1.0 - rate)))
        if not np.array_equal(got[kept], scaled[kept]):
            return "kept elements are not x * (1 / (1 - rate)) exactly"
        return None

    f.check(same, SHAPE, dtype, statistics)
    masks = {}

    def remember(label):
        def check(got):
            masks[label] = got != 0
            return None
        return check

    f.check(again, SHAPE, dtype, remember("again"))
    f.check(other_counter, SHAPE, dtype, remember("counter"))

    def differs(got, dtype=dtype, x=x, counter=counter, rate=rate, seed=seed):
        mine = expected(x, counter, rate, seed, dtype) != 0
        if not np.array_equal(masks["again"], mine):
            return "the same seed and counter gave a different mask"
        for label, other in (("counter + 1", masks["counter"]), ("seed ^ 1", got != 0)):
            # Independent masks agree on about r^2 + (1-r)^2 of the elements.
            if (other == mine).mean() > 1 - rate * (1 - rate):
                return "%s gave (almost) the same mask" % label
        return None

    f.check(other_seed, SHAPE, dtype, differs)

# rate 0 keeps everything unscaled.
x = random_values(rng, "f32", (3, 7), -2, 2)
f = suite.function("dropout_rate_zero")
r = dropout(f, f.const(x, "f32"), 3, 0.0, 11, "f32", (3, 7))
f.expect(r, (3, 7), "f32", x, mode="exact")

suite.run()
