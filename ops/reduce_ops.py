"""Reductions beyond ``ops.reduction``: sums of a function of the data (L1, sum of squares),
products, and the index of the extreme value (argmax, argmin).

Stages follow ``ops.reduction``: one stage ``<input>_red`` tagged ``comm_reduce`` whose
reduce axis over input dimension ``d`` is ``k<d>``; 16-bit floats accumulate in float32 and
round once (a stage ``T_cast``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from ..ir import dtype as dt
from ..ir import te
from ..ir.expr import Expr, const, select
from ..ir.te import Tensor
from . import tag
from .reduction import _reduce_axes
from .reduction import max as reduce_max
from .reduction import min as reduce_min
from .utils import (
    accumulate_dtype,
    ax_names,
    cast_output,
    compute_named,
    expect_tensor,
    fail,
    normalize_axis,
)

PROD_MAX_ELEMENTS = 1024
"""The most elements one output of :func:`prod` may multiply (the product is written out
as one expression, since the IR has no product reducer)."""


def _out_shape(data: Tensor, axes: list[int], keepdims: bool) -> tuple:
    if keepdims:
        return tuple(1 if d in axes else s for d, s in enumerate(data.shape))
    return tuple(s for d, s in enumerate(data.shape) if d not in axes)


def _data_index(data: Tensor, axes: list[int], keepdims: bool, out_idx, red_idx: dict) -> list:
    idx, k = [], 0
    for d in range(data.ndim):
        if d in axes:
            idx.append(red_idx[d])
            k += keepdims
        else:
            idx.append(out_idx[k])
            k += 1
    return idx


def reduce_map(op: str, reducer: Callable, data: Tensor, axis, keepdims: bool,
               value: Callable[[Expr], Expr], acc: str) -> Tensor:
    """``reducer`` (``te.sum``, ``te.max_reduce``, ...) of ``value(element)`` computed in
    dtype ``acc`` over ``axis`` (None: all dimensions)."""
    expect_tensor(op, "data", data)
    if data.dtype == "bool":
        fail(op, f"cannot reduce bool tensor {data.name}; cast it to a number type first")
    axes = _reduce_axes(op, data, axis)
    raxes = {d: te.reduce_axis((0, data.shape[d]), name=f"k{d}") for d in axes}
    shape = _out_shape(data, axes, keepdims)

    def fcompute(*i):
        x = data(*_data_index(data, axes, keepdims, i, raxes))
        x = x.astype(acc) if x.dtype != acc else x
        return reducer(value(x), axis=[raxes[d] for d in axes])

    return compute_named(shape, ax_names(len(shape)), fcompute, f"{data.name}_red",
                         tag.COMM_REDUCE)


def sum_square(data: Tensor, axis=None, keepdims: bool = False) -> Tensor:
    """Sum of squares over ``axis``."""
    acc = accumulate_dtype(data.dtype)
    return cast_output(reduce_map("sum_square", te.sum, data, axis, keepdims,
                                  lambda v: v * v, acc), data.dtype)


def l1(data: Tensor, axis=None, keepdims: bool = False) -> Tensor:
    """Sum of absolute values over ``axis``."""
    acc = accumulate_dtype(data.dtype)
    return cast_output(reduce_map("l1", te.sum, data, axis, keepdims, te.abs, acc), data.dtype)


def prod(data: Tensor, axis=None, keepdims: bool = False) -> Tensor:
    """Product over ``axis``, written out element by element (at most
    :data:`PROD_MAX_ELEMENTS` per output); 16-bit floats multiply in float32."""
    expect_tensor("prod", "data", data)
    if data.dtype == "bool":
        fail("prod", f"cannot reduce bool tensor {data.name}; cast it to a number type first")
    axes = _reduce_axes("prod", data, axis)
    count = 1
    for d in axes:
        count *= data.shape[d]
    if count > PROD_MAX_ELEMENTS:
        fail("prod", f"a product over {count} elements is not supported (at most "
                     f"{PROD_MAX_ELEMENTS} per output element)")
    acc = accumulate_dtype(data.dtype)
    shape = _out_shape(data, axes, keepdims)

    def fcompute(*i):
        out = const(1, acc)
        for combo in itertools.product(*(range(data.shape[d]) for d in axes)):
            x = data(*_data_index(data, axes, keepdims, i, dict(zip(axes, combo))))
            out = out * (x.astype(acc) if x.dtype != acc else x)
        return out

    t = compute_named(shape, ax_names(len(shape)), fcompute, "T_prod", tag.INJECTIVE)
    return cast_output(t, data.dtype)


def arg_extreme(data: Tensor, axis: int, keepdims: bool, largest: bool,
                select_last_index: bool = False) -> Tensor:
    """The int64 index of the largest (``largest``) or smallest element along ``axis``;
    ties give the first index, or the last with ``select_last_index``."""
    op = "argmax" if largest else "argmin"
    expect_tensor(op, "data", data)
    if data.dtype == "bool":
        fail(op, f"cannot reduce bool tensor {data.name}; cast it to a number type first")
    ax = normalize_axis(op, axis, data.ndim)
    extreme = (reduce_max if largest else reduce_min)(data, ax, True)
    n = data.shape[ax]
    k = te.reduce_axis((0, n), name=f"k{ax}")
    shape = _out_shape(data, [ax], keepdims)

    def fcompute(*i):
        idx = _data_index(data, [ax], keepdims, i, {ax: k})
        eidx = list(idx)
        eidx[ax] = const(0, dt.INDEX)
        hit = data(*idx) == extreme(*eidx)
        pos = k.as_expr().astype("int64")
        if select_last_index:
            return te.max_reduce(select(hit, pos, const(-1, "int64")), axis=[k])
        return te.min_reduce(select(hit, pos, const(n, "int64")), axis=[k])

    return compute_named(shape, ax_names(len(shape)), fcompute, f"T_{op}", tag.COMM_REDUCE)
