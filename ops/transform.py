"""Injective layout operators: reshape, transpose, concatenate, strided_slice, squeeze,
expand_dims.

Stage names and tags follow TOPI's ``transform.h`` (``T_reshape``, ``T_transpose``,
``T_concat``, ``T_strided_slice``, ``T_squeeze``, ``T_expand_dims``; axes
``ax0, ax1, ...``).
"""

from __future__ import annotations

from ..ir.expr import as_expr, select
from ..ir.te import Tensor
from . import tag
from .utils import (
    ax_names,
    compute_named,
    expect_tensor,
    fail,
    idxdiv,
    idxmod,
    normalize_axis,
    offset,
    scale,
    shape_str,
    shift,
)


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def ravel_index(indices, shape):
    """The row-major flat index of ``indices`` in ``shape`` (folding multiplications by 1)."""
    flat = indices[0]
    for i, extent in zip(indices[1:], shape[1:]):
        flat = offset(scale(flat, extent), i)
    return flat


def unravel_index(flat, shape) -> list:
    """The row-major indices of the flat index ``flat`` into ``shape``.

    The outermost index needs no ``floormod``: ``flat`` is below the element count, so the
    quotient left over is already in range (and is 0 where that dimension has size 1).
    """
    out = []
    for k in range(len(shape) - 1, 0, -1):
        out.append(idxmod(flat, shape[k]))
        flat = idxdiv(flat, shape[k])
    out.append(as_expr(0) if shape[0] == 1 else flat)
    return list(reversed(out))


def _infer_shape(op: str, data: Tensor, newshape) -> tuple[int, ...]:
    if isinstance(newshape, int):
        newshape = (newshape,)
    try:
        newshape = [int(s) for s in newshape]
    except (TypeError, ValueError):
        fail(op, f"newshape must be a sequence of ints, got {newshape!r}")
    total = _numel(data.shape)
    unknown = [k for k, s in enumerate(newshape) if s == -1]
    if len(unknown) > 1:
        fail(op, f"newshape {newshape} has more than one -1")
    if any(s < -1 for s in newshape):
        fail(op, f"newshape {newshape} has a negative size other than -1")
    known = _numel(s for s in newshape if s != -1)
    if unknown:
        if known == 0 or total % known:
            fail(op, f"cannot infer the -1 in {newshape} for {total} elements of {data.name}")
        newshape[unknown[0]] = total // known
    elif known != total:
        fail(
            op,
            f"cannot reshape {data.name} of shape {shape_str(data.shape)} ({total} elements) "
            f"into {newshape} ({known} elements)",
        )
    return tuple(newshape)


def reshape(data: Tensor, newshape) -> Tensor:
    """``data`` with a new shape of the same element count (one entry may be -1)."""
    expect_tensor("reshape", "data", data)
    shape = _infer_shape("reshape", data, newshape)

    def fcompute(*i):
        if not shape:
            return data(*[as_expr(0)] * data.ndim)
        flat = ravel_index(list(i), shape)
        src = unravel_index(flat, data.shape) if data.ndim else []
        return data(*src)

    return compute_named(shape, ax_names(len(shape)), fcompute, "T_reshape", tag.INJECTIVE)


def transpose(data: Tensor, axes=None) -> Tensor:
    """Permute the dimensions: output dimension ``k`` is input dimension ``axes[k]``.

    ``axes`` defaults to reversing the dimensions; negative entries count from the end.
    """
    expect_tensor("transpose", "data", data)
    n = data.ndim
    if axes is None:
        axes = list(reversed(range(n)))
    axes = [normalize_axis("transpose", a, n) for a in axes]
    if sorted(axes) != list(range(n)):
        fail("transpose", f"axes {axes} are not a permutation of {list(range(n))}")
    shape = tuple(data.shape[a] for a in axes)

    def fcompute(*i):
        src = [None] * n
        for k, a in enumerate(axes):
            src[a] = i[k]
        return data(*src)

    return compute_named(shape, ax_names(n), fcompute, "T_transpose", tag.INJECTIVE)


def concatenate(tensors, axis: int = 0) -> Tensor:
    """Join tensors along ``axis``; all other dimensions and the dtype must agree."""
    op = "concatenate"
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)) or not tensors:
        fail(op, "takes a non-empty list or tuple of te tensors")
    for k, t in enumerate(tensors):
        expect_tensor(op, f"tensors[{k}]", t)
    first = tensors[0]
    n = first.ndim
    if n == 0:
        fail(op, "cannot concatenate 0-D tensors")
    axis = normalize_axis(op, axis, n)
    for k, t in enumerate(tensors[1:], start=1):
        if t.ndim != n:
            fail(op, f"tensors[{k}] has {t.ndim} dimensions but tensors[0] has {n}")
        if t.dtype != first.dtype:
            fail(op, f"tensors[{k}] has dtype {t.dtype} but tensors[0] has {first.dtype}")
        for d in range(n):
            if d != axis and t.shape[d] != first.shape[d]:
                fail(
                    op,
                    f"tensors[{k}] has shape {shape_str(t.shape)} but tensors[0] has "
                    f"{shape_str(first.shape)}; they may differ only along axis {axis}",
                )
    starts = []
    total = 0
    for t in tensors:
        starts.append(total)
        total += t.shape[axis]
    shape = tuple(total if d == axis else first.shape[d] for d in range(n))

    def fcompute(*i):
        def read(k):
            idx = list(i)
            idx[axis] = shift(i[axis], starts[k])
            return tensors[k](*idx)

        value = read(0)
        for k in range(1, len(tensors)):
            value = select(i[axis] >= starts[k], read(k), value)
        return value

    return compute_named(shape, ax_names(n), fcompute, "T_concat", tag.INJECTIVE)


def slice_ranges(op: str, shape, begin, end, strides=None, axes=None) -> list:
    """``(start, step, count)`` for every dimension of ``shape`` sliced as numpy's
    ``x[begin:end:strides]`` along ``axes`` (default: the first ``len(begin)`` dimensions;
    the others are kept whole). Negative ``begin`` / ``end`` count from the end and are
    clipped to the dimension, as in numpy; ``strides`` are positive (default 1)."""
    n = len(shape)
    try:
        begin = [int(b) for b in begin]
        end = [int(e) for e in end]
        strides = [1] * len(begin) if strides is None else [int(s) for s in strides]
        axes = list(range(len(begin))) if axes is None else [int(a) for a in axes]
    except (TypeError, ValueError):
        fail(op, f"begin, end, strides and axes must be lists of ints, got {begin!r}, "
                 f"{end!r}, {strides!r}, {axes!r}")
    if not (len(begin) == len(end) == len(strides) == len(axes)):
        fail(op, f"begin {begin}, end {end}, strides {strides} and axes {axes} must have "
                 "the same length")
    if len(axes) > n:
        fail(op, f"{len(axes)} sliced dimensions for a {n}-D tensor")
    axes = [normalize_axis(op, a, n) for a in axes]
    if len(set(axes)) != len(axes):
        fail(op, f"axes {axes} name a dimension twice")
    out = [(0, 1, int(d)) for d in shape]
    for a, b, e, st in zip(axes, begin, end, strides):
        if st < 1:
            fail(op, f"stride {st} along axis {a}: only positive strides are supported")
        start, stop, _ = slice(b, e, st).indices(int(shape[a]))
        count = max(0, -(-(stop - start) // st))
        if count == 0:
            fail(op, f"the slice {b}:{e}:{st} of axis {a} (extent {shape[a]}) is empty")
        out[a] = (start, st, count)
    return out


def strided_slice(data: Tensor, begin, end, strides=None, axes=None) -> Tensor:
    """``data[begin:end:strides]`` along ``axes`` (see :func:`slice_ranges`), as TOPI's
    ``strided_slice``: output element ``i`` reads input element ``begin + i * strides``."""
    op = "strided_slice"
    expect_tensor(op, "data", data)
    ranges = slice_ranges(op, data.shape, begin, end, strides, axes)
    shape = tuple(c for _, _, c in ranges)

    def fcompute(*i):
        return data(*(offset(scale(x, st), b) for x, (b, st, _) in zip(i, ranges)))

    return compute_named(shape, ax_names(data.ndim), fcompute, "T_strided_slice",
                         tag.INJECTIVE)


def squeeze(data: Tensor, axis=None) -> Tensor:
    """Drop dimensions of size 1: those in ``axis`` (an int or ints), or all of them."""
    op = "squeeze"
    expect_tensor(op, "data", data)
    n = data.ndim
    if axis is None:
        drop = {d for d in range(n) if data.shape[d] == 1}
    else:
        axes = [axis] if isinstance(axis, int) else list(axis)
        drop = {normalize_axis(op, a, n) for a in axes}
        for d in sorted(drop):
            if data.shape[d] != 1:
                fail(op, f"axis {d} of {data.name} has size {data.shape[d]}, not 1")
    keep = [d for d in range(n) if d not in drop]
    shape = tuple(data.shape[d] for d in keep)

    def fcompute(*i):
        src = [as_expr(0)] * n
        for k, d in enumerate(keep):
            src[d] = i[k]
        return data(*src)

    return compute_named(shape, ax_names(len(shape)), fcompute, "T_squeeze", tag.INJECTIVE)


def expand_dims(data: Tensor, axis: int, num_newaxis: int = 1) -> Tensor:
    """Insert ``num_newaxis`` dimensions of size 1 at position ``axis``."""
    op = "expand_dims"
    expect_tensor(op, "data", data)
    n = data.ndim
    if isinstance(num_newaxis, bool) or not isinstance(num_newaxis, int) or num_newaxis < 0:
        fail(op, f"num_newaxis must be a non-negative int, got {num_newaxis!r}")
    if isinstance(axis, bool) or not isinstance(axis, int) or not -n - 1 <= axis <= n:
        fail(op, f"axis must be an int in [{-n - 1}, {n}], got {axis!r}")
    axis = axis % (n + 1)
    shape = tuple(data.shape[:axis]) + (1,) * num_newaxis + tuple(data.shape[axis:])

    def fcompute(*i):
        return data(*(i[:axis] + i[axis + num_newaxis :]))

    return compute_named(shape, ax_names(len(shape)), fcompute, "T_expand_dims", tag.BROADCAST)
