"""``image.resize``: resizing channel-first or any data along some axes through per-axis
(index, weight) tables that the caller computes (see :mod:`ptxforge.ops.nn.resize`; the
ONNX importer makes them constants). Nearest resizing is a gather (``INJECTIVE``, fuses
with its neighbours); interpolation sums over the taps and fuses its element-wise
consumers."""

from __future__ import annotations

from ...ops.nn import resize as R
from ..ir import Call, Node, TensorType
from ..op import OpDef, OpPattern, register_op
from .common import fail


def _normalize(attrs: dict) -> dict:
    out = dict(attrs)
    out["axes"] = tuple(int(a) for a in attrs["axes"])
    out["nearest"] = bool(attrs["nearest"])
    if attrs["extrapolation"] is not None:
        out["extrapolation"] = float(attrs["extrapolation"])
    return out


def _infer(types, attrs):
    op = "image.resize"
    data, tables = types[0], types[1:]
    axes = attrs["axes"]
    per_axis = 1 if attrs["nearest"] else 2
    if not axes or len(tables) != per_axis * len(axes):
        what = "an index table" if per_axis == 1 else "an (index, weight) pair"
        fail(op, f"takes the data and {what} per resized axis: {len(axes)} axes need "
                 f"{per_axis * len(axes)} tables, got {len(tables)}")
    if len(set(axes)) != len(axes) or any(not 0 <= a < data.ndim for a in axes):
        fail(op, f"axes {list(axes)} must be distinct axes of {data}")
    if data.dtype == "bool" or (not attrs["nearest"]
                                and not data.dtype.startswith(("float", "bfloat"))):
        fail(op, f"interpolating resize needs float data, got {data.dtype}")
    shape = list(data.shape)
    for j, a in enumerate(axes):
        idx = tables[per_axis * j]
        w = idx if attrs["nearest"] else tables[2 * j + 1]
        if idx.dtype != "int32" or idx.ndim != 2 or w.shape != idx.shape:
            fail(op, f"axis {a}: the index table must be int32 [out, taps] and the weights of "
                     f"the same shape, got {idx} and {w}")
        if attrs["nearest"] and idx.shape[1] != 1:
            fail(op, f"axis {a}: nearest resizing takes one tap, got {idx.shape[1]}")
        shape[a] = idx.shape[0]
    return TensorType(tuple(shape), data.dtype)


def _pairs(a: list, nearest: bool) -> list:
    if nearest:  # index tables only: one tap, weight 1
        return [(idx, None) for idx in a[1:]]
    return [(a[1 + 2 * j], a[2 + 2 * j]) for j in range((len(a) - 1) // 2)]


register_op(OpDef(
    name="image.resize", num_inputs=None, infer=_infer,
    lower=lambda a, attrs: R.resize_gather(a[0], attrs["axes"], _pairs(a, attrs["nearest"]),
                                           attrs["nearest"], attrs["extrapolation"]),
    ref=lambda a, attrs: R.resize_reference(a[0], attrs["axes"], _pairs(a, attrs["nearest"]),
                                            attrs["extrapolation"]),
    pattern=lambda attrs: (OpPattern.INJECTIVE if attrs["nearest"]
                           else OpPattern.OUT_ELEMWISE_FUSABLE),
    defaults={"axes": (), "nearest": True, "extrapolation": None}, normalize=_normalize,
))


def resize(data: Node, axes, tables, nearest: bool, extrapolation: float | None = None) -> Call:
    """``data`` resized along ``axes``; ``tables`` holds one (int32 index, float32 weight)
    pair of ``[out, taps]`` nodes per axis (:func:`ptxforge.ops.nn.resize.axis_tables`);
    ``nearest`` resizing reads the index tables only (one tap each)."""
    args = [data]
    for idx, w in tables:
        args += [idx] if nearest else [idx, w]
    return Call("image.resize", args, {"axes": tuple(axes), "nearest": nearest,
                                       "extrapolation": extrapolation})
