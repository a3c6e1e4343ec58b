"""Converters of products, convolutions, normalizations, pools and resizes (attention:
:mod:`.convert_attention`)."""

from __future__ import annotations

import numpy as np

from ..ir import Call, Node
from .helpers import broadcast_to, numel, operand, reshape
from .registry import converter


class Unavailable:
    """A value the importer does not compute (the indices of a max pool): using it is an
    error that says so."""

    def __init__(self, what: str):
        self.what = what


# -- products -----------------------------------------------------------------------------

def _transposed_weight(x: Node) -> Node | None:
    """The [N, K] matrix whose transpose ``x`` is, when ``x`` is ``transpose(w, [1, 0])``."""
    if isinstance(x, Call) and x.op == "transpose" and tuple(x.attrs["axes"]) == (1, 0):
        return x.args[0]
    return None


def _product(cx, m1: Node, m2: Node) -> Node:
    weight = _transposed_weight(m2)
    if weight is not None:
        return cx.call("nn.dense", [m1, weight])
    return cx.call("nn.matmul", [m1, m2])


@converter("aten.mm.default", needs=("nn.dense", "nn.matmul"),
           maps_to="nn.dense (x @ w^T) or nn.matmul")
def _mm(cx, a):
    return _product(cx, a.self, a.mat2)


@converter("aten.addmm.default", needs=("nn.dense", "nn.matmul", "add", "multiply"),
           maps_to="nn.dense or nn.matmul, then add")
def _addmm(cx, a):
    dtype = cx.out_dtype()
    prod = _product(cx, a.mat1, a.mat2)
    if a.alpha != 1:
        prod = cx.call("multiply", [prod, cx.const(a.alpha, dtype)])
    bias = operand(cx, a.self, dtype)
    if a.beta == 0:
        return prod
    if a.beta != 1:
        bias = cx.call("multiply", [bias, cx.const(a.beta, dtype)])
    return cx.call("add", [prod, bias])


@converter("aten.bmm.default", needs="nn.batch_matmul")
def _bmm(cx, a):
    return cx.call("nn.batch_matmul", [a.self, a.mat2], {"transpose_b": False})


# -- convolution --------------------------------------------------------------------------

@converter("aten.convolution.default",
           needs=("nn.conv2d", "nn.conv_nd", "nn.conv_transpose", "nn.bias_add", "reshape"),
           maps_to="nn.conv2d (1-D through a 2-D view), nn.conv_nd (3-D), nn.conv_transpose "
                   "(transposed); nn.bias_add")
def _convolution(cx, a):
    x, w = a.input, a.weight
    nd = x.ndim - 2
    if a.transposed:
        return _generic_conv(cx, a, "nn.conv_transpose", transposed=True)
    if nd == 3:
        return _generic_conv(cx, a, "nn.conv_nd")
    stride, pad, dil = list(a.stride), list(a.padding), list(a.dilation)
    if nd == 1:
        x = reshape(cx, x, (x.shape[0], x.shape[1], 1, x.shape[2]))
        w = reshape(cx, w, (w.shape[0], w.shape[1], 1, w.shape[2]))
        stride, pad, dil = [1] + stride, [0] + pad, [1] + dil
    elif nd != 2:
        cx.fail(f"a {nd}-D convolution is not supported")
    out = cx.call("nn.conv2d", [x, w], {"strides": stride, "padding": pad, "dilation": dil,
                                        "groups": a.groups})
    if a.bias is not None:
        out = cx.call("nn.bias_add", [out, a.bias], {"axis": 1})
    return reshape(cx, out, cx.out_shape())


def _generic_conv(cx, a, op, transposed=False):
    """``nn.conv_nd`` / ``nn.conv_transpose``: ONNX-style padding (the befores, then the
    afters)."""
    attrs = {"strides": tuple(a.stride), "padding": tuple(a.padding) * 2,
             "dilation": tuple(a.dilation), "groups": a.groups}
    if transposed:
        attrs["output_padding"] = tuple(a.output_padding)
    out = cx.call(op, [a.input, a.weight], attrs)
    if a.bias is not None:
        out = cx.call("nn.bias_add", [out, a.bias], {"axis": 1})
    return out


# -- normalization ------------------------------------------------------------------------

def _ones(cx, n, dtype):
    return cx.const(np.ones(n), dtype)


def _zeros(cx, n, dtype):
    return cx.const(np.zeros(n), dtype)


def _batch_norm(cx, x, weight, bias, mean, var, eps):
    c = x.shape[1]
    weight = weight if weight is not None else _ones(cx, c, x.dtype)
    bias = bias if bias is not None else _zeros(cx, c, x.dtype)
    out = cx.call("nn.batch_norm", [x, weight, bias, mean, var],
                  {"axis": 1, "epsilon": float(eps)})
    return (out, Unavailable("the saved mean of batch norm"),
            Unavailable("the saved inverse deviation of batch norm"))


@converter("aten._native_batch_norm_legit_no_training.default", needs="nn.batch_norm")
def _bn_inference(cx, a):
    return _batch_norm(cx, a.input, a.weight, a.bias, a.running_mean, a.running_var, a.eps)


@converter("aten._native_batch_norm_legit.default", needs="nn.batch_norm",
           note="training=False only")
def _bn_legit(cx, a):
    if a.training:
        cx.fail("batch norm in training mode uses the batch's statistics; put the module in "
                "eval mode")
    return _batch_norm(cx, a.input, a.weight, a.bias, a.running_mean, a.running_var, a.eps)


def _moments(cx, x, axes, eps):
    mu = cx.call("mean", [x], {"axis": axes, "keepdims": True})
    d = cx.call("subtract", [x, mu])
    var = cx.call("mean", [cx.call("multiply", [d, d])], {"axis": axes, "keepdims": True})
    rstd = cx.call("rsqrt", [cx.call("add", [var, cx.const(eps, x.dtype)])])
    return mu, rstd


@converter("aten.native_layer_norm.default",
           needs=("nn.layer_norm", "reshape", "mean", "subtract", "multiply", "rsqrt", "add"),
           maps_to="nn.layer_norm over the merged normalized dimensions")
def _layer_norm(cx, a):
    x = a.input
    k = len(a.normalized_shape)
    inner = numel(x.shape[x.ndim - k:])
    flat = reshape(cx, x, tuple(x.shape[:x.ndim - k]) + (inner,))
    gamma = reshape(cx, a.weight, (inner,)) if a.weight is not None else \
        _ones(cx, inner, x.dtype)
    beta = reshape(cx, a.bias, (inner,)) if a.bias is not None else _zeros(cx, inner, x.dtype)
    out = cx.call("nn.layer_norm", [flat, gamma, beta], {"axis": -1, "epsilon": float(a.eps)})
    mu, rstd = _moments(cx, x, tuple(range(x.ndim - k, x.ndim)), a.eps)
    return reshape(cx, out, x.shape), mu, rstd


@converter("aten.native_group_norm.default",
           needs=("nn.group_norm", "reshape", "mean", "subtract", "multiply", "rsqrt", "add"),
           maps_to="nn.group_norm")
def _group_norm(cx, a):
    x = a.input
    n, c, g = a.N, a.C, a.group
    gamma = a.weight if a.weight is not None else _ones(cx, c, x.dtype)
    beta = a.bias if a.bias is not None else _zeros(cx, c, x.dtype)
    out = cx.call("nn.group_norm", [x, gamma, beta], {"num_groups": g,
                                                      "epsilon": float(a.eps)})
    flat = reshape(cx, x, (n, g, numel(x.shape[1:]) // g))
    mu, rstd = _moments(cx, flat, (2,), a.eps)
    return out, reshape(cx, mu, (n, g)), reshape(cx, rstd, (n, g))


# -- pooling ------------------------------------------------------------------------------

def _pool_args(a, nd: int):
    k = list(a.kernel_size) * (nd if len(a.kernel_size) == 1 else 1)
    s = list(a.stride) if a.stride else list(k)
    s = s * (nd if len(s) == 1 else 1)
    p = list(a.padding) * (nd if len(a.padding) == 1 else 1)
    return k, s, p


def _pool_indices(cx, a, k, s, p, d):
    """PyTorch's max-pool indices (flat within each channel's plane) from ONNX's (flat over
    the whole tensor)."""
    idx = cx.call("nn.max_pool_indices", [a.self], {
        "pool_size": tuple(k), "strides": tuple(s), "padding": tuple(p) * 2,
        "dilation": tuple(d), "ceil_mode": bool(a.ceil_mode)})
    return cx.call("floor_mod", [idx, cx.const(numel(a.self.shape[2:]), "int64")])


@converter("aten.max_pool2d_with_indices.default",
           needs=("nn.max_pool2d", "nn.max_pool_indices", "floor_mod"),
           maps_to="nn.max_pool2d; the indices by nn.max_pool_indices")
def _max_pool2d(cx, a):
    k, s, p = _pool_args(a, 2)
    d = list(a.dilation) * (2 if len(a.dilation) == 1 else 1)
    out = cx.call("nn.max_pool2d", [a.self], {"pool_size": k, "strides": s, "padding": p,
                                              "dilation": d, "ceil_mode": bool(a.ceil_mode)})
    return out, _pool_indices(cx, a, k, s, p, d)


@converter("aten.avg_pool2d.default", needs="nn.avg_pool2d", note="no divisor_override")
def _avg_pool2d(cx, a):
    if a.divisor_override is not None:
        cx.fail("divisor_override is not supported")
    k, s, p = _pool_args(a, 2)
    return cx.call("nn.avg_pool2d", [a.self], {
        "pool_size": k, "strides": s, "padding": p, "ceil_mode": bool(a.ceil_mode),
        "count_include_pad": bool(a.count_include_pad)})


@converter("aten.max_pool3d_with_indices.default",
           needs=("nn.pool", "nn.max_pool_indices", "floor_mod"),
           maps_to="nn.pool (max); the indices by nn.max_pool_indices")
def _max_pool3d(cx, a):
    k, s, p = _pool_args(a, 3)
    d = list(a.dilation) * (3 if len(a.dilation) == 1 else 1)
    out = cx.call("nn.pool", [a.self], {
        "pool_type": "max", "pool_size": tuple(k), "strides": tuple(s),
        "padding": tuple(p) * 2, "dilation": tuple(d), "ceil_mode": bool(a.ceil_mode)})
    return out, _pool_indices(cx, a, k, s, p, d)


@converter("aten.avg_pool3d.default", needs="nn.pool", maps_to="nn.pool (average)",
           note="no divisor_override")
def _avg_pool3d(cx, a):
    if a.divisor_override is not None:
        cx.fail("divisor_override is not supported")
    k, s, p = _pool_args(a, 3)
    return cx.call("nn.pool", [a.self], {
        "pool_type": "avg", "pool_size": tuple(k), "strides": tuple(s),
        "padding": tuple(p) * 2, "ceil_mode": bool(a.ceil_mode),
        "count_include_pad": bool(a.count_include_pad)})


@converter("aten._adaptive_avg_pool2d.default",
           needs=("nn.global_avg_pool2d", "nn.avg_pool2d"),
           maps_to="nn.global_avg_pool2d, or nn.avg_pool2d when the sizes divide",
           note="output sizes that divide the input's")
def _adaptive_avg_pool2d(cx, a):
    x = a.self
    oh, ow = (list(a.output_size) * 2)[:2] if len(a.output_size) == 1 else a.output_size
    h, w = x.shape[-2:]
    if (oh, ow) == (1, 1):
        return cx.call("nn.global_avg_pool2d", [x])
    if h % oh or w % ow:
        cx.fail(f"an output of {oh}x{ow} from {h}x{w} has windows of different sizes, which "
                "is not supported")
    kh, kw = h // oh, w // ow
    return cx.call("nn.avg_pool2d", [x], {"pool_size": [kh, kw], "strides": [kh, kw]})


@converter("aten._adaptive_avg_pool3d.default", needs=("mean",),
           maps_to="mean over the spatial axes", note="output 1x1x1 only")
def _adaptive_avg_pool3d(cx, a):
    if tuple(a.output_size) not in ((1,), (1, 1, 1)):
        cx.fail(f"only an output of 1x1x1 is supported, got {list(a.output_size)}")
    return cx.call("mean", [a.self], {"axis": (2, 3, 4), "keepdims": True})


# -- resizing -----------------------------------------------------------------------------

@converter("aten.upsample_nearest2d.vec", needs=("reshape", "multiply"),
           maps_to="reshape and broadcast (integer scales)", note="integer scale factors")
def _upsample_nearest(cx, a):
    x = a.input
    n, c, h, w = x.shape
    oh, ow = cx.out_shape()[2:]
    if oh % h or ow % w:
        cx.fail(f"a nearest resize from {h}x{w} to {oh}x{ow} is not by whole factors, which is "
                "not supported")
    fh, fw = oh // h, ow // w
    grid = reshape(cx, x, (n, c, h, 1, w, 1))
    return reshape(cx, broadcast_to(cx, grid, (n, c, h, fh, w, fw)), (n, c, oh, ow))


def _linear_weights(n_in: int, n_out: int, align_corners: bool, scale) -> np.ndarray:
    """The [n_out, n_in] matrix of PyTorch's linear interpolation along one axis."""
    out = np.arange(n_out, dtype=np.float64)
    if align_corners:
        src = out * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
    else:
        ratio = 1.0 / scale if scale else n_in / n_out
        src = np.maximum((out + 0.5) * ratio - 0.5, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    i1 = np.minimum(i0 + 1, n_in - 1)
    lam = src - i0
    w = np.zeros((n_out, n_in))
    np.add.at(w, (np.arange(n_out), i0), 1 - lam)
    np.add.at(w, (np.arange(n_out), i1), lam)
    return w


@converter("aten.upsample_bilinear2d.vec", needs=("nn.dense", "reshape", "transpose"),
           maps_to="two products with constant interpolation matrices (nn.dense)")
def _upsample_bilinear(cx, a):
    x = a.input
    n, c, h, w = x.shape
    oh, ow = cx.out_shape()[2:]
    scales = list(a.scale_factors) if a.scale_factors else [None, None]
    wh = cx.const(_linear_weights(h, oh, a.align_corners, scales[0]), x.dtype)
    ww = cx.const(_linear_weights(w, ow, a.align_corners, scales[1]), x.dtype)
    rows = cx.call("nn.dense", [reshape(cx, x, (n * c * h, w)), ww])
    cols = cx.call("transpose", [reshape(cx, rows, (n * c, h, ow))], {"axes": [0, 2, 1]})
    both = cx.call("nn.dense", [reshape(cx, cols, (n * c * ow, h)), wh])
    back = cx.call("transpose", [reshape(cx, both, (n * c, ow, oh))], {"axes": [0, 2, 1]})
    return reshape(cx, back, (n, c, oh, ow))
