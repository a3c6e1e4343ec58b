"""Injective layout operators: reshape, transpose, concatenate, strided_slice, squeeze,
expand_dims, reverse, broadcast_to, tile, depth_to_space, space_to_depth and border_pad.

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


def reverse(data: Tensor, axes) -> Tensor:
    """``data`` read backwards along ``axes`` (numpy's ``flip``)."""
    op = "reverse"
    expect_tensor(op, "data", data)
    axes = [axes] if isinstance(axes, int) else list(axes)
    flip = {normalize_axis(op, a, data.ndim) for a in axes}

    def fcompute(*i):
        return data(*((data.shape[d] - 1 - x) if d in flip else x for d, x in enumerate(i)))

    return compute_named(data.shape, ax_names(data.ndim), fcompute, "T_reverse", tag.INJECTIVE)


def broadcast_to(data: Tensor, shape) -> Tensor:
    """``data`` stretched to ``shape`` by numpy's broadcasting rules (a dimension of size 1
    repeats, missing leading dimensions are added)."""
    from .broadcast import broadcast_indices, broadcast_shape

    op = "broadcast_to"
    expect_tensor(op, "data", data)
    shape = tuple(int(s) for s in shape)
    if broadcast_shape(op, data.shape, shape) != shape:
        fail(op, f"{data.name} of shape {shape_str(data.shape)} does not broadcast to "
                 f"{shape_str(shape)}")

    def fcompute(*i):
        return data(*broadcast_indices(data, shape, list(i)))

    return compute_named(shape, ax_names(len(shape)), fcompute, "T_broadcast_to",
                         tag.BROADCAST)


def tile(data: Tensor, reps) -> Tensor:
    """``data`` repeated ``reps[d]`` times along each dimension ``d`` (numpy's ``tile`` with
    one repeat count per dimension)."""
    op = "tile"
    expect_tensor(op, "data", data)
    reps = [int(r) for r in reps]
    if len(reps) != data.ndim or any(r < 1 for r in reps):
        fail(op, f"reps must be {data.ndim} positive ints (one per dimension), got {reps}")
    shape = tuple(s * r for s, r in zip(data.shape, reps))

    def fcompute(*i):
        return data(*(x if r == 1 else idxmod(x, s) for x, s, r in zip(i, data.shape, reps)))

    return compute_named(shape, ax_names(data.ndim), fcompute, "T_tile", tag.INJECTIVE)


def _block_check(op: str, data: Tensor, block: int) -> None:
    expect_tensor(op, "data", data)
    if data.ndim != 4:
        fail(op, f"data must be 4-D [N, C, H, W], got shape {shape_str(data.shape)}")
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        fail(op, f"block_size must be a positive int, got {block!r}")


def depth_to_space(data: Tensor, block: int, mode: str = "DCR") -> Tensor:
    """Move blocks of channels into ``block x block`` spatial tiles (NCHW): ``[N, C, H, W]``
    to ``[N, C / block^2, H * block, W * block]``. ``mode`` says how a channel splits:
    ``DCR`` (depth, column, row: the block offset is the outer part) or ``CRD``."""
    op = "depth_to_space"
    _block_check(op, data, block)
    if mode not in ("DCR", "CRD"):
        fail(op, f"mode must be 'DCR' or 'CRD', got {mode!r}")
    n, c, h, w = data.shape
    if c % (block * block):
        fail(op, f"{c} channels do not split into blocks of {block}x{block}")
    depth = c // (block * block)

    def fcompute(b, k, y, x):
        by, bx = idxmod(y, block), idxmod(x, block)
        if mode == "DCR":
            channel = offset(scale(offset(scale(by, block), bx), depth), k)
        else:
            channel = offset(scale(k, block * block), offset(scale(by, block), bx))
        return data(b, channel, idxdiv(y, block), idxdiv(x, block))

    return compute_named((n, depth, h * block, w * block), ax_names(4), fcompute,
                         "T_depth_to_space", tag.INJECTIVE)


def space_to_depth(data: Tensor, block: int, mode: str = "DCR") -> Tensor:
    """Move ``block x block`` spatial tiles into channels (NCHW), the inverse of
    :func:`depth_to_space` in the same ``mode``: ``[N, C, H, W]`` to
    ``[N, C * block^2, H / block, W / block]``."""
    op = "space_to_depth"
    _block_check(op, data, block)
    if mode not in ("DCR", "CRD"):
        fail(op, f"mode must be 'DCR' or 'CRD', got {mode!r}")
    n, c, h, w = data.shape
    if h % block or w % block:
        fail(op, f"the spatial size {h}x{w} does not split into blocks of {block}x{block}")

    def fcompute(b, k, y, x):
        if mode == "DCR":
            channel, rest = idxmod(k, c), idxdiv(k, c)
        else:
            channel, rest = idxdiv(k, block * block), idxmod(k, block * block)
        return data(b, channel, offset(scale(y, block), idxdiv(rest, block)),
                    offset(scale(x, block), idxmod(rest, block)))

    return compute_named((n, c * block * block, h // block, w // block), ax_names(4), fcompute,
                         "T_space_to_depth", tag.INJECTIVE)


BORDER_PAD_MODES = ("reflect", "edge", "wrap")
"""How :func:`border_pad` fills the border (numpy's ``pad`` modes of the same names)."""


def border_pad(data: Tensor, pad_before, pad_after, mode: str) -> Tensor:
    """``data`` padded with its own elements: ``reflect`` mirrors about the edge element,
    ``edge`` repeats it, ``wrap`` continues from the other side (as numpy's ``pad``, also
    for widths larger than the dimension)."""
    op = "border_pad"
    expect_tensor(op, "data", data)
    if mode not in BORDER_PAD_MODES:
        fail(op, f"mode must be one of {list(BORDER_PAD_MODES)}, got {mode!r}")
    n = data.ndim
    before, after = [int(b) for b in pad_before], [int(a) for a in pad_after]
    if len(before) != n or len(after) != n or min(before + after, default=0) < 0:
        fail(op, f"pad_before {before} and pad_after {after} must be {n} non-negative ints")
    shape = tuple(s + b + a for s, b, a in zip(data.shape, before, after))

    def source(x, size, b, a):
        if b == 0 and a == 0:
            return x
        t = shift(x, b)
        if mode == "edge" or size == 1:
            return select(t < 0, as_expr(0), select(t >= size, as_expr(size - 1), t))
        if mode == "wrap":
            return idxmod(t, size)
        m = idxmod(t, 2 * size - 2)
        return select(m < size, m, 2 * size - 2 - m)

    def fcompute(*i):
        return data(*(source(x, s, b, a) for x, s, b, a in zip(i, data.shape, before, after)))

    return compute_named(shape, ax_names(n), fcompute, "T_border_pad", tag.INJECTIVE)
