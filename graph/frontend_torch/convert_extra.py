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
                                            "broadcast_to"),
           maps_to="scatter_nd over the leading indexed axes (a bool mask: where)",
           note="index tensors on leading axes, or one bool mask")
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
    if any(t is None for t in indices):
        cx.fail("index tensors must index the leading axes with no gaps (None) between them")
    k = len(indices)
    shape = np.broadcast_shapes(*[tuple(t.shape) for t in indices])
    parts = [reshape(cx, broadcast_to(cx, operand(cx, t, "int64"), shape), shape + (1,))
             for t in indices]
    index = parts[0] if k == 1 else cx.call("concatenate", parts, {"axis": len(shape)})
    updates = broadcast_to(cx, values, tuple(shape) + tuple(x.shape[k:]))
    return cx.call("scatter_nd", [x, index, updates],
                   {"reduction": "add" if a.accumulate else "none"})


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
