"""The models of kiln import's tests written with onnx.helper rather than
exported from PyTorch: a few that import (leaky-f64: a float64 LeakyRelu;
flatten-shape: a flatten through Shape, Gather and Concat; ...) and the many
that kiln import refuses, each with the reason import-errors.test checks
(an op it does not read, attributes and shapes it cannot honor, and the
malformed models tests/fuzz's kiln-onnx-fuzzer found).

  onnx_handmade.py DIR      writes them as DIR/NAME.onnx

onnx_peer.py's `handmade DIR` command runs the same (in the process that
exports the PyTorch models)."""

import os
import sys

import numpy as np


def handmade(out):
    """Models written with onnx.helper: one to import, the others refused."""
    import onnx
    import onnx.numpy_helper
    from onnx import TensorProto, helper

    def save(name, nodes, inputs, outputs, inits=(), opset=17, microsoft=False):
        graph = helper.make_graph(nodes, name, inputs, outputs, list(inits))
        imports = [helper.make_opsetid("", opset)]
        if microsoft:
            imports.append(helper.make_opsetid("com.microsoft", 1))
        model = helper.make_model(graph, opset_imports=imports)
        onnx.save(model, os.path.join(out, name + ".onnx"))

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3, 8, 8])
    y4 = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3, 8, 8])
    # NonZero: an op kiln import does not read (its shape depends on data).
    w4 = helper.make_tensor("w4", TensorProto.FLOAT, [3, 1, 1], [1.0, 1.0, 1.0])
    grid = helper.make_tensor("grid", TensorProto.FLOAT, [4, 8, 8, 2], [0.0] * 512)
    save("unread-op", [helper.make_node("Mul", ["x", "w4"], ["h"], name="scale"),
                       helper.make_node("NonZero", ["h"], ["y"], name="nonzero1")],
         [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])], [w4])
    # Variants of the ops kiln import reads that it refuses, each after a
    # trained scale.
    y_any = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)

    def refused(name, nodes, inits=(), opset=17, microsoft=False):
        save(name, [helper.make_node("Mul", ["x", "w4"], ["h"], name="scale")] + nodes,
             [x], [y_any], [w4] + list(inits), opset=opset, microsoft=microsoft)

    refused("einsum-diagonal", [helper.make_node("Einsum", ["h"], ["y"], name="es",
                                                 equation="ncch->nch")])
    refused("einsum-shapes", [helper.make_node("Einsum", ["h", "m"], ["y"], name="es",
                                               equation="nchw,wk->nchk")],
            [helper.make_tensor("m", TensorProto.FLOAT, [5, 2], [0.0] * 10)])
    sizes = helper.make_tensor("sizes", TensorProto.INT64, [4], [4, 3, 4, 4])
    refused("resize-crop", [helper.make_node(
        "Resize", ["h", "", "", "sizes"], ["y"], name="resize", mode="linear",
        coordinate_transformation_mode="tf_crop_and_resize")], [sizes])
    pads = helper.make_tensor("pads", TensorProto.INT64, [8], [0, 0, 8, 0, 0, 0, 0, 0])
    refused("pad-reflect-wide", [helper.make_node("Pad", ["h", "pads"], ["y"], name="pad",
                                                  mode="reflect")], [pads])
    wt = helper.make_tensor("wt", TensorProto.FLOAT, [3, 2, 3, 3], [0.1] * 54)
    refused("convtranspose-padding", [helper.make_node(
        "ConvTranspose", ["h", "wt"], ["y"], name="up", strides=[2, 2],
        output_padding=[2, 0])], [wt])
    split = helper.make_tensor("split", TensorProto.INT64, [2], [3, 4])
    refused("split-sizes", [helper.make_node("Split", ["h", "split"], ["y", "z"],
                                             name="split", axis=2)], [split])
    starts = helper.make_tensor("starts", TensorProto.INT64, [1], [5])
    ends = helper.make_tensor("ends", TensorProto.INT64, [1], [2])
    refused("slice-empty", [helper.make_node("Slice", ["h", "starts", "ends"], ["y"],
                                             name="slice")], [starts, ends])
    # A symbolic batch.
    xs = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 10])
    ys = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])
    scale10 = helper.make_tensor("scale", TensorProto.FLOAT, [10], [0.5] * 10)
    save("dynamic", [helper.make_node("Mul", ["x", "scale"], ["y"], name="scale")], [xs], [ys],
         [scale10])
    # Dropout in training mode (ratio 0.5, training_mode true).
    ratio = helper.make_tensor("ratio", TensorProto.FLOAT, [], [0.5])
    on = helper.make_tensor("on", TensorProto.BOOL, [], [True])
    save("dropout-train", [helper.make_node("Mul", ["x", "scale"], ["h"], name="scale"),
                           helper.make_node("Dropout", ["h", "ratio", "on"], ["y"],
                                            name="drop")],
         [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 10])],
         [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 10])],
         [scale10, ratio, on])
    # A float64 input multiplied by a float32 weight: ONNX's Mul takes one
    # type (a model exported after .double() has DOUBLE weights too).
    save("double-input", [helper.make_node("Mul", ["x", "scale"], ["y"], name="scale")],
         [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [4, 10])],
         [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [4, 10])], [scale10])
    # No floating-point initializers: nothing to train.
    save("no-parameters", [helper.make_node("Relu", ["x"], ["y"], name="relu")], [xs], [ys])
    # Two outputs.
    x2 = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 10])
    y2 = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 10])
    z2 = helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 10])
    save("two-outputs", [helper.make_node("Relu", ["x"], ["y"]),
                         helper.make_node("Tanh", ["x"], ["z"])], [x2], [y2, z2])
    # A pool whose pads are as wide as its window; a transposed convolution
    # with SAME pads.
    refused("pool-pads", [helper.make_node("MaxPool", ["h"], ["y"], name="pool",
                                           kernel_shape=[3, 3], pads=[1, 3, 1, 0])])
    refused("convtranspose-same", [helper.make_node(
        "ConvTranspose", ["h", "wt"], ["y"], name="up", strides=[2, 2],
        auto_pad="SAME_UPPER", output_shape=[20, 16])], [wt])
    # A convolution over four spatial axes: X [4, 3, 2, 4, 2, 4].
    four = helper.make_tensor("four", TensorProto.INT64, [6], [4, 3, 2, 4, 2, 4])
    kernel4 = helper.make_tensor("kernel4", TensorProto.FLOAT, [2, 3, 1, 1, 1, 1], [0.1] * 6)
    refused("conv-4d", [
        helper.make_node("Reshape", ["h", "four"], ["v"], name="four"),
        helper.make_node("Conv", ["v", "kernel4"], ["y"], name="conv")], [four, kernel4])
    # GridSample along one axis (opset 20): X [4, 3, 64], grid [4, 5, 1].
    line = helper.make_tensor("line", TensorProto.INT64, [3], [4, 3, 64])
    grid1 = helper.make_tensor("grid1", TensorProto.FLOAT, [4, 5, 1], [0.0] * 20)
    refused("gridsample-1d", [
        helper.make_node("Reshape", ["h", "line"], ["v"], name="line"),
        helper.make_node("GridSample", ["v", "grid1"], ["y"], name="gs")],
        [line, grid1], opset=20)
    # Groups that do not divide the channels; a GatherND whose batch
    # dimensions differ from the data's; a OneHot whose depth is computed.
    gscale = helper.make_tensor("gscale", TensorProto.FLOAT, [2], [1.0, 1.0])
    refused("group-norm-groups", [helper.make_node(
        "GroupNormalization", ["h", "gscale", "gscale"], ["y"], name="gn", num_groups=2)],
        [gscale], opset=18)
    nd = helper.make_tensor("nd", TensorProto.INT64, [3, 1], [0, 1, 2])
    refused("gather-nd-batch", [helper.make_node("GatherND", ["h", "nd"], ["y"], name="gnd",
                                                 batch_dims=1)], [nd], opset=13)
    hot = helper.make_tensor("hot", TensorProto.INT64, [4], [0, 1, 2, 3])
    onoff = helper.make_tensor("onoff", TensorProto.FLOAT, [2], [0.0, 1.0])
    refused("one-hot-depth", [
        helper.make_node("ReduceMax", ["h"], ["m"], name="max", keepdims=0),
        helper.make_node("OneHot", ["hot", "m", "onoff"], ["y"], name="oh")],
        [hot, onoff], opset=13)
    # Blocked quantization (opset 21); a QuantizeLinear's integers added
    # to; a DequantizeLinear of integers computed from data.
    qscale = helper.make_tensor("qs", TensorProto.FLOAT, [], [0.1])
    refused("quantize-blocked", [
        helper.make_node("QuantizeLinear", ["h", "qsb"], ["q"], name="quant", axis=1,
                         block_size=2),
        helper.make_node("DequantizeLinear", ["q", "qsb"], ["y"], name="dequant", axis=1,
                         block_size=2)],
        [helper.make_tensor("qsb", TensorProto.FLOAT, [4, 2, 8, 8], [0.1] * 512)], opset=21)
    refused("quantized-read", [
        helper.make_node("QuantizeLinear", ["h", "qs"], ["q"], name="quant"),
        helper.make_node("Add", ["q", "q"], ["y"], name="add")], [qscale], opset=13)
    refused("dequantize-data", [
        helper.make_node("ArgMax", ["h"], ["a"], name="argmax", axis=1),
        helper.make_node("DequantizeLinear", ["a", "qs"], ["y"], name="dequant")],
        [qscale], opset=13)
    # QOperator and dynamic quantization: a QLinearConv whose x_scale is
    # per channel (its bias's scale is x_scale x w_scale, per tensor in
    # x); a MatMulInteger of float data; quantized integers cast to an
    # integer type; a DequantizeLinear of DynamicQuantizeLinear's integers
    # with its computed scale and a constant zero point.
    w8 = helper.make_tensor("w8c", TensorProto.INT8, [3, 3, 1, 1], [1] * 9)
    refused("qlinearconv-x-per-channel", [
        helper.make_node("QuantizeLinear", ["h", "qs"], ["q"], name="quant"),
        helper.make_node("QLinearConv", ["q", "qs3", "", "w8c", "qs", "", "qs", "",
                                         "b32"], ["yq"], name="qconv"),
        helper.make_node("DequantizeLinear", ["yq", "qs"], ["y"], name="dequant")],
        [qscale, w8, helper.make_tensor("qs3", TensorProto.FLOAT, [3], [0.1] * 3),
         helper.make_tensor("b32", TensorProto.INT32, [3], [1, 2, 3])], opset=13)
    # An ArgMax of a scalar (a Size), found by tests/fuzz's
    # kiln-onnx-fuzzer: it read the scalar's shape at axis 0.
    refused("argmax-scalar", [
        helper.make_node("Size", ["h"], ["n"], name="size"),
        helper.make_node("ArgMax", ["n"], ["i"], name="argmax"),
        helper.make_node("Cast", ["i"], ["f"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Mul", ["h", "f"], ["y"], name="mul")], opset=13)
    refused("qlinearmatmul-b-scales", [
        helper.make_node("QuantizeLinear", ["h", "qs"], ["q"], name="quant"),
        helper.make_node("QLinearMatMul", ["q", "qs", "", "w8m", "qs3", "", "qs", ""],
                         ["yq"], name="qmm"),
        helper.make_node("DequantizeLinear", ["yq", "qs"], ["y"], name="dequant")],
        [qscale, helper.make_tensor("qs3", TensorProto.FLOAT, [3], [0.1] * 3),
         helper.make_tensor("w8m", TensorProto.INT8, [8, 2], [1] * 16)], opset=13)
    # ONNX Runtime's ops: one of its domain kiln import does not read
    # (QLinearSoftmax), one named in ONNX's domain, NHWC pooling; and a
    # Concat of quantized integers and float values.
    ms = dict(domain="com.microsoft")
    quant = helper.make_node("QuantizeLinear", ["h", "qs"], ["q"], name="quant")
    dequant = helper.make_node("DequantizeLinear", ["yq", "qs"], ["y"], name="dequant")
    refused("ms-unread", [quant, helper.make_node(
        "QLinearSoftmax", ["q", "qs", "", "qs"], ["yq"], name="qsoftmax", **ms), dequant],
        [qscale], opset=13, microsoft=True)
    refused("ms-domain", [quant, helper.make_node(
        "QLinearAdd", ["q", "qs", "", "q", "qs", "", "qs"], ["yq"], name="qadd"), dequant],
        [qscale], opset=13)
    refused("ms-channels-last", [quant, helper.make_node(
        "QLinearGlobalAveragePool", ["q", "qs", "", "qs"], ["yq"], name="qgap",
        channels_last=1, **ms), dequant], [qscale], opset=13, microsoft=True)
    refused("quantized-concat-float", [quant, helper.make_node(
        "Concat", ["q", "h"], ["c"], name="concat", axis=1),
        helper.make_node("DequantizeLinear", ["c", "qs"], ["y"], name="dequant")],
        [qscale], opset=13)
    refused("matmul-integer-float", [
        helper.make_node("MatMulInteger", ["h", "w8m"], ["yi"], name="mmi"),
        helper.make_node("Cast", ["yi"], ["y"], name="cast", to=TensorProto.FLOAT)],
        [helper.make_tensor("w8m", TensorProto.INT8, [8, 2], [1] * 16)], opset=13)
    refused("quantized-cast-int", [
        helper.make_node("QuantizeLinear", ["h", "qs"], ["q"], name="quant"),
        helper.make_node("Cast", ["q"], ["qi"], name="cast", to=TensorProto.INT64),
        helper.make_node("Cast", ["qi"], ["y"], name="back", to=TensorProto.FLOAT)],
        [qscale], opset=13)
    refused("dynamic-dequantize-zero-constant", [
        helper.make_node("DynamicQuantizeLinear", ["h"], ["q", "s", "z"], name="dql"),
        helper.make_node("DequantizeLinear", ["q", "s", "z8"], ["y"], name="dequant")],
        [helper.make_tensor("z8", TensorProto.UINT8, [], [128])], opset=13)
    # One INT8 initializer dequantized at two scales: which is the trained
    # parameter's start?
    refused("dequantize-twice", [
        helper.make_node("DequantizeLinear", ["w8", "qs"], ["d1"], name="dequant1"),
        helper.make_node("DequantizeLinear", ["w8", "qs2"], ["d2"], name="dequant2"),
        helper.make_node("Add", ["h", "d1"], ["h1"], name="add1"),
        helper.make_node("Add", ["h1", "d2"], ["y"], name="add2")],
        [qscale, helper.make_tensor("qs2", TensorProto.FLOAT, [], [0.2]),
         helper.make_tensor("w8", TensorProto.INT8, [8], list(range(-4, 4)))], opset=13)
    # A Multinomial over a 4-D tensor (ONNX's is [batch, classes]).
    refused("multinomial-rank", [
        helper.make_node("Multinomial", ["h"], ["y"], name="draw", sample_size=3)])
    # A Range whose limit is computed from data: its length would be too.
    # Shapes past what any model has (found by tests/fuzz's
    # kiln-onnx-fuzzer: each allocated or looped over the extent, and ran
    # out of memory or time): an edge Pad of 2^40 rows, Resize sizes past
    # 2^31, a linear Resize whose matrix passes 2^24 entries, a nearest one
    # of more than 2^24 positions, an AffineGrid of 2^40 points.
    int64 = TensorProto.INT64
    refused("pad-huge", [helper.make_node("Pad", ["h", "pads"], ["y"], name="pad",
                                          mode="edge")],
            [helper.make_tensor("pads", int64, [8], [0, 0, 0, 1 << 40, 0, 0, 0, 0])])
    for name, mode, width in (("resize-huge", "linear", 1 << 40),
                              ("resize-matrix", "linear", 1 << 22),
                              ("resize-nearest", "nearest", 1 << 25)):
        refused(name, [helper.make_node("Resize", ["h", "", "", "sizes"], ["y"],
                                        name="resize", mode=mode)],
                [helper.make_tensor("sizes", int64, [4], [4, 3, 8, width])], opset=13)
    refused("affine-grid-huge", [helper.make_node("AffineGrid", ["theta", "size"], ["y"],
                                                  name="grid")],
            [helper.make_tensor("theta", TensorProto.FLOAT, [4, 2, 3], [0.5] * 24),
             helper.make_tensor("size", int64, [4], [4, 3, 1 << 20, 1 << 20])], opset=20)
    # A Mul of one input, on a shape (known at import: it read past the
    # node's inputs).
    refused("fold-one-input", [helper.make_node("Shape", ["h"], ["s"], name="shape"),
                               helper.make_node("Mul", ["s"], ["m"], name="mul1"),
                               helper.make_node("Reshape", ["h", "m"], ["y"], name="reshape")])
    # A Slice of a shape without its ends, a Transpose of no input (both
    # read past the node's inputs), a ConstantOfShape of 2^60 elements.
    refused("fold-slice-no-ends", [
        helper.make_node("Shape", ["h"], ["s"], name="shape"),
        helper.make_node("Slice", ["s", "starts"], ["m"], name="slice"),
        helper.make_node("Reshape", ["h", "m"], ["y"], name="reshape")],
        [helper.make_tensor("starts", int64, [1], [0])], opset=13)
    refused("transpose-no-input", [helper.make_node("Transpose", [""], ["y"], name="t")])
    refused("constant-of-shape-huge", [
        helper.make_node("ConstantOfShape", ["big"], ["c"], name="fill"),
        helper.make_node("Add", ["h", "c"], ["y"], name="add")],
        [helper.make_tensor("big", int64, [2], [1 << 30, 1 << 30])], opset=13)
    # An initializer of dimensions [-1, -4] holding 4 floats: their product
    # matched its bytes, and the negative sizes went on into the importer.
    negative = TensorProto()
    negative.name, negative.data_type = "neg", TensorProto.FLOAT
    negative.dims.extend([-1, -4])
    negative.raw_data = np.zeros(4, np.float32).tobytes()
    refused("negative-dims", [helper.make_node("Add", ["h", "neg"], ["y"], name="add")],
            [negative])
    # Unsqueeze axes [1, 1] (it read past its input's dimensions).
    refused("unsqueeze-twice", [helper.make_node("Unsqueeze", ["h", "uaxes"], ["y"], name="unsq")],
            [helper.make_tensor("uaxes", int64, [2], [1, 1])], opset=13)
    # A HannWindow of 2^34 values, evaluated at import (out of memory).
    refused("window-huge", [helper.make_node("HannWindow", ["wsize"], ["w"], name="hann"),
                            helper.make_node("Mul", ["h", "w"], ["y"], name="mul")],
            [helper.make_tensor("wsize", int64, [], [1 << 34])])
    # An input of 2^62 elements.
    save("input-huge", [helper.make_node("Relu", ["xh"], ["y"], name="relu")],
         [helper.make_tensor_value_info("xh", TensorProto.FLOAT, [1 << 31, 1 << 31])],
         [y_any])
    # A MelWeightMatrix of 2^40 bins (out of memory).
    refused("mel-huge", [
        helper.make_node("MelWeightMatrix", ["bins", "dft", "rate", "low", "high"], ["mel"],
                         name="mel"),
        helper.make_node("Add", ["h", "mel"], ["y"], name="add")],
        [helper.make_tensor("bins", int64, [], [1 << 40]),
         helper.make_tensor("dft", int64, [], [32]),
         helper.make_tensor("rate", int64, [], [8000]),
         helper.make_tensor("low", TensorProto.FLOAT, [], [100.0]),
         helper.make_tensor("high", TensorProto.FLOAT, [], [3500.0])])
    # An EyeLike of an input [4096, 16384]: a constant of 2^26 values.
    save("eye-huge", [helper.make_node("EyeLike", ["xe"], ["y"], name="eye")],
         [helper.make_tensor_value_info("xe", TensorProto.FLOAT, [4096, 16384])], [y_any])
    refused("range-data", [
        helper.make_node("ReduceMax", ["h"], ["m"], name="max", keepdims=0),
        helper.make_node("Range", ["zero", "m", "one"], ["y"], name="range")],
        [helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
         helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])], opset=13)
    # A TopK of K = 300 over 12288 elements: K above 256 argmax rounds, and
    # 12288^2 pairs to rank, past 2^24.
    refused("topk-wide", [
        helper.make_node("Expand", ["h", "times16"], ["e"], name="expand"),
        helper.make_node("Reshape", ["e", "row"], ["r"], name="row"),
        helper.make_node("TopK", ["r", "k300"], ["y", "i"], name="topk")],
        [helper.make_tensor("times16", TensorProto.INT64, [5], [16, 4, 3, 8, 8]),
         helper.make_tensor("row", TensorProto.INT64, [2], [1, 12288]),
         helper.make_tensor("k300", TensorProto.INT64, [1], [300])])
    # A DFT of 3072 points: a matrix of 3072 x 6144 entries, past 2^24.
    refused("dft-long", [
        helper.make_node("Expand", ["h", "times4"], ["e"], name="expand"),
        helper.make_node("Reshape", ["e", "signal"], ["r"], name="signal"),
        helper.make_node("DFT", ["r"], ["y"], name="dft")],
        [helper.make_tensor("times4", TensorProto.INT64, [5], [4, 4, 3, 8, 8]),
         helper.make_tensor("signal", TensorProto.INT64, [3], [1, 3072, 1])])
    # Det of a 96 x 96 matrix: more columns than kiln import unrolls.
    refused("det-large", [
        helper.make_node("Expand", ["h", "times12"], ["e"], name="expand"),
        helper.make_node("Reshape", ["e", "square"], ["r"], name="square"),
        helper.make_node("Det", ["r"], ["y"], name="det")],
        [helper.make_tensor("times12", TensorProto.INT64, [5], [12, 4, 3, 8, 8]),
         helper.make_tensor("square", TensorProto.INT64, [2], [96, 96])])
    # A scatter reduction ONNX does not define.
    rows = helper.make_tensor("rows", TensorProto.INT64, [4, 3, 8, 8], [0] * 768)
    refused("scatter-mean", [helper.make_node("ScatterElements", ["h", "rows", "h"], ["y"],
                                              name="scatter", reduction="mean")],
            [rows], opset=18)
    # Control flow kiln cannot take apart: a Loop whose condition depends on
    # data; an If on data whose branches give different shapes; an op it
    # does not read inside a Loop's body (the error says which iteration).
    def body_graph(name, nodes, inputs, outputs):
        return helper.make_graph(
            nodes, name, [helper.make_tensor_value_info(i, t, s) for i, t, s in inputs],
            [helper.make_tensor_value_info(o, 0, None) for o in outputs])

    loop_inputs = [("i", TensorProto.INT64, []), ("c", TensorProto.BOOL, []),
                   ("s", TensorProto.FLOAT, None)]
    minus = helper.make_tensor("minus", TensorProto.FLOAT, [], [-1.0])
    trips = helper.make_tensor("trips", TensorProto.INT64, [], [3])
    refused("loop-dynamic", [
        helper.make_node("ReduceSum", ["h"], ["total"], name="total", keepdims=0),
        helper.make_node("Greater", ["total", "minus"], ["go"], name="go"),
        helper.make_node("Loop", ["", "go", "h"], ["y"], name="loop", body=body_graph(
            "body", [helper.make_node("Identity", ["c"], ["c_out"]),
                     helper.make_node("Tanh", ["s"], ["s_out"])],
            loop_inputs, ["c_out", "s_out"]))], [minus])
    refused("if-shapes", [
        helper.make_node("ReduceSum", ["h"], ["total"], name="total", keepdims=0),
        helper.make_node("Greater", ["total", "minus"], ["go"], name="go"),
        helper.make_node("If", ["go"], ["y"], name="if", then_branch=body_graph(
            "then", [helper.make_node("Tanh", ["h"], ["t"])], [], ["t"]),
            else_branch=body_graph("else", [helper.make_node(
                "ReduceMean", ["h"], ["e"], axes=[2, 3])], [], ["e"]))], [minus])
    refused("loop-body-op", [
        helper.make_node("Loop", ["trips", "", "h"], ["y"], name="loop", body=body_graph(
            "body", [helper.make_node("Identity", ["c"], ["c_out"]),
                     helper.make_node("NonZero", ["s"], ["s_out"], name="nonzero")],
            loop_inputs, ["c_out", "s_out"]))], [trips])
    # Gemm with mismatched inner dimensions.
    wg = helper.make_tensor("fc.weight", TensorProto.FLOAT, [5, 7], [0.0] * 35)
    yg = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 5])
    save("gemm-shape", [helper.make_node("Gemm", ["x", "fc.weight"], ["y"], name="fc",
                                         transB=1)], [x2], [yg], [wg])
    # A node reading a tensor nobody produces.
    save("dangling", [helper.make_node("Add", ["x", "nowhere"], ["y"], name="add")], [x2], [y2])
    # Weights in an external file that is missing.
    we = onnx.numpy_helper.from_array(np.zeros((10, 10), np.float32), "fc.weight")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "fc.weight"], ["y"])],
                              "external", [x2], [y2], [we])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, os.path.join(out, "external.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location="external.weights", size_threshold=0)
    os.remove(os.path.join(out, "external.weights"))
    # A 3-D output under the default cross-entropy loss.
    x3 = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 5, 6])
    y3 = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 5, 6])
    scale6 = helper.make_tensor("scale", TensorProto.FLOAT, [6], [0.5] * 6)
    save("rank3", [helper.make_node("Mul", ["x", "scale"], ["y"])], [x3], [y3], [scale6])
    # A float64 model: a DOUBLE input and weight, a LeakyRelu whose alpha
    # (0.1) ONNX keeps in f32, and a Selu with the f32 constants PyTorch's
    # exporters write for nn.SELU.
    x64 = helper.make_tensor_value_info("x", TensorProto.DOUBLE, [4, 6])
    y64 = helper.make_tensor_value_info("y", TensorProto.DOUBLE, [4, 6])
    w64 = helper.make_tensor("w", TensorProto.DOUBLE, [6], [0.1 * (k + 1) for k in range(6)])
    save("leaky-f64", [helper.make_node("Mul", ["x", "w"], ["h"]),
                       helper.make_node("LeakyRelu", ["h"], ["l"], alpha=0.1),
                       helper.make_node("Selu", ["l"], ["y"], alpha=1.6732632423543772,
                                        gamma=1.0507009873554805)],
         [x64], [y64], [w64])
    # A Reshape whose shape is computed from data.
    save("data-shape", [helper.make_node("Cast", ["x"], ["s"], to=TensorProto.INT64),
                        helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape")],
         [x2], [y2])
    # Opset 11 softmax over the middle dimension of a rank-3 input.
    save("softmax11", [helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=1)],
         [x3], [y3], opset=11)
    # External data outside the model's directory.
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "fc.weight"], ["y"])],
                              "escape", [x2], [y2], [we])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.graph.initializer[0].data_location = TensorProto.EXTERNAL
    model.graph.initializer[0].ClearField("raw_data")
    entry = model.graph.initializer[0].external_data.add()
    entry.key, entry.value = "location", "../secret.bin"
    with open(os.path.join(out, "escape.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    # A flatten as the TorchScript exporter writes x.view(x.size(0), -1):
    # Shape, Gather, Unsqueeze, Concat, Reshape.
    xf = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3, 2, 2])
    yf = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 5])
    wf = helper.make_tensor("fc.weight", TensorProto.FLOAT, [5, 12], [0.01] * 60)
    zero = helper.make_tensor("zero", TensorProto.INT64, [], [0])
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [0])
    rest = helper.make_tensor("rest", TensorProto.INT64, [1], [-1])
    save("flatten-shape", [
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], name="batch", axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes"], ["batch1"], name="unsqueeze"),
        helper.make_node("Concat", ["batch1", "rest"], ["dims"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "dims"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "fc.weight"], ["y"], name="fc", transB=1)],
        [xf], [yf], [wf, zero, axes, rest])
    print("wrote the handmade models")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: onnx_handmade.py DIR")
    handmade(sys.argv[1])
