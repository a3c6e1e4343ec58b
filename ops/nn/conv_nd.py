"""Convolutions over any number of spatial dimensions, channel-first, with groups:
:func:`conv_nd` (used for 3-D; 1-D and 2-D convolutions go through ``conv2d``, whose tiled
and tensor-core schedules apply) and :func:`conv_transpose_nd`.

``conv_nd``: a padding stage ``pad_temp`` then one reduction stage ``compute`` (tag
``conv3d_ncdhw`` for three spatial dims, ``conv_nd`` otherwise; reduce axes ``rc, r0, r1,
...``). ``conv_transpose_nd`` computes each output as a gather over the taps that reach it
(``(y + pad - k * dilation)`` divisible by the stride and inside the input), one reduction
stage tagged ``conv_transpose``: along an axis of dilation 1 the reduction runs over the
``ceil(K / stride)`` taps of the output's phase only, elsewhere over every tap. 16-bit data
accumulates in float32 and rounds once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...ir import te
from ...ir.expr import emax, emin
from ...ir.te import Tensor
from ..utils import (
    accumulate_dtype,
    ax_names,
    cast_output,
    cast_to,
    compute_named,
    expect_same_dtype,
    fail,
    offset,
    scale,
)
from .pad import pad_compute

CONV3D_NCDHW = "conv3d_ncdhw"
CONV_ND = "conv_nd"
CONV_TRANSPOSE = "conv_transpose"


def _ints(op: str, what: str, value, k: int, low: int) -> list[int]:
    vals = [int(v) for v in value]
    if len(vals) != k or any(v < low for v in vals):
        fail(op, f"{what} must be {k} ints >= {low} (one per spatial axis), got {list(value)}")
    return vals


def conv_nd_size(op: str, size: int, k: int, stride: int, dilation: int, before: int,
                 after: int) -> int:
    """Output extent of a convolution along one axis."""
    dilated = (k - 1) * dilation + 1
    if dilated > size + before + after:
        fail(op, f"the kernel extent {k} (dilated to {dilated}) is larger than the padded input "
                 f"{size + before + after}")
    return (size + before + after - dilated) // stride + 1


def conv_nd(data: Tensor, kernel: Tensor, strides: Sequence[int], pads_before: Sequence[int],
            pads_after: Sequence[int], dilations: Sequence[int], groups: int = 1,
            out_dtype: str | None = None) -> Tensor:
    """Convolution of ``data`` ``[N, C, D1..Dk]`` with ``kernel`` ``[O, C/groups, K1..Kk]``:
    ``[N, O, O1..Ok]``."""
    op = "conv_nd"
    expect_same_dtype(op, "data", data, "kernel", kernel)
    k = data.ndim - 2
    if k < 1 or kernel.ndim != k + 2:
        fail(op, f"data {list(data.shape)} and kernel {list(kernel.shape)} must be [N, C, ...] "
                 "and [O, C/groups, ...] with the same number of spatial dims")
    strides = _ints(op, "strides", strides, k, 1)
    dilations = _ints(op, "dilations", dilations, k, 1)
    before = _ints(op, "pads_before", pads_before, k, 0)
    after = _ints(op, "pads_after", pads_after, k, 0)
    n, c = data.shape[:2]
    o, cg = kernel.shape[:2]
    if groups < 1 or c % groups or o % groups or cg * groups != c:
        fail(op, f"groups={groups} must divide the {c} input and {o} output channels, with "
                 f"kernel [{o}, {cg}, ...] holding C/groups input channels")
    out = [conv_nd_size(op, data.shape[2 + j], kernel.shape[2 + j], strides[j], dilations[j],
                        before[j], after[j]) for j in range(k)]
    padded = data
    if any(before) or any(after):
        padded = pad_compute(data, [0, 0] + before, [0, 0] + after, 0.0, "pad_temp", ax_names,
                             op)
    acc = out_dtype or accumulate_dtype(data.dtype)
    rc = te.reduce_axis((0, cg), name="rc")
    rs = [te.reduce_axis((0, kernel.shape[2 + j]), name=f"r{j}") for j in range(k)]
    per_group = o // groups

    def fcompute(nn, ff, *y):
        chan = rc if groups == 1 else ff // per_group * cg + rc
        pos = [offset(scale(y[j], strides[j]), scale(rs[j], dilations[j])) for j in range(k)]
        return te.sum(cast_to(padded(nn, chan, *pos), acc) * cast_to(kernel(ff, rc, *rs), acc),
                      axis=[rc, *rs])

    name_tag = CONV3D_NCDHW if k == 3 else CONV_ND
    res = compute_named((n, o, *out), ["nn", "ff"] + [f"y{j}" for j in range(k)], fcompute,
                        "compute", name_tag)
    return cast_output(res, out_dtype or data.dtype)


def conv_transpose_size(size: int, k: int, stride: int, dilation: int, before: int, after: int,
                        output_padding: int) -> int:
    """Output extent of a transposed convolution along one axis (ONNX's formula)."""
    return stride * (size - 1) + output_padding + (k - 1) * dilation + 1 - before - after


def conv_transpose_nd(data: Tensor, kernel: Tensor, strides: Sequence[int],
                      pads_before: Sequence[int], pads_after: Sequence[int],
                      dilations: Sequence[int], output_padding: Sequence[int],
                      groups: int = 1) -> Tensor:
    """Transposed convolution of ``data`` ``[N, C, D1..Dk]`` with ``kernel``
    ``[C, O/groups, K1..Kk]`` (ONNX's layout): ``[N, O, O1..Ok]``, each output extent
    :func:`conv_transpose_size`."""
    op = "conv_transpose"
    expect_same_dtype(op, "data", data, "kernel", kernel)
    k = data.ndim - 2
    if k < 1 or kernel.ndim != k + 2:
        fail(op, f"data {list(data.shape)} and kernel {list(kernel.shape)} must be [N, C, ...] "
                 "and [C, O/groups, ...] with the same number of spatial dims")
    strides = _ints(op, "strides", strides, k, 1)
    dilations = _ints(op, "dilations", dilations, k, 1)
    before = _ints(op, "pads_before", pads_before, k, 0)
    after = _ints(op, "pads_after", pads_after, k, 0)
    extra = _ints(op, "output_padding", output_padding, k, 0)
    n, c = data.shape[:2]
    if kernel.shape[0] != c:
        fail(op, f"kernel {list(kernel.shape)} must have the data's {c} input channels first")
    if groups < 1 or c % groups:
        fail(op, f"groups={groups} must divide the {c} input channels")
    og = kernel.shape[1]
    cg = c // groups
    spatial = list(data.shape[2:])
    ksize = list(kernel.shape[2:])
    out = [conv_transpose_size(spatial[j], ksize[j], strides[j], dilations[j], before[j],
                               after[j], extra[j]) for j in range(k)]
    if any(v < 1 for v in out):
        fail(op, f"the output would have extents {out}; the padding is too large")
    acc = accumulate_dtype(data.dtype)
    rc = te.reduce_axis((0, cg), name="rc")
    # an axis with stride s > 1 and dilation 1 only reduces over the taps of the output's
    # phase: tap r = (y + pad) mod s + s * t reads input (y + pad) // s - t, for
    # t < ceil(K / s); other axes visit every tap and skip those that miss the stride
    phased = [strides[j] > 1 and dilations[j] == 1 for j in range(k)]
    rs = [te.reduce_axis((0, -(-ksize[j] // strides[j]) if phased[j] else ksize[j]),
                         name=f"r{j}") for j in range(k)]

    def fcompute(nn, ff, *y):
        chan = rc if groups == 1 else ff // og * cg + rc
        conds = []
        pos = []
        taps = []
        for j in range(k):
            s, size = strides[j], spatial[j]
            if phased[j]:
                shifted = y[j] + before[j]
                tap = te.floormod(shifted, s) + scale(rs[j], s)
                q = te.floordiv(shifted, s) - rs[j]
                if ksize[j] % s:
                    conds.append(tap < ksize[j])
                conds.append(q >= 0)
                tap = emin(tap, ksize[j] - 1)
            else:
                t = y[j] + before[j] - scale(rs[j], dilations[j])
                q = t if s == 1 else te.floordiv(t, s)
                conds.append(t >= 0)
                if s != 1:
                    conds.append(te.floormod(t, s) == 0)
                tap = rs[j]
            conds.append(q < size)
            # clamped, so that the read stays inside the input where the tap does not count
            pos.append(emin(emax(q, 0), size - 1))
            taps.append(tap)
        value = (cast_to(data(nn, chan, *pos), acc)
                 * cast_to(kernel(chan, ff % og if groups > 1 else ff, *taps), acc))
        return te.sum(te.if_then_else(te.all(*conds), value, te.const(0.0, acc)),
                      axis=[rc, *rs])

    res = compute_named((n, og * groups, *out), ["nn", "ff"] + [f"y{j}" for j in range(k)],
                        fcompute, "compute", CONV_TRANSPOSE)
    return cast_output(res, data.dtype)


def conv_nd_reference(x: np.ndarray, w: np.ndarray, strides, pads_before, pads_after,
                      dilations, groups: int = 1) -> np.ndarray:
    """Numpy :func:`conv_nd` (float64 arithmetic, the data's dtype out)."""
    k = x.ndim - 2
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + list(zip(pads_before, pads_after)))
    o, cg = w.shape[:2]
    out = [conv_nd_size("conv_nd", x.shape[2 + j], w.shape[2 + j], strides[j], dilations[j],
                        pads_before[j], pads_after[j]) for j in range(k)]
    res = np.zeros((x.shape[0], o, *out))
    per_group = o // groups
    for taps in np.ndindex(*w.shape[2:]):
        index = tuple(slice(taps[j] * dilations[j],
                            taps[j] * dilations[j] + (out[j] - 1) * strides[j] + 1, strides[j])
                      for j in range(k))
        for g in range(groups):
            xs = xp[(slice(None), slice(g * cg, (g + 1) * cg)) + index]
            ws = w[(slice(g * per_group, (g + 1) * per_group), slice(None)) + taps]
            res[:, g * per_group:(g + 1) * per_group] += np.einsum(
                "nc...,oc->no...", xs, ws.astype(np.float64))
    return res.astype(x.dtype)


def conv_transpose_nd_reference(x: np.ndarray, w: np.ndarray, strides, pads_before, pads_after,
                                dilations, output_padding, groups: int = 1) -> np.ndarray:
    """Numpy :func:`conv_transpose_nd`: every input element scattered through the kernel
    into a full-size output, then the padding cropped."""
    k = x.ndim - 2
    n, c = x.shape[:2]
    og = w.shape[1]
    cg = c // groups
    full = [strides[j] * (x.shape[2 + j] - 1) + output_padding[j]
            + (w.shape[2 + j] - 1) * dilations[j] + 1 for j in range(k)]
    res = np.zeros((n, og * groups, *full))
    for taps in np.ndindex(*w.shape[2:]):
        index = tuple(slice(taps[j] * dilations[j],
                            taps[j] * dilations[j] + (x.shape[2 + j] - 1) * strides[j] + 1,
                            strides[j]) for j in range(k))
        for g in range(groups):
            xs = x[:, g * cg:(g + 1) * cg].astype(np.float64)
            ws = w[(slice(g * cg, (g + 1) * cg), slice(None)) + taps].astype(np.float64)
            res[(slice(None), slice(g * og, (g + 1) * og)) + index] += np.einsum(
                "nc...,co->no...", xs, ws)
    crop = tuple(slice(pads_before[j], full[j] - pads_after[j]) for j in range(k))
    out = res[(slice(None), slice(None)) + crop]
    return out.astype(x.dtype)


def _register_default_schedules() -> None:
    """The tiled schedule of conv2d (shared-memory staging of the data and weights shared by
    a block, a register tile per thread) for these convolutions: the analytical estimate
    puts it at about 2.7x (3-D) and 1.3-3x (transposed) the generic reduction schedule."""
    from ..schedules import register_schedule
    from ..schedules.tiled import schedule_tiled

    for name in (CONV3D_NCDHW, CONV_ND, CONV_TRANSPOSE):
        register_schedule(name, schedule_tiled)


_register_default_schedules()
