"""Pooling over any number of spatial dimensions: ``nn.pool`` (max, average, Lp) and
``nn.max_pool_indices`` (ONNX ``MaxPool``'s ``Indices`` output), on channel-first data
``[N, C, D1, ..., Dk]``.

Windows follow ONNX and PyTorch (see :mod:`ptxforge.ops.nn.pool_nd`): in ceil mode a last
window that would start in the padding after the input is dropped. The 2-D pools of
:mod:`.pool` (which ``convert_layout`` moves to NHWC) stay the form of 2-D max and average
pooling; these operators take the other ranks, Lp pooling and the indices.
"""

from __future__ import annotations

from ...ops.nn import pool_nd as P
from ..ir import Call, Node, TensorType
from ..op import OpDef, OpPattern, register_op
from .common import as_graph_error, fail

_WINDOW_KEYS = ("pool_size", "strides", "dilation")


def _normalize(name: str):
    def normalize(attrs: dict) -> dict:
        out = dict(attrs)
        size = attrs["pool_size"]
        if isinstance(size, int) or not size:
            fail(name, f"pool_size must be a non-empty list of ints, got {size!r}")
        k = len(size)
        for key in _WINDOW_KEYS:
            value = attrs[key]
            value = (value,) * k if isinstance(value, int) else tuple(int(v) for v in value)
            if len(value) != k or any(v < 1 for v in value):
                fail(name, f"{key} must be {k} positive ints (one per spatial axis), got "
                           f"{attrs[key]!r}")
            out[key] = value
        pad = attrs["padding"]
        pad = (pad,) * (2 * k) if isinstance(pad, int) else tuple(int(v) for v in pad)
        if len(pad) == k:
            pad = pad + pad
        if len(pad) != 2 * k or any(v < 0 for v in pad):
            fail(name, f"padding must be {2 * k} non-negative ints (all befores, then all "
                       f"afters, as ONNX's pads), got {attrs['padding']!r}")
        out["padding"] = pad
        out["ceil_mode"] = bool(attrs["ceil_mode"])
        if "pool_type" in attrs and attrs["pool_type"] not in P.POOL_TYPES:
            fail(name, f"pool_type must be one of {list(P.POOL_TYPES)}, got "
                       f"{attrs['pool_type']!r}")
        if "count_include_pad" in attrs:
            out["count_include_pad"] = bool(attrs["count_include_pad"])
        if "storage_order" in attrs and attrs["storage_order"] not in (0, 1):
            fail(name, f"storage_order must be 0 or 1, got {attrs['storage_order']!r}")
        return out

    return normalize


def _window_args(attrs: dict) -> tuple:
    k = len(attrs["pool_size"])
    pad = attrs["padding"]
    return (attrs["pool_size"], attrs["strides"], attrs["dilation"], pad[:k], pad[k:])


def _out_shape(name: str, data: TensorType, attrs: dict) -> tuple:
    k = len(attrs["pool_size"])
    if data.ndim != k + 2:
        fail(name, f"a {k}-D window needs data [N, C] + {k} spatial dims, got {data}")
    kernel, strides, dil, before, after = _window_args(attrs)
    with as_graph_error():
        out = [P.pooled_size(name, data.shape[2 + j], kernel[j], strides[j], dil[j],
                             before[j], after[j], attrs["ceil_mode"], f"(axis {2 + j})")
               for j in range(k)]
    return tuple(data.shape[:2]) + tuple(out)


def _pool_infer(types, attrs):
    (data,) = types
    if attrs["pool_type"] != "max" and not data.dtype.startswith(("float", "bfloat")):
        fail("nn.pool", f"{attrs['pool_type']} pooling needs a float tensor, got {data.dtype}")
    if data.dtype == "bool":
        fail("nn.pool", "cannot pool a bool tensor")
    return TensorType(_out_shape("nn.pool", data, attrs), data.dtype)


def _pool_lower(a, attrs):
    return P.pool_nd(a[0], attrs["pool_type"], *_window_args(attrs), attrs["ceil_mode"],
                     attrs["count_include_pad"], attrs["p"])


def _pool_ref(a, attrs):
    return P.pool_nd_reference(a[0], attrs["pool_type"], *_window_args(attrs),
                               attrs["ceil_mode"], attrs["count_include_pad"], attrs["p"])


_DEFAULTS = {"pool_size": (1,), "strides": 1, "padding": 0, "dilation": 1,
             "ceil_mode": False}

register_op(OpDef(
    name="nn.pool", num_inputs=1, infer=_pool_infer, lower=_pool_lower, ref=_pool_ref,
    pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    defaults={**_DEFAULTS, "pool_type": "max", "count_include_pad": False, "p": 2},
    normalize=_normalize("nn.pool"),
))


def _indices_infer(types, attrs):
    (data,) = types
    if data.dtype == "bool":
        fail("nn.max_pool_indices", "cannot pool a bool tensor")
    return TensorType(_out_shape("nn.max_pool_indices", data, attrs), "int64")


register_op(OpDef(
    name="nn.max_pool_indices", num_inputs=1, infer=_indices_infer,
    lower=lambda a, attrs: P.max_pool_indices_nd(a[0], *_window_args(attrs),
                                                 attrs["ceil_mode"], attrs["storage_order"]),
    ref=lambda a, attrs: P.pool_nd_reference(a[0], "max", *_window_args(attrs),
                                             attrs["ceil_mode"], indices=True,
                                             storage_order=attrs["storage_order"])[1],
    pattern=OpPattern.OPAQUE,
    defaults={**_DEFAULTS, "storage_order": 0}, normalize=_normalize("nn.max_pool_indices"),
))


def pool(data: Node, pool_type: str, pool_size, strides=1, padding=0, dilation=1,
         ceil_mode: bool = False, count_include_pad: bool = False, p: int = 2) -> Call:
    """Max, average or Lp pooling of channel-first data over its spatial axes, one window
    entry per axis; ``padding`` as ONNX's ``pads`` (all befores, then all afters)."""
    return Call("nn.pool", [data], {
        "pool_type": pool_type, "pool_size": tuple(pool_size), "strides": strides,
        "padding": padding, "dilation": dilation, "ceil_mode": ceil_mode,
        "count_include_pad": count_include_pad, "p": int(p)})


def max_pool_indices(data: Node, pool_size, strides=1, padding=0, dilation=1,
                     ceil_mode: bool = False, storage_order: int = 0) -> Call:
    """The int64 flat index of each max-pooling window's maximum (ONNX ``Indices``)."""
    return Call("nn.max_pool_indices", [data], {
        "pool_size": tuple(pool_size), "strides": strides, "padding": padding,
        "dilation": dilation, "ceil_mode": ceil_mode, "storage_order": storage_order})
