"""2-D convolution in NCHW (kernel OIHW) and NHWC (kernel HWIO) layouts, as TOPI declares it.

Each is a padding stage followed by one reduction stage::

    pad_temp(i0, i1, i2, i3) = tir.if_then_else(..., data[i0, i1, (i2 - 1), (i3 - 1)], 0f)
    compute(nn, ff, yy, xx) += (pad_temp[nn, rc, (yy + ry), (xx + rx)]*kernel[ff, rc, ry, rx])

The window index is ``yy*stride + ry*dilation`` with the factors of 1 left out.
"""

from __future__ import annotations

from ...ir import te
from ...ir.te import Tensor
from .. import tag
from ..precision import check_precision, operand
from ..utils import (
    accumulate_dtype,
    cast_output,
    check_dtype,
    expect_ndim,
    expect_same_dtype,
    fail,
    int_pair,
    offset,
    scale,
)
from .pad import pad
from .utils import conv_output_size, pad_tuple


def _window(out_index, stride: int, red_index, dilation: int):
    return offset(scale(out_index, stride), scale(red_index, dilation))


def _conv_args(op, stride, padding, dilation, kh, kw):
    stride = int_pair(op, "stride", stride)
    dilation = int_pair(op, "dilation", dilation)
    dilated = ((kh - 1) * dilation[0] + 1, (kw - 1) * dilation[1] + 1)
    pads = pad_tuple(op, padding, dilated)
    return stride, dilation, pads


def conv2d_nchw(
    data: Tensor,
    kernel: Tensor,
    stride,
    padding,
    dilation=1,
    out_dtype: str | None = None,
    precision: str | None = None,
) -> Tensor:
    """Convolution of ``data`` [N, C, H, W] with ``kernel`` [K, C, KH, KW]: [N, K, OH, OW].

    ``stride`` and ``dilation`` are an int or (height, width); ``padding`` an int,
    (height, width), (top, left, bottom, right), "SAME" or "VALID". Products and sums are
    taken in ``out_dtype`` (default: the data's dtype; float16 and bfloat16 accumulate in
    float32 and round once, in a stage ``T_cast``). ``precision`` is ``"float32"`` or
    ``"tf32"`` for float32 inputs (None: :func:`ptxforge.ops.precision.default_precision`)
    and is kept in ``attrs["precision"]``. Stage ``compute``, tag ``conv2d_nchw``, reduce
    axes ``rc, ry, rx``.
    """
    op = "conv2d_nchw"
    expect_ndim(op, "data", data, 4, "NCHW")
    expect_ndim(op, "kernel", kernel, 4, ("O", "I", "KH", "KW"))
    expect_same_dtype(op, "data", data, "kernel", kernel)
    out_dtype = check_dtype(op, out_dtype, data.dtype)
    batch, in_channel, in_h, in_w = data.shape
    num_filter, channel, kh, kw = kernel.shape
    if channel != in_channel:
        fail(op, f"data has {in_channel} input channels but kernel expects {channel}")
    (sh, sw), (dh, dw), pads = _conv_args(op, stride, padding, dilation, kh, kw)
    out_h, out_w = conv_output_size(op, (in_h, in_w), (kh, kw), (sh, sw), (dh, dw), pads)
    top, left, bottom, right = pads
    temp = pad(data, [0, 0, top, left], [0, 0, bottom, right], name="pad_temp")
    rc = te.reduce_axis((0, in_channel), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    acc = accumulate_dtype(out_dtype)
    precision = check_precision(op, precision, data.dtype)
    return cast_output(te.compute(
        (batch, num_filter, out_h, out_w),
        lambda nn, ff, yy, xx: te.sum(
            operand(temp[nn, rc, _window(yy, sh, ry, dh), _window(xx, sw, rx, dw)], acc,
                    precision)
            * operand(kernel[ff, rc, ry, rx], acc, precision),
            axis=[rc, ry, rx],
        ),
        tag=tag.CONV2D_NCHW,
        attrs={"precision": precision},
    ), out_dtype)


def conv2d_nhwc(
    data: Tensor,
    kernel: Tensor,
    stride,
    padding,
    dilation=1,
    out_dtype: str | None = "float32",
    precision: str | None = None,
) -> Tensor:
    """Convolution of ``data`` [N, H, W, C] with ``kernel`` [KH, KW, C, K]: [N, OH, OW, K].

    Arguments as :func:`conv2d_nchw`; ``out_dtype`` defaults to float32 as in TOPI. Stage
    ``conv2d_nhwc``, tag ``conv2d_nhwc``, reduce axes ``ry, rx, rc``; the kernel is
    recorded as a layout-free placeholder.
    """
    op = "conv2d_nhwc"
    expect_ndim(op, "data", data, 4, "NHWC")
    expect_ndim(op, "kernel", kernel, 4, ("KH", "KW", "I", "O"))
    expect_same_dtype(op, "data", data, "kernel", kernel)
    out_dtype = check_dtype(op, out_dtype, data.dtype)
    batch, in_h, in_w, in_channel = data.shape
    kh, kw, channel, num_filter = kernel.shape
    if channel != in_channel:
        fail(op, f"data has {in_channel} input channels but kernel expects {channel}")
    (sh, sw), (dh, dw), pads = _conv_args(op, stride, padding, dilation, kh, kw)
    out_h, out_w = conv_output_size(op, (in_h, in_w), (kh, kw), (sh, sw), (dh, dw), pads)
    top, left, bottom, right = pads
    temp = pad(data, [0, top, left, 0], [0, bottom, right, 0], name="pad_temp")
    rc = te.reduce_axis((0, in_channel), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    acc = accumulate_dtype(out_dtype)
    precision = check_precision(op, precision, data.dtype)
    return cast_output(te.compute(
        (batch, out_h, out_w, num_filter),
        lambda nn, yy, xx, ff: te.sum(
            operand(temp[nn, _window(yy, sh, ry, dh), _window(xx, sw, rx, dw), rc], acc,
                    precision)
            * operand(kernel[ry, rx, rc, ff], acc, precision),
            axis=[ry, rx, rc],
        ),
        name="conv2d_nhwc",
        tag=tag.CONV2D_NHWC,
        attrs={"layout_free_placeholders": [kernel], "precision": precision},
    ), out_dtype)


def conv2d(
    data: Tensor,
    kernel: Tensor,
    strides,
    padding,
    dilation=1,
    layout: str = "NCHW",
    out_dtype: str | None = None,
    precision: str | None = None,
) -> Tensor:
    """:func:`conv2d_nchw` or :func:`conv2d_nhwc`, chosen by ``layout``; for both, an
    ``out_dtype`` of None means the data's dtype."""
    if layout == "NCHW":
        return conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype, precision)
    if layout == "NHWC":
        return conv2d_nhwc(data, kernel, strides, padding, dilation, out_dtype, precision)
    fail("conv2d", f"unknown layout {layout!r}; use 'NCHW' or 'NHWC'")
