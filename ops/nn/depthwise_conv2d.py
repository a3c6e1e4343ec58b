"""Depthwise 2-D convolution (one filter group per input channel, with a channel multiplier).

Output channel ``c`` reads input channel ``c // multiplier`` and filter
``(c // multiplier, c % multiplier)``; with a multiplier of 1 those fold to ``c`` and ``0``.
Stages ``PaddedInput`` and ``DepthwiseConv2d``, reduce axes ``di, dj``, as in TOPI.
"""

from __future__ import annotations

from ...ir import te
from ...ir.te import Tensor
from .. import tag
from ..utils import (
    accumulate_dtype,
    cast_output,
    cast_to,
    check_dtype,
    expect_ndim,
    expect_same_dtype,
    fail,
    idxdiv,
    idxmod,
    int_pair,
    offset,
    scale,
)
from .pad import pad
from .utils import conv_output_size, pad_tuple


def _args(op, stride, padding, dilation, kh, kw):
    stride = int_pair(op, "stride", stride)
    dilation = int_pair(op, "dilation", dilation)
    pads = pad_tuple(op, padding, ((kh - 1) * dilation[0] + 1, (kw - 1) * dilation[1] + 1))
    return stride, dilation, pads


def depthwise_conv2d_nchw(
    data: Tensor,
    kernel: Tensor,
    stride,
    padding,
    dilation=1,
    out_dtype: str | None = None,
) -> Tensor:
    """Depthwise convolution of ``data`` [N, C, H, W] with ``kernel`` [C, M, KH, KW]
    (``M`` the channel multiplier): [N, C*M, OH, OW]. Tag ``depthwise_conv2d_nchw``."""
    op = "depthwise_conv2d_nchw"
    expect_ndim(op, "data", data, 4, "NCHW")
    expect_ndim(op, "kernel", kernel, 4, ("C", "M", "KH", "KW"))
    expect_same_dtype(op, "data", data, "kernel", kernel)
    out_dtype = check_dtype(op, out_dtype, data.dtype)
    batch, in_channel, in_h, in_w = data.shape
    channel, mult, kh, kw = kernel.shape
    if channel != in_channel:
        fail(op, f"data has {in_channel} input channels but kernel expects {channel}")
    (sh, sw), (dh, dw), pads = _args(op, stride, padding, dilation, kh, kw)
    out_h, out_w = conv_output_size(op, (in_h, in_w), (kh, kw), (sh, sw), (dh, dw), pads)
    top, left, bottom, right = pads
    padded = pad(data, [0, 0, top, left], [0, 0, bottom, right], name="PaddedInput")
    di = te.reduce_axis((0, kh), name="di")
    dj = te.reduce_axis((0, kw), name="dj")
    acc = accumulate_dtype(out_dtype)  # 16-bit inputs sum in float32, round once
    return cast_output(te.compute(
        (batch, in_channel * mult, out_h, out_w),
        lambda b, c, i, j: te.sum(
            cast_to(
                padded[
                    b,
                    idxdiv(c, mult),
                    offset(scale(i, sh), scale(di, dh)),
                    offset(scale(j, sw), scale(dj, dw)),
                ],
                acc,
            )
            * cast_to(kernel[idxdiv(c, mult), idxmod(c, mult), di, dj], acc),
            axis=[di, dj],
        ),
        name="DepthwiseConv2d",
        tag=tag.DEPTHWISE_CONV2D_NCHW,
    ), out_dtype)


def depthwise_conv2d_nhwc(
    data: Tensor,
    kernel: Tensor,
    stride,
    padding,
    dilation=1,
    out_dtype: str | None = None,
) -> Tensor:
    """Depthwise convolution of ``data`` [N, H, W, C] with ``kernel`` [KH, KW, C, M]
    (TOPI's default ``HWOI`` layout; ``M`` the channel multiplier): [N, OH, OW, C*M].
    Tag ``depthwise_conv2d_nhwc``."""
    op = "depthwise_conv2d_nhwc"
    expect_ndim(op, "data", data, 4, "NHWC")
    expect_ndim(op, "kernel", kernel, 4, ("KH", "KW", "C", "M"))
    expect_same_dtype(op, "data", data, "kernel", kernel)
    out_dtype = check_dtype(op, out_dtype, data.dtype)
    batch, in_h, in_w, in_channel = data.shape
    kh, kw, channel, mult = kernel.shape
    if channel != in_channel:
        fail(op, f"data has {in_channel} input channels but kernel expects {channel}")
    (sh, sw), (dh, dw), pads = _args(op, stride, padding, dilation, kh, kw)
    out_h, out_w = conv_output_size(op, (in_h, in_w), (kh, kw), (sh, sw), (dh, dw), pads)
    top, left, bottom, right = pads
    padded = pad(data, [0, top, left, 0], [0, bottom, right, 0], name="PaddedInput")
    di = te.reduce_axis((0, kh), name="di")
    dj = te.reduce_axis((0, kw), name="dj")
    acc = accumulate_dtype(out_dtype)  # 16-bit inputs sum in float32, round once
    return cast_output(te.compute(
        (batch, out_h, out_w, in_channel * mult),
        lambda b, i, j, c: te.sum(
            cast_to(
                padded[
                    b,
                    offset(scale(i, sh), scale(di, dh)),
                    offset(scale(j, sw), scale(dj, dw)),
                    idxdiv(c, mult),
                ],
                acc,
            )
            * cast_to(kernel[di, dj, idxdiv(c, mult), idxmod(c, mult)], acc),
            axis=[di, dj],
        ),
        name="DepthwiseConv2d",
        tag=tag.DEPTHWISE_CONV2D_NHWC,
    ), out_dtype)
