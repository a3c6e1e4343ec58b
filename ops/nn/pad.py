"""Constant padding (``pad``), the first stage of every padded convolution and pool."""

from __future__ import annotations

from ...ir import dtype as dt
from ...ir import te
from ...ir.expr import Expr
from ...ir.te import Tensor
from .. import tag
from ..utils import compute_named, const_of, expect_tensor, fail, i_names, shift


def pad(
    data: Tensor,
    pad_before,
    pad_after=None,
    pad_value=0.0,
    name: str = "PadInput",
) -> Tensor:
    """``data`` surrounded by ``pad_value``: ``pad_before[d]`` elements before dimension ``d``
    and ``pad_after[d]`` after it (``pad_after`` defaults to ``pad_before``).

    Bounds are checked only on the sides that are padded, and an index is shifted only
    where ``pad_before`` is non-zero, so the stage prints as TOPI's does. The stage is
    tagged ``injective,pad``; its axes are ``i0, i1, ...``.
    """
    return pad_compute(data, pad_before, pad_after, pad_value, name, i_names, "pad")


def pad_compute(data, pad_before, pad_after, pad_value, name, axis_names, op) -> Tensor:
    """:func:`pad` with the axis names (a function of the rank) and error prefix chosen."""
    expect_tensor(op, "data", data)
    n = data.ndim
    before = _pad_list(op, "pad_before", pad_before, n)
    after = before if pad_after is None else _pad_list(op, "pad_after", pad_after, n)
    value = _pad_value(op, pad_value, data.dtype)
    shape = tuple(s + b + a for s, b, a in zip(data.shape, before, after))

    def fcompute(*i):
        conds = []
        index = []
        for d in range(n):
            if before[d]:
                conds.append(i[d] >= before[d])
            if after[d]:
                conds.append(i[d] < data.shape[d] + before[d])
            index.append(shift(i[d], before[d]))
        if not conds:
            return data(*index)
        return te.if_then_else(te.all(*conds), data(*index), value)

    return compute_named(shape, axis_names(n), fcompute, name, tag.PAD)


def _pad_list(op: str, what: str, value, ndim: int) -> list[int]:
    if not isinstance(value, (tuple, list)):
        fail(op, f"{what} must be a list of {ndim} ints (one per dimension), got {value!r}")
    if len(value) != ndim:
        fail(op, f"{what} has {len(value)} entries but data has {ndim} dimensions")
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            fail(op, f"{what} entries must be non-negative ints, got {list(value)}")
    return [int(v) for v in value]


def _pad_value(op: str, value, dtype: str) -> Expr:
    if isinstance(value, Expr):
        if value.dtype != dtype:
            fail(op, f"pad_value has dtype {value.dtype} but data has dtype {dtype}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        fail(op, f"pad_value must be a number, got {value!r}")
    if not dt.is_float(dtype) and value != int(value):
        fail(op, f"pad_value {value} is not an integer but data has dtype {dtype}")
    return const_of(value, dtype)
