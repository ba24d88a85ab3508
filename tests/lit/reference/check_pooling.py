# RUN: %python %s
#
# max_pool2d (padding is -infinity), avg_pool2d (count_include_pad) and
# their gradients (max: the first maximum in row-major order takes the
# gradient) over random windows, strides and padding, against the direct
# NumPy loops of support/windows.py. Inputs are drawn from a few values so
# ties inside a window are common.
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, __file__.rsplit("/", 1)[0] + "/support")

import numpy as np

import windows
from harness import FLOAT_TYPES, Suite, random_values, round_to, tensor_type

suite = Suite("pooling")
rng = suite.rng


def ints(values):
    return "[" + ", ".join(str(int(v)) for v in values) + "]"


def random_pool():
    while True:
        window = [int(rng.integers(1, 4)), int(rng.integers(1, 4))]
        strides = [int(rng.integers(1, 3)), int(rng.integers(1, 3))]
        # Padding is smaller than the window (the shape rule requires it).
        padding = [int(rng.integers(0, window[0])), int(rng.integers(0, window[0])),
                   int(rng.integers(0, window[1])), int(rng.integers(0, window[1]))]
        xs = (int(rng.integers(1, 3)), int(rng.integers(1, 4)),
              int(rng.integers(2, 8)), int(rng.integers(2, 8)))
        ys = windows.pool_output_shape(xs, window, strides, padding)
        if ys[2] >= 1 and ys[3] >= 1:
            return xs, ys, window, strides, padding


for dtype in FLOAT_TYPES:
    for trial in range(3):
        xs, ys, window, strides, padding = random_pool()
        attrs = "window = %s, strides = %s, padding = %s" % (ints(window), ints(strides), ints(padding))
        if trial == 0:
            x = rng.integers(-2, 3, size=xs).astype(np.float64)  # many ties
        else:
            x = random_values(rng, dtype, xs, -3, 3)
        x = round_to(dtype, x)
        dy = random_values(rng, dtype, ys, -2, 2)
        tx, ty = tensor_type(xs, dtype), tensor_type(ys, dtype)
        f = suite.function("pool_%s_%d" % (dtype, trial))
        cx, cdy = f.const(x, dtype), f.const(dy, dtype)
        r = f.op("kiln.max_pool2d %s, %s : %s -> %s" % (cx, attrs, tx, ty))
        f.expect(r, ys, dtype, windows.max_pool2d(x, window, strides, padding), mode="exact")
        r = f.op("kiln.avg_pool2d %s, %s : %s -> %s" % (cx, attrs, tx, ty))
        f.expect(r, ys, dtype, windows.avg_pool2d(x, window, strides, padding),
                 scale=windows.avg_pool2d(np.abs(x), window, strides, padding))
        r = f.op("kiln.max_pool2d_grad %s, %s, %s : %s, %s" % (cx, cdy, attrs, tx, ty))
        f.expect(r, xs, dtype, windows.max_pool2d_grad(x, dy, window, strides, padding),
                 scale=windows.max_pool2d_grad(x, np.abs(dy), window, strides, padding))
        r = f.op("kiln.avg_pool2d_grad %s, %s : %s -> %s" % (cdy, attrs, ty, tx))
        f.expect(r, xs, dtype, windows.avg_pool2d_grad(dy, xs, window, strides, padding),
                 scale=windows.avg_pool2d_grad(np.abs(dy), xs, window, strides, padding))

# A NaN in a window wins the max and takes that window's gradient.
x = np.array([[[[1.0, np.nan, 2.0, 0.0], [3.0, 4.0, 5.0, 9.0]]]])
dy = np.array([[[[10.0, 20.0]]]])
f = suite.function("max_pool_nan")
cx, cdy = f.const(x, "f32"), f.const(dy, "f32")
attrs = "window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0]"
r = f.op("kiln.max_pool2d %s, %s : tensor<1x1x2x4xf32> -> tensor<1x1x1x2xf32>" % (cx, attrs))
f.expect(r, (1, 1, 1, 2), "f32", [[[[np.nan, 9.0]]]], mode="exact")
r = f.op("kiln.max_pool2d_grad %s, %s, %s : tensor<1x1x2x4xf32>, tensor<1x1x1x2xf32>" % (cx, cdy, attrs))
f.expect(r, (1, 1, 2, 4), "f32", [[[[0, 10.0, 0, 0], [0, 0, 0, 20.0]]]], mode="exact")

suite.run()
