"""Resizing (ONNX ``Resize`` / ``Upsample``) as a gather through per-axis tables.

Resizing is separable: along each resized axis, output position ``o`` reads a few input
positions ``idx[o, t]`` with weights ``w[o, t]``. Every mode (nearest with its rounding
rules, linear, cubic with ``cubic_coeff_a`` and ``exclude_outside``, antialiased
downsampling) and every coordinate transformation only changes those tables, which
:func:`axis_tables` computes once in numpy, exactly as ONNX's reference does (shapes are
static). The kernel (:func:`resize_gather`) then multiplies and sums: one stage
``resize`` (tag ``injective`` for nearest, a reduction over the taps ``t0, t1, ...``
otherwise). A row of ``-1`` indices marks an output position outside the crop of
``tf_crop_and_resize``, which takes ``extrapolation_value``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...ir import dtype as dt
from ...ir import te
from ...ir.expr import emax, emin
from ...ir.te import Tensor
from .. import tag
from ..utils import accumulate_dtype, ax_names, cast_to, compute_named, fail

MODES = ("nearest", "linear", "cubic")
COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                    "align_corners", "asymmetric", "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _source_coords(mode: str, out_size: int, in_size: int, scale: float, roi) -> tuple:
    y = np.arange(out_size, dtype=np.float64)
    width = scale * in_size
    outside = None
    if mode == "align_corners":
        x = np.zeros(out_size) if width == 1 else y * (in_size - 1) / (width - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_crop_and_resize":
        start, end = roi
        if width == 1:
            x = np.full(out_size, (end - start) * (in_size - 1) / 2)
        else:
            x = y * (end - start) * (in_size - 1) / (width - 1)
        x = x + start * (in_size - 1)
        outside = (x < 0) | (x > in_size - 1)
    elif mode == "pytorch_half_pixel":
        x = np.full(out_size, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        offset = in_size / 2 * (1 - out_size / width)
        x = offset + (y + 0.5) / scale - 0.5
    else:
        raise ValueError(f"unknown coordinate_transformation_mode {mode!r}; one of "
                         f"{list(COORDINATE_MODES)}")
    return x, outside


def _cubic(x: np.ndarray, a: float) -> np.ndarray:
    x = np.abs(x)
    return np.where(x <= 1, ((a + 2) * x - (a + 3)) * x * x + 1,
                    np.where(x < 2, ((a * x - 5 * a) * x + 8 * a) * x - 4 * a, 0.0))


def _coeffs(mode: str, ratio: float, scale: float, nearest_mode: str, cubic_a: float,
            antialias: bool) -> np.ndarray:
    if mode == "nearest":
        if float(ratio).is_integer():
            return np.array([0.0, 1.0])
        pick = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
                "floor": False, "ceil": True}[nearest_mode]
        return np.array([0.0, 1.0]) if pick else np.array([1.0, 0.0])
    if mode == "linear":
        if not antialias:
            return np.array([1 - ratio, ratio])
        s = min(scale, 1.0)
        start = int(np.floor(-1 / s) + 1)
        args = (np.arange(start, 2 - start) - ratio) * s
        c = np.clip(1 - np.abs(args), 0, 1)
        return c / c.sum()
    if not antialias:
        return _cubic(np.array([ratio + 1, ratio, 1 - ratio, 2 - ratio]), cubic_a)
    s = min(scale, 1.0)
    start = int(np.floor(-2 / s) + 1)
    c = _cubic(s * (np.arange(start, 2 - start) - ratio), cubic_a)
    return c / c.sum()


def axis_tables(in_size: int, out_size: int, scale: float, mode: str = "nearest",
                coordinate_mode: str = "half_pixel", nearest_mode: str = "round_prefer_floor",
                cubic_a: float = -0.75, exclude_outside: bool = False, antialias: bool = False,
                roi=(0.0, 1.0)) -> tuple[np.ndarray, np.ndarray]:
    """The int32 input positions ``[out_size, taps]`` and float32 weights of resizing one
    axis (ONNX ``Resize`` semantics; ``scale`` as ONNX uses it in the coordinate
    transformation). Rows of ``-1`` mark positions outside the crop."""
    if mode not in MODES:
        raise ValueError(f"unknown resize mode {mode!r}; one of {list(MODES)}")
    if nearest_mode not in NEAREST_MODES:
        raise ValueError(f"unknown nearest_mode {nearest_mode!r}; one of {list(NEAREST_MODES)}")
    x, outside = _source_coords(coordinate_mode, out_size, in_size, scale, roi)
    base = np.floor(x).astype(np.int64)
    ratios = np.where(x == base, 1.0, x - base)
    coeffs = np.stack([_coeffs(mode, float(r), scale, nearest_mode, cubic_a, antialias)
                       for r in ratios])
    n = coeffs.shape[1]
    # the n neighbours of x in an edge-padded axis, preferring the lower ones (the
    # reference's rule), in unpadded coordinates
    pad = -(-n // 2)
    xp = x + pad
    p = np.floor(xp).astype(np.int64)
    frac = xp - p
    if n % 2 == 0:
        first = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        first = np.where(frac <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    neighbours = (p + first)[:, None] + np.arange(n)[None, :] - pad
    if exclude_outside:
        coeffs = np.where((neighbours < 0) | (neighbours >= in_size), 0.0, coeffs)
        total = coeffs.sum(axis=1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    idx = np.clip(neighbours, 0, in_size - 1)
    if mode == "nearest":  # one-hot weights: keep the chosen tap only
        pick = np.argmax(coeffs, axis=1)
        idx = idx[np.arange(out_size), pick][:, None]
        coeffs = np.ones((out_size, 1))
    if outside is not None:
        idx = np.where(outside[:, None], -1, idx)
        coeffs = np.where(outside[:, None], 0.0, coeffs)
    return idx.astype(np.int32), coeffs.astype(np.float32)


def resize_gather(data: Tensor, axes: Sequence[int], tables: Sequence[tuple[Tensor, Tensor]],
                  nearest: bool, extrapolation: float | None = None) -> Tensor:
    """``data`` resized along ``axes`` through the (index, weight) ``tables`` of each axis
    (see :func:`axis_tables`); ``nearest`` tables have one tap and their weights (None
    allowed) are not read.
    With ``extrapolation``, an output whose index row is ``-1`` on any axis takes it."""
    op = "resize"
    if len(axes) != len(tables) or not axes:
        fail(op, f"one (index, weight) table pair per resized axis: {len(axes)} axes, "
                 f"{len(tables)} tables")
    if data.dtype == "bool" or (not nearest and not dt.is_float(data.dtype)):
        fail(op, f"{'nearest' if nearest else 'interpolating'} resize of {data.dtype} data is "
                 "not supported")
    shape = list(data.shape)
    for a, (idx, w) in zip(axes, tables):
        w = idx if w is None else w
        if idx.ndim != 2 or tuple(w.shape) != tuple(idx.shape) or idx.dtype != "int32":
            fail(op, f"axis {a}: the index table must be int32 [out, taps] and the weights "
                     f"the same shape, got {idx.dtype} {list(idx.shape)} and {list(w.shape)}")
        if nearest and idx.shape[1] != 1:
            fail(op, f"axis {a}: nearest resizing takes one tap, got {idx.shape[1]}")
        shape[a] = idx.shape[0]
    acc = data.dtype if nearest else accumulate_dtype(data.dtype)
    rts = [te.reduce_axis((0, idx.shape[1]), name=f"t{j}") for j, (idx, _) in enumerate(tables)]

    def source(i, taps):
        index = list(i)
        for j, a in enumerate(axes):
            # clamped both ways: whatever a table holds (a tuner fills it with random
            # integers), the read stays inside the data
            index[a] = emin(emax(tables[j][0](i[a], taps[j]), 0), data.shape[a] - 1)
        return data(*index)

    def inside(i):
        return te.all(*[tables[j][0](i[a], 0) >= 0 for j, a in enumerate(axes)])

    names = ax_names(data.ndim)
    if nearest:
        def fnearest(*i):
            value = source(i, [0] * len(axes))
            if extrapolation is None:
                return value
            return te.if_then_else(inside(i), value, te.const(float(extrapolation), data.dtype))

        return compute_named(shape, names, fnearest, "resize", tag.INJECTIVE)

    def fsum(*i):
        weight = None
        for j, a in enumerate(axes):
            wj = cast_to(tables[j][1](i[a], rts[j]), acc)
            weight = wj if weight is None else weight * wj
        return te.sum(weight * cast_to(source(i, rts), acc), axis=rts)

    total = compute_named(shape, names, fsum, "resize_sum", tag.COMM_REDUCE)

    def fout(*i):
        value = cast_to(total(*i), data.dtype)
        if extrapolation is None:
            return value
        return te.if_then_else(inside(i), value, te.const(float(extrapolation), data.dtype))

    return compute_named(shape, names, fout, "resize", tag.ELEMWISE)


def resize_reference(x: np.ndarray, axes: Sequence[int], tables: Sequence[tuple],
                     extrapolation: float | None = None) -> np.ndarray:
    """Numpy :func:`resize_gather` (float64 arithmetic, the data's dtype out)."""
    is_float = dt.is_float(dt.from_numpy(x.dtype))
    out = x.astype(np.float64) if is_float else x
    outside = np.zeros(out.shape, bool)
    for a, (idx, w) in zip(axes, tables):
        w = np.ones(idx.shape, np.float32) if w is None else w
        gathered = np.take(out, np.maximum(idx, 0), axis=a)  # [..., out, taps, ...]
        wshape = (1,) * a + w.shape + (1,) * (out.ndim - a - 1)
        if idx.shape[1] == 1 and not is_float:
            out = gathered.squeeze(a + 1)
        else:
            out = (gathered * w.astype(np.float64).reshape(wshape)).sum(axis=a + 1)
        outside = np.take(outside, np.maximum(idx[:, 0], 0), axis=a)
        mshape = (1,) * a + (idx.shape[0],) + (1,) * (out.ndim - a - 1)
        outside = outside | (idx[:, 0] < 0).reshape(mshape)
    if extrapolation is not None:
        out = np.where(outside, extrapolation, out)
    return out.astype(x.dtype)
