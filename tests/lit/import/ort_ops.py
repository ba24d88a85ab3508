"""ONNX Runtime's quantized ops of domain com.microsoft, for
onnx_variants.py (onnx.reference has none): each as ONNX Runtime's
ContribOperators.md defines it, the float op of the dequantized inputs,
quantized by the output's scale and zero point (rounding halves to even,
saturating to the zero point's type). Dequantizing, the op and dividing by
the scale are float32, as ONNX Runtime computes them."""

import numpy as np
from onnx.reference.op_run import OpRun


def dequantize(x, scale, zero=None):
    x = x.astype(np.float32)
    if zero is not None:
        x = x - zero.astype(np.float32)
    return (x * scale.astype(np.float32)).astype(np.float32)


def quantize(y, scale, zero, like):
    dtype = zero.dtype if zero is not None else like.dtype
    info = np.iinfo(dtype)
    q = np.rint(y.astype(np.float32) / scale.astype(np.float32))
    if zero is not None:
        q = q + zero.astype(np.float32)
    return (np.clip(q, info.min, info.max).astype(dtype),)


class QLinearAdd(OpRun):
    op_domain = "com.microsoft"

    def _run(self, a, a_scale, a_zero, b, b_scale, b_zero, c_scale, c_zero=None):
        return quantize(dequantize(a, a_scale, a_zero) + dequantize(b, b_scale, b_zero),
                        c_scale, c_zero, a)


class QLinearMul(OpRun):
    op_domain = "com.microsoft"

    def _run(self, a, a_scale, a_zero, b, b_scale, b_zero, c_scale, c_zero=None):
        return quantize(dequantize(a, a_scale, a_zero) * dequantize(b, b_scale, b_zero),
                        c_scale, c_zero, a)


class QLinearLeakyRelu(OpRun):
    op_domain = "com.microsoft"

    def _run(self, x, x_scale, x_zero, y_scale, y_zero=None, alpha=None):
        alpha = np.float32(getattr(self, "alpha", 0.01) if alpha is None else alpha)
        f = dequantize(x, x_scale, x_zero)
        return quantize(np.where(f > 0, f, f * alpha), y_scale, y_zero, x)


class QLinearSigmoid(OpRun):
    op_domain = "com.microsoft"

    def _run(self, x, x_scale, x_zero, y_scale, y_zero=None):
        f = dequantize(x, x_scale, x_zero)
        return quantize((1 / (1 + np.exp(-f))).astype(np.float32), y_scale, y_zero, x)


class QLinearGlobalAveragePool(OpRun):
    op_domain = "com.microsoft"

    def _run(self, x, x_scale, x_zero, y_scale, y_zero=None, channels_last=None):
        f = dequantize(x, x_scale, x_zero)
        mean = f.mean(axis=tuple(range(2, f.ndim)), keepdims=True, dtype=np.float32)
        return quantize(mean, y_scale, y_zero, x)


class QLinearAveragePool(OpRun):
    """The float AveragePool of the dequantized X as onnx.reference computes
    it (its window attributes), quantized."""
    op_domain = "com.microsoft"

    def _run(self, x, x_scale, x_zero, y_scale, y_zero=None, **attributes):
        import onnx
        from onnx import helper
        from onnx.reference import ReferenceEvaluator
        f = dequantize(x, x_scale, x_zero)
        kept = {a.name: helper.get_attribute_value(a) for a in self.onnx_node.attribute
                if a.name != "channels_last"}
        node = helper.make_node("AveragePool", ["x"], ["y"], **kept)
        graph = helper.make_graph([node], "pool",
                                  [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, None)],
                                  [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
        pooled = ReferenceEvaluator(model).run(None, {"x": f})[0]
        return quantize(pooled, y_scale, y_zero, x)


class QLinearConcat(OpRun):
    op_domain = "com.microsoft"

    def _run(self, y_scale, y_zero, *triples, axis=None):
        axis = self.axis if axis is None else axis
        parts = [dequantize(triples[i], triples[i + 1], triples[i + 2])
                 for i in range(0, len(triples), 3)]
        return quantize(np.concatenate(parts, axis=axis), y_scale, y_zero, triples[0])


class QGemm(OpRun):
    """alpha A' B' + C, C an INT32 bias of scale alpha x a_scale x b_scale;
    quantized when y_scale is given, else float."""
    op_domain = "com.microsoft"

    def _run(self, a, a_scale, a_zero, b, b_scale, b_zero, c=None, y_scale=None,
             y_zero=None, alpha=None, transA=None, transB=None):
        alpha = np.float32(getattr(self, "alpha", 1.0) if alpha is None else alpha)
        fa = dequantize(a, a_scale, a_zero)
        if getattr(self, "transA", 0) if transA is None else transA:
            fa = fa.T
        trans_b = getattr(self, "transB", 0) if transB is None else transB
        if b_scale.size > 1:  # per column: along N
            b_scale = b_scale.reshape((-1, 1) if trans_b else (1, -1))
            b_zero = None if b_zero is None else b_zero.reshape(b_scale.shape)
        fb = dequantize(b, b_scale, b_zero)
        if trans_b:
            fb = fb.T
        y = (alpha * (fa @ fb)).astype(np.float32)
        if c is not None:
            y = y + dequantize(c, (alpha * a_scale.astype(np.float32)
                                   * b_scale.reshape(-1).astype(np.float32)))
        if y_scale is None:
            return (y.astype(np.float32),)
        return quantize(y, y_scale, y_zero, a)


OPS = [QLinearAdd, QLinearMul, QLinearLeakyRelu, QLinearSigmoid, QLinearGlobalAveragePool,
       QLinearAveragePool, QLinearConcat, QGemm]
