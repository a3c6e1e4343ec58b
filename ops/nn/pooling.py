"""2-D max and average pooling, windowed and global, in NCHW or NHWC layout.

Follows TOPI's ``pooling.h``: an optional padding stage ``pad_temp`` (max pooling pads
with the lowest value of the dtype, average pooling with 0), a reduction stage ``tensor``
(tag ``pool_max`` or ``pool_sum``, reduce axes ``rv0, rv1``) and, for the average, a
stage ``tensor`` tagged ``elemwise`` that divides by the number of elements counted.
That divisor is a constant where it is the same for every window; otherwise an integer
expression of the output index, built only along the dimensions where it varies.
"""

from __future__ import annotations

from ...ir import dtype as dt
from ...ir import te
from ...ir.expr import Expr, as_expr, const, emax, emin
from ...ir.te import Tensor
from .. import tag
from ..utils import (
    accumulate_dtype,
    ax_names,
    cast_to,
    compute_named,
    expect_ndim,
    fail,
    idxdiv,
    int_pair,
    offset,
    scale,
)
from .pad import pad_compute
from .utils import conv_output_size, pad_tuple

_LAYOUTS = ("NCHW", "NHWC")
_LOWEST_FLOAT = {
    "float16": -65504.0,
    "bfloat16": -3.3895313892515355e38,
    "float32": -3.4028234663852886e38,
    "float64": -1.7976931348623157e308,
}


def min_value(dtype: str) -> Expr:
    """The lowest finite value of ``dtype`` (TVM's ``min_value``): max pooling's padding."""
    if dt.is_float(dtype):
        return const(_LOWEST_FLOAT[dtype], dtype)
    if dt.is_uint(dtype) or dtype == "bool":
        return const(0, dtype)
    return const(-(2 ** (dt.bits(dtype) - 1)), dtype)


def _layout_axes(op: str, layout: str) -> tuple[int, int]:
    if layout not in _LAYOUTS:
        fail(op, f"unknown layout {layout!r}; use one of {list(_LAYOUTS)}")
    return layout.index("H"), layout.index("W")


def pool2d(
    data: Tensor,
    kernel,
    stride,
    dilation,
    padding,
    pool_type: str,
    ceil_mode: bool = False,
    layout: str = "NCHW",
    count_include_pad: bool = True,
) -> Tensor:
    """Max (``pool_type="max"``) or average (``"avg"``) pooling over ``kernel`` windows.

    ``kernel``, ``stride`` and ``dilation`` are an int or (height, width); ``padding`` an
    int, (height, width), (top, left, bottom, right), "SAME" or "VALID". ``ceil_mode``
    rounds the output size up by padding the bottom/right with ``stride - 1`` more
    elements, which are never counted. ``count_include_pad`` makes the average divide by
    the window size including explicit padding; otherwise only by the real elements (at
    least 1). Output [N, C, OH, OW] or [N, OH, OW, C].
    """
    op = f"{pool_type}_pool2d" if pool_type in ("max", "avg") else "pool2d"
    if pool_type not in ("max", "avg"):
        fail(op, f"pool_type must be 'max' or 'avg', got {pool_type!r}")
    h_axis, w_axis = _layout_axes(op, layout)
    expect_ndim(op, "data", data, 4, layout)
    if pool_type == "avg" and not dt.is_float(data.dtype):
        fail(op, f"average pooling needs a float tensor, got {data.name} with dtype {data.dtype}")
    if data.dtype == "bool":
        fail(op, f"cannot pool bool tensor {data.name}")
    kh, kw = int_pair(op, "kernel", kernel)
    sh, sw = int_pair(op, "stride", stride)
    dh, dw = int_pair(op, "dilation", dilation)
    pads = pad_tuple(op, padding, ((kh - 1) * dh + 1, (kw - 1) * dw + 1))
    top, left, bottom, right = pads
    extra = (sh - 1, sw - 1) if ceil_mode else (0, 0)
    in_h, in_w = data.shape[h_axis], data.shape[w_axis]
    out_h, out_w = conv_output_size(op, (in_h, in_w), (kh, kw), (sh, sw), (dh, dw), pads, extra)
    shape = list(data.shape)
    shape[h_axis], shape[w_axis] = out_h, out_w

    before = [0] * 4
    after = [0] * 4
    before[h_axis], before[w_axis] = top, left
    after[h_axis], after[w_axis] = bottom + extra[0], right + extra[1]
    temp = data
    if any(before) or any(after):
        value = min_value(data.dtype) if pool_type == "max" else const(0, data.dtype)
        temp = pad_compute(data, before, after, value, "pad_temp", ax_names, op)

    rv0 = te.reduce_axis((0, kh), name="rv0")
    rv1 = te.reduce_axis((0, kw), name="rv1")
    reducer = te.max_reduce if pool_type == "max" else te.sum
    # averages of 16-bit data sum and divide in float32 and round once
    acc = data.dtype if pool_type == "max" else accumulate_dtype(data.dtype)

    def fwindow(*i):
        idx = list(i)
        idx[h_axis] = offset(scale(i[h_axis], sh), scale(rv0, dh))
        idx[w_axis] = offset(scale(i[w_axis], sw), scale(rv1, dw))
        return reducer(cast_to(temp(*idx), acc), axis=[rv0, rv1])

    window_tag = tag.POOL_MAX if pool_type == "max" else tag.POOL_SUM
    pooled = compute_named(shape, ax_names(4), fwindow, "tensor", window_tag)
    if pool_type == "max":
        return pooled

    if count_include_pad:
        # explicit padding counts; the ceil-mode extension never does
        lo_h, hi_h, lo_w, hi_w = -top, in_h + bottom - 1, -left, in_w + right - 1
    else:
        lo_h, hi_h, lo_w, hi_w = 0, in_h - 1, 0, in_w - 1
    count_h = _WindowCount(out_h, sh, top, kh, dh, lo_h, hi_h)
    count_w = _WindowCount(out_w, sw, left, kw, dw, lo_w, hi_w)

    def fdivide(*i):
        ch = count_h(i[h_axis])
        cw = count_w(i[w_axis])
        if isinstance(ch, int) and isinstance(cw, int):
            return cast_to(pooled(*i) / const(float(max(ch * cw, 1)), acc), data.dtype)
        if isinstance(ch, int):
            total = scale(cw, ch)
        elif isinstance(cw, int):
            total = scale(ch, cw)
        else:
            total = ch * cw
        if count_h.may_be_zero or count_w.may_be_zero:
            total = emax(total, 1)
        return cast_to(pooled(*i) / total.astype(acc), data.dtype)

    return compute_named(shape, ax_names(4), fdivide, "tensor", tag.ELEMWISE)


class _WindowCount:
    """How many taps ``t`` in ``[0, k)`` of the window at output ``o`` land in ``[lo, hi]``.

    The tap's position is ``o*stride - pad_before + t*dilation``. Calling it with the output
    var gives an int when the count is the same for every window, else an int32 expression
    that checks only the bound some window crosses.
    """

    def __init__(self, n_out, stride, pad_before, k, dilation, lo, hi):
        self.stride, self.pad_before, self.k, self.dilation = stride, pad_before, k, dilation
        self.lo, self.hi = lo, hi
        starts = [o * stride - pad_before for o in range(n_out)]
        counts = [
            sum(1 for t in range(k) if lo <= start + t * dilation <= hi) for start in starts
        ]
        self.constant = counts[0] if len(set(counts)) == 1 else None
        self.may_be_zero = min(counts) == 0
        self.need_lo = any(start < lo for start in starts)
        self.need_hi = any(start + (k - 1) * dilation > hi for start in starts)

    def __call__(self, o) -> int | Expr:
        if self.constant is not None:
            return self.constant
        s, d, k = self.stride, self.dilation, self.k
        o_s = scale(o, s)
        if not self.need_lo:
            # last tap at or below hi: floor((hi - start) / d), start = o*s - pad_before
            count = emin(idxdiv(as_expr(self.hi + self.pad_before) - o_s, d), k - 1) + 1
        else:
            # first tap at or above lo: ceil((lo - start) / d)
            first = emax(idxdiv(as_expr(self.lo + self.pad_before + d - 1) - o_s, d), 0)
            if self.need_hi:
                last = emin(idxdiv(as_expr(self.hi + self.pad_before) - o_s, d), k - 1)
                count = last - first + 1
            else:
                count = as_expr(k) - first
        return emax(count, 0) if self.may_be_zero else count


def max_pool2d(
    data: Tensor,
    pool_size,
    strides=1,
    padding=0,
    dilation=1,
    layout: str = "NCHW",
    ceil_mode: bool = False,
) -> Tensor:
    """Max pooling: :func:`pool2d` with ``pool_type="max"``."""
    return pool2d(data, pool_size, strides, dilation, padding, "max", ceil_mode, layout)


def avg_pool2d(
    data: Tensor,
    pool_size,
    strides=1,
    padding=0,
    dilation=1,
    layout: str = "NCHW",
    ceil_mode: bool = False,
    count_include_pad: bool = False,
) -> Tensor:
    """Average pooling: :func:`pool2d` with ``pool_type="avg"`` (padding not counted by
    default, as in Relay and ONNX)."""
    return pool2d(
        data, pool_size, strides, dilation, padding, "avg", ceil_mode, layout, count_include_pad
    )


def global_pool2d(data: Tensor, pool_type: str, layout: str = "NCHW") -> Tensor:
    """Max or average over the whole height and width: [N, C, 1, 1] or [N, 1, 1, C].

    Stage ``tensor`` tagged ``adaptive_pool_max`` / ``adaptive_pool_sum`` (reduce axes
    ``rv0, rv1``); the average divides in a second stage ``tensor`` tagged ``elemwise``.
    """
    op = f"global_{pool_type}_pool2d" if pool_type in ("max", "avg") else "global_pool2d"
    if pool_type not in ("max", "avg"):
        fail(op, f"pool_type must be 'max' or 'avg', got {pool_type!r}")
    h_axis, w_axis = _layout_axes(op, layout)
    expect_ndim(op, "data", data, 4, layout)
    if pool_type == "avg" and not dt.is_float(data.dtype):
        fail(op, f"average pooling needs a float tensor, got {data.name} with dtype {data.dtype}")
    if data.dtype == "bool":
        fail(op, f"cannot pool bool tensor {data.name}")
    in_h, in_w = data.shape[h_axis], data.shape[w_axis]
    shape = list(data.shape)
    shape[h_axis] = shape[w_axis] = 1
    rv0 = te.reduce_axis((0, in_h), name="rv0")
    rv1 = te.reduce_axis((0, in_w), name="rv1")
    reducer = te.max_reduce if pool_type == "max" else te.sum
    acc = data.dtype if pool_type == "max" else accumulate_dtype(data.dtype)

    def fwindow(*i):
        idx = list(i)
        idx[h_axis], idx[w_axis] = rv0, rv1
        return reducer(cast_to(data(*idx), acc), axis=[rv0, rv1])

    window_tag = tag.ADAPTIVE_POOL_MAX if pool_type == "max" else tag.ADAPTIVE_POOL_SUM
    pooled = compute_named(shape, ax_names(4), fwindow, "tensor", window_tag)
    if pool_type == "max":
        return pooled
    size = const(float(in_h * in_w), acc)
    return compute_named(shape, ax_names(4), lambda *i: cast_to(pooled(*i) / size, data.dtype),
                         "tensor", tag.ELEMWISE)


def global_avg_pool2d(data: Tensor, layout: str = "NCHW") -> Tensor:
    """Average over the whole height and width."""
    return global_pool2d(data, "avg", layout)


def global_max_pool2d(data: Tensor, layout: str = "NCHW") -> Tensor:
    """Maximum over the whole height and width."""
    return global_pool2d(data, "max", layout)
