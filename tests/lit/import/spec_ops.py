"""The specification's versions of onnx.reference ops, for
onnx_variants.py: where onnx.reference departs from ONNX's specification
(LpNormalization, LRN, MaxUnpool with output_shape, Hardmax before opset
13, Scan's axes and directions), reads less than it (STFT of a [batch,
length] signal, opset 7's Upsample scales attribute) or lacks the op
(GlobalLpPool)."""

import numpy as np
import onnx
from onnx.reference.op_run import OpRun
from onnx.reference.ops import op_max_unpool, op_scan, op_stft


class LpNormalization(OpRun):
    """The operator as its specification says: X over the p-norm of |X|
    (onnx.reference's own sums X itself for p = 1)."""

    def _run(self, x, axis=None, p=None):
        axis = self.axis if axis is None else axis
        p = self.p if p is None else p
        norm = np.power(np.power(np.abs(x), p).sum(axis=axis, keepdims=True), 1.0 / p)
        return ((x / norm).astype(x.dtype),)


def hardmax_for(opset):
    """Hardmax as the specification of |opset| says: onnx.reference's takes
    the axis alone (opset 13 on), where before opset 13 X is the matrix of
    its dimensions before the axis by the rest."""

    class Hardmax(OpRun):
        def _run(self, x, axis=None):
            axis = (self.axis if axis is None else axis) % x.ndim
            rows = x.reshape(int(np.prod(x.shape[:axis])), -1) if opset < 13 else x
            along = 1 if opset < 13 else axis
            y = np.zeros_like(rows)
            np.put_along_axis(y, np.expand_dims(np.argmax(rows, axis=along), along), 1,
                              axis=along)
            return (y.reshape(x.shape),)

    return Hardmax


class STFT(op_stft.STFT):
    """onnx.reference's STFT, also of a signal [batch, length], which ONNX
    Runtime reads as real and PyTorch's TorchScript exporter writes."""

    def _run(self, x, *args, **kwargs):
        return super()._run(x[..., np.newaxis] if x.ndim == 2 else x, *args, **kwargs)


class LRN(OpRun):
    """LRN as its specification says: onnx.reference's sums the squares
    only for as many channels as the batch has (its loop runs over
    x.shape[0])."""

    def _run(self, x, alpha=None, beta=None, bias=None, size=None):
        alpha = self.alpha if alpha is None else alpha
        beta = self.beta if beta is None else beta
        bias = self.bias if bias is None else bias
        size = self.size if size is None else size
        channels = x.shape[1]
        square_sum = np.zeros(x.shape, dtype=np.float64)
        for c in range(channels):
            begin = max(0, c - (size - 1) // 2)
            end = min(channels, c + -(-(size - 1) // 2) + 1)
            square_sum[:, c] = np.sum(x[:, begin:end].astype(np.float64) ** 2, axis=1)
        return ((x / (bias + alpha / size * square_sum) ** beta).astype(x.dtype),)


class MaxUnpool(op_max_unpool.MaxUnpool):
    """With output_shape, X written at Indices into zeros of that shape, as
    ONNX Runtime and PyTorch's max_unpool with output_size write it (the
    indices of a MaxPool count positions in the tensor it pooled);
    onnx.reference's writes into the inferred shape and pads, which such
    indices overrun."""

    def _run(self, x, indices, output_shape=None, **kwargs):
        if output_shape is None:
            return super()._run(x, indices, **kwargs)
        y = np.zeros(int(np.prod(output_shape)), dtype=x.dtype)
        y[indices.ravel()] = x.ravel()
        return (y.reshape(tuple(output_shape)),)


class GlobalLpPool(OpRun):
    """The specification's GlobalLpPool, which onnx.reference lacks: the
    p-norm of each channel's spatial elements."""

    def _run(self, x, p=None):
        p = self.p if p is None else p
        axes = tuple(range(2, x.ndim))
        y = np.power(np.power(np.abs(x.astype(np.float64)), p).sum(axis=axes, keepdims=True),
                     1.0 / p)
        return (y.astype(x.dtype),)


class Upsample(OpRun):
    """onnx.reference's nearest Upsample (each element repeated by an
    integer scale), also with opset 7's scales attribute, which its own
    does not read."""

    def _run(self, x, scales=None, mode=None):
        scales = self.scales if scales is None else scales
        r = x
        for axis, s in enumerate(np.asarray(scales)):
            assert s == int(s) and (mode or self.mode) == "nearest"
            r = np.repeat(r, int(s), axis=axis)
        return (r,)


class Scan(op_scan.Scan):
    """Scan with any scan axes and directions, as the specification says:
    the inputs' scan axes moved to the front (reversed for direction 1),
    onnx.reference's Scan (which takes axis 0 forward only), and the
    outputs' stacked axis moved back (reversed for direction 1)."""

    GENERAL = ("scan_input_axes", "scan_input_directions", "scan_output_axes",
               "scan_output_directions")

    def __init__(self, onnx_node, run_params):
        node = onnx.NodeProto()
        node.CopyFrom(onnx_node)
        self.general = {a.name: list(a.ints) for a in node.attribute if a.name in self.GENERAL}
        kept = [a for a in node.attribute if a.name not in self.GENERAL]
        del node.attribute[:]
        node.attribute.extend(kept)
        super().__init__(node, run_params)

    def _run(self, *args, **kwargs):
        m = self.num_scan_inputs
        n = len(args) - m
        get = lambda name, count: self.general.get(name) or [0] * count
        args = list(args)
        for j, (axis, direction) in enumerate(zip(get("scan_input_axes", m),
                                                  get("scan_input_directions", m))):
            x = np.moveaxis(args[n + j], axis, 0)
            args[n + j] = x[::-1] if direction else x
        outs = list(super()._run(*args, **{k: v for k, v in kwargs.items()
                                           if k not in self.GENERAL}))
        k = len(outs) - n
        for o, (axis, direction) in enumerate(zip(get("scan_output_axes", k),
                                                  get("scan_output_directions", k))):
            y = outs[n + o][::-1] if direction else outs[n + o]
            outs[n + o] = np.moveaxis(y, 0, axis % (y.ndim))
        return tuple(outs)
