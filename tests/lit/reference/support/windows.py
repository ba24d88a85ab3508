"""Direct NumPy implementations of convolution and pooling, for the checks.

Written from the op descriptions in ir/KilnOps.td, independently of the
C++: a loop over filter taps (or window positions) with strided NumPy
slices of the explicitly padded input. NCHW input, OIHW filter, padding
[top, bottom, left, right], strides and dilation [h, w].
"""

import numpy as np


def out_size(size, lo, hi, k, stride, dilation=1):
    return (size + lo + hi - dilation * (k - 1) - 1) // stride + 1


def _tap(kh, kw, oh, ow, strides, dilation):
    """The slices of the padded input that filter tap (kh, kw) reads."""
    h0, w0 = kh * dilation[0], kw * dilation[1]
    return (slice(h0, h0 + strides[0] * (oh - 1) + 1, strides[0]),
            slice(w0, w0 + strides[1] * (ow - 1) + 1, strides[1]))


def conv2d(x, w, strides, padding, dilation, groups):
    n, c, h, wd = x.shape
    o, cg, kh_, kw_ = w.shape
    oh = out_size(h, padding[0], padding[1], kh_, strides[0], dilation[0])
    ow = out_size(wd, padding[2], padding[3], kw_, strides[1], dilation[1])
    xp = np.pad(x, ((0, 0), (0, 0), (padding[0], padding[1]), (padding[2], padding[3])))
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for g in range(groups):
        for kh in range(kh_):
            for kw in range(kw_):
                hs, ws = _tap(kh, kw, oh, ow, strides, dilation)
                patch = xp[:, g * cg:(g + 1) * cg, hs, ws]
                out[:, g * og:(g + 1) * og] += np.einsum(
                    "nchw,oc->nohw", patch, w[g * og:(g + 1) * og, :, kh, kw])
    return out


def conv2d_input_grad(dy, w, input_shape, strides, padding, dilation, groups):
    n, c, h, wd = input_shape
    o, cg, kh_, kw_ = w.shape
    _, _, oh, ow = dy.shape
    dxp = np.zeros((n, c, h + padding[0] + padding[1], wd + padding[2] + padding[3]))
    og = o // groups
    for g in range(groups):
        for kh in range(kh_):
            for kw in range(kw_):
                hs, ws = _tap(kh, kw, oh, ow, strides, dilation)
                dxp[:, g * cg:(g + 1) * cg, hs, ws] += np.einsum(
                    "nohw,oc->nchw", dy[:, g * og:(g + 1) * og], w[g * og:(g + 1) * og, :, kh, kw])
    return dxp[:, :, padding[0]:padding[0] + h, padding[2]:padding[2] + wd]


def conv2d_filter_grad(x, dy, filter_shape, strides, padding, dilation, groups):
    o, cg, kh_, kw_ = filter_shape
    _, _, oh, ow = dy.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding[0], padding[1]), (padding[2], padding[3])))
    dw = np.zeros(filter_shape)
    og = o // groups
    for g in range(groups):
        for kh in range(kh_):
            for kw in range(kw_):
                hs, ws = _tap(kh, kw, oh, ow, strides, dilation)
                patch = xp[:, g * cg:(g + 1) * cg, hs, ws]
                dw[g * og:(g + 1) * og, :, kh, kw] = np.einsum(
                    "nchw,nohw->oc", patch, dy[:, g * og:(g + 1) * og])
    return dw


def _windows(x, window, strides, padding, fill):
    """Yields (oh, ow, padded window [N, C, kh, kw], its top-left corner)."""
    n, c, h, wd = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding[0], padding[1]), (padding[2], padding[3])),
                constant_values=fill)
    oh = out_size(h, padding[0], padding[1], window[0], strides[0])
    ow = out_size(wd, padding[2], padding[3], window[1], strides[1])
    for i in range(oh):
        for j in range(ow):
            top, left = i * strides[0], j * strides[1]
            yield i, j, xp[:, :, top:top + window[0], left:left + window[1]], (top, left)


def pool_output_shape(x_shape, window, strides, padding):
    n, c, h, wd = x_shape
    return (n, c, out_size(h, padding[0], padding[1], window[0], strides[0]),
            out_size(wd, padding[2], padding[3], window[1], strides[1]))


def max_pool2d(x, window, strides, padding):
    out = np.zeros(pool_output_shape(x.shape, window, strides, padding))
    for i, j, win, _ in _windows(x, window, strides, padding, -np.inf):
        out[:, :, i, j] = win.max(axis=(2, 3))
    return out


def avg_pool2d(x, window, strides, padding):
    out = np.zeros(pool_output_shape(x.shape, window, strides, padding))
    for i, j, win, _ in _windows(x, window, strides, padding, 0.0):
        out[:, :, i, j] = win.sum(axis=(2, 3)) / (window[0] * window[1])
    return out


def max_pool2d_grad(x, dy, window, strides, padding):
    n, c, h, wd = x.shape
    dxp = np.zeros((n, c, h + padding[0] + padding[1], wd + padding[2] + padding[3]))
    for i, j, win, (top, left) in _windows(x, window, strides, padding, -np.inf):
        flat = win.reshape(n, c, -1)
        first = np.argmax(flat, axis=2)  # first maximum in row-major order
        for a in range(n):
            for b in range(c):
                r, s = divmod(int(first[a, b]), window[1])
                dxp[a, b, top + r, left + s] += dy[a, b, i, j]
    return dxp[:, :, padding[0]:padding[0] + h, padding[2]:padding[2] + wd]


def avg_pool2d_grad(dy, input_shape, window, strides, padding):
    n, c, h, wd = input_shape
    dxp = np.zeros((n, c, h + padding[0] + padding[1], wd + padding[2] + padding[3]))
    for i in range(dy.shape[2]):
        for j in range(dy.shape[3]):
            top, left = i * strides[0], j * strides[1]
            dxp[:, :, top:top + window[0], left:left + window[1]] += \
                dy[:, :, i, j][:, :, None, None] / (window[0] * window[1])
    return dxp[:, :, padding[0]:padding[0] + h, padding[2]:padding[2] + wd]
