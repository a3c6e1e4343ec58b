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
