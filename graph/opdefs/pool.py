"""Pooling: ``nn.max_pool2d``, ``nn.avg_pool2d``, ``nn.global_avg_pool2d``,
``nn.global_max_pool2d`` in NCHW or NHWC.

In ceil mode the output size follows ONNX and PyTorch: a last window that would start in
the padding after the input is dropped (see :func:`ptxforge.ops.nn.pool_nd.pooled_size`).
Where that drops a window, the pool lowers to :func:`~ptxforge.ops.nn.pool_nd.pool_nd`;
elsewhere to :func:`~ptxforge.ops.nn.pool2d`, whose ceil mode keeps such a window.
"""

from __future__ import annotations

from ... import ops
from ...ops import testing
from ...ops.nn import pool_nd as P
from ..ir import Call, Node, TensorType
from ..op import OpDef, OpPattern, register_op
from .common import as_graph_error, expect_rank, fail, padding4, pair

_LAYOUTS = ("NCHW", "NHWC")


def _normalize(name):
    def normalize(attrs):
        out = dict(attrs)
        out["pool_size"] = pair(name, "pool_size", attrs["pool_size"])
        out["strides"] = pair(name, "strides", attrs["strides"])
        out["dilation"] = pair(name, "dilation", attrs["dilation"])
        out["padding"] = padding4(name, attrs["padding"])
        if attrs["layout"] not in _LAYOUTS:
            fail(name, f"layout must be NCHW or NHWC, got {attrs['layout']!r}")
        out["ceil_mode"] = bool(attrs["ceil_mode"])
        if "count_include_pad" in attrs:
            out["count_include_pad"] = bool(attrs["count_include_pad"])
        return out

    return normalize


def _pool_infer(name):
    def infer(types, attrs):
        (data,) = types
        layout = attrs["layout"]
        expect_rank(name, "data", data, 4, layout)
        h_axis, w_axis = layout.index("H"), layout.index("W")
        (kh, kw), (sh, sw), (dh, dw) = attrs["pool_size"], attrs["strides"], attrs["dilation"]
        top, left, bottom, right = attrs["padding"]
        ceil = attrs["ceil_mode"]
        shape = list(data.shape)
        with as_graph_error():
            shape[h_axis] = P.pooled_size(name, data.shape[h_axis], kh, sh, dh, top, bottom,
                                          ceil, "height")
            shape[w_axis] = P.pooled_size(name, data.shape[w_axis], kw, sw, dw, left, right,
                                          ceil, "width")
        return TensorType(tuple(shape), data.dtype)

    return infer


def _drops_window(shape, attrs) -> bool:
    """Whether ceil mode drops a last window that starts in the padding after the input
    (where ``ops.nn.pool2d`` would keep it)."""
    if not attrs["ceil_mode"]:
        return False
    layout = attrs["layout"]
    top, left, bottom, right = attrs["padding"]
    for axis, k, s, d, b, e in (
            (layout.index("H"), attrs["pool_size"][0], attrs["strides"][0],
             attrs["dilation"][0], top, bottom),
            (layout.index("W"), attrs["pool_size"][1], attrs["strides"][1],
             attrs["dilation"][1], left, right)):
        padded = shape[axis] + b + e - (k - 1) * d - 1
        if P.pooled_size("pool", shape[axis], k, s, d, b, e, True) != -(-padded // s) + 1:
            return True
    return False


def _nd_args(attrs) -> tuple:
    top, left, bottom, right = attrs["padding"]
    layout = attrs["layout"]
    return (attrs["pool_size"], attrs["strides"], attrs["dilation"], (top, left),
            (bottom, right), attrs["ceil_mode"], attrs.get("count_include_pad", True), 2,
            (layout.index("H"), layout.index("W")))


def _pool_lower(kind):
    def lower(a, attrs):
        if _drops_window(a[0].shape, attrs):
            return P.pool_nd(a[0], kind, *_nd_args(attrs))
        return ops.nn.pool2d(a[0], attrs["pool_size"], attrs["strides"], attrs["dilation"],
                             attrs["padding"], kind, attrs["ceil_mode"], attrs["layout"],
                             attrs.get("count_include_pad", True))

    return lower


def _pool_ref(kind):
    def ref(a, attrs):
        if _drops_window(a[0].shape, attrs):
            return P.pool_nd_reference(a[0], kind, *_nd_args(attrs))
        return testing.pool2d_python(a[0], attrs["pool_size"], attrs["strides"],
                                     attrs["dilation"], attrs["padding"], kind,
                                     attrs["ceil_mode"], attrs["layout"],
                                     attrs.get("count_include_pad", True))

    return ref


_POOL_DEFAULTS = {"pool_size": (1, 1), "strides": (1, 1), "padding": (0, 0, 0, 0),
                  "dilation": (1, 1), "layout": "NCHW", "ceil_mode": False}

register_op(OpDef(
    name="nn.max_pool2d", num_inputs=1, infer=_pool_infer("nn.max_pool2d"),
    lower=_pool_lower("max"), ref=_pool_ref("max"), pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    defaults=dict(_POOL_DEFAULTS), normalize=_normalize("nn.max_pool2d"),
))
register_op(OpDef(
    name="nn.avg_pool2d", num_inputs=1, infer=_pool_infer("nn.avg_pool2d"),
    lower=_pool_lower("avg"), ref=_pool_ref("avg"), pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    defaults={**_POOL_DEFAULTS, "count_include_pad": False},
    normalize=_normalize("nn.avg_pool2d"),
))


def max_pool2d(data: Node, pool_size=(1, 1), strides=(1, 1), padding=(0, 0), dilation=(1, 1),
               layout: str = "NCHW", ceil_mode: bool = False) -> Call:
    """Max pooling over ``pool_size`` windows (padding counts as the lowest value)."""
    return Call("nn.max_pool2d", [data], {
        "pool_size": pool_size, "strides": strides, "padding": padding, "dilation": dilation,
        "layout": layout, "ceil_mode": ceil_mode})


def avg_pool2d(data: Node, pool_size=(1, 1), strides=(1, 1), padding=(0, 0), dilation=(1, 1),
               layout: str = "NCHW", ceil_mode: bool = False,
               count_include_pad: bool = False) -> Call:
    """Average pooling; padding is counted in the divisor only with ``count_include_pad``."""
    return Call("nn.avg_pool2d", [data], {
        "pool_size": pool_size, "strides": strides, "padding": padding, "dilation": dilation,
        "layout": layout, "ceil_mode": ceil_mode, "count_include_pad": count_include_pad})


def _global_infer(name):
    def infer(types, attrs):
        (data,) = types
        layout = attrs["layout"]
        if layout not in _LAYOUTS:
            fail(name, f"layout must be NCHW or NHWC, got {layout!r}")
        expect_rank(name, "data", data, 4, layout)
        shape = list(data.shape)
        shape[layout.index("H")] = shape[layout.index("W")] = 1
        return TensorType(tuple(shape), data.dtype)

    return infer


for _kind in ("avg", "max"):
    register_op(OpDef(
        name=f"nn.global_{_kind}_pool2d", num_inputs=1,
        infer=_global_infer(f"nn.global_{_kind}_pool2d"),
        lower=(lambda k: lambda a, attrs: ops.nn.global_pool2d(a[0], k, attrs["layout"]))(_kind),
        ref=(lambda k: lambda a, attrs: testing.global_pool2d_python(a[0], k, attrs["layout"]))(
            _kind),
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE, defaults={"layout": "NCHW"},
    ))


def global_avg_pool2d(data: Node, layout: str = "NCHW") -> Call:
    """Mean over the height and width, kept as dimensions of size 1."""
    return Call("nn.global_avg_pool2d", [data], {"layout": layout})


def global_max_pool2d(data: Node, layout: str = "NCHW") -> Call:
    """Maximum over the height and width, kept as dimensions of size 1."""
    return Call("nn.global_max_pool2d", [data], {"layout": layout})


# registers nn.pool, nn.max_pool_indices and image.resize
from . import pool_nd, resize  # noqa: E402,F401
