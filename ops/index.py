"""Indexing operators whose reads depend on another tensor's values: ``take`` (an embedding
lookup), ``gather_elements``, ``gather_nd``, ``scatter_elements``, ``scatter_nd``,
``one_hot``, and the ordering operators ``cumsum``, ``topk_indices`` and ``trilu``.

An index read from a tensor is wrapped (a negative index counts from the end, as ONNX and
numpy do) and then clamped into the dimension, so a compiled kernel never reads or writes
outside a buffer whatever the index data holds; the numpy references raise ``IndexError``
on such an index instead. Index tensors must be int32 or int64.
"""

from __future__ import annotations

from ..ir import dtype as dt
from ..ir import te
from ..ir.expr import Expr, as_expr, cast, const, emax, emin, select
from ..ir.te import Tensor
from . import tag
from .transform import _numel, unravel_index
from .utils import (
    accumulate_dtype,
    ax_names,
    cast_output,
    cast_to,
    compute_named,
    expect_tensor,
    fail,
    normalize_axis,
    shape_str,
)

INDEX_DTYPES = ("int32", "int64")
"""The dtypes an index tensor may have."""

SCATTER_REDUCTIONS = ("none", "add", "mul", "max", "min")
"""How a scatter combines an update with the element it lands on (ONNX's ``reduction``)."""

MUL_SCATTER_LIMIT = 64
"""The most updates a ``mul`` scatter combines per element (it unrolls one select per
update: there is no product reducer)."""


def _expect_index(op: str, what: str, t: Tensor) -> None:
    expect_tensor(op, what, t)
    if t.dtype not in INDEX_DTYPES:
        fail(op, f"{what} must be int32 or int64, got {t.dtype}; cast it first")


def wrap_index(value, extent: int) -> Expr:
    """The index ``value`` (read from a tensor) into a dimension of ``extent``: negative
    values count from the end (``te.normalize_index``), and the result is clamped into
    ``[0, extent)`` here, before it narrows to the int32 index dtype, so the read stays in
    bounds whatever the data holds."""
    value = te.normalize_index(value, extent)
    value = emin(emax(value, 0), extent - 1)
    return cast_to(value, dt.INDEX)


def _wrapped_equals(value, extent: int, position) -> Expr:
    """Whether the index ``value`` (negative counts from the end) names ``position``; an
    index outside ``[-extent, extent)`` names nothing."""
    value = as_expr(value)
    if dt.is_int(value.dtype):
        value = select(value < 0, value + extent, value)
    return value == cast(value.dtype, as_expr(position))


def take(data: Tensor, indices: Tensor, axis: int = 0) -> Tensor:
    """``numpy.take(data, indices, axis)``: the output is ``data`` with dimension ``axis``
    replaced by the dimensions of ``indices`` (an embedding lookup at ``axis=0``)."""
    op = "take"
    expect_tensor(op, "data", data)
    _expect_index(op, "indices", indices)
    if data.ndim == 0:
        fail(op, "data must have at least one dimension")
    axis = normalize_axis(op, axis, data.ndim)
    q = indices.ndim
    shape = tuple(data.shape[:axis]) + tuple(indices.shape) + tuple(data.shape[axis + 1:])

    def fcompute(*i):
        k = wrap_index(indices(*i[axis:axis + q]), data.shape[axis])
        return data(*i[:axis], k, *i[axis + q:])

    return compute_named(shape, ax_names(len(shape)), fcompute, "T_take", tag.INJECTIVE)


def gather_elements(data: Tensor, indices: Tensor, axis: int = 0) -> Tensor:
    """ONNX ``GatherElements``: ``out[i] = data[i with i[axis] = indices[i]]``; the output
    has the shape of ``indices`` (of the same rank as ``data``, no larger along the other
    dimensions)."""
    op = "gather_elements"
    expect_tensor(op, "data", data)
    _expect_index(op, "indices", indices)
    axis = _same_rank_axis(op, data, indices, axis)

    def fcompute(*i):
        k = wrap_index(indices(*i), data.shape[axis])
        return data(*i[:axis], k, *i[axis + 1:])

    return compute_named(indices.shape, ax_names(indices.ndim), fcompute, "T_gather_elements",
                         tag.INJECTIVE)


def _same_rank_axis(op: str, data: Tensor, indices: Tensor, axis: int) -> int:
    if data.ndim == 0 or indices.ndim != data.ndim:
        fail(op, f"indices {shape_str(indices.shape)} must have the rank of data "
                 f"{shape_str(data.shape)} (at least 1)")
    axis = normalize_axis(op, axis, data.ndim)
    for d in range(data.ndim):
        if d != axis and indices.shape[d] > data.shape[d]:
            fail(op, f"indices {shape_str(indices.shape)} is larger than data "
                     f"{shape_str(data.shape)} along dimension {d}")
    return axis


def gather_nd(data: Tensor, indices: Tensor, batch_dims: int = 0) -> Tensor:
    """ONNX ``GatherND``: the last dimension of ``indices`` holds index tuples into the
    dimensions of ``data`` after its first ``batch_dims`` (which ``indices`` shares)."""
    op = "gather_nd"
    expect_tensor(op, "data", data)
    _expect_index(op, "indices", indices)
    b, q = _nd_dims(op, data, indices, batch_dims)
    shape = tuple(indices.shape[:-1]) + tuple(data.shape[b + q:])
    lead = indices.ndim - 1

    def fcompute(*i):
        src = list(i[:b])
        for j in range(q):
            src.append(wrap_index(indices(*i[:lead], j), data.shape[b + j]))
        return data(*src, *i[lead:])

    return compute_named(shape, ax_names(len(shape)), fcompute, "T_gather_nd", tag.INJECTIVE)


def _nd_dims(op: str, data: Tensor, indices: Tensor, batch_dims: int) -> tuple[int, int]:
    """``(batch_dims, q)``: the shared leading dimensions and the index tuple length."""
    if isinstance(batch_dims, bool) or not isinstance(batch_dims, int) or batch_dims < 0:
        fail(op, f"batch_dims must be a non-negative int, got {batch_dims!r}")
    if indices.ndim < 1 or indices.ndim <= batch_dims:
        fail(op, f"indices {shape_str(indices.shape)} needs more than batch_dims={batch_dims} "
                 "dimensions")
    if tuple(indices.shape[:batch_dims]) != tuple(data.shape[:batch_dims]):
        fail(op, f"the first {batch_dims} dimensions of indices {shape_str(indices.shape)} "
                 f"and data {shape_str(data.shape)} (batch_dims) differ")
    q = indices.shape[-1]
    if not 1 <= q <= data.ndim - batch_dims:
        fail(op, f"index tuples of length {q} (the last dimension of indices) do not fit data "
                 f"{shape_str(data.shape)} after {batch_dims} batch dimensions")
    return batch_dims, q


def _check_reduction(op: str, reduction: str) -> None:
    if reduction not in SCATTER_REDUCTIONS:
        fail(op, f"reduction must be one of {list(SCATTER_REDUCTIONS)}, got {reduction!r}")


def _scatter(op: str, data: Tensor, count: int, match, update, reduction: str) -> Tensor:
    """The scatter of ``count`` updates into ``data``: ``match(k, p)`` says whether update
    ``k`` lands on output position ``p``, ``update(k, p)`` is its value there.

    ``none`` keeps the last update that lands (a reduction finds its number, a second stage
    reads it), ``add`` sums the updates and adds them, ``max`` / ``min`` reduce them together
    with the element itself, and ``mul`` unrolls one select per update. The reductions run
    over every update for every output element: work of ``count`` times the data's size,
    meant for the small scatters of model graphs (cache updates, masks)."""
    _check_reduction(op, reduction)
    names = ax_names(data.ndim)
    name = f"T_{op}"
    if reduction == "mul":
        if count > MUL_SCATTER_LIMIT:
            fail(op, f"a 'mul' scatter combines at most {MUL_SCATTER_LIMIT} updates, got "
                     f"{count}")

        def chain(*p):
            acc = data(*p)
            for k in range(count):
                acc = select(match(as_expr(k), p), acc * update(as_expr(k), p), acc)
            return acc

        return compute_named(data.shape, names, chain, name, tag.INJECTIVE)
    if reduction in ("max", "min"):
        reducer = te.max_reduce if reduction == "max" else te.min_reduce

        def extreme(*p):
            # one step more than there are updates: the last step takes the element
            # itself (the update index is clamped there, so nothing reads out of bounds)
            k = te.reduce_axis((0, count + 1), "k")
            u = emin(k.var, count - 1)
            lands = te.all(k.var < count, match(u, p))
            return reducer(select(lands, update(u, p), data(*p)), axis=k)

        return compute_named(data.shape, names, extreme, name, tag.COMM_REDUCE)
    if reduction == "add":
        acc = accumulate_dtype(data.dtype)

        def total(*p):
            k = te.reduce_axis((0, count), "k")
            return te.sum(select(match(k.var, p), cast_to(update(k.var, p), acc), const(0, acc)),
                          axis=k)

        sums = compute_named(data.shape, names, total, f"{name}_sum", tag.COMM_REDUCE)
        return compute_named(data.shape, names,
                             lambda *p: cast_to(cast_to(data(*p), acc) + sums(*p), data.dtype),
                             name, tag.INJECTIVE)

    def last(*p):
        k = te.reduce_axis((0, count), "k")
        return te.max_reduce(select(match(k.var, p), k.var, as_expr(-1)), axis=k)

    chosen = compute_named(data.shape, names, last, f"{name}_last", tag.COMM_REDUCE)

    def pick(*p):
        k = chosen(*p)
        return select(k >= 0, update(emax(k, 0), p), data(*p))

    return compute_named(data.shape, names, pick, name, tag.INJECTIVE)


def scatter_elements(data: Tensor, indices: Tensor, updates: Tensor, axis: int = 0,
                     reduction: str = "none") -> Tensor:
    """ONNX ``ScatterElements``: ``out[i with i[axis] = indices[i]] = updates[i]``,
    combined by ``reduction`` (see :data:`SCATTER_REDUCTIONS`); elsewhere ``data``."""
    op = "scatter_elements"
    expect_tensor(op, "data", data)
    _expect_index(op, "indices", indices)
    expect_tensor(op, "updates", updates)
    axis = _same_rank_axis(op, data, indices, axis)
    _check_updates(op, data, updates, indices.shape)
    ishape = indices.shape
    n = data.ndim
    count = ishape[axis]

    def coords(k, p):
        # the update read along the other dimensions at the output's own position,
        # clamped: a position beyond the updates' extent matches nothing (see match)
        return [k if d == axis else emin(p[d], ishape[d] - 1) for d in range(n)]

    def match(k, p):
        cond = _wrapped_equals(indices(*coords(k, p)), data.shape[axis], p[axis])
        for d in range(n):
            if d != axis and ishape[d] < data.shape[d]:
                cond = te.all(p[d] < ishape[d], cond)
        return cond

    return _scatter(op, data, count, match, lambda k, p: updates(*coords(k, p)), reduction)


def _check_updates(op: str, data: Tensor, updates: Tensor, shape) -> None:
    if tuple(updates.shape) != tuple(shape):
        fail(op, f"updates has shape {shape_str(updates.shape)} but must have "
                 f"{shape_str(shape)}")
    if updates.dtype != data.dtype:
        fail(op, f"updates has dtype {updates.dtype} but data has {data.dtype}")


def scatter_nd(data: Tensor, indices: Tensor, updates: Tensor,
               reduction: str = "none") -> Tensor:
    """ONNX ``ScatterND``: each index tuple in the last dimension of ``indices`` names a
    slice of ``data`` that the matching slice of ``updates`` replaces (or combines with, by
    ``reduction``)."""
    op = "scatter_nd"
    expect_tensor(op, "data", data)
    _expect_index(op, "indices", indices)
    expect_tensor(op, "updates", updates)
    _, q = _nd_dims(op, data, indices, 0)
    lead = tuple(indices.shape[:-1])
    _check_updates(op, data, updates, lead + tuple(data.shape[q:]))
    count = 1
    for s in lead:
        count *= s

    def position(k):
        return unravel_index(k, lead) if lead else []

    def match(k, p):
        u = position(k)
        conds = [_wrapped_equals(indices(*u, j), data.shape[j], p[j]) for j in range(q)]
        return te.all(*conds)

    def update(k, p):
        return updates(*position(k), *p[q:])

    return _scatter(op, data, count, match, update, reduction)


def one_hot(indices: Tensor, values: Tensor, depth: int, axis: int = -1) -> Tensor:
    """ONNX ``OneHot``: a new dimension of ``depth`` at ``axis`` holding ``values[1]`` where
    it equals the index (negative indices count from the end) and ``values[0]`` elsewhere;
    an index outside ``[-depth, depth)`` gives a row of ``values[0]``."""
    op = "one_hot"
    expect_tensor(op, "indices", indices)
    expect_tensor(op, "values", values)
    if tuple(values.shape) != (2,):
        fail(op, f"values must be [off, on] (shape [2]), got {shape_str(values.shape)}")
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        fail(op, f"depth must be a positive int, got {depth!r}")
    n = indices.ndim + 1
    if not -n <= axis < n:
        fail(op, f"axis {axis} is out of range for a {n}-D output")
    axis %= n
    shape = tuple(indices.shape[:axis]) + (depth,) + tuple(indices.shape[axis:])

    def fcompute(*i):
        index = indices(*i[:axis], *i[axis + 1:])
        if dt.is_float(index.dtype):
            index = cast("int64", index)  # ONNX truncates float indices
        return select(_wrapped_equals(index, depth, i[axis]), values(1), values(0))

    return compute_named(shape, ax_names(n), fcompute, "T_one_hot", tag.INJECTIVE)


def cumsum(data: Tensor, axis: int, exclusive: bool = False, reverse: bool = False) -> Tensor:
    """Running sums along ``axis`` (ONNX ``CumSum``): ``exclusive`` leaves out the element
    itself, ``reverse`` sums from the end. float16 and bfloat16 sum in float32."""
    op = "cumsum"
    expect_tensor(op, "data", data)
    if data.dtype == "bool":
        fail(op, "cannot sum a bool tensor; cast it to a number type first")
    axis = normalize_axis(op, axis, data.ndim)
    acc = accumulate_dtype(data.dtype)

    def fcompute(*i):
        k = te.reduce_axis((0, data.shape[axis]), "k")
        here = i[axis]
        if reverse:
            cond = k.var > here if exclusive else k.var >= here
        else:
            cond = k.var < here if exclusive else k.var <= here
        src = cast_to(data(*i[:axis], k.var, *i[axis + 1:]), acc)
        return te.sum(src, axis=k, where=cond)

    sums = compute_named(data.shape, ax_names(data.ndim), fcompute, "T_cumsum", tag.COMM_REDUCE)
    return cast_output(sums, data.dtype)


def topk_indices(data: Tensor, k: int, axis: int = -1, largest: bool = True) -> Tensor:
    """The positions of the ``k`` largest (or smallest) elements along ``axis``, best
    first; equal elements in order of position (ONNX ``TopK``); int64.

    A first stage ranks every element (how many elements come before it), a second finds
    the element of each rank below ``k``: work quadratic in the extent of ``axis``, meant
    for the short rows of a model's top-k."""
    op = "topk"
    expect_tensor(op, "data", data)
    if data.dtype == "bool":
        fail(op, "cannot order a bool tensor; cast it to a number type first")
    axis = normalize_axis(op, axis, data.ndim)
    n = data.shape[axis]
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
        fail(op, f"k must be an int in [1, {n}] (the extent of axis {axis}), got {k!r}")
    names = ax_names(data.ndim)

    def rank(*i):
        e = te.reduce_axis((0, n), "e")
        other = data(*i[:axis], e.var, *i[axis + 1:])
        mine = data(*i)
        better = other > mine if largest else other < mine
        before = te.any(better, te.all(other == mine, e.var < i[axis]))
        return te.sum(select(before, as_expr(1), as_expr(0)), axis=e)

    ranks = compute_named(data.shape, names, rank, "T_topk_rank", tag.COMM_REDUCE)
    shape = tuple(k if d == axis else s for d, s in enumerate(data.shape))

    def pick(*i):
        e = te.reduce_axis((0, n), "e")
        at = ranks(*i[:axis], e.var, *i[axis + 1:])
        return te.max_reduce(select(at == i[axis], cast("int64", e.var), const(-1, "int64")),
                             axis=e)

    return compute_named(shape, names, pick, "T_topk_indices", tag.COMM_REDUCE)


def trilu(data: Tensor, k=0, upper: bool = True) -> Tensor:
    """The upper (or lower) triangle of the last two dimensions from diagonal ``k`` (ONNX
    ``Trilu``): elements with ``j - i >= k`` (``<= k`` for lower) kept, others 0. ``k`` is
    an int, or a one-element int tensor read when the kernel runs."""
    op = "trilu"
    expect_tensor(op, "data", data)
    if data.ndim < 2:
        fail(op, f"data must have at least 2 dimensions, got {shape_str(data.shape)}")
    if isinstance(k, Tensor):
        _expect_index(op, "k", k)
        if _numel(k.shape) != 1:
            fail(op, f"k must hold one value, got shape {shape_str(k.shape)}")
    elif isinstance(k, bool) or not isinstance(k, int):
        fail(op, f"k must be an int or a one-element int tensor, got {k!r}")
    zero = const(False) if data.dtype == "bool" else const(0, data.dtype)

    def fcompute(*i):
        diag = k(*[0] * k.ndim) if isinstance(k, Tensor) else k
        diff = i[-1] - i[-2]
        if isinstance(diag, Expr):
            diff = cast(diag.dtype, diff)
        keep = diff >= diag if upper else diff <= diag
        return select(keep, data(*i), zero)

    return compute_named(data.shape, ax_names(data.ndim), fcompute, "T_trilu", tag.INJECTIVE)


__all__ = [
    "INDEX_DTYPES", "MUL_SCATTER_LIMIT", "SCATTER_REDUCTIONS", "cumsum", "gather_elements",
    "gather_nd", "one_hot", "scatter_elements", "scatter_nd", "take",
    "topk_indices", "trilu", "wrap_index",
]
