"""Converters of the less common Core ATen overloads, each a composition of graph ops:
``atan2``, distances (``_cdist_forward``, ``_pdist_forward``), ``as_strided``,
``index_put`` and batch norm over the batch's own statistics."""

from __future__ import annotations

import math

import numpy as np

from .helpers import broadcast_to, numel, operand, promoted, reshape
from .registry import converter


@converter("aten.atan2.default", "aten.atan2.out",
           needs=("atan", "divide", "add", "greater", "less", "where", "logical_not"),
           maps_to="atan(y / x) corrected by quadrant (where)")
def _atan2(cx, a):
    dtype = promoted(cx)
    y, x = operand(cx, a.self, dtype), operand(cx, a.other, dtype)
    c = lambda v: cx.const(v, dtype)  # noqa: E731
    where = lambda p, q, r: cx.call("where", [p, q, r])  # noqa: E731
    base = cx.call("atan", [cx.call("divide", [y, x])])
    y_nonneg = cx.call("logical_not", [cx.call("less", [y, c(0)])])
    shifted = cx.call("add", [base, where(y_nonneg, c(math.pi), c(-math.pi))])
    on_axis = where(cx.call("greater", [y, c(0)]), c(math.pi / 2),
                    where(cx.call("less", [y, c(0)]), c(-math.pi / 2), c(0)))
    return where(cx.call("greater", [x, c(0)]), base,
                 where(cx.call("less", [x, c(0)]), shifted, on_axis))


def _distance(cx, x1, x2, p: float):
    """Distances between the rows of x1 [..., P, M] and x2 [..., R, M]: [..., P, R]."""
    lead = tuple(x1.shape[:-2])
    pn, m = x1.shape[-2:]
    r = x2.shape[-2]
    a = reshape(cx, x1, lead + (pn, 1, m))
    b = reshape(cx, x2, tuple(x2.shape[:-2]) + (1, r, m))
    d = cx.call("subtract", [a, b])
    mag = cx.call("maximum", [d, cx.call("negative", [d])])
    axis = (len(lead) + 2,)
    if p == 2:
        return cx.call("sqrt", [cx.call("reduce.sum", [cx.call("multiply", [d, d])],
                                        {"axis": axis})])
    if p == 1:
        return cx.call("reduce.sum", [mag], {"axis": axis})
    if math.isinf(p):
        return cx.call("reduce.max", [mag], {"axis": axis})
    if p == 0:
        nz = operand(cx, cx.call("not_equal", [d, cx.const(0, d.dtype)]), d.dtype)
        return cx.call("reduce.sum", [nz], {"axis": axis})
    c = lambda v: cx.const(v, d.dtype)  # noqa: E731
    total = cx.call("reduce.sum", [cx.call("power", [mag, c(p)])], {"axis": axis})
    return cx.call("power", [total, c(1.0 / p)])


_DIST_OPS = ("subtract", "maximum", "negative", "sqrt", "multiply", "reduce.sum",
             "reduce.max", "power", "not_equal", "reshape")


@converter("aten._cdist_forward.default", needs=_DIST_OPS,
           maps_to="p-norms of broadcast row differences (reduce.sum / reduce.max)")
def _cdist(cx, a):
    return _distance(cx, a.x1, a.x2, float(a.p))


@converter("aten._pdist_forward.default", needs=_DIST_OPS + ("take",),
           maps_to="the cdist of the rows with themselves, the upper triangle by take")
def _pdist(cx, a):
    x = a.self
    n = x.shape[0]
    full = reshape(cx, _distance(cx, x, x, float(a.p)), (n * n,))
    rows, cols = np.triu_indices(n, k=1)
    if rows.size == 0:
        cx.fail("pdist of fewer than two rows is empty, which is not supported")
    return cx.call("take", [full, cx.const(rows * n + cols, "int64")], {"axis": 0})


@converter("aten.as_strided.default", needs=("reshape", "take"),
           maps_to="take of the strided positions of the flat input",
           note="a contiguous input")
def _as_strided(cx, a):
    x = a.self
    val = cx.node.args[0].meta.get("val")
    if val is not None and not val.is_contiguous():
        cx.fail("as_strided of a non-contiguous tensor reads its storage, which the graph "
                "does not model; call .contiguous() first")
    offset = a.storage_offset or 0
    index = np.full(tuple(a.size), offset, dtype=np.int64)
    for d, (n, s) in enumerate(zip(a.size, a.stride)):
        shape = [1] * len(a.size)
        shape[d] = n
        index = index + (np.arange(n, dtype=np.int64) * s).reshape(shape)
    total = numel(x.shape)
    if index.size and (index.min() < 0 or index.max() >= total):
        cx.fail(f"the strided view reads outside the input's {total} elements")
    flat = reshape(cx, x, (total,))
    return cx.call("take", [flat, cx.const(index, "int64")], {"axis": 0})


@converter("aten.index_put.default", needs=("scatter_nd", "where", "reshape", "cast",
                                            "broadcast_to", "transpose", "concatenate"),
           maps_to="scatter_nd over the indexed axes moved first (a bool mask: where)",
           note="integer index tensors, or one bool mask with one value")
def _index_put(cx, a):
    x = a.self
    values = operand(cx, a.values, x.dtype)
    indices = list(a.indices)
    if len(indices) == 1 and indices[0] is not None and indices[0].dtype == "bool":
        mask = indices[0]
        if numel(values.shape) != 1:
            cx.fail("a bool mask with more than one value has a data-dependent layout, which "
                    "is not supported")
        if a.accumulate:
            cx.fail("accumulate=True with a bool mask is not supported")
        mask = reshape(cx, mask, tuple(mask.shape) + (1,) * (x.ndim - mask.ndim))
        mask = broadcast_to(cx, mask, x.shape)
        return cx.call("where", [mask, reshape(cx, values, ()), x])
    picked = [(d, t) for d, t in enumerate(indices) if t is not None]
    dims = [d for d, _ in picked]
    rest = [d for d in range(x.ndim) if d not in dims]
    perm = dims + rest
    moved = x if perm == list(range(x.ndim)) else cx.call("transpose", [x], {"axes": perm})
    shape = tuple(np.broadcast_shapes(*[tuple(t.shape) for _, t in picked]))
    parts = [reshape(cx, broadcast_to(cx, operand(cx, t, "int64"), shape), shape + (1,))
             for _, t in picked]
    index = parts[0] if len(parts) == 1 else cx.call("concatenate", parts,
                                                     {"axis": len(shape)})
    # the values broadcast to x[indices] (numpy's layout), then to (index dims, rest)
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    nb = len(shape)
    if adjacent:
        lead = dims[0]
        result = tuple(x.shape[:lead]) + shape + tuple(x.shape[dims[-1] + 1:])
        updates = broadcast_to(cx, values, result)
        if lead:
            order = list(range(lead, lead + nb)) + list(range(lead)) + \
                list(range(lead + nb, len(result)))
            updates = cx.call("transpose", [updates], {"axes": order})
    else:
        updates = broadcast_to(cx, values, shape + tuple(x.shape[d] for d in rest))
    out = cx.call("scatter_nd", [moved, index, updates],
                  {"reduction": "add" if a.accumulate else "none"})
    if perm == list(range(x.ndim)):
        return out
    return cx.call("transpose", [out], {"axes": [perm.index(d) for d in range(x.ndim)]})


@converter("aten._native_batch_norm_legit.no_stats",
           needs=("mean", "subtract", "multiply", "add", "rsqrt", "reshape"),
           maps_to="normalization by the batch's own statistics (instance norm)")
def _bn_no_stats(cx, a):
    x = a.input
    axes = tuple(d for d in range(x.ndim) if d != 1)
    mu = cx.call("mean", [x], {"axis": axes, "keepdims": True})
    d = cx.call("subtract", [x, mu])
    var = cx.call("mean", [cx.call("multiply", [d, d])], {"axis": axes, "keepdims": True})
    rstd = cx.call("rsqrt", [cx.call("add", [var, cx.const(a.eps, x.dtype)])])
    out = cx.call("multiply", [d, rstd])
    shape = (x.shape[1],) + (1,) * (x.ndim - 2)
    if a.weight is not None:
        out = cx.call("multiply", [out, reshape(cx, a.weight, shape)])
    if a.bias is not None:
        out = cx.call("add", [out, reshape(cx, a.bias, shape)])
    c = x.shape[1]
    return out, reshape(cx, mu, (c,)), reshape(cx, rstd, (c,))


@converter("aten._embedding_bag.default", "aten._embedding_bag_forward_only.default",
           needs=("take", "reshape", "reduce.sum", "reduce.max", "mean", "multiply",
                  "strided_slice", "concatenate", "scatter_elements", "less_equal", "cast",
                  "add", "broadcast_to", "maximum", "divide", "greater", "where", "not_equal"),
           maps_to="take of the rows, reduced per bag (slices for offsets known while "
                   "importing, a scatter by bag number for offsets given at run time)",
           note="the first output only")
def _embedding_bag(cx, a):
    from ..ir import Constant
    from .convert_nn import Unavailable

    modes = {0: "reduce.sum", 1: "mean", 2: "reduce.max"}
    if a.mode not in modes:
        cx.fail(f"mode {a.mode} is not supported")
    n = a.indices.shape[0]
    rows = cx.call("take", [a.weight, a.indices], {"axis": 0})
    if a.per_sample_weights is not None:
        if a.mode != 0:
            cx.fail("per_sample_weights needs mode 'sum'")
        w = reshape(cx, a.per_sample_weights, (n, 1))
        rows = cx.call("multiply", [rows, w])
    rest = Unavailable("the bag bookkeeping outputs of _embedding_bag")
    padding = a.padding_idx is not None and a.padding_idx >= 0
    if padding or not isinstance(a.offsets, Constant):
        return _bags_at_run_time(cx, a, rows, n, padding), rest, rest, rest
    offsets = [int(o) for o in np.asarray(a.offsets.value).reshape(-1)]
    ends = offsets[1:] + ([] if a.include_last_offset else [n])
    starts = offsets[:len(ends)]
    dim = a.weight.shape[1]
    sizes = {e - s for s, e in zip(starts, ends)}
    if 0 in sizes:
        cx.fail("an empty bag is not supported")
    if len(sizes) == 1 and starts == list(range(0, n, next(iter(sizes))))[:len(starts)]:
        k = next(iter(sizes))
        grouped = reshape(cx, rows, (len(starts), k, dim))
        out = cx.call(modes[a.mode], [grouped], {"axis": (1,)})
    else:
        bags = [cx.call(modes[a.mode], [cx.call("strided_slice", [rows], {
            "begin": [s], "end": [e], "axes": [0]})], {"axis": (0,), "keepdims": True})
            for s, e in zip(starts, ends)]
        out = bags[0] if len(bags) == 1 else cx.call("concatenate", bags, {"axis": 0})
    return out, rest, rest, rest


def _bags_at_run_time(cx, a, rows, n: int, padding: bool = False):
    """Bags whose offsets are an input: row ``j`` belongs to bag ``#{offsets <= j} - 1``,
    and the rows are scattered (added, or maxed) into their bags; an empty bag is 0. With
    ``padding``, the rows of ``padding_idx`` count for nothing (nor in a mean's size)."""
    count = a.offsets.shape[0] - (1 if a.include_last_offset else 0)
    dim = rows.shape[1]
    offsets = operand(cx, a.offsets, "int64")
    if a.include_last_offset:
        offsets = cx.call("strided_slice", [offsets], {"begin": [0], "end": [count],
                                                       "axes": [0]})
    positions = cx.const(np.arange(n, dtype=np.int64).reshape(n, 1), "int64")
    started = cx.call("less_equal", [reshape(cx, offsets, (1, count)), positions])
    bag = cx.call("reduce.sum", [cx.call("cast", [started], {"dtype": "int64"})], {"axis": (1,)})
    bag = cx.call("add", [bag, cx.const(-1, "int64")])
    index = broadcast_to(cx, reshape(cx, bag, (n, 1)), (n, dim))
    dtype = rows.dtype
    ones = cx.const(np.ones(n), dtype)
    if padding:
        keep = cx.call("not_equal", [operand(cx, a.indices, "int64"),
                                     cx.const(a.padding_idx, "int64")])
        ones = cx.call("cast", [keep], {"dtype": dtype})
        fill = -np.inf if a.mode == 2 else 0.0
        rows = cx.call("where", [reshape(cx, keep, (n, 1)), rows, cx.const(fill, dtype)])
    if a.mode == 2:
        base = cx.const(np.full((count, dim), -np.inf), dtype)
        out = cx.call("scatter_elements", [base, index, rows], {"axis": 0, "reduction": "max"})
    else:
        out = cx.call("scatter_elements", [cx.const(np.zeros((count, dim)), dtype), index,
                                           rows], {"axis": 0, "reduction": "add"})
    sizes = cx.call("scatter_elements", [cx.const(np.zeros(count), dtype), bag, ones],
                    {"axis": 0, "reduction": "add"})
    sizes = reshape(cx, sizes, (count, 1))
    if a.mode == 1:
        return cx.call("divide", [out, cx.call("maximum", [sizes, cx.const(1.0, dtype)])])
    if a.mode == 2:
        return cx.call("where", [cx.call("greater", [sizes, cx.const(0.0, dtype)]), out,
                                 cx.const(0.0, dtype)])
    return out


@converter("aten.col2im.default", needs=("scatter_elements", "reshape", "strided_slice"),
           maps_to="scatter_elements (add) of the columns into the padded image")
def _col2im(cx, a):
    x = a.self
    kh, kw = a.kernel_size
    dh, dw = a.dilation
    ph, pw = a.padding
    sh, sw = a.stride
    oh, ow = a.output_size
    batched = x.ndim == 3
    if not batched:
        x = reshape(cx, x, (1,) + tuple(x.shape))
    n, ckk, length = x.shape
    c = ckk // (kh * kw)
    hp, wp = oh + 2 * ph, ow + 2 * pw
    bh = (hp - (dh * (kh - 1) + 1)) // sh + 1
    bw = (wp - (dw * (kw - 1) + 1)) // sw + 1
    if bh * bw != length:
        cx.fail(f"{length} columns do not match the {bh}x{bw} blocks of the output")
    ki, kj, bi, bj = np.meshgrid(np.arange(kh), np.arange(kw), np.arange(bh), np.arange(bw),
                                 indexing="ij")
    target = ((bi * sh + ki * dh) * wp + (bj * sw + kj * dw)).reshape(kh * kw * length)
    index = np.broadcast_to(target, (n, c, kh * kw * length))
    cols = reshape(cx, x, (n, c, kh * kw * length))
    base = cx.const(np.zeros((n, c, hp * wp)), x.dtype)
    out = cx.call("scatter_elements", [base, cx.const(index, "int64"), cols],
                  {"axis": 2, "reduction": "add"})
    out = reshape(cx, out, (n, c, hp, wp))
    if ph or pw:
        out = cx.call("strided_slice", [out], {"begin": [ph, pw], "end": [ph + oh, pw + ow],
                                               "axes": [2, 3]})
    return out if batched else reshape(cx, out, (c, oh, ow))
