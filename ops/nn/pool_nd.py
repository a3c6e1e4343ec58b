"""Pooling over any number of spatial dimensions, with the window rules of ONNX and PyTorch.

:func:`pool_nd` takes max, average and Lp pooling over the spatial axes of a tensor (the
axes after ``N, C`` by default, or any axes given: ``(1, 2)`` for NHWC), each with its own
kernel, stride, dilation and padding before and after. :func:`max_pool_indices_nd` gives the
position of each window's maximum as ONNX's ``MaxPool`` ``Indices`` output defines it.

Ceil mode rounds the output size up, but a last window that would start in the padding
after the input is dropped (ONNX and PyTorch; TVM's ``pool2d`` keeps it): the output size
along an axis is ``ceil((in + before + after - dilated) / stride) + 1``, less one when
``(out - 1) * stride >= in + before``. :func:`pooled_size` computes it.

The stages are those of :func:`~ptxforge.ops.nn.pooling.pool2d`: ``pad_temp`` (tag ``pad``,
only where a window reaches outside the input), the window reduction ``tensor`` (tag
``pool_max`` or ``pool_sum``, reduce axes ``rv0, rv1, ...``) and, for averages and Lp
norms, an element-wise ``tensor`` stage; so the default pooling schedules apply.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ...ir import dtype as dt
from ...ir import te
from ...ir.expr import Expr, const, emax, emin
from ...ir.te import Tensor
from .. import tag
from ..utils import (
    accumulate_dtype,
    ax_names,
    cast_to,
    compute_named,
    fail,
    offset,
    scale,
)
from .pad import pad_compute
from .pooling import _WindowCount, min_value

POOL_TYPES = ("max", "avg", "lp")


def pooled_size(op: str, size: int, k: int, stride: int, dilation: int, before: int,
                after: int, ceil_mode: bool = False, what: str = "spatial size") -> int:
    """Output extent of a pooling window along one axis (ONNX / PyTorch rules, see the
    module doc); a ``TEError`` when the window does not fit the padded input."""
    dilated = (k - 1) * dilation + 1
    padded = size + before + after
    if dilated > padded:
        fail(op, f"the window {what} {k} (dilated to {dilated}) is larger than the padded "
                 f"input {what} {padded} ({size} + padding {before}+{after})")
    if not ceil_mode:
        return (padded - dilated) // stride + 1
    out = -(-(padded - dilated) // stride) + 1
    if (out - 1) * stride >= size + before:
        out -= 1  # the last window would start in the padding after the input
    return out


def _geometry(op: str, data: Tensor, kernel, strides, dilations, pads_before, pads_after,
              ceil_mode: bool, spatial_axes):
    axes = tuple(range(2, data.ndim)) if spatial_axes is None else tuple(spatial_axes)
    k = len(axes)
    if k == 0:
        fail(op, f"data {list(data.shape)} has no spatial axes to pool over")
    if len(set(axes)) != k or any(not 0 <= a < data.ndim for a in axes):
        fail(op, f"spatial_axes {list(axes)} must be distinct axes of a {data.ndim}-D tensor")
    lists = {}
    for what, value, low in (("kernel", kernel, 1), ("strides", strides, 1),
                             ("dilations", dilations, 1), ("pads_before", pads_before, 0),
                             ("pads_after", pads_after, 0)):
        vals = [int(v) for v in value]
        if len(vals) != k:
            fail(op, f"{what} has {len(vals)} entries but there are {k} spatial axes "
                     f"{list(axes)}")
        if any(v < low for v in vals):
            fail(op, f"{what} must be >= {low}, got {vals}")
        lists[what] = vals
    out = [pooled_size(op, data.shape[a], kk, s, d, b, e, ceil_mode, f"(axis {a})")
           for a, kk, s, d, b, e in zip(axes, lists["kernel"], lists["strides"],
                                        lists["dilations"], lists["pads_before"],
                                        lists["pads_after"])]
    return axes, lists, out


def _padded_input(data: Tensor, axes, lists, out, value) -> Tensor:
    """``data`` padded so that every window's taps are inside (the padding after an axis is
    widened where a ceil-mode window reaches past it; those cells are never counted)."""
    before = [0] * data.ndim
    after = [0] * data.ndim
    for j, a in enumerate(axes):
        k, s, d = lists["kernel"][j], lists["strides"][j], lists["dilations"][j]
        b, e = lists["pads_before"][j], lists["pads_after"][j]
        before[a] = b
        reach = (out[j] - 1) * s + (k - 1) * d + 1
        after[a] = max(reach - data.shape[a] - b, 0)
        del e  # padding past the last window's reach is never read
    if not any(before) and not any(after):
        return data
    return pad_compute(data, before, after, value, "pad_temp", ax_names, "pool")


def pool_nd(data: Tensor, pool_type: str, kernel: Sequence[int], strides: Sequence[int],
            dilations: Sequence[int], pads_before: Sequence[int], pads_after: Sequence[int],
            ceil_mode: bool = False, count_include_pad: bool = False, p: int = 2,
            spatial_axes: Sequence[int] | None = None) -> Tensor:
    """Max, average or Lp (``(sum |x|^p)^(1/p)``) pooling over ``spatial_axes``.

    One entry per spatial axis in ``kernel``, ``strides``, ``dilations``, ``pads_before``
    and ``pads_after``. Max pooling pads with the dtype's lowest value, the others with 0.
    The average divides by the number of taps inside the input, or, with
    ``count_include_pad``, inside the input and its explicit padding (never the ceil-mode
    extension). 16-bit data sums in float32 and rounds once.
    """
    op = f"{pool_type}_pool" if pool_type in POOL_TYPES else "pool_nd"
    if pool_type not in POOL_TYPES:
        fail(op, f"pool_type must be one of {list(POOL_TYPES)}, got {pool_type!r}")
    if pool_type != "max" and not dt.is_float(data.dtype):
        fail(op, f"{pool_type} pooling needs a float tensor, got {data.name} with dtype "
                 f"{data.dtype}")
    if data.dtype == "bool":
        fail(op, f"cannot pool bool tensor {data.name}")
    if pool_type == "lp" and (isinstance(p, bool) or int(p) != p or p < 1):
        fail(op, f"the Lp norm's p must be a positive int, got {p!r}")
    axes, lists, out = _geometry(op, data, kernel, strides, dilations, pads_before,
                                 pads_after, ceil_mode, spatial_axes)
    pad_value = min_value(data.dtype) if pool_type == "max" else const(0, data.dtype)
    temp = _padded_input(data, axes, lists, out, pad_value)
    shape = list(data.shape)
    for j, a in enumerate(axes):
        shape[a] = out[j]
    rvs = [te.reduce_axis((0, kk), name=f"rv{j}") for j, kk in enumerate(lists["kernel"])]
    acc = data.dtype if pool_type == "max" else accumulate_dtype(data.dtype)
    reducer = te.max_reduce if pool_type == "max" else te.sum

    def tap(i):
        idx = list(i)
        for j, a in enumerate(axes):
            idx[a] = offset(scale(i[a], lists["strides"][j]), scale(rvs[j], lists["dilations"][j]))
        value = cast_to(temp(*idx), acc)
        if pool_type != "lp":
            return value
        if p == 1:
            return te.abs(value)
        if p == 2:
            return value * value
        return te.power(te.abs(value), const(float(p), acc))

    window_tag = tag.POOL_MAX if pool_type == "max" else tag.POOL_SUM
    pooled = compute_named(shape, ax_names(data.ndim),
                           lambda *i: reducer(tap(i), axis=rvs), "tensor", window_tag)
    if pool_type == "max":
        return pooled
    if pool_type == "lp":
        def fnorm(*i):
            total = pooled(*i)
            if p == 1:
                value = total
            elif p == 2:
                value = te.sqrt(total)
            else:
                value = te.power(total, const(1.0 / p, acc))
            return cast_to(value, data.dtype)

        return compute_named(shape, ax_names(data.ndim), fnorm, "tensor", tag.ELEMWISE)

    counts = []
    for j, a in enumerate(axes):
        size, b, e = data.shape[a], lists["pads_before"][j], lists["pads_after"][j]
        lo, hi = (-b, size + e - 1) if count_include_pad else (0, size - 1)
        counts.append(_WindowCount(out[j], lists["strides"][j], b, lists["kernel"][j],
                                   lists["dilations"][j], lo, hi))

    def fdivide(*i):
        const_part = 1
        total: Expr | None = None
        zero = False
        for j, a in enumerate(axes):
            c = counts[j](i[a])
            zero = zero or counts[j].may_be_zero
            if isinstance(c, int):
                const_part *= c
            else:
                total = c if total is None else total * c
        if total is None:
            return cast_to(pooled(*i) / const(float(max(const_part, 1)), acc), data.dtype)
        total = scale(total, const_part)
        if zero:
            total = emax(total, 1)
        return cast_to(pooled(*i) / total.astype(acc), data.dtype)

    return compute_named(shape, ax_names(data.ndim), fdivide, "tensor", tag.ELEMWISE)


def max_pool_indices_nd(data: Tensor, kernel: Sequence[int], strides: Sequence[int],
                        dilations: Sequence[int], pads_before: Sequence[int],
                        pads_after: Sequence[int], ceil_mode: bool = False,
                        storage_order: int = 0, dtype: str = "int64") -> Tensor:
    """The flat index into ``data`` ``[N, C, D1, ..., Dk]`` of each max-pooling window's
    maximum, as ONNX's ``MaxPool`` ``Indices``: ``(n * C + c) * D1 * ... * Dk`` plus the
    position in the spatial block, row-major (``storage_order=0``) or column-major (``1``).
    Padding is never chosen; of equal values the first in the window wins."""
    op = "max_pool_indices"
    if storage_order not in (0, 1):
        fail(op, f"storage_order must be 0 (row-major) or 1 (column-major), got "
                 f"{storage_order!r}")
    if data.dtype == "bool":
        fail(op, f"cannot pool bool tensor {data.name}")
    axes, lists, out = _geometry(op, data, kernel, strides, dilations, pads_before,
                                 pads_after, ceil_mode, None)
    temp = _padded_input(data, axes, lists, out, min_value(data.dtype))
    shape = list(data.shape[:2]) + out
    k = len(axes)
    if storage_order == 1 and k != 2:
        fail(op, f"storage_order=1 (column-major indices) is defined for 2-D pooling, got {k} "
                 "spatial axes")
    spatial = [data.shape[a] for a in axes]
    block = math.prod(spatial)
    if data.shape[0] * data.shape[1] * block >= 2 ** 31:
        fail(op, f"data {list(data.shape)} has 2**31 or more elements; its indices do not "
                 "fit the int32 arithmetic used here")
    names = ax_names(data.ndim)

    def window_pos(i, rvs):
        return [offset(scale(i[a], lists["strides"][j]), scale(rvs[j], lists["dilations"][j]))
                for j, a in enumerate(axes)]

    rv_max = [te.reduce_axis((0, kk), name=f"rv{j}") for j, kk in enumerate(lists["kernel"])]

    def fmax(*i):
        idx = list(i[:2]) + window_pos(i, rv_max)
        return te.max_reduce(temp(*idx), axis=rv_max)

    pooled = compute_named(shape, names, fmax, "pool_max", tag.POOL_MAX)
    rv_arg = [te.reduce_axis((0, kk), name=f"rk{j}") for j, kk in enumerate(lists["kernel"])]
    big = const(2 ** 31 - 1, "int32")

    def fargmin(*i):
        # the row-major position in the spatial block: the smallest is the first in the
        # window (its taps run in row-major order), whatever order the result is given in
        pos = window_pos(i, rv_arg)
        real = [p - lists["pads_before"][j] for j, p in enumerate(pos)]
        inside = []
        for j in range(k):
            if lists["pads_before"][j]:
                inside.append(real[j] >= 0)
            inside.append(real[j] < spatial[j])
        flat = real[0]
        for j in range(1, k):
            flat = flat * spatial[j] + real[j]
        value = temp(*(list(i[:2]) + pos))
        hit = te.all(value == pooled(*i), *inside)
        # a clamped index keeps the int32 expression in range where the tap is outside
        return te.min_reduce(te.if_then_else(hit, emin(emax(flat, 0), big), big), axis=rv_arg)

    first = compute_named(shape, names, fargmin, "pool_argmax", tag.COMM_REDUCE)

    def findex(*i):
        r = first(*i)
        if storage_order == 1:
            coords = []
            step = block
            for j in range(k):
                step //= spatial[j]
                coords.append(te.floormod(te.floordiv(r, step), spatial[j]) if j else
                              te.floordiv(r, step))
            r = coords[k - 1]
            for j in reversed(range(k - 1)):
                r = r * spatial[j] + coords[j]
        return cast_to((i[0] * data.shape[1] + i[1]) * block + r, dtype)

    return compute_named(shape, names, findex, "T_indices", tag.ELEMWISE)


def pool_nd_reference(x: np.ndarray, pool_type: str, kernel, strides, dilations, pads_before,
                      pads_after, ceil_mode=False, count_include_pad=False, p=2,
                      spatial_axes=None, indices=False, storage_order=0):
    """Numpy pooling with the semantics of :func:`pool_nd`; with ``indices`` also the
    int64 indices of :func:`max_pool_indices_nd` (channel-first data only)."""
    axes = tuple(range(2, x.ndim)) if spatial_axes is None else tuple(spatial_axes)
    k = len(axes)
    out = [pooled_size("pool", x.shape[a], kk, s, d, b, e, ceil_mode)
           for a, kk, s, d, b, e in zip(axes, kernel, strides, dilations, pads_before,
                                       pads_after)]
    lead = [a for a in range(x.ndim) if a not in axes]
    xt = np.transpose(x, lead + list(axes))
    lead_shape = xt.shape[:len(lead)]
    spatial = list(xt.shape[len(lead):])
    is_float = dt.is_float(dt.from_numpy(x.dtype))  # bfloat16's numpy kind is not "f"
    xt = xt.reshape((-1, *spatial)).astype(np.float64 if is_float else np.int64)
    rows = np.arange(xt.shape[0])
    lowest = -np.inf if is_float else np.iinfo(np.int64).min
    result = np.full((xt.shape[0], *out), lowest if pool_type == "max" else 0.0)
    count = np.zeros(out, np.int64)
    best = np.full(result.shape, -1, np.int64)
    for taps in np.ndindex(*kernel):
        pos = [np.arange(out[j]) * strides[j] - pads_before[j] + taps[j] * dilations[j]
               for j in range(k)]
        inside = np.ones(out, bool)
        counted = np.ones(out, bool)
        for j, q in enumerate(pos):
            shape = [1] * k
            shape[j] = out[j]
            inside = inside & ((q >= 0) & (q < spatial[j])).reshape(shape)
            lo, hi = (-pads_before[j], spatial[j] + pads_after[j]) if count_include_pad \
                else (0, spatial[j])
            counted = counted & ((q >= lo) & (q < hi)).reshape(shape)
        clipped = [np.clip(q, 0, spatial[j] - 1) for j, q in enumerate(pos)]
        vals = xt[np.ix_(rows, *clipped)]
        count += counted
        if pool_type == "max":
            better = inside & (vals > result)
            if indices:
                order = list(range(k)) if storage_order == 0 else list(reversed(range(k)))
                flat = np.zeros(out, np.int64)
                step = 1
                for j in reversed(order):
                    shape = [1] * k
                    shape[j] = out[j]
                    flat = flat + (clipped[j] * step).reshape(shape)
                    step *= spatial[j]
                best = np.where(better, flat, best)
            result = np.where(better, vals, result)
        elif pool_type == "avg":
            result = result + np.where(inside, vals, 0.0)
        else:
            result = result + np.abs(np.where(inside, vals, 0.0)) ** p
    if pool_type == "avg":
        result = result / np.maximum(count, 1)
    elif pool_type == "lp":
        result = result ** (1.0 / p)
    inverse = np.argsort(lead + list(axes))

    def back(a):
        return np.transpose(a.reshape(*lead_shape, *out), inverse)

    value = back(result).astype(x.dtype)
    if not indices:
        return value
    best = best + (rows * math.prod(spatial)).reshape((-1,) + (1,) * k)
    return value, back(best).astype(np.int64)
