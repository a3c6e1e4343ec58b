"""Indexing operators: ``take``, ``gather_elements``, ``gather_nd``, ``scatter_elements``,
``scatter_nd``, ``one_hot``, ``cumsum``, ``topk_indices`` and ``trilu``.

Index arguments are int32 or int64 tensors; a negative index counts from the end. The
numpy references raise ``IndexError`` on an index outside its dimension; compiled kernels
clamp it into the dimension instead (see :mod:`ptxforge.ops.index`), so they never touch
memory outside a buffer.
"""

from __future__ import annotations

import numpy as np

from ...ops import index as ix
from ..ir import Call, Node, TensorType
from ..op import OpDef, OpPattern, register_op
from .common import as_graph_error, axis_index, fail


def _index_type(op: str, what: str, ty: TensorType) -> None:
    if ty.dtype not in ix.INDEX_DTYPES:
        fail(op, f"{what} must be int32 or int64, got {ty.dtype}; cast it first")


def _check_indices(op: str, indices: np.ndarray, extent: int, what: str = "indices") -> None:
    """The reference's bounds check: ``IndexError`` naming the first bad index."""
    bad = (indices < -extent) | (indices >= extent)
    if bad.any():
        value = indices[bad].flat[0]
        raise IndexError(f"{op}: {what} holds {value}, outside [{-extent}, {extent})")


def _wrap(indices: np.ndarray, extent: int) -> np.ndarray:
    return np.where(indices < 0, indices + extent, indices).astype(np.int64)


def _typed(fn):
    """A te lowering under the ops layer's checks, whose errors become GraphErrors."""
    def lower(a, attrs):
        with as_graph_error():
            return fn(a, attrs)
    return lower


# -- take ------------------------------------------------------------------------------------


def _take_infer(types, attrs):
    data, indices = types
    _index_type("take", "indices", indices)
    if data.ndim == 0:
        fail("take", "data must have at least one dimension")
    axis = axis_index("take", attrs["axis"], data.ndim)
    return TensorType(data.shape[:axis] + indices.shape + data.shape[axis + 1:], data.dtype)


def _take_ref(a, attrs):
    data, indices = a
    axis = attrs["axis"] % data.ndim
    _check_indices("take", indices, data.shape[axis])
    return np.take(data, _wrap(indices, data.shape[axis]), axis=axis)


register_op(OpDef(
    name="take", num_inputs=2, infer=_take_infer,
    lower=_typed(lambda a, attrs: ix.take(a[0], a[1], attrs["axis"])),
    ref=_take_ref, pattern=OpPattern.INJECTIVE, defaults={"axis": 0},
))


def take(data: Node, indices: Node, axis: int = 0) -> Call:
    """``numpy.take``: slices of ``data`` along ``axis`` picked by an int tensor (an
    embedding lookup at ``axis=0``)."""
    return Call("take", [data, indices], {"axis": axis})


# -- gather_elements -------------------------------------------------------------------------


def _same_rank(op, data, indices, axis):
    _index_type(op, "indices", indices)
    if data.ndim == 0 or indices.ndim != data.ndim:
        fail(op, f"indices {list(indices.shape)} must have the rank of data "
                 f"{list(data.shape)} (at least 1)")
    axis = axis_index(op, axis, data.ndim)
    for d in range(data.ndim):
        if d != axis and indices.shape[d] > data.shape[d]:
            fail(op, f"indices {list(indices.shape)} is larger than data {list(data.shape)} "
                     f"along dimension {d}")
    return axis


def _gather_elements_infer(types, attrs):
    data, indices = types
    _same_rank("gather_elements", data, indices, attrs["axis"])
    return TensorType(indices.shape, data.dtype)


def _gather_elements_ref(a, attrs):
    data, indices = a
    axis = attrs["axis"] % data.ndim
    _check_indices("gather_elements", indices, data.shape[axis])
    index = list(np.indices(indices.shape, sparse=True))
    index[axis] = _wrap(indices, data.shape[axis])
    return data[tuple(index)]


register_op(OpDef(
    name="gather_elements", num_inputs=2, infer=_gather_elements_infer,
    lower=_typed(lambda a, attrs: ix.gather_elements(a[0], a[1], attrs["axis"])),
    ref=_gather_elements_ref, pattern=OpPattern.INJECTIVE, defaults={"axis": 0},
))


def gather_elements(data: Node, indices: Node, axis: int = 0) -> Call:
    """ONNX ``GatherElements``: ``out[i] = data[i with i[axis] = indices[i]]``."""
    return Call("gather_elements", [data, indices], {"axis": axis})


# -- gather_nd -------------------------------------------------------------------------------


def _nd_dims(op, data, indices, batch_dims):
    _index_type(op, "indices", indices)
    if isinstance(batch_dims, bool) or not isinstance(batch_dims, int) or batch_dims < 0:
        fail(op, f"batch_dims must be a non-negative int, got {batch_dims!r}")
    if indices.ndim <= batch_dims:
        fail(op, f"indices {list(indices.shape)} needs more than batch_dims={batch_dims} "
                 "dimensions")
    if indices.shape[:batch_dims] != data.shape[:batch_dims]:
        fail(op, f"the first {batch_dims} dimensions of indices {list(indices.shape)} and "
                 f"data {list(data.shape)} (batch_dims) differ")
    q = indices.shape[-1]
    if not 1 <= q <= data.ndim - batch_dims:
        fail(op, f"index tuples of length {q} (the last dimension of indices) do not fit "
                 f"data {list(data.shape)} after {batch_dims} batch dimensions")
    return q


def _gather_nd_infer(types, attrs):
    data, indices = types
    b = attrs["batch_dims"]
    q = _nd_dims("gather_nd", data, indices, b)
    return TensorType(indices.shape[:-1] + data.shape[b + q:], data.dtype)


def _nd_positions(op, data, indices, b):
    """The index tuples of ``indices`` wrapped, as an int64 array ``[..., q]``."""
    q = indices.shape[-1]
    out = np.empty(indices.shape, np.int64)
    for j in range(q):
        extent = data.shape[b + j]
        _check_indices(op, indices[..., j], extent, f"indices[..., {j}]")
        out[..., j] = _wrap(indices[..., j], extent)
    return out


def _gather_nd_ref(a, attrs):
    data, indices = a
    b = attrs["batch_dims"]
    pos = _nd_positions("gather_nd", data, indices, b)
    q = indices.shape[-1]
    out = np.empty(indices.shape[:-1] + data.shape[b + q:], data.dtype)
    for i in np.ndindex(*indices.shape[:-1]):
        out[i] = data[i[:b] + tuple(pos[i])]
    return out


register_op(OpDef(
    name="gather_nd", num_inputs=2, infer=_gather_nd_infer,
    lower=_typed(lambda a, attrs: ix.gather_nd(a[0], a[1], attrs["batch_dims"])),
    ref=_gather_nd_ref, pattern=OpPattern.INJECTIVE, defaults={"batch_dims": 0},
))


def gather_nd(data: Node, indices: Node, batch_dims: int = 0) -> Call:
    """ONNX ``GatherND``: index tuples in the last dimension of ``indices``."""
    return Call("gather_nd", [data, indices], {"batch_dims": batch_dims})


# -- scatters --------------------------------------------------------------------------------

_COMBINE = {
    "none": lambda old, new: new,
    "add": lambda old, new: old + new,
    "mul": lambda old, new: old * new,
    "max": np.maximum,
    "min": np.minimum,
}


def _check_reduction(op, attrs):
    if attrs["reduction"] not in ix.SCATTER_REDUCTIONS:
        fail(op, f"reduction must be one of {list(ix.SCATTER_REDUCTIONS)}, got "
                 f"{attrs['reduction']!r}")


def _check_updates(op, data, updates, shape):
    if updates.shape != tuple(shape):
        fail(op, f"updates has shape {list(updates.shape)} but must have {list(shape)}")
    if updates.dtype != data.dtype:
        fail(op, f"updates has dtype {updates.dtype} but data has {data.dtype}")


def _scatter_elements_infer(types, attrs):
    data, indices, updates = types
    _check_reduction("scatter_elements", attrs)
    _same_rank("scatter_elements", data, indices, attrs["axis"])
    _check_updates("scatter_elements", data, updates, indices.shape)
    return data


def _scatter_elements_ref(a, attrs):
    data, indices, updates = a
    axis = attrs["axis"] % data.ndim
    _check_indices("scatter_elements", indices, data.shape[axis])
    wrapped = _wrap(indices, data.shape[axis])
    combine = _COMBINE[attrs["reduction"]]
    out = data.copy()
    for i in np.ndindex(*indices.shape):
        p = i[:axis] + (wrapped[i],) + i[axis + 1:]
        out[p] = combine(out[p], updates[i])
    return out


register_op(OpDef(
    name="scatter_elements", num_inputs=3, infer=_scatter_elements_infer,
    lower=_typed(lambda a, attrs: ix.scatter_elements(a[0], a[1], a[2], attrs["axis"],
                                                      attrs["reduction"])),
    ref=_scatter_elements_ref, pattern=OpPattern.OPAQUE,
    defaults={"axis": 0, "reduction": "none"},
))


def scatter_elements(data: Node, indices: Node, updates: Node, axis: int = 0,
                     reduction: str = "none") -> Call:
    """ONNX ``ScatterElements``: ``updates[i]`` written (or combined by ``reduction``: add,
    mul, max, min) at ``i`` with ``i[axis] = indices[i]``."""
    return Call("scatter_elements", [data, indices, updates],
                {"axis": axis, "reduction": reduction})


def _scatter_nd_infer(types, attrs):
    data, indices, updates = types
    _check_reduction("scatter_nd", attrs)
    q = _nd_dims("scatter_nd", data, indices, 0)
    _check_updates("scatter_nd", data, updates, indices.shape[:-1] + data.shape[q:])
    return data


def _scatter_nd_ref(a, attrs):
    data, indices, updates = a
    pos = _nd_positions("scatter_nd", data, indices, 0)
    combine = _COMBINE[attrs["reduction"]]
    out = data.copy()
    for i in np.ndindex(*indices.shape[:-1]):
        p = tuple(pos[i])
        out[p] = combine(out[p], updates[i])
    return out


register_op(OpDef(
    name="scatter_nd", num_inputs=3, infer=_scatter_nd_infer,
    lower=_typed(lambda a, attrs: ix.scatter_nd(a[0], a[1], a[2], attrs["reduction"])),
    ref=_scatter_nd_ref, pattern=OpPattern.OPAQUE, defaults={"reduction": "none"},
))


def scatter_nd(data: Node, indices: Node, updates: Node, reduction: str = "none") -> Call:
    """ONNX ``ScatterND``: slices of ``updates`` written (or combined) at the index tuples
    in the last dimension of ``indices``."""
    return Call("scatter_nd", [data, indices, updates], {"reduction": reduction})


# -- one_hot ---------------------------------------------------------------------------------


def _one_hot_infer(types, attrs):
    indices, values = types
    depth, axis = attrs["depth"], attrs["axis"]
    if values.shape != (2,):
        fail("one_hot", f"values must be [off, on] (shape [2]), got {list(values.shape)}")
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        fail("one_hot", f"depth must be a positive int, got {depth!r}")
    if indices.dtype == "bool":
        fail("one_hot", "indices must be numbers, got bool")
    n = indices.ndim + 1
    axis = axis_index("one_hot", axis, n)
    return TensorType(indices.shape[:axis] + (depth,) + indices.shape[axis:], values.dtype)


def _one_hot_ref(a, attrs):
    indices, values = a
    depth = attrs["depth"]
    idx = indices.astype(np.int64)
    idx = np.where(idx < 0, idx + depth, idx)
    axis = attrs["axis"] % (indices.ndim + 1)
    hot = np.expand_dims(idx, axis) == np.arange(depth).reshape(
        (depth,) + (1,) * (indices.ndim - axis))
    return np.where(hot, values[1], values[0]).astype(values.dtype)


register_op(OpDef(
    name="one_hot", num_inputs=2, infer=_one_hot_infer,
    lower=_typed(lambda a, attrs: ix.one_hot(a[0], a[1], attrs["depth"], attrs["axis"])),
    ref=_one_hot_ref, pattern=OpPattern.INJECTIVE, defaults={"depth": None, "axis": -1},
))


def one_hot(indices: Node, values: Node, depth: int, axis: int = -1) -> Call:
    """ONNX ``OneHot``: ``values[1]`` where a new dimension of ``depth`` at ``axis``
    equals the index, ``values[0]`` elsewhere."""
    return Call("one_hot", [indices, values], {"depth": depth, "axis": axis})


# -- cumsum, topk, trilu ---------------------------------------------------------------------


def _cumsum_infer(types, attrs):
    (data,) = types
    if data.dtype == "bool":
        fail("cumsum", "cannot sum a bool tensor; cast it to a number type first")
    axis_index("cumsum", attrs["axis"], data.ndim)
    return data


def _cumsum_ref(a, attrs):
    x = a[0]
    axis = attrs["axis"] % x.ndim
    acc = np.float32 if x.dtype == np.float16 else x.dtype
    if attrs["reverse"]:
        x = np.flip(x, axis)
    out = np.cumsum(x, axis=axis, dtype=acc)
    if attrs["exclusive"]:
        out = out - x.astype(acc)
    if attrs["reverse"]:
        out = np.flip(out, axis)
    return np.ascontiguousarray(out.astype(a[0].dtype))


register_op(OpDef(
    name="cumsum", num_inputs=1, infer=_cumsum_infer,
    lower=_typed(lambda a, attrs: ix.cumsum(a[0], attrs["axis"], attrs["exclusive"],
                                            attrs["reverse"])),
    ref=_cumsum_ref, pattern=OpPattern.OPAQUE,
    defaults={"axis": 0, "exclusive": False, "reverse": False},
    normalize=lambda attrs: {**attrs, "exclusive": bool(attrs["exclusive"]),
                             "reverse": bool(attrs["reverse"])},
))


def cumsum(data: Node, axis: int = 0, exclusive: bool = False, reverse: bool = False) -> Call:
    """Running sums along ``axis`` (ONNX ``CumSum``)."""
    return Call("cumsum", [data], {"axis": axis, "exclusive": exclusive, "reverse": reverse})


def _topk_infer(types, attrs):
    (data,) = types
    op = "topk_indices"
    if data.dtype == "bool":
        fail(op, "cannot order a bool tensor; cast it to a number type first")
    if data.ndim == 0:
        fail(op, "data must have at least one dimension")
    axis = axis_index(op, attrs["axis"], data.ndim)
    k, n = attrs["k"], data.shape[axis]
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
        fail(op, f"k must be an int in [1, {n}] (the extent of axis {axis}), got {k!r}")
    return TensorType(tuple(k if d == axis else s for d, s in enumerate(data.shape)), "int64")


def _topk_ref(a, attrs):
    x = a[0]
    axis = attrs["axis"] % x.ndim
    # a stable sort of the keys keeps equal elements in order of position, as ONNX asks
    keys = -x if attrs["largest"] and x.dtype.kind != "u" else x
    if attrs["largest"] and x.dtype.kind == "u":
        keys = np.iinfo(x.dtype).max - x
    order = np.argsort(keys, axis=axis, kind="stable")
    return np.ascontiguousarray(np.take(order, np.arange(attrs["k"]), axis=axis)).astype(
        np.int64)


register_op(OpDef(
    name="topk_indices", num_inputs=1, infer=_topk_infer,
    lower=_typed(lambda a, attrs: ix.topk_indices(a[0], attrs["k"], attrs["axis"],
                                                  attrs["largest"])),
    ref=_topk_ref, pattern=OpPattern.OPAQUE,
    defaults={"k": None, "axis": -1, "largest": True},
    normalize=lambda attrs: {**attrs, "largest": bool(attrs["largest"])},
))


def topk_indices(data: Node, k: int, axis: int = -1, largest: bool = True) -> Call:
    """The int64 positions of the ``k`` largest (smallest) elements along ``axis``, best
    first, ties in order of position; their values are ``gather_elements(data, it, axis)``."""
    return Call("topk_indices", [data], {"k": k, "axis": axis, "largest": largest})


def _trilu_infer(types, attrs):
    data = types[0]
    if len(types) > 2:
        fail("trilu", f"takes data and an optional k tensor, got {len(types)} arguments")
    if data.ndim < 2:
        fail("trilu", f"data must have at least 2 dimensions, got {list(data.shape)}")
    if len(types) == 2:
        _index_type("trilu", "k", types[1])
        if types[1].size != 1:
            fail("trilu", f"k must hold one value, got {types[1]}")
    elif isinstance(attrs["k"], bool) or not isinstance(attrs["k"], int):
        fail("trilu", f"k must be an int, got {attrs['k']!r}")
    return data


def _trilu_ref(a, attrs):
    fn = np.triu if attrs["upper"] else np.tril
    k = int(a[1].reshape(())) if len(a) > 1 else attrs["k"]
    return np.ascontiguousarray(fn(a[0], k))


register_op(OpDef(
    name="trilu", num_inputs=None, infer=_trilu_infer,
    lower=_typed(lambda a, attrs: ix.trilu(a[0], a[1] if len(a) > 1 else attrs["k"],
                                           attrs["upper"])),
    ref=_trilu_ref, pattern=OpPattern.INJECTIVE, defaults={"k": 0, "upper": True},
    normalize=lambda attrs: {**attrs, "upper": bool(attrs["upper"])},
))


def trilu(data: Node, k: int | Node = 0, upper: bool = True) -> Call:
    """The upper (lower) triangle of the last two dimensions from diagonal ``k``: an int,
    or a one-element int tensor (known only when the network runs)."""
    if isinstance(k, Node):
        return Call("trilu", [data, k], {"upper": upper})
    return Call("trilu", [data], {"k": k, "upper": upper})


from . import scan  # noqa: E402,F401  (registers cumprod)
