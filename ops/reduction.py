"""Commutative reductions over chosen axes: ``sum``, ``max``, ``min`` and ``mean``.

As TOPI's ``reduction.h``: one stage ``<input>_red`` tagged ``comm_reduce`` whose reduce
axis over input dimension ``d`` is named ``k<d>``; output axes are ``ax0, ax1, ...``.
"""

from __future__ import annotations

from ..ir import dtype as dt
from ..ir import te
from ..ir.te import Tensor
from . import tag
from .broadcast import divide
from .utils import (
    accumulate_dtype,
    ax_names,
    cast_output,
    cast_to,
    compute_named,
    expect_tensor,
    fail,
    normalize_axis,
)


def _reduce_axes(op: str, data: Tensor, axis) -> list[int]:
    n = data.ndim
    if axis is None:
        return list(range(n))
    axes = [axis] if isinstance(axis, int) else list(axis)
    out = sorted({normalize_axis(op, a, n) for a in axes})
    if len(out) != len(axes):
        fail(op, f"axis {axis} names a dimension twice")
    return out


def _comm_reduce(op: str, reducer, data: Tensor, axis, keepdims: bool,
                 acc: str | None = None) -> Tensor:
    """The reduction stage; ``acc``: the dtype it accumulates in (default: the data's)."""
    expect_tensor(op, "data", data)
    if data.dtype == "bool":
        fail(op, f"cannot reduce bool tensor {data.name}; cast it to a number type first")
    axes = _reduce_axes(op, data, axis)
    raxes = {d: te.reduce_axis((0, data.shape[d]), name=f"k{d}") for d in axes}
    if keepdims:
        shape = tuple(1 if d in raxes else s for d, s in enumerate(data.shape))
    else:
        shape = tuple(s for d, s in enumerate(data.shape) if d not in raxes)

    def fcompute(*i):
        idx, k = [], 0
        for d in range(data.ndim):
            if d in raxes:
                idx.append(raxes[d])
                k += keepdims
            else:
                idx.append(i[k])
                k += 1
        return reducer(cast_to(data(*idx), acc or data.dtype), axis=[raxes[d] for d in axes])

    return compute_named(
        shape, ax_names(len(shape)), fcompute, f"{data.name}_red", tag.COMM_REDUCE
    )


def sum(data: Tensor, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Sum over ``axis`` (an int, ints, or None for all dimensions). float16 and bfloat16
    sum in float32 and round once (a stage ``T_cast``)."""
    acc = accumulate_dtype(data.dtype)
    return cast_output(_comm_reduce("sum", te.sum, data, axis, keepdims, acc), data.dtype)


def max(data: Tensor, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Maximum over ``axis`` (an int, ints, or None for all dimensions)."""
    return _comm_reduce("max", te.max_reduce, data, axis, keepdims)


def min(data: Tensor, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Minimum over ``axis`` (an int, ints, or None for all dimensions)."""
    return _comm_reduce("min", te.min_reduce, data, axis, keepdims)


def mean(data: Tensor, axis=None, keepdims: bool = False) -> Tensor:
    """Arithmetic mean over ``axis``: a sum stage, then ``T_divide`` by the count (float16
    and bfloat16: both in float32, rounded once at the end)."""
    expect_tensor("mean", "data", data)
    if not dt.is_float(data.dtype):
        fail("mean", f"needs a float tensor, got {data.name} with dtype {data.dtype}")
    acc = accumulate_dtype(data.dtype)
    total = _comm_reduce("sum", te.sum, data, axis, keepdims, acc)
    count = 1
    for d in _reduce_axes("mean", data, axis):
        count *= data.shape[d]
    if acc == data.dtype:
        return divide(total, te.const(float(count), data.dtype))
    return compute_named(total.shape, ax_names(total.ndim),
                         lambda *i: cast_to(total(*i) / te.const(float(count), acc), data.dtype),
                         "T_divide", tag.BROADCAST)
