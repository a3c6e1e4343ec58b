"""Converters of the gradient overloads of Core ATen that are sums over windows or rows:
the backward of max, average and adaptive average pooling, and of embedding. Each is a
``scatter_elements`` (add) of the output gradient into zeros of the input's shape, at
positions known while importing (windows) or read from a tensor (pooling indices, token
ids), so a program exported with its backward imports as it is."""

from __future__ import annotations

import math

import numpy as np

from .helpers import broadcast_to, numel, operand, reshape
from .registry import converter

_SCATTER = ("scatter_elements", "reshape", "multiply")


def _scatter_windows(cx, grad, x, positions: np.ndarray, weights: np.ndarray):
    """``grad`` (..., Ho, Wo) spread into zeros shaped like ``x`` (..., H, W): output
    position ``o`` adds ``grad[o] * weights[o, k]`` at the flat input position
    ``positions[o, k]`` (a weight of 0 pads windows of fewer elements)."""
    lead = tuple(grad.shape[:-2])
    points, k = positions.shape
    h, w = x.shape[-2:]
    batch = numel(lead)
    dtype = cx.out_dtype()
    g = reshape(cx, operand(cx, grad, dtype), (batch, points, 1))
    spread = cx.call("multiply", [g, cx.const(weights.reshape(1, points, k), dtype)])
    spread = reshape(cx, spread, (batch, points * k))
    index = np.broadcast_to(positions.reshape(1, points * k), (batch, points * k))
    base = cx.const(np.zeros((batch, h * w)), dtype)
    out = cx.call("scatter_elements", [base, cx.const(index, "int64"), spread],
                  {"axis": 1, "reduction": "add"})
    return reshape(cx, out, tuple(x.shape))


def _windows(bounds_h: list, bounds_w: list, width: int, divisor) -> tuple:
    """Flat positions and weights of every output's window: ``bounds_*`` hold, per output
    row / column, ``(start, end)`` clipped to the input; ``divisor(oh, ow)`` the window's
    divisor."""
    size = max((e - s) for s, e in bounds_h) * max((e - s) for s, e in bounds_w)
    points = len(bounds_h) * len(bounds_w)
    positions = np.zeros((points, max(size, 1)), np.int64)
    weights = np.zeros((points, max(size, 1)), np.float64)
    for i, (hs, he) in enumerate(bounds_h):
        for j, (ws, we) in enumerate(bounds_w):
            o = i * len(bounds_w) + j
            cells = [(r * width + c) for r in range(hs, he) for c in range(ws, we)]
            positions[o, :len(cells)] = cells
            weights[o, :len(cells)] = 1.0 / divisor(i, j)
    return positions, weights


@converter("aten.avg_pool2d_backward.default", needs=_SCATTER,
           maps_to="scatter_elements (add) of the gradient over each window, divided as the "
                   "forward divides")
def _avg_pool2d_backward(cx, a):
    x, grad = a.self, a.grad_output
    (kh, kw), (sh, sw) = _pair(a.kernel_size), _pair(a.stride or a.kernel_size)
    ph, pw = _pair(a.padding)
    h, w = x.shape[-2:]
    ho, wo = grad.shape[-2:]

    def bounds(out: int, k: int, s: int, p: int, size: int) -> tuple[list, list]:
        padded, clipped = [], []
        for o in range(out):
            start = o * s - p
            end = min(start + k, size + p)
            padded.append(end - start)
            clipped.append((max(start, 0), min(end, size)))
        return padded, clipped

    pad_h, rows = bounds(ho, kh, sh, ph, h)
    pad_w, cols = bounds(wo, kw, sw, pw, w)

    def divisor(i: int, j: int) -> float:
        if a.divisor_override:
            return float(a.divisor_override)
        if a.count_include_pad:
            return float(pad_h[i] * pad_w[j])
        return float((rows[i][1] - rows[i][0]) * (cols[j][1] - cols[j][0]))

    return _scatter_windows(cx, grad, x, *_windows(rows, cols, w, divisor))


@converter("aten._adaptive_avg_pool2d_backward.default", needs=_SCATTER,
           maps_to="scatter_elements (add) of the gradient over each adaptive window")
def _adaptive_avg_pool2d_backward(cx, a):
    x, grad = a.self, a.grad_output
    h, w = x.shape[-2:]
    ho, wo = grad.shape[-2:]
    rows = [(math.floor(i * h / ho), math.ceil((i + 1) * h / ho)) for i in range(ho)]
    cols = [(math.floor(j * w / wo), math.ceil((j + 1) * w / wo)) for j in range(wo)]

    def divisor(i: int, j: int) -> float:
        return float((rows[i][1] - rows[i][0]) * (cols[j][1] - cols[j][0]))

    return _scatter_windows(cx, grad, x, *_windows(rows, cols, w, divisor))


@converter("aten.max_pool2d_with_indices_backward.default",
           needs=("scatter_elements", "reshape", "cast"),
           maps_to="scatter_elements (add) of the gradient at the forward's indices")
def _max_pool2d_backward(cx, a):
    x, grad = a.self, a.grad_output
    h, w = x.shape[-2:]
    lead = tuple(x.shape[:-2])
    batch = numel(lead)
    points = numel(grad.shape[-2:])
    dtype = cx.out_dtype()
    g = reshape(cx, operand(cx, grad, dtype), (batch, points))
    index = reshape(cx, operand(cx, a.indices, "int64"), (batch, points))
    base = cx.const(np.zeros((batch, h * w)), dtype)
    out = cx.call("scatter_elements", [base, index, g], {"axis": 1, "reduction": "add"})
    return reshape(cx, out, tuple(x.shape))


@converter("aten.embedding_dense_backward.default",
           needs=("scatter_elements", "reshape", "cast", "broadcast_to", "not_equal", "where",
                  "take", "divide"),
           maps_to="scatter_elements (add) of the gradient rows at the token ids")
def _embedding_backward(cx, a):
    grad, ids = a.grad_output, a.indices
    dim = grad.shape[-1]
    rows = numel(ids.shape)
    dtype = cx.out_dtype()
    g = reshape(cx, operand(cx, grad, dtype), (rows, dim))
    flat_ids = reshape(cx, operand(cx, ids, "int64"), (rows,))
    if a.scale_grad_by_freq:  # each row's gradient divided by how often its id occurs
        counts = cx.call("scatter_elements", [
            cx.const(np.zeros(a.num_weights), dtype), flat_ids,
            cx.const(np.ones(rows), dtype)], {"axis": 0, "reduction": "add"})
        seen = reshape(cx, cx.call("take", [counts, flat_ids], {"axis": 0}), (rows, 1))
        g = cx.call("divide", [g, seen])
    if a.padding_idx is not None and a.padding_idx >= 0:  # the padding row gets no gradient
        keep = cx.call("not_equal", [flat_ids, cx.const(a.padding_idx, "int64")])
        g = cx.call("where", [reshape(cx, keep, (rows, 1)), g, cx.const(0.0, dtype)])
    index = broadcast_to(cx, reshape(cx, flat_ids, (rows, 1)), (rows, dim))
    base = cx.const(np.zeros((a.num_weights, dim)), dtype)
    return cx.call("scatter_elements", [base, index, g], {"axis": 0, "reduction": "add"})


def _pair(v) -> tuple[int, int]:
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return (int(v[0]), int(v[-1])) if v else (1, 1)


_NORM_OPS = ("reshape", "subtract", "multiply", "mean", "reduce.sum", "cast")


def _norm_input_grad(cx, grad, xhat, rstd, axes: tuple):
    """``rstd * (g - mean(g) - xhat * mean(g * xhat))`` over ``axes``: the gradient of a
    normalization ``xhat = (x - mean) * rstd`` whose statistics depend on x."""
    mean = lambda v: cx.call("mean", [v], {"axis": axes, "keepdims": True})  # noqa: E731
    inner = cx.call("subtract", [cx.call("subtract", [grad, mean(grad)]),
                                 cx.call("multiply", [xhat, mean(cx.call("multiply",
                                                                         [grad, xhat]))])])
    return cx.call("multiply", [rstd, inner])


@converter("aten.native_layer_norm_backward.default", needs=_NORM_OPS,
           maps_to="the normalization's gradient from the saved mean and rstd (mean, "
                   "reduce.sum)")
def _layer_norm_backward(cx, a):
    x = operand(cx, a.input, cx.out_dtype(0))
    dtype = x.dtype
    k = len(a.normalized_shape)
    inner = numel(x.shape[x.ndim - k:])
    rows = numel(x.shape[:x.ndim - k])
    flat = reshape(cx, x, (rows, inner))
    grad = reshape(cx, operand(cx, a.grad_out, dtype), (rows, inner))
    mean = reshape(cx, operand(cx, a.mean, dtype), (rows, 1))
    rstd = reshape(cx, operand(cx, a.rstd, dtype), (rows, 1))
    xhat = cx.call("multiply", [cx.call("subtract", [flat, mean]), rstd])
    scaled = grad if a.weight is None else \
        cx.call("multiply", [grad, reshape(cx, operand(cx, a.weight, dtype), (1, inner))])
    dx = reshape(cx, _norm_input_grad(cx, scaled, xhat, rstd, (1,)), tuple(x.shape))
    norm_shape = tuple(x.shape[x.ndim - k:])
    dw = None if a.weight is None else reshape(cx, cx.call(
        "reduce.sum", [cx.call("multiply", [grad, xhat])], {"axis": (0,)}), norm_shape)
    db = None if a.bias is None else reshape(cx, cx.call("reduce.sum", [grad], {"axis": (0,)}),
                                             norm_shape)
    return dx, dw, db


@converter("aten.native_group_norm_backward.default", needs=_NORM_OPS,
           maps_to="the normalization's gradient per group from the saved mean and rstd")
def _group_norm_backward(cx, a):
    x = operand(cx, a.input, cx.out_dtype(0))
    dtype = x.dtype
    n, c, g = int(a.N), int(a.C), int(a.group)
    hw = int(a.HxW)
    shape4 = (n, g, c // g, hw)
    flat = reshape(cx, x, shape4)
    grad = reshape(cx, operand(cx, a.grad_out, dtype), shape4)
    mean = reshape(cx, operand(cx, a.mean, dtype), (n, g, 1, 1))
    rstd = reshape(cx, operand(cx, a.rstd, dtype), (n, g, 1, 1))
    xhat = cx.call("multiply", [cx.call("subtract", [flat, mean]), rstd])
    scaled = grad if a.weight is None else cx.call(
        "multiply", [grad, reshape(cx, operand(cx, a.weight, dtype), (1, g, c // g, 1))])
    dx = reshape(cx, _norm_input_grad(cx, scaled, xhat, rstd, (2, 3)), tuple(x.shape))
    per_channel = lambda v: reshape(cx, cx.call(  # noqa: E731
        "reduce.sum", [v], {"axis": (0, 3)}), (c,))
    dw = per_channel(cx.call("multiply", [grad, xhat])) if a.weight is not None else None
    db = per_channel(grad)
    return dx, dw, db


@converter("aten.convolution_backward.default",
           needs=("nn.conv_transpose", "nn.conv2d", "nn.conv_nd", "transpose", "strided_slice",
                  "concatenate", "reduce.sum", "reshape"),
           maps_to="input gradient by nn.conv_transpose, weight gradient by a convolution of "
                   "the input with the output gradient (per group), bias gradient by "
                   "reduce.sum; a transposed convolution's the other way round")
def _convolution_backward(cx, a):
    x, w, grad = a.input, a.weight, a.grad_output
    nd = x.ndim - 2
    if nd not in (1, 2, 3):
        cx.fail(f"the gradient of a {nd}-D convolution is not supported")
    stride, pad, dil = list(a.stride), list(a.padding), list(a.dilation)
    if nd == 1:  # through a 2-D view, as the forward converter
        x = reshape(cx, x, (x.shape[0], x.shape[1], 1, x.shape[2]))
        w = reshape(cx, w, (w.shape[0], w.shape[1], 1, w.shape[2]))
        grad = reshape(cx, grad, (grad.shape[0], grad.shape[1], 1, grad.shape[2]))
        stride, pad, dil = [1] + stride, [0] + pad, [1] + dil
    spatial = tuple(range(2, x.ndim))
    mask = list(a.output_mask)
    groups = int(a.groups)
    dx = dw = db = None
    if a.transposed:
        # the transposed convolution is the adjoint of the convolution: its input gradient
        # is that convolution, its weight gradient the correlation with the roles swapped
        if mask[0]:
            dx = reshape(cx, _conv(cx, grad, w, stride, pad, dil, groups),
                         tuple(a.input.shape))
        if mask[1]:
            dw = reshape(cx, _weight_grad(cx, grad, x, w.shape, stride, pad, dil, groups),
                         tuple(a.weight.shape))
    else:
        if mask[0]:
            extra = [x.shape[d] - ((grad.shape[d] - 1) * stride[i] - 2 * pad[i]
                                   + dil[i] * (w.shape[d] - 1) + 1)
                     for i, d in enumerate(spatial)]
            dx = cx.call("nn.conv_transpose", [grad, w], {
                "strides": tuple(stride), "padding": tuple(pad) * 2, "dilation": tuple(dil),
                "groups": groups, "output_padding": tuple(extra)})
            dx = reshape(cx, dx, tuple(a.input.shape))
        if mask[1]:
            dw = reshape(cx, _weight_grad(cx, x, grad, w.shape, stride, pad, dil, groups),
                         tuple(a.weight.shape))
    if mask[2]:
        db = cx.call("reduce.sum", [grad], {"axis": (0,) + spatial})
    return dx, dw, db


def _conv(cx, x, w, stride, pad, dil, groups: int = 1):
    """A 2-D (``nn.conv2d``) or 3-D (``nn.conv_nd``) convolution."""
    if x.ndim == 4:
        return cx.call("nn.conv2d", [x, w], {"strides": list(stride), "padding": list(pad),
                                             "dilation": list(dil), "groups": groups})
    return cx.call("nn.conv_nd", [x, w], {"strides": tuple(stride), "padding": tuple(pad) * 2,
                                          "dilation": tuple(dil), "groups": groups})


def _weight_grad(cx, x, grad, w_shape, stride, pad, dil, groups: int):
    """Per group, the correlation of the input with the output gradient over the batch: a
    convolution of the input's channels (as a batch) by the gradient's channels (as
    filters), the forward's stride as its dilation and the dilation as its stride."""
    cin_g, cout_g = x.shape[1] // groups, grad.shape[1] // groups
    kernel = tuple(w_shape[2:])
    swap = (1, 0) + tuple(range(2, x.ndim))
    xt = cx.call("transpose", [x], {"axes": swap})
    gt = cx.call("transpose", [grad], {"axes": swap})
    parts = []
    for i in range(groups):
        xi = xt if groups == 1 else cx.call("strided_slice", [xt], {
            "begin": [i * cin_g], "end": [(i + 1) * cin_g], "axes": [0]})
        gi = gt if groups == 1 else cx.call("strided_slice", [gt], {
            "begin": [i * cout_g], "end": [(i + 1) * cout_g], "axes": [0]})
        corr = _conv(cx, xi, gi, dil, pad, stride)
        if tuple(corr.shape[2:]) != kernel:  # the correlation may reach past the kernel
            corr = cx.call("strided_slice", [corr], {
                "begin": [0] * len(kernel), "end": list(kernel),
                "axes": list(range(2, x.ndim))})
        parts.append(cx.call("transpose", [corr], {"axes": swap}))
    return parts[0] if groups == 1 else cx.call("concatenate", parts, {"axis": 0})
