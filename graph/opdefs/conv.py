"""``nn.conv2d``: 2-D convolution (plain, grouped and depthwise) in NCHW/OIHW or NHWC/HWIO.

Plain convolutions lower to ``ops.nn.conv2d_nchw`` / ``conv2d_nhwc``, depthwise ones
(``groups`` equal to the input channels) to ``ops.nn.depthwise_conv2d_*``, other groupings
to a grouped compute declared here.
"""

from __future__ import annotations

import numpy as np

from ... import ops
from ...ir import te
from ...ops import tag as optag
from ..ir import Call, Node, TensorType
from ..op import OpDef, OpPattern, register_op
from .common import (
    check_matrix_precision,
    expect_rank,
    fail,
    padding4,
    pair,
    precision_arg,
    same_dtype,
    window_out,
    with_precision,
)

KERNEL_LAYOUT = {"NCHW": "OIHW", "NHWC": "HWIO"}
"""The kernel layout that goes with each data layout."""


def _normalize(attrs: dict) -> dict:
    op = "nn.conv2d"
    out = dict(attrs)
    out["strides"] = pair(op, "strides", attrs["strides"])
    out["dilation"] = pair(op, "dilation", attrs["dilation"])
    out["padding"] = padding4(op, attrs["padding"])
    layout = attrs["data_layout"]
    if layout not in KERNEL_LAYOUT:
        fail(op, f"data_layout must be NCHW or NHWC, got {layout!r}")
    kl = attrs["kernel_layout"] or KERNEL_LAYOUT[layout]
    if kl != KERNEL_LAYOUT[layout]:
        fail(op, f"data_layout {layout} needs kernel_layout {KERNEL_LAYOUT[layout]}, got {kl!r}; "
                 "transpose the weight first")
    out["kernel_layout"] = kl
    groups = attrs["groups"]
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        fail(op, f"groups must be a positive int, got {groups!r}")
    return out


def conv_dims(data: TensorType, weight: TensorType, attrs: dict):
    """``(N, C, H, W, O, I, KH, KW)`` of a convolution, whatever its layout."""
    if attrs["data_layout"] == "NCHW":
        n, c, h, w = data.shape
        o, i, kh, kw = weight.shape
    else:
        n, h, w, c = data.shape
        kh, kw, i, o = weight.shape
    return n, c, h, w, o, i, kh, kw


def _infer(types: list[TensorType], attrs: dict) -> TensorType:
    op = "nn.conv2d"
    data, weight = types
    layout = attrs["data_layout"]
    expect_rank(op, "data", data, 4, layout)
    expect_rank(op, "weight", weight, 4, attrs["kernel_layout"])
    dtype = same_dtype(op, [data, weight])
    n, c, h, w, o, i, kh, kw = conv_dims(data, weight, attrs)
    g = attrs["groups"]
    if c % g or o % g:
        fail(op, f"groups={g} must divide the input channels ({c}) and output channels ({o})")
    if i * g != c:
        fail(op, f"data has {c} channels but weight {list(weight.shape)} "
                 f"({attrs['kernel_layout']}) expects {i} per group x {g} groups = {i * g}")
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilation"]
    top, left, bottom, right = attrs["padding"]
    oh = window_out(op, h, kh, sh, dh, top, bottom, "height")
    ow = window_out(op, w, kw, sw, dw, left, right, "width")
    check_matrix_precision(op, attrs, dtype)
    if attrs["precision"] == "tf32" and g != 1:
        fail(op, "precision 'tf32' is for dense convolutions (groups=1); grouped and "
                 "depthwise ones run on CUDA cores in float32")
    out_dtype = attrs["out_dtype"] or dtype
    shape = (n, o, oh, ow) if layout == "NCHW" else (n, oh, ow, o)
    return TensorType(shape, out_dtype)


def is_depthwise(data: TensorType, weight: TensorType, attrs: dict) -> bool:
    _, c, _, _, _, i, _, _ = conv_dims(data, weight, attrs)
    return attrs["groups"] == c and i == 1 and c > 1


def _lower(args: list, attrs: dict):
    data, weight = args
    layout = attrs["data_layout"]
    strides, pad, dil = attrs["strides"], attrs["padding"], attrs["dilation"]
    out_dtype = attrs["out_dtype"] or None
    dty = TensorType(data.shape, data.dtype)
    wty = TensorType(weight.shape, weight.dtype)
    if attrs["groups"] == 1:
        if layout == "NCHW":
            return ops.nn.conv2d_nchw(data, weight, strides, pad, dil, out_dtype,
                                      precision_arg(attrs))
        return ops.nn.conv2d_nhwc(data, weight, strides, pad, dil, out_dtype or data.dtype,
                                  precision_arg(attrs))
    n, c, h, w, o, i, kh, kw = conv_dims(dty, wty, attrs)
    if is_depthwise(dty, wty, attrs):
        mult = o // c
        if layout == "NCHW":
            # OIHW (C*M, 1, KH, KW) has the memory order of TOPI's (C, M, KH, KW)
            kernel = weight if mult == 1 else te.compute(
                (c, mult, kh, kw), lambda a, m, y, x: weight[a * mult + m, 0, y, x],
                name="kernel_view", tag=optag.INJECTIVE)
            return ops.nn.depthwise_conv2d_nchw(data, kernel, strides, pad, dil, out_dtype)
        kernel = te.compute((kh, kw, c, mult), lambda y, x, a, m: weight[y, x, 0, a * mult + m],
                            name="kernel_view", tag=optag.INJECTIVE)
        return ops.nn.depthwise_conv2d_nhwc(data, kernel, strides, pad, dil, out_dtype)
    return _grouped(data, weight, attrs, out_dtype or data.dtype)


def _grouped(data, weight, attrs, out_dtype):
    layout = attrs["data_layout"]
    dty = TensorType(data.shape, data.dtype)
    wty = TensorType(weight.shape, weight.dtype)
    n, c, h, w, o, i, kh, kw = conv_dims(dty, wty, attrs)
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilation"]
    top, left, bottom, right = attrs["padding"]
    oh = window_out("nn.conv2d", h, kh, sh, dh, top, bottom, "height")
    ow = window_out("nn.conv2d", w, kw, sw, dw, left, right, "width")
    per_group = o // attrs["groups"]
    rc = te.reduce_axis((0, i), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")

    def cast(v):
        return v if v.dtype == out_dtype else v.astype(out_dtype)

    if layout == "NCHW":
        padded = ops.nn.pad(data, [0, 0, top, left], [0, 0, bottom, right], name="pad_temp")
        return te.compute(
            (n, o, oh, ow),
            lambda nn, ff, yy, xx: te.sum(
                cast(padded[nn, te.floordiv(ff, per_group) * i + rc, yy * sh + ry * dh,
                            xx * sw + rx * dw]) * cast(weight[ff, rc, ry, rx]),
                axis=[rc, ry, rx]),
            name="group_conv2d_nchw", tag="group_conv2d_nchw")
    padded = ops.nn.pad(data, [0, top, left, 0], [0, bottom, right, 0], name="pad_temp")
    return te.compute(
        (n, oh, ow, o),
        lambda nn, yy, xx, ff: te.sum(
            cast(padded[nn, yy * sh + ry * dh, xx * sw + rx * dw,
                        te.floordiv(ff, per_group) * i + rc]) * cast(weight[ry, rx, rc, ff]),
            axis=[ry, rx, rc]),
        name="group_conv2d_nhwc", tag="group_conv2d_nhwc")


def conv2d_reference(data: np.ndarray, weight: np.ndarray, attrs: dict) -> np.ndarray:
    """Numpy convolution with the attributes of ``nn.conv2d``."""
    from ...ops import testing

    layout = attrs["data_layout"]
    if layout == "NHWC":
        data = data.transpose(0, 3, 1, 2)
        weight = weight.transpose(3, 2, 0, 1)
    g = attrs["groups"]
    strides, pad, dil = attrs["strides"], attrs["padding"], attrs["dilation"]
    if g == 1:
        out = testing.conv2d_nchw_python(data, weight, strides, pad, dil)
    else:
        o, i = weight.shape[0], weight.shape[1]
        outs = []
        for k in range(g):
            outs.append(testing.conv2d_nchw_python(
                data[:, k * i:(k + 1) * i], weight[k * (o // g):(k + 1) * (o // g)],
                strides, pad, dil))
        out = np.concatenate(outs, axis=1)
    out = out.astype(attrs["out_dtype"] or data.dtype)
    return out if layout == "NCHW" else out.transpose(0, 2, 3, 1)


register_op(OpDef(
    name="nn.conv2d", num_inputs=2, infer=_infer, lower=_lower,
    ref=with_precision(lambda a, attrs: conv2d_reference(a[0], a[1], attrs)),
    pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    defaults={"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1,
              "data_layout": "NCHW", "kernel_layout": "", "out_dtype": "", "precision": ""},
    normalize=_normalize,
))


def conv2d(data: Node, weight: Node, strides=(1, 1), padding=(0, 0), dilation=(1, 1),
           groups: int = 1, data_layout: str = "NCHW", kernel_layout: str = "",
           out_dtype: str = "", precision: str = "") -> Call:
    """2-D convolution. ``data_layout`` NCHW takes an OIHW weight ``[O, C/groups, KH, KW]``,
    NHWC an HWIO weight ``[KH, KW, C/groups, O]``; ``padding`` is an int, (height, width) or
    (top, left, bottom, right). ``groups`` equal to the channels is a depthwise conv."""
    return Call("nn.conv2d", [data, weight], {
        "strides": strides, "padding": padding, "dilation": dilation, "groups": groups,
        "data_layout": data_layout, "kernel_layout": kernel_layout, "out_dtype": out_dtype,
        "precision": precision})


from . import conv_nd  # noqa: E402,F401  (registers nn.conv_nd and nn.conv_transpose)
