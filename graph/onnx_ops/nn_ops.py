"""ONNX converters of convolution, pooling and normalization operators (resizing lives in
:mod:`.resize_ops`).

Data is channel-first as ONNX gives it. 1-D convolutions become ``nn.conv2d`` over a unit
height (reshapes around it), so they reach the 2-D kernels; 2-D pools stay
``nn.max_pool2d`` / ``nn.avg_pool2d`` (which ``convert_layout`` moves to NHWC); other ranks,
Lp pooling and ``MaxPool``'s ``Indices`` use ``nn.pool`` / ``nn.max_pool_indices``.
"""

from __future__ import annotations

import math

import numpy as np

from ...ops.schedules.block_reduce import MIN_ROW
from .. import opdefs as G
from ..frontend_onnx import OnnxImportError, register_converter
from ..ir import Constant, Node
from ..opdefs.conv_nd import conv_nd, conv_transpose
from ..opdefs.norm_nd import group_norm, lrn
from ..opdefs.pool_nd import max_pool_indices, pool
from .common import text_attr as _text


def _ints(v) -> list[int]:
    return [int(x) for x in v]


def _has(node, index: int, outputs: bool = False) -> bool:
    names = node.output if outputs else node.input
    return len(names) > index and bool(names[index])


def _reshaped(node: Node, shape) -> Node:
    """``node`` reshaped (a constant is reshaped at import time)."""
    shape = tuple(int(s) for s in shape)
    if node.shape == shape:
        return node
    if isinstance(node, Constant):
        return Constant(node.value.reshape(shape), node.name)
    return G.reshape(node, shape)


def _window_attrs(node, a, k: int, kernel) -> tuple[list, list, list, list]:
    """``(strides, dilations, pads_before, pads_after)`` of a sliding-window node over ``k``
    spatial axes (``auto_pad`` resolved against the input sizes in ``a["__in"]``)."""
    strides = _ints(a.get("strides", [1] * k))
    dilations = _ints(a.get("dilations", [1] * k))
    for what, vals in (("strides", strides), ("dilations", dilations)):
        if len(vals) != k:
            raise OnnxImportError(f"{node.op_type} {node.name!r}: {what} {vals} must have one "
                                  f"entry per spatial axis ({k})")
    auto = _text(a.get("auto_pad"), "NOTSET")
    sizes = a["__in"]
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        before, after = [], []
        for size, kk, s, d in zip(sizes, kernel, strides, dilations):
            total = max((-(-size // s) - 1) * s + (kk - 1) * d + 1 - size, 0)
            small, big = total // 2, total - total // 2
            before.append(big if auto == "SAME_LOWER" else small)
            after.append(small if auto == "SAME_LOWER" else big)
        return strides, dilations, before, after
    if auto == "VALID":
        return strides, dilations, [0] * k, [0] * k
    if auto != "NOTSET":
        raise OnnxImportError(f"{node.op_type} {node.name!r}: unknown auto_pad {auto!r}")
    pads = _ints(a.get("pads", [0] * (2 * k)))
    if len(pads) != 2 * k:
        raise OnnxImportError(f"{node.op_type} {node.name!r}: pads {pads} must have two entries "
                              f"per spatial axis ({2 * k})")
    return strides, dilations, pads[:k], pads[k:]


def _spatial_rank(node, x: Node, least: int = 1) -> int:
    k = x.ndim - 2
    if k < least:
        raise OnnxImportError(f"{node.op_type} {node.name!r}: the input must be [N, C] and at "
                              f"least {least} spatial dimension(s), got {list(x.shape)}")
    return k


def _bias_add(im, node, y: Node, index: int, k: int) -> Node:
    if not _has(node, index):
        return y
    b = im.tensor(node.input[index])
    return G.add(y, _reshaped(b, (b.shape[0],) + (1,) * k))


# -- convolutions ------------------------------------------------------------------------------


@register_converter("Conv")
def _conv(im, node, a):
    x = im.tensor(node.input[0])
    y = convolution(node, a, x, im.tensor(node.input[1]))
    return _bias_add(im, node, y, 2, x.ndim - 2)


def convolution(node, a, x: Node, w: Node) -> Node:
    """ONNX's ``Conv`` of ``x`` by ``w`` without the bias (attributes ``a``), 1-D to 3-D;
    ``ConvInteger`` and ``QLinearConv`` use it on their int32 operands."""
    k = _spatial_rank(node, x)
    if w.ndim != k + 2:
        raise OnnxImportError(f"{node.op_type} {node.name!r}: weight {list(w.shape)} must "
                              f"have {k + 2} dimensions for input {list(x.shape)}")
    kernel = list(w.shape[2:])
    if "kernel_shape" in a and _ints(a["kernel_shape"]) != kernel:
        raise OnnxImportError(f"{node.op_type} {node.name!r}: kernel_shape "
                              f"{_ints(a['kernel_shape'])} does not match the weight "
                              f"{list(w.shape)}")
    strides, dil, before, after = _window_attrs(node, {**a, "__in": x.shape[2:]}, k, kernel)
    groups = int(a.get("group", 1))
    if k == 1:
        n, c, length = x.shape
        y = G.conv2d(_reshaped(x, (n, c, 1, length)), _reshaped(w, w.shape[:2] + (1, kernel[0])),
                     (1, strides[0]), (0, before[0], 0, after[0]), (1, dil[0]), groups=groups)
        return _reshaped(y, (n, y.shape[1], y.shape[3]))
    if k == 2:
        return G.conv2d(x, w, strides, (before[0], before[1], after[0], after[1]), dil,
                        groups=groups)
    if k == 3:
        return conv_nd(x, w, strides, before + after, dil, groups)
    raise OnnxImportError(f"{node.op_type} {node.name!r}: {k}-D convolutions are not "
                          "supported (1-D, 2-D and 3-D are)")


@register_converter("ConvTranspose")
def _conv_transpose(im, node, a):
    x = im.tensor(node.input[0])
    w = im.tensor(node.input[1])
    k = _spatial_rank(node, x)
    if k > 3 or w.ndim != k + 2:
        raise OnnxImportError(f"ConvTranspose {node.name!r}: takes 1-D to 3-D data with a "
                              f"weight of the same rank, got {list(x.shape)} and "
                              f"{list(w.shape)}")
    kernel = list(w.shape[2:])
    strides = _ints(a.get("strides", [1] * k))
    dil = _ints(a.get("dilations", [1] * k))
    extra = _ints(a.get("output_padding", [0] * k))
    groups = int(a.get("group", 1))
    auto = _text(a.get("auto_pad"), "NOTSET")
    full = [s * (size - 1) + e + (kk - 1) * d + 1
            for size, kk, s, d, e in zip(x.shape[2:], kernel, strides, dil, extra)]
    if "output_shape" in a or auto in ("SAME_UPPER", "SAME_LOWER"):
        if "output_shape" in a:
            want = _ints(a["output_shape"])[-k:]
        else:
            want = [size * s for size, s in zip(x.shape[2:], strides)]
        before, after = [], []
        for j in range(k):
            total = full[j] - want[j]
            if total < 0:  # a larger output than the taps reach: zeros at the end
                extra[j] -= total
                total = 0
            small, big = total // 2, total - total // 2
            upper = auto != "SAME_LOWER"
            before.append(small if upper else big)
            after.append(big if upper else small)
    elif auto == "VALID" or "pads" not in a:
        before, after = [0] * k, [0] * k
    else:
        pads = _ints(a["pads"])
        before, after = pads[:k], pads[k:]
    y = conv_transpose(x, w, strides, before + after, dil, extra, groups)
    return _bias_add(im, node, y, 2, k)


# -- pooling -----------------------------------------------------------------------------------


def _pool_converter(kind: str):
    def convert(im, node, a):
        x = im.tensor(node.input[0])
        k = _spatial_rank(node, x)
        kernel = _ints(a["kernel_shape"])
        if len(kernel) != k:
            raise OnnxImportError(f"{node.op_type} {node.name!r}: kernel_shape {kernel} does "
                                  f"not match the {k} spatial dims of {list(x.shape)}")
        strides, dil, before, after = _window_attrs(node, {**a, "__in": x.shape[2:]}, k,
                                                    kernel)
        ceil = bool(a.get("ceil_mode", 0))
        include = bool(a.get("count_include_pad", 0))
        if kind in ("max", "avg") and k == 2:
            pad4 = (before[0], before[1], after[0], after[1])
            if kind == "max":
                y = G.max_pool2d(x, kernel, strides, pad4, dil, ceil_mode=ceil)
            else:
                y = G.avg_pool2d(x, kernel, strides, pad4, dil, ceil_mode=ceil,
                                 count_include_pad=include)
        else:
            y = pool(x, kind, kernel, strides, before + after, dil, ceil, include,
                     int(a.get("p", 2)))
        if kind != "max" or not _has(node, 1, outputs=True):
            return y
        order = int(a.get("storage_order", 0))
        if order and k != 2:
            raise OnnxImportError(f"MaxPool {node.name!r}: storage_order=1 (column-major "
                                  "indices) is defined for 2-D pooling only")
        return [y, max_pool_indices(x, kernel, strides, before + after, dil, ceil, order)]

    return convert


register_converter("MaxPool")(_pool_converter("max"))
register_converter("AveragePool")(_pool_converter("avg"))
register_converter("LpPool")(_pool_converter("lp"))


def _global_converter(kind: str):
    def convert(im, node, a):
        x = im.tensor(node.input[0])
        k = _spatial_rank(node, x)
        if kind == "avg" and k == 2:
            return G.global_avg_pool2d(x)
        if kind == "max" and k == 2:
            return G.global_max_pool2d(x)
        return pool(x, kind, x.shape[2:], 1, 0, 1, p=int(a.get("p", 2)))

    return convert


register_converter("GlobalAveragePool")(_global_converter("avg"))
register_converter("GlobalMaxPool")(_global_converter("max"))
register_converter("GlobalLpPool")(_global_converter("lp"))


# -- normalizations ----------------------------------------------------------------------------


@register_converter("BatchNormalization")
def _batch_norm(im, node, a):
    training = bool(int(a.get("training_mode", 0)))
    if (training or any(_has(node, j, outputs=True) for j in (1, 2, 3, 4))) \
            and (im.opset < 14 or any(_has(node, j, outputs=True) for j in (3, 4))):
        raise OnnxImportError(
            f"BatchNormalization {node.name!r}: training mode before opset 14 (the saved "
            "statistics as outputs) is not supported; export the model in eval mode")
    x, scale, bias, mean, var = (im.tensor(i) for i in node.input[:5])
    if x.ndim < 2:
        raise OnnxImportError(f"BatchNormalization {node.name!r}: the input must be [N, C, ...],"
                              f" got {list(x.shape)}")
    eps = float(a.get("epsilon", 1e-5))
    if not training:
        return G.batch_norm(x, scale, bias, mean, var, 1, eps)
    # training mode (opset 14+): the batch's statistics over every axis but the channels
    # (the population variance) normalize; the running ones are blended with momentum
    axes = [d for d in range(x.ndim) if d != 1]
    batch_mean = G.mean(x, axes, False)
    centered = G.subtract(x, G.reshape(batch_mean, [1, -1] + [1] * (x.ndim - 2)))
    batch_var = G.mean(G.multiply(centered, centered), axes, False)
    y = G.batch_norm(x, scale, bias, batch_mean, batch_var, 1, eps)
    momentum = float(a.get("momentum", 0.9))

    def blend(running, current):
        keep = Constant(np.array(momentum, running.dtype), "", running.dtype)
        take = Constant(np.array(1 - momentum, current.dtype), "", current.dtype)
        return G.add(G.multiply(running, keep), G.multiply(current, take))

    return [y, blend(mean, batch_mean), blend(var, batch_var)]


def _stats(x: Node, axes: list[int], epsilon: float) -> tuple[Node, Node]:
    """Mean and ``1 / sqrt(var + epsilon)`` over ``axes``, kept as dimensions of size 1."""
    mean = G.mean(x, axes, True)
    centered = G.subtract(x, mean)
    var = G.mean(G.multiply(centered, centered), axes, True)
    return mean, G.rsqrt(G.add(var, Constant(np.array(epsilon, x.dtype))))


def _layer_norm_rows(x, gamma, beta, rows, width, full, eps, name):
    """``nn.layer_norm`` over ``rows`` rows of ``width`` elements (a row per thread)."""
    if full:
        g = _reshaped(gamma, (width,))
        b = (_reshaped(beta, (width,)) if beta is not None
             else Constant(np.zeros(width, x.dtype), f"{name}_beta"))
    else:  # scale and bias broadcast: normalize, then apply them element-wise
        g = Constant(np.ones(width, x.dtype), f"{name}_ones")
        b = Constant(np.zeros(width, x.dtype), f"{name}_zeros")
    if width == x.shape[-1]:
        y = G.layer_norm(x, g, b, -1, eps)
    else:
        y = _reshaped(G.layer_norm(_reshaped(x, (rows, width)), g, b, -1, eps), x.shape)
    if not full:
        y = G.multiply(y, gamma)
        if beta is not None:
            y = G.add(y, beta)
    return y


def _layer_norm_long_rows(x, gamma, beta, rows, width, full, eps, name):
    """Layer norm over several trailing axes holding many elements: ``nn.group_norm`` of
    ``x`` as ``[rows, 1, width]`` (its statistics take one block per row, where a thread
    per row would leave the GPU idle), the scale and bias its fused epilogue."""
    one = Constant(np.ones(1, x.dtype), f"{name}_one")
    zero = Constant(np.zeros(1, x.dtype), f"{name}_zero")
    y = group_norm(_reshaped(x, (rows, 1, width)), one, zero, 1, eps)
    if full:
        y = G.multiply(y, _reshaped(gamma, (1, 1, width)))
        if beta is not None:
            y = G.add(y, _reshaped(beta, (1, 1, width)))
        return _reshaped(y, x.shape)
    y = G.multiply(_reshaped(y, x.shape), gamma)
    return G.add(y, beta) if beta is not None else y


@register_converter("LayerNormalization")
def _layer_norm(im, node, a):
    x = im.tensor(node.input[0])
    axis = int(a.get("axis", -1))
    if not -x.ndim <= axis < x.ndim:
        raise OnnxImportError(f"LayerNormalization {node.name!r}: axis {axis} is out of range "
                              f"for input {list(x.shape)}")
    axis %= x.ndim
    eps = float(a.get("epsilon", 1e-5))
    gamma = im.tensor(node.input[1])
    beta = im.tensor(node.input[2]) if _has(node, 2) else None
    inner = x.shape[axis:]
    rows, width = math.prod(x.shape[:axis]), math.prod(inner)
    full = gamma.shape == inner and (beta is None or beta.shape == inner)
    # the last axis alone stays nn.layer_norm, the form the rest of the compiler knows
    layer_norm = _layer_norm_long_rows if axis < x.ndim - 1 and width >= MIN_ROW else \
        _layer_norm_rows
    y = layer_norm(x, gamma, beta, rows, width, full, eps, node.output[0])
    outs = [y]
    if _has(node, 1, outputs=True) or _has(node, 2, outputs=True):
        stash = int(a.get("stash_type", 1))
        xs = x if stash != 1 or x.dtype == "float32" else G.cast(x, "float32")
        outs += list(_stats(xs, list(range(axis, x.ndim)), eps))
    return outs


@register_converter("InstanceNormalization")
def _instance_norm(im, node, a):
    x = im.tensor(node.input[0])
    _spatial_rank(node, x)
    return group_norm(x, im.tensor(node.input[1]), im.tensor(node.input[2]), x.shape[1],
                      float(a.get("epsilon", 1e-5)))


@register_converter("GroupNormalization")
def _group_norm(im, node, a):
    x = im.tensor(node.input[0])
    if x.ndim < 2:
        raise OnnxImportError(f"GroupNormalization {node.name!r}: the input must be [N, C, ...],"
                              f" got {list(x.shape)}")
    groups = int(a["num_groups"])
    scale, bias = im.tensor(node.input[1]), im.tensor(node.input[2])
    # opset 18 takes scale and bias per group, opset 21 per channel; the operator takes both
    return group_norm(x, scale, bias, groups, float(a.get("epsilon", 1e-5)))


@register_converter("MeanVarianceNormalization")
def _mvn(im, node, a):
    x = im.tensor(node.input[0])
    axes = _ints(a.get("axes", [0, 2, 3]))
    if any(not -x.ndim <= ax < x.ndim for ax in axes):
        raise OnnxImportError(f"MeanVarianceNormalization {node.name!r}: axes {axes} are out "
                              f"of range for input {list(x.shape)}")
    axes = sorted(ax % x.ndim for ax in axes)
    mean = G.mean(x, axes, True)
    centered = G.subtract(x, mean)
    std = G.sqrt(G.mean(G.multiply(centered, centered), axes, True))
    # ONNX's definition: (x - mean) / (std + 1e-9)
    return G.divide(centered, G.add(std, Constant(np.array(1e-9, x.dtype))))


_TINY = {"float16": 6.103515625e-05, "bfloat16": 1.1754943508222875e-38,
         "float32": 1.1754943508222875e-38, "float64": 2.2250738585072014e-308}


@register_converter("LpNormalization")
def _lp_normalization(im, node, a):
    x = im.tensor(node.input[0])
    axis = int(a.get("axis", -1))
    p = int(a.get("p", 2))
    if p not in (1, 2):
        raise OnnxImportError(f"LpNormalization {node.name!r}: p must be 1 or 2, got {p}")
    if not -x.ndim <= axis < x.ndim:
        raise OnnxImportError(f"LpNormalization {node.name!r}: axis {axis} is out of range "
                              f"for input {list(x.shape)}")
    axis %= x.ndim
    length = Constant(np.array(x.shape[axis], x.dtype))
    squares = G.multiply(x, x)
    if p == 2:
        norm = G.sqrt(G.multiply(G.mean(squares, [axis], True), length))
    else:
        norm = G.multiply(G.mean(G.sqrt(squares), [axis], True), length)
    # a zero norm (an all-zero slice) gives 0 / tiny = 0 rather than 0 / 0
    return G.divide(x, G.maximum(norm, Constant(np.array(_TINY[x.dtype], x.dtype))))


@register_converter("LRN")
def _lrn(im, node, a):
    x = im.tensor(node.input[0])
    _spatial_rank(node, x, least=0)
    return lrn(x, int(a["size"]), float(a.get("alpha", 1e-4)), float(a.get("beta", 0.75)),
               float(a.get("bias", 1.0)))


from . import resize_ops  # noqa: E402,F401  (registers Resize and Upsample)
