"""Running products along an axis (ONNX ``CumProd``).

There is no product reducer in the tensor expression language, so each output element is
the product of its axis written out term by term, a term outside the running range being
``1``: work quadratic in the extent of the axis, at most
:data:`~ptxforge.ops.reduce_ops.PROD_MAX_ELEMENTS` terms per element. The terms multiply
in the order numpy's ``cumprod`` takes them (from the start, or from the end with
``reverse``), and a factor of 1 is exact, so float32 results match it bit for bit; 16-bit
floats multiply in float32.
"""

from __future__ import annotations

from ..ir.expr import const, select
from ..ir.te import Tensor
from . import tag
from .reduce_ops import PROD_MAX_ELEMENTS
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


def cumprod(data: Tensor, axis: int, exclusive: bool = False, reverse: bool = False) -> Tensor:
    """Running products along ``axis``: ``exclusive`` leaves out the element itself (the
    first product is 1), ``reverse`` multiplies from the end (stage ``T_cumprod``)."""
    op = "cumprod"
    expect_tensor(op, "data", data)
    if data.dtype == "bool":
        fail(op, "cannot multiply a bool tensor; cast it to a number type first")
    axis = normalize_axis(op, axis, data.ndim)
    n = int(data.shape[axis])
    if n > PROD_MAX_ELEMENTS:
        fail(op, f"axis {axis} has {n} elements; running products over at most "
                 f"{PROD_MAX_ELEMENTS} are supported")
    acc = accumulate_dtype(data.dtype)
    order = range(n - 1, -1, -1) if reverse else range(n)

    def fcompute(*i):
        here = i[axis]
        out = const(1, acc)
        for k in order:
            if reverse:
                inside = (here < k) if exclusive else (here <= k)
            else:
                inside = (here > k) if exclusive else (here >= k)
            term = cast_to(data(*i[:axis], k, *i[axis + 1:]), acc)
            out = out * select(inside, term, const(1, acc))
        return out

    t = compute_named(data.shape, ax_names(data.ndim), fcompute, "T_cumprod", tag.INJECTIVE)
    return cast_output(t, data.dtype)
