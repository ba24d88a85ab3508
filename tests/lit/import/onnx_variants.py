"""kiln import against ONNX's reference implementation, op by op: the
attribute and opset variants of Resize, Pad, Slice, Split, Clip, Einsum,
ConvTranspose, InstanceNormalization, Gather and the activations that the
PyTorch exports in onnx_peer.py do not reach.

  onnx_variants.py run DIR [NAME...]

writes each variant (made with onnx.helper: X times a trained scale, then
the op under test, then Y) with random data to DIR/NAME/, imports it with
--loss=mse, runs one training step, and compares kiln's step-1 loss, the
mean squared error of Y against random targets, with the same loss computed
from onnx.reference.ReferenceEvaluator's Y (relative 1e-5; its
LpNormalization, LRN, MaxUnpool with output_shape and Hardmax replaced by
the specification's, and GlobalLpPool, which it lacks, added: spec_ops.py). The smooth
variants also pass `kiln gradcheck` (finite differences). Prints one line
per variant; exits 1 if any differs. The seed is random and printed;
KILN_ONNX_SEED=N reruns one."""

import os
import re
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import ort_ops
from spec_ops import (LRN, STFT, GlobalLpPool, LpNormalization, MaxUnpool, Scan, Upsample,
                      hardmax_for)

TOLERANCE = 1e-5
F32 = TensorProto.FLOAT


def variants(rng):
    """(name, opset, x shape, nodes after the scale, extra initializers,
    smooth): each graph reads x, multiplies it by the parameter 'scale'
    (broadcast over dimension 1) into 'h', and writes 'y'."""
    def const(name, values, dtype=np.int64):
        return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)

    def floats(name, values):
        return const(name, values, np.float32)

    out = []

    def add(name, opset, shape, nodes, inits=(), smooth=True, labels=None,
            tolerance=TOLERANCE):
        out.append((name, opset, shape, nodes, list(inits), smooth, labels, tolerance))

    image = (4, 3, 6, 6)
    # Resize: each coordinate transformation, nearest rounding, cubic.
    add("resize-nearest-half-pixel", 13, image,
        [helper.make_node("Resize", ["h", "", "scales"], ["y"], mode="nearest")],
        [floats("scales", [1, 1, 1.5, 2.5])], smooth=False)
    add("resize-nearest-align-corners-ceil", 13, image,
        [helper.make_node("Resize", ["h", "", "", "sizes"], ["y"], mode="nearest",
                          coordinate_transformation_mode="align_corners",
                          nearest_mode="ceil")],
        [const("sizes", [4, 3, 9, 4])], smooth=False)
    add("resize-nearest-prefer-ceil-asymmetric", 13, image,
        [helper.make_node("Resize", ["h", "", "scales"], ["y"], mode="nearest",
                          coordinate_transformation_mode="asymmetric",
                          nearest_mode="round_prefer_ceil")],
        [floats("scales", [1, 1, 0.5, 2])], smooth=False)
    add("resize-linear-pytorch-half-pixel-down", 13, image,
        [helper.make_node("Resize", ["h", "", "", "sizes"], ["y"], mode="linear",
                          coordinate_transformation_mode="pytorch_half_pixel")],
        [const("sizes", [4, 3, 4, 1])])
    add("resize-linear-asymmetric", 13, image,
        [helper.make_node("Resize", ["h", "", "scales"], ["y"], mode="linear",
                          coordinate_transformation_mode="asymmetric")],
        [floats("scales", [1, 1, 2, 3])])
    add("resize-linear-channels", 13, image,
        [helper.make_node("Resize", ["h", "", "", "sizes"], ["y"], mode="linear",
                          coordinate_transformation_mode="align_corners")],
        [const("sizes", [4, 5, 6, 8])])
    add("resize-cubic-exclude-outside", 13, image,
        [helper.make_node("Resize", ["h", "", "scales"], ["y"], mode="cubic",
                          cubic_coeff_a=-0.5, exclude_outside=1)],
        [floats("scales", [1, 1, 1.75, 1.25])])
    add("resize-cubic-align-corners", 13, image,
        [helper.make_node("Resize", ["h", "", "", "sizes"], ["y"], mode="cubic",
                          coordinate_transformation_mode="align_corners")],
        [const("sizes", [4, 3, 11, 4])])
    # antialias (opset 18): the filter stretched where an axis shrinks
    # (ignored where it grows), edge pixels repeated, or dropped with
    # exclude_outside (as PyTorch's F.interpolate(antialias=True) exports
    # it), scales or sizes, down to a third (12 taps of the triangle).
    add("resize-antialias-linear", 18, image,
        [helper.make_node("Resize", ["h", "", "", "sizes"], ["y"], mode="linear",
                          antialias=1)],
        [const("sizes", [4, 3, 4, 9])])
    add("resize-antialias-cubic-exclude-outside", 18, image,
        [helper.make_node("Resize", ["h", "", "scales"], ["y"], mode="cubic",
                          antialias=1, cubic_coeff_a=-0.5, exclude_outside=1)],
        [floats("scales", [1, 1, 0.5, 0.8])])
    add("resize-antialias-third", 18, image,
        [helper.make_node("Resize", ["h", "", "", "sizes"], ["a"], mode="cubic",
                          antialias=1),
         helper.make_node("Resize", ["h", "", "", "sizes"], ["b"], mode="linear",
                          antialias=1, coordinate_transformation_mode="align_corners"),
         helper.make_node("Add", ["a", "b"], ["y"])],
        [const("sizes", [4, 3, 2, 2])])
    add("resize-axes", 18, image,
        [helper.make_node("Resize", ["h", "", "", "sizes"], ["y"], mode="linear",
                          axes=[3, 2])],
        [const("sizes", [7, 5])])
    add("resize-half-pixel-symmetric", 19, image,
        [helper.make_node("Resize", ["h", "", "scales"], ["y"], mode="linear",
                          coordinate_transformation_mode="half_pixel_symmetric")],
        [floats("scales", [1, 1, 1.4, 0.7])])
    # Pad: modes, negative pads, axes.
    add("pad-edge", 13, image,
        [helper.make_node("Pad", ["h", "pads"], ["y"], mode="edge")],
        [const("pads", [0, 0, 2, 1, 0, 1, 0, 3])])
    add("pad-reflect", 13, image,
        [helper.make_node("Pad", ["h", "pads"], ["y"], mode="reflect")],
        [const("pads", [0, 0, 3, 1, 0, 0, 2, 2])])
    add("pad-wrap", 19, image,
        [helper.make_node("Pad", ["h", "pads"], ["y"], mode="wrap")],
        [const("pads", [0, 0, 2, 6, 0, 0, 1, 0])])
    add("pad-constant-axes", 18, image,
        [helper.make_node("Pad", ["h", "pads", "value", "axes"], ["y"])],
        [const("pads", [1, 2, 0, 1]), floats("value", 0.75), const("axes", [-1, 1])])
    add("pad-attributes", 7, image,
        [helper.make_node("Pad", ["h"], ["y"], pads=[0, 0, 1, 1, 0, 0, 1, 1], value=-0.5)])
    # Slice and Split.
    add("slice-negative-steps", 13, image,
        [helper.make_node("Slice", ["h", "starts", "ends", "axes", "steps"], ["y"])],
        [const("starts", [-1, 4, 2]), const("ends", [-100, 0, 3]),
         const("axes", [3, 2, 1]), const("steps", [-2, -1, 1])])
    add("slice-opset9", 9, image,
        [helper.make_node("Slice", ["h"], ["y"], starts=[1, -4], ends=[1000, -1],
                          axes=[2, 3])])
    add("split-sizes", 13, image,
        [helper.make_node("Split", ["h", "split"], ["a", "b"], axis=3),
         helper.make_node("Tanh", ["b"], ["tb"]),
         helper.make_node("Concat", ["tb", "a"], ["y"], axis=3)],
        [const("split", [2, 4])])
    add("split-opset11", 11, image,
        [helper.make_node("Split", ["h"], ["a", "b", "c"], axis=1, split=[1, 1, 1]),
         helper.make_node("Mul", ["a", "b"], ["ab"]),
         helper.make_node("Sub", ["ab", "c"], ["y"])])
    add("split-num-outputs", 18, image,
        [helper.make_node("Split", ["h"], ["a", "b", "c"], axis=2, num_outputs=3),
         helper.make_node("Concat", ["c", "a", "b"], ["y"], axis=2)])
    add("split-uneven", 18, (4, 3, 6, 7),
        [helper.make_node("Split", ["h"], ["a", "b", "c"], axis=3, num_outputs=3),
         helper.make_node("Sigmoid", ["c"], ["sc"]),
         helper.make_node("Concat", ["sc", "b", "a"], ["y"], axis=3)])
    # Clip with attributes (opset 6) and with only a maximum.
    add("clip-attributes", 7, image,
        [helper.make_node("Clip", ["h"], ["y"], min=-0.4, max=0.6)], smooth=False)
    add("clip-max-only", 13, image,
        [helper.make_node("Clip", ["h", "", "top"], ["y"])], [floats("top", 0.3)],
        smooth=False)
    # Einsum: ellipsis, three operands, implicit output, a transpose, sums.
    mat = (4, 3, 5)
    add("einsum-ellipsis", 13, mat,
        [helper.make_node("Einsum", ["h", "w"], ["y"], equation="...ij,jk->...ik")],
        [floats("w", rng.standard_normal((5, 2)))])
    add("einsum-three", 13, mat,
        [helper.make_node("Einsum", ["h", "w", "v"], ["y"], equation="bij,jk,kl->bli")],
        [floats("w", rng.standard_normal((5, 4))), floats("v", rng.standard_normal((4, 2)))])
    add("einsum-implicit", 13, mat,
        [helper.make_node("Einsum", ["h", "w"], ["y"], equation="bij, kj")],
        [floats("w", rng.standard_normal((2, 5)))])
    add("einsum-sum-outer", 13, mat,
        [helper.make_node("Einsum", ["h", "h"], ["y"], equation="bij,cik->bjk")])
    add("einsum-broadcast", 13, mat,
        [helper.make_node("Einsum", ["h", "w"], ["y"], equation="...j,...j->...j")],
        [floats("w", rng.standard_normal((1, 5)))])
    # Diagonals: taken ("nchh->nch"), contracted ("nchw,ncww->nch") and
    # summed (the implicit "abcc", a trace).
    add("einsum-diagonal", 13, image,
        [helper.make_node("Einsum", ["h"], ["a"], equation="nchh->nch"),
         helper.make_node("Einsum", ["h", "h"], ["b"], equation="nchw,ncww->nch"),
         helper.make_node("Einsum", ["h"], ["t"], equation="abcc"),
         helper.make_node("Unsqueeze", ["t", "last"], ["c"]),
         helper.make_node("Sum", ["a", "b", "c"], ["y"])],
        [const("last", [2])])
    # ConvTranspose: dilation, asymmetric pads, output_padding, output_shape
    # (groups: onnx_peer.py's image model; the reference evaluator's grouped
    # ConvTranspose fails).
    add("convtranspose-dilated", 13, (4, 4, 5, 5),
        [helper.make_node("ConvTranspose", ["h", "w", "b"], ["y"], strides=[2, 3],
                          dilations=[2, 1], pads=[1, 0, 2, 1], output_padding=[1, 2])],
        [floats("w", rng.standard_normal((4, 6, 3, 2)) * 0.3),
         floats("b", rng.standard_normal(6))])
    add("convtranspose-output-shape", 13, (4, 4, 5, 5),
        [helper.make_node("ConvTranspose", ["h", "w"], ["y"], strides=[2, 2],
                          output_shape=[9, 9], pads=[1, 1, 1, 1])],
        [floats("w", rng.standard_normal((4, 2, 3, 3)) * 0.3)])
    # auto_pad SAME: the output is the input times the stride (odd totals
    # put the extra pad at the end for SAME_UPPER) or output_shape, the
    # pads derived from it (SAME_LOWER puts the extra at the beginning).
    add("convtranspose-same-upper", 13, (4, 4, 5, 5),
        [helper.make_node("ConvTranspose", ["h", "w", "b"], ["y"], strides=[2, 3],
                          auto_pad="SAME_UPPER")],
        [floats("w", rng.standard_normal((4, 3, 3, 5)) * 0.3),
         floats("b", rng.standard_normal(3))])
    add("convtranspose-same-lower-output-shape", 13, (4, 4, 5, 5),
        [helper.make_node("ConvTranspose", ["h", "w"], ["y"], strides=[2, 2],
                          dilations=[1, 2], output_padding=[1, 0],
                          auto_pad="SAME_LOWER", output_shape=[7, 10])],
        [floats("w", rng.standard_normal((4, 2, 3, 3)) * 0.3)])
    # InstanceNormalization of a rank-3 input with its own (trained) affine.
    add("instancenorm-1d", 13, (4, 3, 7),
        [helper.make_node("InstanceNormalization", ["h", "g", "b"], ["y"], epsilon=1e-3)],
        [floats("g", rng.standard_normal(3)), floats("b", rng.standard_normal(3))])
    # Gather along an inner axis with a matrix of indices, one negative.
    add("gather-axis2", 13, image,
        [helper.make_node("Gather", ["h", "idx"], ["y"], axis=2)],
        [const("idx", [[0, -1], [3, 3], [5, 2]])])
    # Activations with their attributes; Sum and Mean broadcasting.
    add("activations", 13, image,
        [helper.make_node("HardSigmoid", ["h"], ["a"], alpha=0.3, beta=0.4),
         helper.make_node("Elu", ["h"], ["e"], alpha=0.5),
         helper.make_node("Softsign", ["h"], ["s"]),
         helper.make_node("Softplus", ["h"], ["p"]),
         helper.make_node("Sum", ["a", "e", "s", "p"], ["y"])], smooth=False)
    add("mean-prelu", 13, image,
        [helper.make_node("PRelu", ["h", "slope"], ["r"]),
         helper.make_node("Mean", ["r", "h", "row"], ["y"])],
        [floats("slope", [0.25]), floats("row", rng.standard_normal((1, 6)))],
        smooth=False)
    add("where-static", 13, image,
        [helper.make_node("ConstantOfShape", ["shape"], ["zeros"],
                          value=numpy_helper.from_array(np.array([0.5], np.float32))),
         helper.make_node("Range", ["r0", "r6", "r1"], ["r"]),
         helper.make_node("Less", ["r", "three"], ["lower"]),
         helper.make_node("Where", ["lower", "h", "zeros"], ["y"])],
        [const("shape", [6]), const("r0", 0), const("r6", 6), const("r1", 1),
         const("three", 3)])
    # Recurrent ops: X [seq, batch, input] (layout 0) or [batch, seq,
    # input] (layout 1); W, R, B in ONNX's gate order.
    def rnn_weights(prefix, dirs, gates, hidden, features, bias=True, states=()):
        inits = [floats(prefix + "W", rng.standard_normal((dirs, gates * hidden, features))
                        * 0.5),
                 floats(prefix + "R", rng.standard_normal((dirs, gates * hidden, hidden))
                        * 0.5)]
        if bias:
            inits.append(floats(prefix + "B", rng.standard_normal((dirs, 2 * gates * hidden))
                                * 0.5))
        for name, shape in states:
            inits.append(floats(name, rng.standard_normal(shape) * 0.5))
        return inits

    # kiln takes dimension 0 of every input and target as the batch, so the
    # time-major (layout 0) variants transpose X to [seq, batch, input]
    # and their results back to batch first.
    seq = (4, 5, 3)

    def time_major(node, result, perm):
        return [helper.make_node("Transpose", ["h"], ["ht"], perm=[1, 0, 2]), node,
                helper.make_node("Transpose", [result], ["y"], perm=perm)]

    add("lstm-reverse-states", 14, seq,
        [helper.make_node("Transpose", ["h"], ["ht"], perm=[1, 0, 2]),
         helper.make_node("LSTM", ["ht", "W", "R", "B", "", "h0", "c0"], ["seqs", "yh", "yc"],
                          hidden_size=4, direction="reverse"),
         helper.make_node("Mul", ["yh", "yc"], ["both"]),
         helper.make_node("Transpose", ["both"], ["y"], perm=[1, 0, 2])],
        rnn_weights("", 1, 4, 4, 3, states=[("h0", (1, 4, 4)), ("c0", (1, 4, 4))]))
    add("lstm-bidirectional-batch-first", 14, seq,
        [helper.make_node("LSTM", ["h", "W", "R", "B"], ["y"], hidden_size=3,
                          direction="bidirectional", layout=1)],
        rnn_weights("", 2, 4, 3, 3))
    add("gru-linear-after-reset", 14, seq,
        time_major(helper.make_node("GRU", ["ht", "W", "R", "B", "lengths"], ["seqs"],
                                    hidden_size=4, direction="bidirectional"),
                   "seqs", [2, 0, 1, 3]),
        rnn_weights("", 2, 3, 4, 3) + [const("lengths", [5, 5, 5, 5], np.int32)])
    add("gru-linear-before-reset", 14, seq,
        time_major(helper.make_node("GRU", ["ht", "W", "R", "B", "", "h0"], ["seqs", "last"],
                                    hidden_size=4, linear_before_reset=1),
                   "last", [1, 0, 2]),
        rnn_weights("", 1, 3, 4, 3, states=[("h0", (1, 4, 4))]))
    add("rnn-tanh", 14, seq,
        time_major(helper.make_node("RNN", ["ht", "W", "R"], ["seqs"], hidden_size=5),
                   "seqs", [2, 0, 1, 3]),
        rnn_weights("", 1, 1, 5, 3, bias=False))
    # Composite reductions, LpNormalization, more activations, logical ops,
    # Tile, DepthToSpace and SpaceToDepth, CumSum.
    add("reduce-composites", 18, image,
        [helper.make_node("ReduceL2", ["h", "a3"], ["l2"]),
         helper.make_node("ReduceLogSumExp", ["h", "a1"], ["lse"]),
         helper.make_node("ReduceSumSquare", ["h", "a23"], ["ss"]),
         helper.make_node("Exp", ["h"], ["e"]),
         helper.make_node("ReduceLogSum", ["e", "a2"], ["ls"], keepdims=1),
         helper.make_node("Mul", ["l2", "lse"], ["p"]),
         helper.make_node("Add", ["p", "ss"], ["q"]),
         helper.make_node("Add", ["q", "ls"], ["y"])],
        [const("a3", [3]), const("a1", [1]), const("a23", [2, 3]), const("a2", [2])])
    add("reduce-l1-lp-normalization", 18, image,
        [helper.make_node("ReduceL1", ["h", "a2"], ["l1"], keepdims=0),
         helper.make_node("LpNormalization", ["h"], ["n2"], axis=1, p=2),
         helper.make_node("LpNormalization", ["h"], ["n1"], axis=-1, p=1),
         helper.make_node("Add", ["n1", "n2"], ["n"]),
         helper.make_node("ReduceMean", ["n", "a2"], ["m"], keepdims=0),
         helper.make_node("Mul", ["m", "l1"], ["y"])],
        [const("a2", [2])], smooth=False)
    add("more-activations", 13, image,
        [helper.make_node("Selu", ["h"], ["a"]),
         helper.make_node("Celu", ["h"], ["c"], alpha=0.7),
         helper.make_node("ThresholdedRelu", ["h"], ["t"], alpha=0.3),
         helper.make_node("Shrink", ["h"], ["s"], lambd=0.6, bias=0.2),
         helper.make_node("Sum", ["a", "c", "t", "s"], ["y"])], smooth=False)
    add("logical", 13, image,
        [helper.make_node("Less", ["h", "half"], ["p"]),
         helper.make_node("Greater", ["h", "minus"], ["q"]),
         helper.make_node("And", ["p", "q"], ["both"]),
         helper.make_node("Or", ["p", "q"], ["either"]),
         helper.make_node("Not", ["either"], ["neither"]),
         helper.make_node("Xor", ["both", "neither"], ["pick"]),
         helper.make_node("Mul", ["h", "half"], ["scaled"]),
         helper.make_node("Where", ["pick", "h", "scaled"], ["y"])],
        [floats("half", 0.5), floats("minus", -0.5)], smooth=False)
    add("argmax-argmin", 13, image,
        [helper.make_node("ArgMax", ["h"], ["i"], axis=3),
         helper.make_node("ArgMin", ["h"], ["j"], axis=1, keepdims=0),
         # Clipped, the rows tie at the bound: the last of them is taken.
         helper.make_node("Clip", ["h", "low", "high"], ["r"]),
         helper.make_node("ArgMax", ["r"], ["k"], axis=-1, select_last_index=1),
         helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
         helper.make_node("Cast", ["j"], ["fj"], to=TensorProto.FLOAT),
         helper.make_node("Cast", ["k"], ["fk"], to=TensorProto.FLOAT),
         helper.make_node("Unsqueeze", ["fj", "one"], ["fj1"]),
         helper.make_node("Sum", ["fi", "fj1", "fk"], ["f"]),
         helper.make_node("Mul", ["h", "f"], ["y"])],
        [const("one", [1]), floats("low", -0.3), floats("high", 0.3)], smooth=False)
    # Integer ArgMax and ArgMin (INT32 and INT64, ties likely: the values
    # are h rounded to tenths), the first and the last of the extremes.
    add("argmax-integer", 13, image,
        [helper.make_node("Mul", ["h", "ten"], ["h10"]),
         helper.make_node("Cast", ["h10"], ["q32"], to=TensorProto.INT32),
         helper.make_node("Cast", ["h10"], ["q64"], to=TensorProto.INT64),
         helper.make_node("ArgMax", ["q32"], ["i"], axis=3),
         helper.make_node("ArgMin", ["q64"], ["j"], axis=2, select_last_index=1),
         helper.make_node("ArgMin", ["q32"], ["k"], axis=-1, keepdims=1),
         helper.make_node("ArgMax", ["q64"], ["m"], axis=1, select_last_index=1),
         helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
         helper.make_node("Cast", ["j"], ["fj"], to=TensorProto.FLOAT),
         helper.make_node("Cast", ["k"], ["fk"], to=TensorProto.FLOAT),
         helper.make_node("Cast", ["m"], ["fm"], to=TensorProto.FLOAT),
         helper.make_node("Sum", ["fi", "fj", "fk", "fm"], ["f"]),
         helper.make_node("Mul", ["h", "f"], ["y"])],
        [floats("ten", 10.0)], smooth=False)
    add("gather-elements", 13, image,
        [helper.make_node("ArgMax", ["h"], ["top"], axis=3),
         helper.make_node("GatherElements", ["h", "top"], ["best"], axis=3),
         helper.make_node("GatherElements", ["h", "picks"], ["picked"], axis=1),
         helper.make_node("Mul", ["best", "picked"], ["y"])],
        [const("picks", rng.integers(-3, 3, (4, 1, 6, 6)))])
    add("tile", 13, image,
        [helper.make_node("Tile", ["h", "repeats"], ["y"])], [const("repeats", [1, 2, 1, 3])])
    add("depth-to-space-dcr", 13, (4, 8, 3, 3),
        [helper.make_node("DepthToSpace", ["h"], ["y"], blocksize=2)])
    add("depth-to-space-crd", 13, (4, 8, 3, 3),
        [helper.make_node("DepthToSpace", ["h"], ["y"], blocksize=2, mode="CRD")])
    add("space-to-depth", 13, image,
        [helper.make_node("SpaceToDepth", ["h"], ["y"], blocksize=3)])
    add("cumsum", 14, image,
        [helper.make_node("CumSum", ["h", "axis2"], ["a"], exclusive=1),
         helper.make_node("CumSum", ["h", "last"], ["b"], reverse=1),
         helper.make_node("CumSum", ["h", "axis1"], ["c"], exclusive=1, reverse=1),
         helper.make_node("Sum", ["a", "b", "c"], ["y"])],
        [const("axis2", 2), const("last", -1), const("axis1", 1)])
    # Pooling with ceil_mode (windows that overhang the end; with pads 1 on
    # 7 a last window that would start in the trailing pad is dropped),
    # count_include_pad 0 (asymmetric pads), auto_pad SAME_UPPER and
    # SAME_LOWER (on an average: the reference's MaxPool gives SAME_LOWER
    # floor(in / stride) outputs, where the specification says ceil);
    # convolutions with SAME pads, strided and dilated. Two results of
    # different shapes are flattened and concatenated.
    def both(a, b):
        return [helper.make_node("Flatten", [a], [a + "_flat"]),
                helper.make_node("Flatten", [b], [b + "_flat"]),
                helper.make_node("Concat", [a + "_flat", b + "_flat"], ["y"], axis=1)]

    add("maxpool-ceil-same", 13, (4, 3, 7, 8),
        [helper.make_node("MaxPool", ["h"], ["a"], kernel_shape=[2, 3], strides=[3, 2],
                          pads=[1, 1, 1, 0], ceil_mode=1),
         helper.make_node("MaxPool", ["h"], ["b"], kernel_shape=[2, 3], strides=[2, 3],
                          auto_pad="SAME_UPPER")] + both("a", "b"), smooth=False)
    add("avgpool-ceil", 19, (4, 3, 7, 8),
        [helper.make_node("AveragePool", ["h"], ["a"], kernel_shape=[3, 3], strides=[2, 2],
                          pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=1),
         helper.make_node("AveragePool", ["h"], ["b"], kernel_shape=[3, 2], strides=[2, 3],
                          pads=[1, 0, 0, 1], ceil_mode=1)] + both("a", "b"))
    add("avgpool-exclude-pad-same", 13, (4, 3, 7, 8),
        [helper.make_node("AveragePool", ["h"], ["a"], kernel_shape=[3, 2], strides=[1, 2],
                          pads=[1, 0, 2, 1]),
         helper.make_node("AveragePool", ["h"], ["b"], kernel_shape=[3, 2], strides=[2, 3],
                          auto_pad="SAME_LOWER")] + both("a", "b"))
    add("conv-same", 13, (4, 3, 7, 8),
        [helper.make_node("Conv", ["h", "w1"], ["a"], auto_pad="SAME_UPPER",
                          strides=[2, 3], dilations=[1, 2]),
         helper.make_node("Conv", ["h", "w2", "b2"], ["b"], auto_pad="SAME_LOWER",
                          strides=[2, 3])] + both("a", "b"),
        [floats("w1", rng.standard_normal((2, 3, 2, 3)) * 0.4),
         floats("w2", rng.standard_normal((3, 3, 4, 2)) * 0.4),
         floats("b2", rng.standard_normal(3) * 0.1)])
    # 1-D and 3-D windows (kiln's are 2-D: a unit height for 1-D, the
    # depth positions' planes for 3-D): strides, dilations, asymmetric
    # pads, groups, SAME pads, output_padding, ceil_mode and
    # count_include_pad along every axis.
    add("conv-1d", 13, (4, 3, 11),
        [helper.make_node("Conv", ["h", "w1", "b1"], ["a"], strides=[2], dilations=[2],
                          pads=[1, 2]),
         helper.make_node("Conv", ["h", "w2"], ["b"], group=3, strides=[3],
                          auto_pad="SAME_UPPER")] + both("a", "b"),
        [floats("w1", rng.standard_normal((4, 3, 3)) * 0.4),
         floats("b1", rng.standard_normal(4) * 0.1),
         floats("w2", rng.standard_normal((6, 1, 4)) * 0.4)])
    add("convtranspose-1d", 13, (4, 4, 6),
        [helper.make_node("ConvTranspose", ["h", "w1", "b1"], ["a"], strides=[2],
                          dilations=[2], pads=[1, 0], output_padding=[1]),
         helper.make_node("ConvTranspose", ["h", "w2"], ["b"], strides=[3],
                          auto_pad="SAME_LOWER")] + both("a", "b"),
        [floats("w1", rng.standard_normal((4, 3, 3)) * 0.3),
         floats("b1", rng.standard_normal(3) * 0.1),
         floats("w2", rng.standard_normal((4, 2, 4)) * 0.3)])
    add("conv-3d", 13, (2, 4, 5, 6, 5),
        [helper.make_node("Conv", ["h", "w1", "b1"], ["a"], group=2, strides=[2, 1, 2],
                          dilations=[2, 2, 1], pads=[1, 0, 1, 2, 1, 0]),
         helper.make_node("Conv", ["h", "w2"], ["b"], strides=[2, 2, 1],
                          auto_pad="SAME_LOWER")] + both("a", "b"),
        [floats("w1", rng.standard_normal((4, 2, 3, 2, 3)) * 0.3),
         floats("b1", rng.standard_normal(4) * 0.1),
         floats("w2", rng.standard_normal((2, 4, 2, 3, 2)) * 0.3)])
    # The second's depth pads (2 at each end, stride 3) drop whole kernel
    # slices' results and output_padding 2 reaches past the last.
    add("convtranspose-3d", 13, (2, 3, 3, 4, 3),
        [helper.make_node("ConvTranspose", ["h", "w1", "b1"], ["a"], strides=[2, 1, 2],
                          dilations=[1, 2, 1], pads=[1, 0, 0, 0, 1, 1],
                          output_padding=[1, 0, 1]),
         helper.make_node("ConvTranspose", ["h", "w2"], ["b"], strides=[3, 1, 1],
                          pads=[2, 0, 0, 2, 0, 0], output_padding=[2, 0, 0])] + both("a", "b"),
        [floats("w1", rng.standard_normal((3, 2, 3, 2, 3)) * 0.3),
         floats("b1", rng.standard_normal(2) * 0.1),
         floats("w2", rng.standard_normal((3, 2, 2, 2, 2)) * 0.3)])
    add("convtranspose-3d-same", 13, (2, 3, 3, 4, 3),
        [helper.make_node("ConvTranspose", ["h", "w"], ["y"], strides=[2, 2, 2],
                          auto_pad="SAME_UPPER")],
        [floats("w", rng.standard_normal((3, 2, 3, 3, 2)) * 0.3)])
    add("maxpool-1d-3d", 13, (2, 3, 5, 6, 5),
        [helper.make_node("MaxPool", ["h"], ["a"], kernel_shape=[2, 3, 2], strides=[2, 2, 1],
                          pads=[1, 1, 0, 1, 0, 1], ceil_mode=1),
         helper.make_node("Reshape", ["h", "rows"], ["hr"]),
         helper.make_node("MaxPool", ["hr"], ["b"], kernel_shape=[3], strides=[2],
                          pads=[1, 1], ceil_mode=1)] + both("a", "b"),
        [const("rows", [2, 3, 150])], smooth=False)
    add("avgpool-1d", 19, (4, 3, 11),
        [helper.make_node("AveragePool", ["h"], ["a"], kernel_shape=[4], strides=[3],
                          pads=[1, 2], ceil_mode=1),
         helper.make_node("AveragePool", ["h"], ["b"], kernel_shape=[3], strides=[2],
                          pads=[1, 1], count_include_pad=1)] + both("a", "b"))
    add("avgpool-3d", 19, (2, 3, 5, 6, 5),
        [helper.make_node("AveragePool", ["h"], ["a"], kernel_shape=[3, 2, 2],
                          strides=[2, 1, 2], pads=[1, 0, 1, 1, 1, 0], ceil_mode=1,
                          count_include_pad=1),
         helper.make_node("AveragePool", ["h"], ["b"], kernel_shape=[2, 3, 2],
                          strides=[2, 2, 2], pads=[0, 1, 1, 1, 1, 0])] + both("a", "b"))
    # ReduceProd of data (kiln.reduce prod): over C and W (18 elements)
    # and over H and W (36), of 1 + tanh(h) / 10; over C, H and W (108,
    # which took 50 s to compile when kiln import built the product from
    # pairwise multiplies); and of integers (opset 18's axes input) along W,
    # which is not smooth.
    add("reduce-prod", 13, image,
        [helper.make_node("Tanh", ["h"], ["th"]),
         helper.make_node("Mul", ["th", "tenth"], ["small"]),
         helper.make_node("Add", ["small", "one"], ["near_one"]),
         helper.make_node("ReduceProd", ["near_one"], ["rows"], axes=[1, 3]),
         helper.make_node("ReduceProd", ["near_one"], ["all"], axes=[2, 3]),
         helper.make_node("Mul", ["h", "rows"], ["a"]),
         helper.make_node("Add", ["a", "all"], ["y"])],
        [floats("tenth", 0.1), floats("one", 1.0)])
    add("reduce-prod-wide", 13, image,
        [helper.make_node("Tanh", ["h"], ["th"]),
         helper.make_node("Mul", ["th", "tenth"], ["small"]),
         helper.make_node("Add", ["small", "one"], ["near_one"]),
         helper.make_node("ReduceProd", ["near_one"], ["each"], axes=[1, 2, 3]),
         helper.make_node("Mul", ["h", "each"], ["y"])],
        [floats("tenth", 0.1), floats("one", 1.0)])
    add("reduce-prod-int", 18, image,
        [helper.make_node("Round", ["h"], ["r"]),
         helper.make_node("Cast", ["r"], ["ri"], to=TensorProto.INT64),
         helper.make_node("ReduceProd", ["ri", "last"], ["p"], keepdims=0),
         helper.make_node("Cast", ["p"], ["pf"], to=TensorProto.FLOAT),
         helper.make_node("Unsqueeze", ["pf", "last"], ["pw"]),
         helper.make_node("Add", ["h", "pw"], ["y"])],
        [const("last", [3])], smooth=False)
    # Clip with bounds computed from data (torch.clamp with tensor bounds:
    # the gradient reaches a bound where it binds), and arithmetic in
    # DOUBLE between Casts (torch.nan_to_num's IsInf of a double): h plus
    # sqrt(h^2 + 1) in f64, the infinities of log(relu(h)) replaced by 0,
    # and the f64 Mean of h and a DOUBLE constant.
    add("clip-data", 13, image,
        [helper.make_node("ReduceMin", ["h"], ["low"], keepdims=0),
         helper.make_node("ReduceMax", ["h"], ["high"], keepdims=0),
         helper.make_node("Mul", ["low", "half"], ["low_half"]),
         helper.make_node("Mul", ["high", "half"], ["high_half"]),
         helper.make_node("Clip", ["h", "low_half", "high_half"], ["y"])],
        [floats("half", 0.5)])
    add("cast-double", 13, image,
        [helper.make_node("Cast", ["h"], ["d"], to=TensorProto.DOUBLE),
         helper.make_node("Mul", ["d", "d"], ["d2"]),
         helper.make_node("Constant", [], ["one_d"],
                          value=helper.make_tensor("v", TensorProto.DOUBLE, [], [1.0])),
         helper.make_node("Add", ["d2", "one_d"], ["d3"]),
         helper.make_node("Sqrt", ["d3"], ["root"]),
         helper.make_node("Cast", ["root"], ["root_f"], to=TensorProto.FLOAT),
         helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("Log", ["r"], ["l"]),
         helper.make_node("Cast", ["l"], ["ld"], to=TensorProto.DOUBLE),
         helper.make_node("IsInf", ["ld"], ["inf"]),
         helper.make_node("Constant", [], ["zero_f"],
                          value=helper.make_tensor("z", TensorProto.FLOAT, [], [0.0])),
         helper.make_node("Where", ["inf", "zero_f", "l"], ["finite"]),
         helper.make_node("Mean", ["d", "one_d"], ["mean_d"]),
         helper.make_node("Cast", ["mean_d"], ["mean_f"], to=TensorProto.FLOAT),
         # A Where between DOUBLE constants, less its own truncation
         # through INT64 (torch.quantile's export): f64 throughout.
         helper.make_node("Constant", [], ["seven_d"],
                          value=helper.make_tensor("s", TensorProto.DOUBLE, [], [7.0])),
         helper.make_node("Constant", [], ["frac_d"],
                          value=helper.make_tensor("f", TensorProto.DOUBLE, [], [2.1])),
         helper.make_node("Where", ["inf", "seven_d", "frac_d"], ["pick_d"]),
         helper.make_node("Cast", ["pick_d"], ["pick_i"], to=TensorProto.INT64),
         helper.make_node("Cast", ["pick_i"], ["pick_id"], to=TensorProto.DOUBLE),
         helper.make_node("Sub", ["pick_d", "pick_id"], ["fraction_d"]),
         helper.make_node("Cast", ["fraction_d"], ["fraction_f"], to=TensorProto.FLOAT),
         helper.make_node("Sum", ["h", "root_f", "finite", "mean_f", "fraction_f"], ["y"])],
        smooth=False)
    # Mod of data: floats with fmod 1 (torch.fmod; exact, the dividend's
    # sign) by a divisor from data and by a constant; integers with fmod 0
    # (Python's %: the divisor's sign) and 1, by divisors of both signs.
    # (Not gradient-checked: the remainder jumps where the quotient
    # crosses an integer, which some of 432 elements come near.)
    add("mod-data", 13, image,
        [helper.make_node("Mul", ["h", "three"], ["h3"]),
         helper.make_node("Abs", ["h"], ["ah"]),
         helper.make_node("Add", ["ah", "half"], ["d"]),
         helper.make_node("Mod", ["h3", "d"], ["a"], fmod=1),
         helper.make_node("Mod", ["h3", "seven_tenths"], ["b"], fmod=1),
         helper.make_node("Round", ["h3"], ["r"]),
         helper.make_node("Cast", ["r"], ["ri"], to=TensorProto.INT32),
         helper.make_node("Mod", ["ri", "divisors"], ["c"]),
         helper.make_node("Mod", ["ri", "divisors"], ["e"], fmod=1),
         helper.make_node("Cast", ["c"], ["cf"], to=TensorProto.FLOAT),
         helper.make_node("Cast", ["e"], ["ef"], to=TensorProto.FLOAT),
         helper.make_node("Sum", ["a", "b", "cf", "ef", "h"], ["y"])],
        [floats("three", 3.0), floats("half", 0.5), floats("seven_tenths", 0.7),
         const("divisors", [3, -3, 5, -2, 4, -7], np.int32)], smooth=False)
    # Col2Im (F.fold): h [4, 3, 6, 6] read as columns [4, 3 * 2 * 3, 6]
    # of 2 x 3 blocks of a 5 x 7 image, dilated, padded and strided, so
    # that blocks overlap (their elements add) and some image elements
    # are in no block.
    add("col2im", 18, image,
        [helper.make_node("Reshape", ["h", "columns"], ["c"]),
         helper.make_node("Col2Im", ["c", "image_shape", "block_shape"], ["y"],
                          dilations=[2, 1], pads=[1, 0, 0, 1], strides=[2, 2])],
        [const("columns", [4, 18, 6]), const("image_shape", [5, 7]),
         const("block_shape", [2, 3])])
    # TopK: the largest along the last axis and the smallest along the
    # channels (K as an input); ties in index order (clipped values) and
    # -infinity left over (the log of a ReLU) through K as an attribute
    # (opset 9), its indices cast to floats.
    add("topk", 11, image,
        [helper.make_node("TopK", ["h", "k3"], ["a", "ia"]),
         helper.make_node("TopK", ["h", "k2"], ["b", "ib"], axis=1, largest=0)]
        + both("a", "b"), [const("k3", [3]), const("k2", [2])])
    add("topk-ties-opset9", 9, image,
        [helper.make_node("Clip", ["h"], ["r"], min=-0.3, max=0.3),
         helper.make_node("TopK", ["r"], ["rv", "ri"], k=4),
         helper.make_node("Cast", ["ri"], ["rf"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["rv", "rf"], ["a"]),
         helper.make_node("Relu", ["h"], ["p"]),
         helper.make_node("Log", ["p"], ["l"]),
         helper.make_node("TopK", ["l"], ["lv", "li"], axis=3, k=5),
         helper.make_node("Cast", ["li"], ["b"], to=TensorProto.FLOAT)]
        + both("a", "b"), smooth=False)
    # TopK with K above 16, from the elements' ranks: the 20 largest of 108
    # along the last axis and all 27 along an inner axis, smallest first
    # (torch.sort's export); then ties (clipped values) in a full sort of
    # 108, and -infinity (the log of a ReLU) along the inner axis, through
    # K as an attribute, the indices cast to floats.
    add("topk-rank", 11, image,
        [helper.make_node("Reshape", ["h", "flat"], ["f"]),
         helper.make_node("TopK", ["f", "k20"], ["a", "ia"]),
         helper.make_node("Reshape", ["h", "deep"], ["d"]),
         helper.make_node("TopK", ["d", "k27"], ["b", "ib"], axis=1, largest=0)]
        + both("a", "b"),
        [const("flat", [4, 108]), const("deep", [4, 27, 4]), const("k20", [20]),
         const("k27", [27])])
    add("topk-rank-ties-opset9", 9, image,
        [helper.make_node("Clip", ["h"], ["r"], min=-0.3, max=0.3),
         helper.make_node("Reshape", ["r", "flat"], ["rf"]),
         helper.make_node("TopK", ["rf"], ["rv", "ri"], k=108),
         helper.make_node("Cast", ["ri"], ["rif"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["rv", "rif"], ["a"]),
         helper.make_node("Relu", ["h"], ["p"]),
         helper.make_node("Log", ["p"], ["l"]),
         helper.make_node("Reshape", ["l", "deep"], ["ld"]),
         helper.make_node("TopK", ["ld"], ["lv", "li"], axis=1, k=27),
         helper.make_node("Cast", ["li"], ["b"], to=TensorProto.FLOAT)]
        + both("a", "b"),
        [const("flat", [4, 108]), const("deep", [4, 27, 4])], smooth=False)
    # ScatterElements written (distinct rows, some counted from the end)
    # and added (repeated columns); ScatterND written at (batch, channel)
    # pairs, added at repeated batches (k = 1), and written at one element
    # (k = 4). The updates are slices of h, so gradients reach both sides.
    rows = np.stack([rng.permutation(6)[:2] for _ in range(4 * 3 * 6)])
    rows = rows.reshape(4, 3, 6, 2).transpose(0, 1, 3, 2) - 6 * rng.integers(0, 2, (4, 3, 2, 6))
    add("scatter-elements", 16, image,
        [helper.make_node("Slice", ["h", "s0", "s2", "ax2"], ["u"]),
         helper.make_node("ScatterElements", ["h", "rows", "u"], ["a"], axis=2),
         helper.make_node("Slice", ["h", "s0", "s3", "ax3"], ["v"]),
         helper.make_node("ScatterElements", ["h", "cols", "v"], ["b"], axis=-1,
                          reduction="add"),
         helper.make_node("Add", ["a", "b"], ["y"])],
        [const("rows", rows), const("cols", rng.integers(0, 3, (4, 3, 6, 3))),
         const("s0", [0]), const("s2", [2]), const("s3", [3]), const("ax2", [2]),
         const("ax3", [3])])
    # reduction max and min (opset 18) with repeated indices: ScatterElements
    # along the last axis (several updates per element) and ScatterND rows.
    # Not gradchecked: a data element and an update may lie within the
    # finite-difference step (NNGradient.ScatterMax/Min check the gradient
    # on distinct values).
    add("scatter-max-min", 18, image,
        [helper.make_node("Slice", ["h", "s0", "s3", "ax3"], ["v"]),
         helper.make_node("Mul", ["v", "two"], ["v2"]),
         helper.make_node("ScatterElements", ["h", "cols", "v2"], ["a"], axis=-1,
                          reduction="max"),
         helper.make_node("ScatterND", ["h", "batches", "h"], ["b0"], reduction="min"),
         helper.make_node("Neg", ["h"], ["nh"]),
         helper.make_node("ScatterND", ["b0", "batches", "nh"], ["b"], reduction="min"),
         helper.make_node("Add", ["a", "b"], ["y"])],
        [const("cols", rng.integers(0, 3, (4, 3, 6, 3))), const("s0", [0]),
         const("s3", [3]), const("ax3", [3]), floats("two", 2.0),
         const("batches", [[1], [3], [1], [0]])], smooth=False)
    # reduction mul (opset 18), smooth, so gradient-checked: ScatterElements
    # along the last axis with repeated columns (several factors per
    # element) and ScatterND rows at repeated batches, the updates near 1.
    add("scatter-mul", 18, image,
        [helper.make_node("Slice", ["h", "s0", "s3", "ax3"], ["v"]),
         helper.make_node("Tanh", ["v"], ["tv"]),
         helper.make_node("Mul", ["tv", "tenth"], ["sv"]),
         helper.make_node("Add", ["sv", "one"], ["nv"]),
         helper.make_node("ScatterElements", ["h", "cols", "nv"], ["a"], axis=-1,
                          reduction="mul"),
         helper.make_node("Tanh", ["h"], ["th"]),
         helper.make_node("Mul", ["th", "tenth"], ["sh"]),
         helper.make_node("Add", ["sh", "one"], ["nh"]),
         helper.make_node("ScatterND", ["h", "batches", "nh"], ["b"], reduction="mul"),
         helper.make_node("Add", ["a", "b"], ["y"])],
        [const("cols", rng.integers(0, 3, (4, 3, 6, 3))), const("s0", [0]),
         const("s3", [3]), const("ax3", [3]), floats("tenth", 0.1), floats("one", 1.0),
         const("batches", [[1], [3], [1], [0]])])
    add("scatter-nd", 16, image,
        [helper.make_node("Slice", ["h", "s1", "s3", "ax0"], ["u"]),
         helper.make_node("Reshape", ["u", "pairs_shape"], ["u2"]),
         helper.make_node("ScatterND", ["h", "pairs", "u2"], ["a"]),
         helper.make_node("ScatterND", ["a", "batches", "h"], ["b"], reduction="add"),
         helper.make_node("ReduceSum", ["h", "all"], ["total"], keepdims=0),
         helper.make_node("ScatterND", ["b", "element", "total"], ["y"])],
        [const("pairs", [[[0, 1], [3, -1], [2, 0]], [[1, 2], [0, 0], [-1, 1]]]),
         const("pairs_shape", [2, 3, 6, 6]),
         const("batches", [[1], [3], [1], [0]]), const("element", [2, 1, 4, -1]),
         const("s1", [1]), const("s3", [3]), const("ax0", [0]), const("all", [0, 1, 2, 3])])
    # GatherND (every result keeps a leading dimension of 4, the batch's):
    # (batch, channel) pairs with negative values, batch_dims 1 (channel and
    # row within each batch), and whole indices (one element each).
    add("gather-nd", 13, image,
        [helper.make_node("GatherND", ["h", "pairs"], ["a"]),
         helper.make_node("GatherND", ["h", "rows"], ["b"], batch_dims=1),
         helper.make_node("GatherND", ["h", "points"], ["c"]),
         helper.make_node("Reshape", ["a", "by_batch"], ["af"]),
         helper.make_node("Reshape", ["b", "by_batch"], ["bf"]),
         helper.make_node("Reshape", ["c", "by_batch"], ["cf"]),
         helper.make_node("Concat", ["af", "bf", "cf"], ["y"], axis=1)],
        [const("pairs", [[3, 1], [0, -1], [-2, 0], [1, 2]]),
         const("rows", [[[0, 5], [2, -1], [1, 0]], [[-3, 2], [0, 0], [2, 3]],
                        [[1, 1], [1, -6], [0, 4]], [[2, 2], [2, 2], [0, 1]]]),
         const("points", [[0, 0, 0, 0], [3, 2, 5, 5], [-1, -2, 1, -3], [1, 1, 2, 3]]),
         const("by_batch", [4, -1])])
    # OneHot along a middle and the last axis, from indices with negative
    # values and values outside [-depth, depth) (all off).
    add("one-hot", 13, image,
        [helper.make_node("OneHot", ["hot", "depth", "values"], ["o1"], axis=1),
         helper.make_node("OneHot", ["hot", "depth", "values"], ["o2"]),
         helper.make_node("Add", ["o1", "o2"], ["o"]),
         helper.make_node("Unsqueeze", ["o", "one"], ["ou"]),
         helper.make_node("Mul", ["h", "ou"], ["y"])],
        [const("hot", rng.integers(-8, 8, (4, 6))), const("depth", 6),
         floats("values", [0.25, 2.0]), const("one", [1])])
    # Hardmax along an inner axis (opset 13) and over the flattened
    # dimensions from axis 2 (opset 11), as weights of h (no gradient flows
    # through them).
    add("hardmax", 13, image,
        [helper.make_node("Hardmax", ["h"], ["m"], axis=2),
         helper.make_node("Add", ["m", "one_f"], ["m1"]),
         helper.make_node("Mul", ["h", "m1"], ["y"])],
        [floats("one_f", 1.0)], smooth=False)
    add("hardmax-opset11", 11, image,
        [helper.make_node("Hardmax", ["h"], ["m"], axis=2),
         helper.make_node("Add", ["m", "one_f"], ["m1"]),
         helper.make_node("Mul", ["h", "m1"], ["y"])],
        [floats("one_f", 1.0)], smooth=False)
    # Graphs with their loss (imported with --loss=output; labels is a
    # second input, (shape past the batch, low, high) of random INT64 class
    # indices): SoftmaxCrossEntropyLoss with class weights and an ignored
    # class over [N, C, D] (mean), its log-probabilities reused;
    # NegativeLogLikelihoodLoss of a LogSoftmax over [N, C, D] (sum, no
    # weights, an ignored class among few).
    add("softmax-cross-entropy-loss", 13, (4, 5, 3),
        [helper.make_node("SoftmaxCrossEntropyLoss", ["h", "labels", "cweights"],
                          ["l", "logp"], ignore_index=2),
         helper.make_node("ReduceMean", ["logp"], ["m"], keepdims=0),
         helper.make_node("Mul", ["m", "tenth"], ["mt"]),
         helper.make_node("Sub", ["l", "mt"], ["y"])],
        [floats("cweights", [0.5, 1.0, 2.0, 1.5, 0.75]), floats("tenth", 0.1)],
        labels=((3,), 0, 5))
    add("nll-loss-sum", 13, (4, 6, 4),
        [helper.make_node("LogSoftmax", ["h"], ["lp"], axis=1),
         helper.make_node("NegativeLogLikelihoodLoss", ["lp", "labels"], ["y"],
                          reduction="sum", ignore_index=0)],
        labels=((4,), 0, 3))
    # GroupNormalization: scale and bias per group (opset 18), per channel
    # (21).
    grouped = (4, 6, 5)
    add("group-norm-18", 18, grouped,
        [helper.make_node("GroupNormalization", ["h", "gscale", "gbias"], ["y"],
                          num_groups=3, epsilon=1e-3)],
        [floats("gscale", rng.uniform(0.5, 1.5, 3)), floats("gbias", rng.uniform(-1, 1, 3))])
    add("group-norm-21", 21, grouped,
        [helper.make_node("GroupNormalization", ["h", "cscale", "cbias"], ["y"],
                          num_groups=2)],
        [floats("cscale", rng.uniform(0.5, 1.5, 6)), floats("cbias", rng.uniform(-1, 1, 6))])
    # RMSNormalization (opset 23) over the last two axes, scale broadcast.
    add("rms-norm", 23, image,
        [helper.make_node("RMSNormalization", ["h", "rscale"], ["y"], axis=2,
                          epsilon=1e-4)],
        [floats("rscale", rng.uniform(0.5, 1.5, (1, 6)))])
    # GridSample: bilinear with zeros (align_corners 0) and border
    # (align_corners 1) padding on a trained grid reaching past the image;
    # nearest (opset 20's names) on a grid of exact half-pixel ties, which
    # round to even, and of random points.
    grid = rng.uniform(-1.2, 1.2, (4, 5, 7, 2))
    ties = grid.copy()
    ties[:, :2, :, 0] = rng.integers(0, 8, (4, 2, 7)) / 4 - 0.75
    ties[:, 2:4, :, 1] = rng.integers(0, 4, (4, 2, 7)) / 2 - 0.5
    add("gridsample-bilinear", 16, (4, 3, 6, 8),
        [helper.make_node("GridSample", ["h", "grid"], ["a"]),
         helper.make_node("GridSample", ["h", "grid"], ["b"], padding_mode="border",
                          align_corners=1)] + both("a", "b"),
        [floats("grid", grid)])
    # Reflection: the grid scaled by 2.5 folds points back from one to
    # three mirrors away, in both corner conventions.
    add("gridsample-reflection", 16, (4, 3, 6, 8),
        [helper.make_node("GridSample", ["h", "grid"], ["a"], padding_mode="reflection"),
         helper.make_node("Mul", ["grid", "far"], ["far_grid"]),
         helper.make_node("GridSample", ["h", "far_grid"], ["b"], padding_mode="reflection",
                          align_corners=1)] + both("a", "b"),
        [floats("grid", grid), floats("far", [2.5])])
    # Bicubic (opset 20's cubic), zeros and reflection padding in both
    # conventions: the 16 taps of points near the edges fall outside or
    # fold back (from the grid scaled by 2.5 too). Border is PyTorch's
    # check (onnx_peer.py's image network): onnx.reference clamps a
    # bicubic point itself to the image before its taps, PyTorch only the
    # taps, and kiln follows PyTorch.
    add("gridsample-bicubic", 20, (4, 3, 6, 8),
        [helper.make_node("GridSample", ["h", "grid"], ["a"], mode="cubic"),
         helper.make_node("GridSample", ["h", "grid"], ["b"], mode="cubic",
                          padding_mode="reflection", align_corners=1),
         helper.make_node("Mul", ["grid", "far"], ["far_grid"]),
         helper.make_node("GridSample", ["h", "far_grid"], ["c"], mode="cubic",
                          padding_mode="reflection"),
         helper.make_node("Add", ["b", "c"], ["bc"])] + both("a", "bc"),
        [floats("grid", grid), floats("far", [2.5])])
    add("gridsample-nearest", 20, (4, 3, 4, 8),
        [helper.make_node("GridSample", ["h", "ties"], ["y"], mode="nearest")],
        [floats("ties", ties)], smooth=False)
    # Volumetric (opset 20): X [N, C, D, H, W] sampled at grid [N, D_out,
    # H_out, W_out, 3] holding (x, y, z); trilinear with each padding
    # Tan, and the hyperbolic functions and their inverses, each over the
    # ranges where kiln switches forms (sinh's |x| = 1, asinh's and acosh's
    # 1e4).
    def scaled(src, factor, out_name):
        return [helper.make_node("Mul", [src, factor], [out_name])]

    add("hyperbolic", 13, image,
        scaled("h", "quarter_h", "hq") + scaled("h", "two_h", "h2x") +
        scaled("h", "big_h", "hb") +
        [helper.make_node("Tan", ["hq"], ["tan"]),
         helper.make_node("Sinh", ["h2x"], ["sinh"]),
         helper.make_node("Cosh", ["h"], ["cosh"]),
         helper.make_node("Asinh", ["h"], ["asinh"]),
         helper.make_node("Asinh", ["hb"], ["asinh_big"]),
         helper.make_node("Mul", ["h", "h"], ["hh"]),
         helper.make_node("Add", ["hh", "one_h"], ["above_one"]),
         helper.make_node("Acosh", ["above_one"], ["acosh"]),
         helper.make_node("Mul", ["hh", "big_h"], ["hhb"]),
         helper.make_node("Add", ["hhb", "one_h"], ["far_above_one"]),
         helper.make_node("Acosh", ["far_above_one"], ["acosh_big"]),
         helper.make_node("Tanh", ["h"], ["th"]),
         helper.make_node("Mul", ["th", "nine_tenths"], ["inside"]),
         helper.make_node("Atanh", ["inside"], ["atanh"]),
         helper.make_node("Sum", ["tan", "sinh", "cosh", "asinh", "asinh_big", "acosh",
                                  "acosh_big", "atanh"], ["y"])],
        [floats("quarter_h", 0.25), floats("two_h", 2.0), floats("big_h", 3e4),
         floats("one_h", 1.0), floats("nine_tenths", 0.9)])
    # The same near 0, scaled back up: each of Sinh, Asinh, Atanh and Tan
    # of h / 1e5 is about h / 1e5, so a form that loses relative accuracy
    # there (e^x - e^-x, log(x + sqrt(x^2 + 1))) moves the loss past the
    # tolerance.
    add("hyperbolic-small", 13, image,
        scaled("h", "milli", "hs") +
        [helper.make_node("Sinh", ["hs"], ["sinh"]),
         helper.make_node("Asinh", ["hs"], ["asinh"]),
         helper.make_node("Atanh", ["hs"], ["atanh"]),
         helper.make_node("Tan", ["hs"], ["tan"]),
         helper.make_node("Sum", ["sinh", "asinh", "atanh", "tan"], ["s"]),
         helper.make_node("Mul", ["s", "kilo_quarter"], ["y"])],
        [floats("milli", 1e-5), floats("kilo_quarter", 25000.0)])
    # Atan of h and of 4h (past tan(3 pi/8), where kiln's f32 atan switches
    # reductions), Asin and Acos inside (-1, 1), and of constants at the
    # ends of [-1, 1] and next to them: +-pi/2, pi and 0 there, not NaN
    # (no gradient flows to a constant, so the ends' infinite slopes never
    # meet the gradient check).
    add("inverse-trig", 13, image,
        scaled("h", "four", "h4") +
        [helper.make_node("Atan", ["h"], ["atan"]),
         helper.make_node("Atan", ["h4"], ["atan4"]),
         helper.make_node("Tanh", ["h"], ["th"]),
         helper.make_node("Mul", ["th", "nine_tenths"], ["inside"]),
         helper.make_node("Asin", ["inside"], ["asin"]),
         helper.make_node("Acos", ["inside"], ["acos"]),
         helper.make_node("Asin", ["ends"], ["asin_ends"]),
         helper.make_node("Acos", ["ends"], ["acos_ends"]),
         helper.make_node("Sum", ["atan", "atan4", "asin", "acos", "asin_ends",
                                  "acos_ends"], ["y"])],
        [floats("four", 4.0), floats("nine_tenths", 0.9),
         floats("ends", [-1.0, np.nextafter(np.float32(-1), np.float32(0)), -0.5, 0.0,
                         np.nextafter(np.float32(1), np.float32(0)), 1.0])])
    # Acos of the float next below 1, scaled up: 3.4527e-4, which pi/2 -
    # asin(x) in f32 gets 1e-4 wrong (relatively); scaled by 1e5, y
    # outweighs h and the targets, and that error moves the loss by 2e-4.
    add("acos-near-one", 13, image,
        [helper.make_node("Acos", ["below_one"], ["acos"]),
         helper.make_node("Mul", ["acos", "scale_up"], ["far"]),
         helper.make_node("Add", ["h", "far"], ["y"])],
        [floats("below_one", [np.nextafter(np.float32(1), np.float32(0))]),
         floats("scale_up", 1e5)])
    # Rounding and sign, of floats and of integers (flat between steps: no
    # gradient flows through them, so h itself joins y), and IsNaN and IsInf of a log that is NaN
    # below 0 and -inf at it (h has a few zeros).
    add("rounding-sign", 13, image,
        [helper.make_node("Mul", ["h", "three"], ["h3"]),
         helper.make_node("Floor", ["h3"], ["f"]),
         helper.make_node("Ceil", ["h3"], ["c"]),
         helper.make_node("Round", ["h3"], ["r"]),
         helper.make_node("Sign", ["h"], ["s"]),
         helper.make_node("Cast", ["f"], ["fi"], to=TensorProto.INT32),
         helper.make_node("Sign", ["fi"], ["si"]),
         helper.make_node("Cast", ["si"], ["sf"], to=TensorProto.FLOAT),
         helper.make_node("Sum", ["f", "c", "r", "s", "sf", "h"], ["y"])],
        [floats("three", 3.0)], smooth=False)
    add("isnan-isinf", 13, image,
        [helper.make_node("Relu", ["h"], ["p"]),
         helper.make_node("Sub", ["p", "quarter"], ["shifted"]),
         helper.make_node("Log", ["shifted"], ["l"]),
         helper.make_node("IsNaN", ["l"], ["nan"]),
         helper.make_node("Neg", ["p"], ["negp"]),
         helper.make_node("Log", ["negp"], ["l0"]),
         helper.make_node("IsInf", ["l0"], ["inf"], detect_positive=0),
         helper.make_node("IsInf", ["l0"], ["pinf"], detect_negative=0),
         helper.make_node("Mul", ["h", "two"], ["h2"]),
         helper.make_node("Where", ["nan", "h", "h2"], ["a"]),
         helper.make_node("Neg", ["a"], ["na"]),
         helper.make_node("Where", ["inf", "na", "a"], ["b"]),
         helper.make_node("Where", ["pinf", "h2", "b"], ["y"])],
        [floats("quarter", 0.25), floats("two", 2.0)], smooth=False)
    # (reflection also three mirrors away), tricubic, nearest.
    volume = (4, 2, 3, 4, 5)
    grid3 = rng.uniform(-1.2, 1.2, (4, 2, 3, 4, 3))
    add("gridsample-3d-linear", 20, volume,
        [helper.make_node("GridSample", ["h", "grid3"], ["a"], mode="linear"),
         helper.make_node("GridSample", ["h", "grid3"], ["b"], mode="linear",
                          padding_mode="border", align_corners=1)] + both("a", "b"),
        [floats("grid3", grid3)])
    add("gridsample-3d-reflection", 20, volume,
        [helper.make_node("GridSample", ["h", "grid3"], ["a"], mode="linear",
                          padding_mode="reflection"),
         helper.make_node("Mul", ["grid3", "far"], ["far_grid"]),
         helper.make_node("GridSample", ["h", "far_grid"], ["b"], mode="linear",
                          padding_mode="reflection", align_corners=1)] + both("a", "b"),
        [floats("grid3", grid3), floats("far", [2.5])])
    # (Tricubic once, with reflection: its 64 taps make the largest kernels
    # of these tests; zeros and border share the 2-D variants' code.)
    add("gridsample-3d-cubic", 20, volume,
        [helper.make_node("GridSample", ["h", "grid3"], ["y"], mode="cubic",
                          padding_mode="reflection", align_corners=1)],
        [floats("grid3", grid3)])
    add("gridsample-3d-nearest", 20, volume,
        [helper.make_node("GridSample", ["h", "grid3"], ["y"], mode="nearest")],
        [floats("grid3", grid3)], smooth=False)

    # Index arithmetic on shapes, known at import, as the TorchScript
    # exporter writes it for torch.var (the divisor: ReduceProd of some of
    # the shape's entries) and torch.diagonal (EyeLike, Min and Max of
    # sizes, CumSum of ones): h over the element count of its last two
    # axes, times the k = 1 diagonal of a constant's shape and the k =
    # -2 one of a value's (h's mean over N and C, dtype from the attribute),
    # times one plus the exclusive reversed running sum of min(H, 9) ones
    # along W.
    add("static-index-math", 13, image,
        [helper.make_node("Shape", ["h"], ["shape"]),
         helper.make_node("Gather", ["shape", "last_two"], ["sizes"]),
         helper.make_node("ReduceProd", ["sizes"], ["count"], keepdims=0),
         helper.make_node("Cast", ["count"], ["count_f"], to=TensorProto.FLOAT),
         helper.make_node("Div", ["h", "count_f"], ["a"]),
         helper.make_node("ConstantOfShape", ["sizes"], ["plane"]),
         helper.make_node("EyeLike", ["plane"], ["upper"], k=1),
         helper.make_node("ReduceMean", ["h"], ["mean"], axes=[0, 1], keepdims=0),
         helper.make_node("EyeLike", ["mean"], ["lower"], k=-2, dtype=TensorProto.FLOAT),
         helper.make_node("Add", ["upper", "lower"], ["band"]),
         helper.make_node("Mul", ["a", "band"], ["b"]),
         helper.make_node("Gather", ["shape", "third"], ["height"]),
         helper.make_node("Min", ["height", "nine"], ["small"]),
         helper.make_node("Max", ["small", "one"], ["n"]),
         helper.make_node("ConstantOfShape", ["n"], ["ones"],
                          value=helper.make_tensor("v", TensorProto.INT64, [1], [1])),
         helper.make_node("CumSum", ["ones", "zero"], ["running"], exclusive=1, reverse=1),
         helper.make_node("Cast", ["running"], ["running_f"], to=TensorProto.FLOAT),
         helper.make_node("Add", ["running_f", "one_f"], ["weights"]),
         helper.make_node("Mul", ["b", "weights"], ["c"]),
         helper.make_node("Add", ["c", "h"], ["y"])],
        [const("last_two", [2, 3]), const("third", [2]), const("nine", [9]),
         const("one", [1]), const("zero", 0), floats("one_f", [1.0])])
    # Control flow. Subgraphs read outer names (h, the parameters) as ONNX
    # lets them; their own values are declared without shapes.
    def graph(name, nodes, inputs, outputs, inits=()):
        return helper.make_graph(
            nodes, name, [helper.make_tensor_value_info(i, t, s) for i, t, s in inputs],
            [helper.make_tensor_value_info(o, 0, None) for o in outputs], list(inits))

    def branch(name, nodes, output):
        return graph(name, nodes, [], [output])

    BOOL, I64 = TensorProto.BOOL, TensorProto.INT64
    # If with conditions known at import (from h's shape): true takes the
    # then_branch, false the else_branch.
    add("if-static", 16, image,
        [helper.make_node("Shape", ["h"], ["hs"]),
         helper.make_node("Gather", ["hs", "one"], ["channels"]),
         helper.make_node("Greater", ["channels", "two"], ["wide"]),
         helper.make_node("Less", ["channels", "two"], ["narrow"]),
         helper.make_node("If", ["wide"], ["a"], then_branch=branch(
             "wide_then", [helper.make_node("Mul", ["h", "w"], ["ta"]),
                           helper.make_node("Tanh", ["ta"], ["ta2"])], "ta2"),
             else_branch=branch("wide_else", [helper.make_node("Sin", ["h"], ["ea"])], "ea")),
         helper.make_node("If", ["narrow"], ["b"], then_branch=branch(
             "narrow_then", [helper.make_node("Cos", ["h"], ["tb"])], "tb"),
             else_branch=branch("narrow_else", [helper.make_node("Sigmoid", ["h"], ["eb"])],
                                "eb")),
         helper.make_node("Add", ["a", "b"], ["y"])],
        [const("one", 1), const("two", 2), floats("w", rng.standard_normal(6))])
    # If with conditions that depend on data (always true and always
    # false here, so gradcheck does not cross them): kiln computes both
    # branches and selects.
    add("if-dynamic", 16, image,
        [helper.make_node("Mul", ["h", "h"], ["sq"]),
         helper.make_node("ReduceSum", ["sq"], ["energy"], keepdims=0),
         helper.make_node("Greater", ["energy", "minus"], ["positive"]),
         helper.make_node("Less", ["energy", "minus"], ["negative"]),
         helper.make_node("If", ["positive"], ["a"], then_branch=branch(
             "pos_then", [helper.make_node("Mul", ["h", "w"], ["ta"])], "ta"),
             else_branch=branch("pos_else", [helper.make_node("Sin", ["h"], ["ea"])], "ea")),
         helper.make_node("If", ["negative"], ["b"], then_branch=branch(
             "neg_then", [helper.make_node("Cos", ["h"], ["tb"])], "tb"),
             else_branch=branch("neg_else", [helper.make_node("Tanh", ["h"], ["eb"])], "eb")),
         helper.make_node("Add", ["a", "b"], ["y"])],
        [floats("minus", -1.0), floats("w", rng.standard_normal(6))])
    # Loop with a trip count: a state through a shared [6, 6] weight and a
    # row of a bias table chosen by the iteration number, an If on the
    # iteration number inside (each branch taken), and a scan output of
    # every state, averaged with the last.
    body = graph("loop_body", [
        helper.make_node("Identity", ["c"], ["c_out"]),
        helper.make_node("MatMul", ["s", "lw"], ["sw"]),
        helper.make_node("Gather", ["table", "i"], ["row"]),
        helper.make_node("Add", ["sw", "row"], ["pre"]),
        helper.make_node("Tanh", ["pre"], ["t"]),
        helper.make_node("Equal", ["i", "one"], ["second"]),
        helper.make_node("If", ["second"], ["s_out"], then_branch=branch(
            "second_then", [helper.make_node("Mul", ["t", "half"], ["halved"])], "halved"),
            else_branch=branch("second_else", [helper.make_node("Identity", ["t"], ["kept"])],
                               "kept")),
        helper.make_node("Mul", ["s_out", "s"], ["product"]),
        helper.make_node("ReduceMean", ["product"], ["trace"], axes=[1, 2, 3], keepdims=0)],
        [("i", I64, []), ("c", BOOL, []), ("s", F32, None)], ["c_out", "s_out", "trace"],
        [floats("half", 0.5)])
    # (A scan output of one dimension: onnx.reference joins a Loop's scan
    # outputs with np.vstack, which stacks only those; ONNX Runtime, as
    # kiln, stacks any along a new axis 0.)
    add("loop-trip-count", 16, image,
        [helper.make_node("Loop", ["trips", "yes", "h"], ["last", "traces"], body=body),
         helper.make_node("Transpose", ["traces"], ["by_sample"], perm=[1, 0]),
         helper.make_node("Unsqueeze", ["by_sample", "inner"], ["wide"]),
         helper.make_node("Add", ["last", "wide"], ["y"])],
        [const("trips", 3), helper.make_tensor("yes", BOOL, [], [True]), const("one", 1),
         const("inner", [2, 3]),
         floats("lw", rng.standard_normal((6, 6)) * 0.4),
         floats("table", rng.standard_normal((3, 6)) * 0.5)])
    # Loop ended by its condition: a counter carried as a constant; the
    # body's condition is computed from it at import (its step a CastLike
    # of the counter, as torch.export writes its index arithmetic).
    counted = graph("counted_body", [
        helper.make_node("CastLike", ["step", "k"], ["step_like"]),
        helper.make_node("Add", ["k", "step_like"], ["k_out"]),
        helper.make_node("Less", ["k_out", "four"], ["c_out"]),
        helper.make_node("Sin", ["s"], ["sin"]),
        helper.make_node("Mul", ["s", "lw"], ["sw"]),
        helper.make_node("Add", ["sin", "sw"], ["s_out"])],
        [("i", I64, []), ("c", BOOL, []), ("k", I64, []), ("s", F32, None)],
        ["c_out", "k_out", "s_out"])
    add("loop-condition", 16, image,
        [helper.make_node("Loop", ["", "yes", "zero", "h"], ["k", "y"], body=counted)],
        [helper.make_tensor("yes", BOOL, [], [True]), const("zero", 0), const("step", 1),
         const("four", 4), floats("lw", 0.5 + 0.2 * rng.standard_normal(6))])
    # Sequences: constructed, inserted into (at a negative position and at
    # the end), erased from, their length in a shape computation, read back
    # (SequenceAt from the end) and joined (ConcatFromSequence along an
    # axis and stacked along a new one).
    add("sequence-ops", 17, image,
        [helper.make_node("Tanh", ["h"], ["a"]),
         helper.make_node("Sin", ["h"], ["b"]),
         helper.make_node("Mul", ["h", "h"], ["c"]),
         helper.make_node("SequenceConstruct", ["a", "b"], ["s0"]),
         helper.make_node("SequenceInsert", ["s0", "c", "minus_one"], ["s1"]),
         helper.make_node("SequenceInsert", ["s1", "h"], ["s2"]),
         helper.make_node("SequenceErase", ["s2", "zero"], ["s3"]),
         helper.make_node("SequenceLength", ["s3"], ["count"]),
         helper.make_node("SequenceAt", ["s3", "minus_one"], ["last"]),
         helper.make_node("ConcatFromSequence", ["s3"], ["joined"], axis=1),
         helper.make_node("ConcatFromSequence", ["s3"], ["stacked"], axis=-1, new_axis=1),
         helper.make_node("ReduceMean", ["stacked"], ["mean"], axes=[-1], keepdims=0),
         helper.make_node("Cast", ["count"], ["fcount"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["last", "fcount"], ["scaled"]),
         helper.make_node("Slice", ["joined", "c0", "c3", "ax1"], ["first3"]),
         helper.make_node("Add", ["first3", "mean"], ["am"]),
         helper.make_node("Add", ["am", "scaled"], ["y"])],
        [const("minus_one", -1), const("zero", 0), const("c0", [0]), const("c3", [3]),
         const("ax1", [1])])
    # Scan over the channels in reverse, a state [4, 6, 6] that starts at
    # a trained initializer, the scan output stacked along axis 1 again.
    scan_body = graph("scan_body", [
        helper.make_node("Constant", [], ["decay"], value_float=0.7),
        helper.make_node("Mul", ["acc", "decay"], ["kept"]),
        helper.make_node("Add", ["kept", "xt"], ["pre"]),
        helper.make_node("Tanh", ["pre"], ["acc_out"]),
        helper.make_node("Mul", ["acc_out", "xt"], ["yt"])],
        [("acc", F32, None), ("xt", F32, None)], ["acc_out", "yt"])
    add("scan-reverse", 16, image,
        [helper.make_node("Scan", ["acc0", "h"], ["final", "ys"], body=scan_body,
                          num_scan_inputs=1, scan_input_axes=[1],
                          scan_input_directions=[1], scan_output_axes=[1]),
         helper.make_node("Unsqueeze", ["final", "one_axis"], ["final1"]),
         helper.make_node("Add", ["ys", "final1"], ["y"])],
        [floats("acc0", rng.standard_normal((4, 6, 6)) * 0.5), const("one_axis", [1])])
    # DFT (opset 17: axis an attribute): a real input, onesided.
    add("dft-onesided", 17, (4, 12, 1),
        [helper.make_node("DFT", ["h"], ["y"], onesided=1)])
    # DFT (opset 20: axis an input): a complex input padded to 13 along
    # axis 2, then an inverse along axis 1 cut from 4 to 3.
    add("dft-complex-pad-inverse-cut", 20, (4, 4, 10, 2),
        [helper.make_node("DFT", ["h", "len13", "axis2"], ["a"]),
         helper.make_node("DFT", ["a", "len3", "axis1"], ["y"], inverse=1)],
        [const("len13", 13), const("len3", 3), const("axis2", 2), const("axis1", 1)])
    # An inverse onesided DFT (NumPy's irfft): a real signal of odd length
    # 15 from the first 8 of 9 bins, and of the default even length 16.
    add("dft-inverse-onesided", 20, (4, 9, 2),
        [helper.make_node("DFT", ["h", "len15"], ["a"], inverse=1, onesided=1),
         helper.make_node("DFT", ["h"], ["b"], inverse=1, onesided=1),
         helper.make_node("Concat", ["a", "b"], ["y"], axis=1)],
        [const("len15", 15)])
    # STFT: a real signal with a constant Hann window (folded into the
    # matrix; as torch.stft exports it), onesided; a complex one with a
    # window computed from a parameter, frame_length given, both sides.
    n = np.arange(10)
    add("stft-window", 17, (2, 40, 1),
        [helper.make_node("STFT", ["h", "step", "window"], ["y"])],
        [const("step", 4), floats("window", 0.5 - 0.5 * np.cos(2 * np.pi * n / 10))])
    add("stft-complex-computed-window", 17, (2, 30, 2),
        [helper.make_node("Sigmoid", ["logits"], ["window"]),
         helper.make_node("STFT", ["h", "step", "window", "length"], ["y"], onesided=0)],
        [const("step", 5), const("length", 8), floats("logits", rng.standard_normal(8))])
    # A signal [batch, length] (PyTorch's TorchScript export of torch.stft;
    # ONNX Runtime reads it as real).
    add("stft-rank2", 17, (2, 33),
        [helper.make_node("STFT", ["h", "step"], ["y"], onesided=1)]
        + [], [const("step", 3)])
    # Det: batches of 5 x 5 matrices (LU with partial pivoting); a column
    # of zeros (determinant 0, its pivot divided as 1) beside a zero in
    # the corner (a swap at the first step); one matrix, a scalar.
    add("det-batch", 13, (4, 3, 5, 5), [helper.make_node("Det", ["h"], ["y"])])
    column = np.ones((4, 4), np.float32)
    column[:, 2] = 0
    corner = np.ones((4, 4), np.float32)
    corner[0, 0] = 0
    add("det-zero-column-corner", 13, (4, 2, 4, 4),
        [helper.make_node("Mul", ["h", "column"], ["hc"]),
         helper.make_node("Det", ["hc"], ["a"]),
         helper.make_node("Mul", ["h", "corner"], ["hk"]),
         helper.make_node("Det", ["hk"], ["b"]),
         helper.make_node("Concat", ["a", "b"], ["y"], axis=1)],
        [floats("column", column), floats("corner", corner)])
    # (The one determinant plus 1000: the loss of one value against a
    # random target is tiny where they nearly agree, and its relative error
    # then large.)
    add("det-matrix", 13, (1, 6, 6),
        [helper.make_node("Reshape", ["h", "square"], ["m"]),
         helper.make_node("Det", ["m"], ["d"]),
         helper.make_node("Reshape", ["d", "one"], ["d1"]),
         helper.make_node("Add", ["d1", "thousand"], ["y"])],
        [const("square", [6, 6]), const("one", [1]), floats("thousand", 1000.0)])
    # MaxPool's Indices (F.max_pool2d(return_indices=True), which
    # max_unpool2d reads): flat positions in X counting the batch and the
    # channels, row-major; with pads, then ceil_mode and storage_order 1
    # (column-major), then 1-D. Scaled by 0.01 so that one index off by one
    # moves the loss past the tolerance. (No gradient flows to indices.)
    def indices_of(pool):
        return [pool, helper.make_node("Cast", ["i"], ["f"], to=F32),
                helper.make_node("Mul", ["f", "hundredth"], ["y"])]
    add("maxpool-indices", 12, (4, 3, 7, 7),
        indices_of(helper.make_node("MaxPool", ["h"], ["v", "i"], kernel_shape=[3, 3],
                                    strides=[2, 2], pads=[1, 1, 1, 1])),
        [floats("hundredth", 0.01)], smooth=False)
    add("maxpool-indices-ceil-column-major", 12, (4, 3, 7, 8),
        indices_of(helper.make_node("MaxPool", ["h"], ["v", "i"], kernel_shape=[2, 3],
                                    strides=[2, 2], ceil_mode=1, storage_order=1)),
        [floats("hundredth", 0.01)], smooth=False)
    add("maxpool-indices-1d", 12, (4, 3, 10),
        indices_of(helper.make_node("MaxPool", ["h"], ["v", "i"], kernel_shape=[3],
                                    strides=[2], pads=[1, 1])),
        [floats("hundredth", 0.01)], smooth=False)
    # LRN (AlexNet's: size 5) and an even window with its own alpha, beta
    # and bias; MeanVarianceNormalization over the default axes and over
    # the last two; Swish (opset 24) with alpha.
    add("lrn", 13, (4, 7, 5, 5),
        [helper.make_node("LRN", ["h"], ["y"], size=5, alpha=1e-2)])
    add("lrn-even-window", 13, (4, 6, 3, 4),
        [helper.make_node("LRN", ["h"], ["y"], size=4, alpha=0.3, beta=0.5, bias=2.0)])
    add("mean-variance-normalization", 13, image,
        [helper.make_node("MeanVarianceNormalization", ["h"], ["a"]),
         helper.make_node("MeanVarianceNormalization", ["h"], ["b"], axes=[2, 3]),
         helper.make_node("Add", ["a", "b"], ["y"])])
    add("swish", 24, (4, 3, 5),
        [helper.make_node("Swish", ["h"], ["y"], alpha=1.7)])
    # Upsample (opset 7: scales an attribute; 9: an input), nearest: each
    # element repeated.
    add("upsample-7", 7, image,
        [helper.make_node("Upsample", ["h"], ["y"], scales=[1.0, 1.0, 2.0, 3.0])],
        smooth=False)
    add("upsample-9", 9, image,
        [helper.make_node("Upsample", ["h", "up"], ["y"])],
        [floats("up", [1, 2, 3, 2])], smooth=False)
    # CumProd (opset 26): inclusive along the last axis; exclusive and
    # reversed along the middle one over factors a third of which are 0.
    zeros = (rng.random((3, 7)) > 0.33).astype(np.float32)
    add("cumprod", 26, (4, 3, 7),
        [helper.make_node("CumProd", ["h", "axis2"], ["a"]),
         helper.make_node("Mul", ["h", "holes"], ["z"]),
         helper.make_node("CumProd", ["z", "axis1"], ["b"], exclusive=1, reverse=1),
         helper.make_node("Add", ["a", "b"], ["y"])],
        [const("axis2", 2), const("axis1", 1), floats("holes", zeros)])
    # MaxUnpool after MaxPool: disjoint windows; the same padded to a
    # larger output_shape; overlapping windows (3 by stride 2, padded), whose
    # shared maxima are written twice.
    add("maxunpool", 12, image,
        [helper.make_node("MaxPool", ["h"], ["v", "i"], kernel_shape=[2, 2], strides=[2, 2]),
         helper.make_node("MaxUnpool", ["v", "i"], ["y"], kernel_shape=[2, 2],
                          strides=[2, 2])])
    add("maxunpool-output-shape", 12, (4, 3, 7, 7),
        [helper.make_node("MaxPool", ["h"], ["v", "i"], kernel_shape=[2, 2], strides=[2, 2]),
         helper.make_node("MaxUnpool", ["v", "i", "out"], ["y"], kernel_shape=[2, 2],
                          strides=[2, 2])], [const("out", [4, 3, 7, 7])])
    add("maxunpool-overlapping", 12, (4, 3, 7, 7),
        [helper.make_node("MaxPool", ["h"], ["v", "i"], kernel_shape=[3, 3], strides=[2, 2],
                          pads=[1, 1, 1, 1]),
         helper.make_node("MaxUnpool", ["v", "i"], ["y"], kernel_shape=[3, 3],
                          strides=[2, 2], pads=[1, 1, 1, 1])])
    # AffineGrid (opset 20): 2-D with and without align_corners, and 3-D.
    add("affine-grid", 20, (2, 2, 3),
        [helper.make_node("AffineGrid", ["h", "size"], ["a"], align_corners=0),
         helper.make_node("AffineGrid", ["h", "size"], ["b"], align_corners=1),
         helper.make_node("Concat", ["a", "b"], ["y"], axis=3)],
        [const("size", [2, 3, 5, 6])])
    add("affine-grid-3d", 20, (2, 3, 4),
        [helper.make_node("AffineGrid", ["h", "size"], ["y"])],
        [const("size", [2, 1, 3, 4, 5])])
    # ReverseSequence: time first (lengths 4, 1, 3), then batch first
    # (lengths 6, 2, 0, 5).
    add("reverse-sequence", 10, (4, 3, 5),
        [helper.make_node("ReverseSequence", ["h", "lens"], ["y"])], [const("lens", [4, 1, 3])])
    add("reverse-sequence-batch-first", 10, (4, 6, 2),
        [helper.make_node("ReverseSequence", ["h", "lens"], ["y"], batch_axis=0,
                          time_axis=1)], [const("lens", [6, 2, 0, 5])])
    # CenterCropPad (opset 18): H cropped 6 -> 5, W padded 6 -> 9.
    add("center-crop-pad", 18, image,
        [helper.make_node("CenterCropPad", ["h", "crop"], ["y"], axes=[2, 3])],
        [const("crop", [5, 9])])
    # LpPool (opset 18: p 3, no padding: onnx.reference divides a padded
    # window's sum by the elements it covers before multiplying it by the
    # window, where the specification sums) and GlobalLpPool (p 2 and 3).
    add("lp-pool", 18, image,
        [helper.make_node("LpPool", ["h"], ["y"], kernel_shape=[2, 3], strides=[2, 3], p=3)])
    add("global-lp-pool", 13, image,
        [helper.make_node("GlobalLpPool", ["h"], ["a"]),
         helper.make_node("GlobalLpPool", ["h"], ["b"], p=3),
         helper.make_node("Add", ["a", "b"], ["y"])])
    # The windows (opset 17), periodic and symmetric, scaling the input.
    add("windows", 17, (4, 3, 10),
        [helper.make_node("HannWindow", ["ten"], ["hann"]),
         helper.make_node("HammingWindow", ["ten"], ["hamming"], periodic=0),
         helper.make_node("BlackmanWindow", ["ten"], ["blackman"]),
         helper.make_node("Sum", ["hann", "hamming", "blackman"], ["w"]),
         helper.make_node("Mul", ["h", "w"], ["y"])], [const("ten", 10)])
    # A mel spectrogram's filters (MelWeightMatrix, opset 17: 8 bins of a
    # 32-point DFT at 8 kHz, 100 Hz to 3.5 kHz) applied to a power spectrum.
    add("mel-weight-matrix", 17, (4, 3, 17),
        [helper.make_node("MelWeightMatrix", ["bins", "dft", "rate", "low", "high"], ["mel"]),
         helper.make_node("Mul", ["h", "h"], ["power"]),
         helper.make_node("MatMul", ["power", "mel"], ["y"])],
        [const("bins", 8), const("dft", 32), const("rate", 8000),
         floats("low", 100.0), floats("high", 3500.0)])
    # Attention (opset 23, torch.export's F.scaled_dot_product_attention):
    # plain causal attention, and plain 3-D attention split into heads (each
    # one kiln.attention); 3-D inputs with grouped key heads (4 query heads,
    # 2 key heads), a boolean mask shorter than the keys with a row that
    # sees no key, softcap and scale; a cache (past keys and values, which
    # the causal frontier follows) and a float mask; (opset 25) a sliding
    # window with nonpad_kv_seqlen.
    def attention_weights(shape):
        return floats("wk", 1 + 0.3 * rng.standard_normal(shape)), \
            floats("wv", rng.standard_normal(shape))
    add("attention-causal", 23, (2, 4, 8, 16),
        [helper.make_node("Mul", ["h", "wk"], ["k"]), helper.make_node("Mul", ["h", "wv"], ["v"]),
         helper.make_node("Attention", ["h", "k", "v"], ["y"], is_causal=1)],
        attention_weights((4, 8, 16)))
    add("attention-3d-plain", 23, (2, 5, 32),
        [helper.make_node("MatMul", ["h", "wk"], ["k"]), helper.make_node("MatMul", ["h", "wv"], ["v"]),
         helper.make_node("Attention", ["h", "k", "v"], ["y"], q_num_heads=4, kv_num_heads=4)],
        [floats("wk", rng.standard_normal((32, 32)) * 0.3),
         floats("wv", rng.standard_normal((32, 24)) * 0.3)])
    mask = rng.random((5, 4)) > 0.3
    mask[2] = False
    mask[:, 0] |= np.arange(5) != 2
    add("attention-gqa-3d-mask-softcap", 23, (2, 5, 32),
        [helper.make_node("MatMul", ["h", "wk"], ["k"]), helper.make_node("MatMul", ["h", "wv"], ["v"]),
         helper.make_node("Attention", ["h", "k", "v", "mask"], ["y"], q_num_heads=4,
                          kv_num_heads=2, softcap=3.0, scale=0.2)],
        [floats("wk", rng.standard_normal((32, 16)) * 0.3),
         floats("wv", rng.standard_normal((32, 12)) * 0.3),
         numpy_helper.from_array(mask, "mask")])
    add("attention-cache-float-mask", 23, (2, 2, 3, 8),
        [helper.make_node("Mul", ["h", "wk"], ["k"]), helper.make_node("Mul", ["h", "wv"], ["v"]),
         helper.make_node("Attention", ["h", "k", "v", "bias", "past_k", "past_v"], ["y"],
                          is_causal=1)],
        list(attention_weights((2, 3, 8)))
        + [floats("bias", 0.5 * rng.standard_normal((1, 1, 3, 7))),
           floats("past_k", rng.standard_normal((2, 2, 4, 8))),
           floats("past_v", rng.standard_normal((2, 2, 4, 8)))])
    add("attention-window-nonpad", 25, (2, 2, 6, 8),
        [helper.make_node("Mul", ["h", "wk"], ["k"]), helper.make_node("Mul", ["h", "wv"], ["v"]),
         helper.make_node("Attention", ["h", "k", "v", "", "", "", "lens"], ["y"], is_causal=1,
                          left_window_size=2)],
        list(attention_weights((2, 6, 8))) + [const("lens", [6, 4])])
    # RotaryEmbedding (opset 23): 4-D with position_ids into [10, 4]
    # caches; 3-D (num_heads 2) interleaved over the first 4 of 6 elements,
    # caches per batch and position.
    angle = np.arange(10)[:, None] * (1.0 / 10000 ** (np.arange(4) / 4))[None, :]
    add("rotary-positions", 23, (2, 2, 5, 8),
        [helper.make_node("RotaryEmbedding", ["h", "cos", "sin", "positions"], ["y"])],
        [floats("cos", np.cos(angle)), floats("sin", np.sin(angle)),
         const("positions", [[0, 1, 2, 3, 4], [3, 4, 5, 6, 7]])])
    angle = rng.random((2, 5, 2)) * 3
    add("rotary-3d-interleaved-partial", 23, (2, 5, 12),
        [helper.make_node("RotaryEmbedding", ["h", "cos", "sin"], ["y"], num_heads=2,
                          interleaved=1, rotary_embedding_dim=4)],
        [floats("cos", np.cos(angle)), floats("sin", np.sin(angle))])
    # QuantizeLinear then DequantizeLinear (fake quantization): per tensor
    # to UINT8 with a zero point; per axis to INT8 (axis 1, a negative
    # axis); without a zero point (UINT8: the negatives clamp to 0); INT16
    # (opset 21); constants quantized and dequantized at import (an INT8
    # weight, an INT32 bias, a float constant). Opset 19: onnx.reference
    # has no earlier version, and 19 only adds float8 types to 10 and 13
    # (the exports in import.test are opset 13). The steps of the rounding
    # are not smooth.
    def qdq(axis=None, scale="qs", zero="qz"):
        kw = {} if axis is None else dict(axis=axis)
        inputs = ["h", scale] + ([zero] if zero else [])
        return [helper.make_node("QuantizeLinear", inputs, ["q"], **kw),
                helper.make_node("DequantizeLinear", ["q"] + inputs[1:], ["y"], **kw)]
    add("qdq-uint8", 19, (4, 3, 5), qdq(),
        [floats("qs", 0.02), const("qz", 128, np.uint8)], smooth=False)
    add("qdq-int8-axis", 19, (4, 3, 5), qdq(axis=1),
        [floats("qs", [0.01, 0.03, 0.004]), const("qz", [0, 5, -3], np.int8)], smooth=False)
    add("qdq-int8-negative-axis", 19, (2, 3, 4, 5), qdq(axis=-1),
        [floats("qs", [0.01, 0.02, 0.005, 0.04, 0.03]), const("qz", [0] * 5, np.int8)],
        smooth=False)
    add("qdq-no-zero-point", 19, (4, 3, 5), qdq(zero=None), [floats("qs", 0.01)],
        smooth=False)
    add("qdq-int16", 21, (4, 3, 5), qdq(),
        [floats("qs", 1e-4), const("qz", -200, np.int16)], smooth=False)
    add("dq-constants", 19, (4, 3, 5),
        [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(
            (rng.standard_normal((3, 1)) * 2).astype(np.float32))),
         helper.make_node("DequantizeLinear", ["w8", "ws", "wz"], ["w"], axis=0),
         helper.make_node("DequantizeLinear", ["b32", "bs"], ["b"]),
         helper.make_node("QuantizeLinear", ["c", "ws", "wz"], ["cq"], axis=0),
         helper.make_node("DequantizeLinear", ["cq", "ws", "wz"], ["cd"], axis=0),
         helper.make_node("Mul", ["h", "w"], ["hw"]),
         helper.make_node("Add", ["hw", "b"], ["hb"]),
         helper.make_node("Add", ["hb", "cd"], ["y"])],
        [const("w8", rng.integers(-128, 128, (3, 1)), np.int8),
         floats("ws", [0.01, 0.02, 0.05]), const("wz", [1, -2, 0], np.int8),
         const("b32", rng.integers(-1000, 1000, (5,)), np.int32), floats("bs", 0.001)],
        smooth=False)
    # ONNX Runtime's QOperator format (QLinearMatMul, QLinearConv: the
    # weights INT8 initializers, trained fake-quantized) and its dynamic
    # quantization (DynamicQuantizeLinear's computed scale and zero point,
    # MatMulInteger and ConvInteger's INT32 products cast to FLOAT and
    # scaled; their weights stay constants). The reference sums integers;
    # kiln sums the dequantized floats, which with scales that are powers
    # of two are exact in f32 in any order, so each output rounds to the
    # same integer (other scales would round a sum within f32 error of a
    # half either way). Opset 19, as the fake quantizations above.
    act = [floats("hs", 2.0 ** -6), const("hz", 128, np.uint8)]
    add("qlinear-matmul", 19, (4, 3, 5),
        [helper.make_node("QuantizeLinear", ["h", "hs", "hz"], ["hq"]),
         helper.make_node("QLinearMatMul", ["hq", "hs", "hz", "w8", "ws", "wz",
                                            "ys", "yz"], ["yq"]),
         helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])],
        act + [const("w8", rng.integers(-128, 128, (5, 6)), np.int8),
               floats("ws", 2.0 ** -rng.integers(6, 9, 6)),
               const("wz", [0, 3, -2, 0, 1, 0], np.int8),
               floats("ys", 2.0 ** -4), const("yz", 120, np.uint8)],
        smooth=False)
    add("qlinear-conv", 19, (2, 3, 6, 6),
        [helper.make_node("QuantizeLinear", ["h", "hs", "hz"], ["hq"]),
         helper.make_node("QLinearConv", ["hq", "hs", "hz", "w8", "ws", "wz",
                                          "ys", "yz", "b32"], ["yq"],
                          pads=[1, 0, 1, 2], strides=[1, 2]),
         helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])],
        act + [const("w8", rng.integers(-128, 128, (4, 3, 3, 3)), np.int8),
               floats("ws", 2.0 ** -rng.integers(8, 11, 4)),
               const("wz", [0, 0, 0, 0], np.int8),
               const("b32", rng.integers(-3000, 3000, (4,)), np.int32),
               floats("ys", 2.0 ** -6), const("yz", 128, np.uint8)],
        smooth=False)
    add("dynamic-matmul-integer", 19, (4, 3, 5),
        [helper.make_node("DynamicQuantizeLinear", ["h"], ["hq", "hs", "hz"]),
         helper.make_node("MatMulInteger", ["hq", "w8", "hz", "wz"], ["yi"]),
         helper.make_node("Cast", ["yi"], ["yf"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["hs", "ws"], ["s"]),
         helper.make_node("Mul", ["yf", "s"], ["y"])],
        [const("w8", rng.integers(-128, 128, (5, 6)), np.int8),
         const("wz", [0, 1, -1, 0, 2, 0], np.int8), floats("ws", 0.01)],
        smooth=False)
    add("conv-integer", 19, (2, 3, 6, 6),
        [helper.make_node("QuantizeLinear", ["h", "hs", "hz"], ["hq"]),
         helper.make_node("ConvInteger", ["hq", "w8", "hz", "wz"], ["yi"],
                          pads=[1, 1, 1, 1]),
         helper.make_node("Cast", ["yi"], ["yf"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["yf", "s"], ["y"])],
        act + [const("w8", rng.integers(0, 256, (4, 3, 3, 3)), np.uint8),
               const("wz", [128, 120, 130, 128], np.uint8),
               floats("s", 1e-4)],
        smooth=False)
    # ONNX Runtime's own quantized ops (domain com.microsoft; ort_ops.py
    # gives their definition to the reference), and a UINT8 tensor through
    # MaxPool and Flatten as QOperator models keep it. QLinearSigmoid's
    # exp differs from NumPy's in the last bit, which rounds an output one
    # step (2^-8) away now and then: 2e-3.
    ms = dict(domain="com.microsoft")
    add("qlinear-add-mul", 19, (4, 3, 5),
        [helper.make_node("QuantizeLinear", ["h", "hs", "hz"], ["hq"]),
         helper.make_node("QLinearMul", ["hq", "hs", "hz", "c8", "cs", "cz", "ms", "mz"],
                          ["mq"], **ms),
         helper.make_node("QLinearAdd", ["mq", "ms", "mz", "hq", "hs", "hz", "ys", "yz"],
                          ["yq"], **ms),
         helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])],
        act + [const("c8", rng.integers(0, 256, (3, 1)), np.uint8), floats("cs", 2.0 ** -5),
               const("cz", 128, np.uint8), floats("ms", 2.0 ** -5), const("mz", 128, np.uint8),
               floats("ys", 2.0 ** -4), const("yz", 128, np.uint8)],
        smooth=False)
    add("qlinear-leaky-pool-concat", 19, (2, 3, 4, 4),
        [helper.make_node("QuantizeLinear", ["h", "hs", "hz"], ["hq"]),
         helper.make_node("QLinearLeakyRelu", ["hq", "hs", "hz", "ls", "lz"], ["lq"],
                          alpha=0.25, **ms),
         helper.make_node("QLinearGlobalAveragePool", ["lq", "ls", "lz", "ps", "pz"], ["pq"],
                          channels_last=0, **ms),
         helper.make_node("MaxPool", ["lq"], ["mq"], kernel_shape=[4, 4]),
         helper.make_node("QLinearConcat", ["ys", "yz", "pq", "ps", "pz", "mq", "ls", "lz"],
                          ["cq"], axis=1, **ms),
         helper.make_node("Flatten", ["cq"], ["fq"]),
         helper.make_node("DequantizeLinear", ["fq", "ys", "yz"], ["y"])],
        act + [floats("ls", 2.0 ** -6), const("lz", 100, np.uint8),
               floats("ps", 2.0 ** -7), const("pz", 128, np.uint8),
               floats("ys", 2.0 ** -5), const("yz", 120, np.uint8)],
        smooth=False)
    # QGemm: B transposed with per-row (N) scales and an INT32 bias, the
    # output quantized; and without y_scale, a float output.
    for name, outputs in (("qgemm", ["ys", "yz"]), ("qgemm-float", [])):
        add(name, 19, (4, 5),
            [helper.make_node("QuantizeLinear", ["h", "hs", "hz"], ["hq"]),
             helper.make_node("QGemm", ["hq", "hs", "hz", "w8", "ws", "wz", "c32"] + outputs,
                              ["yq" if outputs else "y"], transB=1, alpha=0.5, **ms)]
            + ([helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
               if outputs else []),
            act + [const("w8", rng.integers(-128, 128, (6, 5)), np.int8),
                   floats("ws", 2.0 ** -rng.integers(6, 9, 6)),
                   const("wz", [0] * 6, np.int8),
                   const("c32", rng.integers(-3000, 3000, (6,)), np.int32),
                   floats("ys", 2.0 ** -4), const("yz", 128, np.uint8)],
            smooth=False)
    # QLinearAveragePool: a 2 x 2 window with stride 2 and pads counted
    # in (each window's sum over 4 exact in f32).
    add("qlinear-average-pool", 19, (2, 3, 6, 6),
        [helper.make_node("QuantizeLinear", ["h", "hs", "hz"], ["hq"]),
         helper.make_node("QLinearAveragePool", ["hq", "hs", "hz", "ys", "yz"], ["yq"],
                          kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1],
                          count_include_pad=1, channels_last=0, **ms),
         helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])],
        act + [floats("ys", 2.0 ** -7), const("yz", 128, np.uint8)],
        smooth=False)
    add("qlinear-sigmoid", 19, (4, 3, 5),
        [helper.make_node("QuantizeLinear", ["h", "hs", "hz"], ["hq"]),
         helper.make_node("QLinearSigmoid", ["hq", "hs", "hz", "ys", "yz"], ["yq"], **ms),
         helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])],
        act + [floats("ys", 2.0 ** -8), const("yz", 0, np.uint8)],
        smooth=False, tolerance=2e-3)
    add("dynamic-qdq", 19, (4, 3, 5),
        [helper.make_node("DynamicQuantizeLinear", ["h"], ["hq", "hs", "hz"]),
         helper.make_node("DequantizeLinear", ["hq", "hs", "hz"], ["y"])],
        smooth=False)
    return out


def write(directory, spec, rng):
    name, opset, shape, nodes, inits, _, labels, _ = spec
    if labels:
        return write_loss_graph(directory, spec, rng)
    os.makedirs(os.path.join(directory, "data"), exist_ok=True)
    scale = numpy_helper.from_array(
        (1 + 0.3 * rng.standard_normal((shape[1],) + (1,) * (len(shape) - 2)))
        .astype(np.float32), "scale")
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "scale"], ["h"])] + nodes, name,
        [helper.make_tensor_value_info("x", F32, list(shape))],
        [helper.make_tensor_value_info("y", F32, None)], [scale] + inits)
    imports = [helper.make_opsetid("", opset)]
    if any(n.domain == "com.microsoft" for n in nodes):
        imports.append(helper.make_opsetid("com.microsoft", 1))
    model = helper.make_model(graph, opset_imports=imports)
    path = os.path.join(directory, "model.onnx")
    onnx.save(model, path)
    x = rng.standard_normal((8,) + tuple(shape[1:])).astype(np.float32)
    reference = ReferenceEvaluator(model, new_ops=ort_ops.OPS + [
        GlobalLpPool, LpNormalization, LRN, MaxUnpool, Scan, STFT,
                                             Upsample, hardmax_for(opset)])
    with np.errstate(divide="ignore", invalid="ignore"):  # the logs of isnan-isinf
        y = np.concatenate([reference.run(None, {"x": x[i:i + shape[0]]})[0]
                            for i in range(0, 8, shape[0])])
    targets = rng.standard_normal(y.shape).astype(np.float32)
    np.save(os.path.join(directory, "data", "x.npy"), x)
    np.save(os.path.join(directory, "data", "targets.npy"), targets)
    first = y[:shape[0]].astype(np.float64) - targets[:shape[0]]
    return float(np.mean(first * first))


def write_loss_graph(directory, spec, rng):
    """A graph whose output y is its loss, with a second input 'labels':
    the reference's loss on the first batch."""
    name, opset, shape, nodes, inits, _, (rest, low, high), _ = spec
    os.makedirs(os.path.join(directory, "data"), exist_ok=True)
    scale = numpy_helper.from_array(
        (1 + 0.3 * rng.standard_normal((shape[1],) + (1,) * (len(shape) - 2)))
        .astype(np.float32), "scale")
    batch = shape[0]
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "scale"], ["h"])] + nodes, name,
        [helper.make_tensor_value_info("x", F32, list(shape)),
         helper.make_tensor_value_info("labels", TensorProto.INT64, [batch] + list(rest))],
        [helper.make_tensor_value_info("y", F32, [])], [scale] + inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.save(model, os.path.join(directory, "model.onnx"))
    x = rng.standard_normal((8,) + tuple(shape[1:])).astype(np.float32)
    labels = rng.integers(low, high, (8,) + tuple(rest)).astype(np.int64)
    np.save(os.path.join(directory, "data", "x.npy"), x)
    np.save(os.path.join(directory, "data", "labels.npy"), labels)
    reference = ReferenceEvaluator(model)
    return float(reference.run(None, {"x": x[:batch], "labels": labels[:batch]})[0])


def run(*command):
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"failed: {' '.join(command)}")
    return proc.stdout


def main(directory, names):
    seed = int(os.environ.get("KILN_ONNX_SEED") or int.from_bytes(os.urandom(4), "little"))
    print(f"seed {seed} (KILN_ONNX_SEED={seed} reruns it)")
    rng = np.random.default_rng(seed)
    failed = 0
    for spec in variants(rng):
        name, smooth = spec[0], spec[5]
        if names and name not in names:
            continue
        where = os.path.join(directory, name)
        expected = write(where, spec, rng)
        model = os.path.join(where, "model.kiln")
        run("kiln", "import", os.path.join(where, "model.onnx"), "-o", model,
            "--loss=output" if spec[6] else "--loss=mse")
        log = run("kiln", "train", model, "--init-from=" + os.path.join(where, "model.safetensors"),
                  "--data=npy:" + os.path.join(where, "data"), "--eval-data=none",
                  "--no-shuffle", "--max-steps=1")
        match = re.search(r"step 1 loss (\S+)", log)
        if not match:
            raise SystemExit(f"{name}: no step 1 loss in\n{log}")
        got = float(match.group(1))
        error = abs(got - expected) / max(abs(expected), 1e-12)
        status = "matches" if error <= spec[7] else "DIFFERS"
        failed += error > spec[7]
        line = f"{name}: loss {status} the onnx reference ({got:.7g} vs {expected:.7g}, " \
               f"relative {error:.1e})"
        if smooth:
            check = run("kiln", "gradcheck", model)
            line += "; gradcheck PASS" if "gradcheck: PASS" in check else "; gradcheck FAILED"
            failed += "gradcheck: PASS" not in check
        print(line)
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] != "run":
        raise SystemExit(__doc__)
    sys.exit(main(sys.argv[2], sys.argv[3:]))
