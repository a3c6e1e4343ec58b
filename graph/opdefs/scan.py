"""``cumprod``: running products along an axis (ONNX ``CumProd``); see
:mod:`ptxforge.ops.scan` for its lowering."""

from __future__ import annotations

import numpy as np

from ...ops import scan
from ..ir import Call, Node
from ..op import OpDef, OpPattern, register_op
from .common import as_graph_error, axis_index, fail


def _infer(types, attrs):
    (data,) = types
    if data.dtype == "bool":
        fail("cumprod", "cannot multiply a bool tensor; cast it to a number type first")
    axis_index("cumprod", attrs["axis"], data.ndim)
    return data


def _ref(a, attrs):
    x = np.asarray(a[0])
    axis = attrs["axis"] % x.ndim
    acc = np.float32 if x.dtype == np.float16 else x.dtype
    if attrs["reverse"]:
        x = np.flip(x, axis)
    out = np.cumprod(x, axis=axis, dtype=acc)
    if attrs["exclusive"]:
        # the product before each element: 1, then the running product shifted by one
        ones = np.ones_like(np.take(out, [0], axis=axis))
        out = np.concatenate([ones, np.delete(out, -1, axis=axis)], axis=axis)
    if attrs["reverse"]:
        out = np.flip(out, axis)
    return np.ascontiguousarray(out.astype(a[0].dtype))


def _lower(a, attrs):
    with as_graph_error():
        return scan.cumprod(a[0], attrs["axis"], attrs["exclusive"], attrs["reverse"])


register_op(OpDef(
    name="cumprod", num_inputs=1, infer=_infer, lower=_lower, ref=_ref,
    pattern=OpPattern.OPAQUE, defaults={"axis": 0, "exclusive": False, "reverse": False},
    normalize=lambda attrs: {**attrs, "axis": int(attrs["axis"]),
                             "exclusive": bool(attrs["exclusive"]),
                             "reverse": bool(attrs["reverse"])},
))


def cumprod(data: Node, axis: int = 0, exclusive: bool = False, reverse: bool = False) -> Call:
    """Running products along ``axis`` (ONNX ``CumProd``)."""
    return Call("cumprod", [data], {"axis": axis, "exclusive": exclusive, "reverse": reverse})
