"""Reductions over chosen axes: ``reduce.sum``, ``reduce.max``, ``reduce.min``,
``reduce.prod``, ``reduce.l1``, ``reduce.sum_square``, and ``argmax`` / ``argmin``.

``axis`` is None (every dimension) or a tuple of dimensions; ``keepdims`` keeps reduced
dimensions as 1. Sums of 16-bit floats accumulate in float32 and round once; integer sums
wrap in the data's dtype as numpy's ``sum(dtype=...)`` does.
"""

from __future__ import annotations

import numpy as np

from ... import ops
from ...ir import dtype as dt
from ...ops import reduce_ops
from ..ir import Call, Node, TensorType
from ..op import OpDef, OpPattern, register_op
from .common import as_graph_error, axis_index, fail
from .mapping import NUMBERS, expect_dtype, from_compute, to_compute


def _axes(name: str, axis, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = [axis] if isinstance(axis, int) else list(axis)
    out = sorted({axis_index(name, a, ndim) for a in axes})
    if len(out) != len(axes):
        fail(name, f"axis {axis} names a dimension twice")
    return tuple(out)


def _normalize(attrs: dict) -> dict:
    axis = attrs["axis"]
    if axis is not None and not isinstance(axis, int):
        axis = tuple(int(a) for a in axis)
    return {**attrs, "axis": axis, "keepdims": bool(attrs["keepdims"])}


def _infer(name: str):
    def infer(types, attrs):
        (data,) = types
        expect_dtype(name, "data", data, NUMBERS)
        axes = _axes(name, attrs["axis"], data.ndim)
        if attrs["keepdims"]:
            shape = tuple(1 if d in axes else s for d, s in enumerate(data.shape))
        else:
            shape = tuple(s for d, s in enumerate(data.shape) if d not in axes)
        return TensorType(shape, data.dtype)

    return infer


def _ref(fn):
    def ref(a, attrs):
        x = np.asarray(a[0])
        dtype = x.dtype
        axis = None if attrs["axis"] is None else tuple(
            a % max(x.ndim, 1) for a in ([attrs["axis"]] if isinstance(attrs["axis"], int)
                                         else attrs["axis"]))
        with np.errstate(all="ignore"):
            out = fn(to_compute(x), axis, attrs["keepdims"])
        return from_compute(out, dt.from_numpy(dtype))

    return ref


def _int_sum(x, axis, keepdims):
    return np.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype)


def _int_prod(x, axis, keepdims):
    return np.prod(x, axis=axis, keepdims=keepdims, dtype=x.dtype)


_REDUCE = {
    # name: (te function, numpy function of (x, axis, keepdims), fusion pattern)
    "reduce.sum": (ops.sum, _int_sum, OpPattern.COMM_REDUCE),
    "reduce.max": (ops.max, lambda x, ax, k: np.max(x, axis=ax, keepdims=k),
                   OpPattern.COMM_REDUCE),
    "reduce.min": (ops.min, lambda x, ax, k: np.min(x, axis=ax, keepdims=k),
                   OpPattern.COMM_REDUCE),
    # the product is one written-out expression per output, not a reduce stage
    "reduce.prod": (reduce_ops.prod, _int_prod, OpPattern.OPAQUE),
    "reduce.l1": (reduce_ops.l1, lambda x, ax, k: _int_sum(np.abs(x), ax, k),
                  OpPattern.COMM_REDUCE),
    "reduce.sum_square": (reduce_ops.sum_square, lambda x, ax, k: _int_sum(x * x, ax, k),
                          OpPattern.COMM_REDUCE),
}


def _lower(fn):
    def lower(a, attrs):
        with as_graph_error():
            return fn(a[0], attrs["axis"], attrs["keepdims"])

    return lower


for _name, (_te, _np, _pattern) in _REDUCE.items():
    register_op(OpDef(
        name=_name, num_inputs=1, infer=_infer(_name), lower=_lower(_te), ref=_ref(_np),
        pattern=_pattern, defaults={"axis": None, "keepdims": False}, normalize=_normalize,
    ))


def reduce(kind: str, data: Node, axis=None, keepdims: bool = False) -> Call:
    """``reduce.<kind>`` of ``data`` over ``axis`` (an int, ints, or None for all)."""
    return Call(f"reduce.{kind}", [data], {"axis": axis, "keepdims": keepdims})


# -- argmax / argmin ---------------------------------------------------------------------------


def _arg_infer(name: str):
    def infer(types, attrs):
        (data,) = types
        expect_dtype(name, "data", data, NUMBERS)
        ax = axis_index(name, attrs["axis"], data.ndim)
        if attrs["keepdims"]:
            shape = tuple(1 if d == ax else s for d, s in enumerate(data.shape))
        else:
            shape = tuple(s for d, s in enumerate(data.shape) if d != ax)
        return TensorType(shape, "int64")

    return infer


def _arg_ref(largest: bool):
    def ref(a, attrs):
        x = to_compute(np.asarray(a[0]))
        ax = attrs["axis"] % x.ndim
        if attrs["select_last_index"]:
            flipped = np.flip(x, ax)
            idx = (np.argmax if largest else np.argmin)(flipped, axis=ax)
            idx = x.shape[ax] - 1 - idx
        else:
            idx = (np.argmax if largest else np.argmin)(x, axis=ax)
        idx = idx.astype(np.int64)
        return np.expand_dims(idx, ax) if attrs["keepdims"] else idx

    return ref


def _arg_normalize(attrs):
    if isinstance(attrs["axis"], bool) or not isinstance(attrs["axis"], int):
        fail("argmax", f"axis must be an int, got {attrs['axis']!r}")
    return {"axis": attrs["axis"], "keepdims": bool(attrs["keepdims"]),
            "select_last_index": bool(attrs["select_last_index"])}


for _name, _largest in (("argmax", True), ("argmin", False)):
    register_op(OpDef(
        name=_name, num_inputs=1, infer=_arg_infer(_name),
        lower=(lambda big: lambda a, attrs: reduce_ops.arg_extreme(
            a[0], attrs["axis"], attrs["keepdims"], big, attrs["select_last_index"]))(_largest),
        ref=_arg_ref(_largest), pattern=OpPattern.OPAQUE,
        defaults={"axis": 0, "keepdims": True, "select_last_index": False},
        normalize=_arg_normalize,
    ))


def argmax(data: Node, axis: int = 0, keepdims: bool = True,
           select_last_index: bool = False) -> Call:
    """The int64 index of the largest element along ``axis`` (first or last on ties)."""
    return Call("argmax", [data], {"axis": axis, "keepdims": keepdims,
                                   "select_last_index": select_last_index})


def argmin(data: Node, axis: int = 0, keepdims: bool = True,
           select_last_index: bool = False) -> Call:
    """The int64 index of the smallest element along ``axis`` (first or last on ties)."""
    return Call("argmin", [data], {"axis": axis, "keepdims": keepdims,
                                   "select_last_index": select_last_index})
