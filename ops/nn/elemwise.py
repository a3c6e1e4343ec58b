"""Activation functions: ``relu`` and ``leaky_relu`` (stage ``compute``, tag ``elemwise``)."""

from __future__ import annotations

from ...ir import dtype as dt
from ...ir import te
from ...ir.expr import const
from ...ir.te import Tensor
from .. import tag
from ..utils import compute_named, expect_tensor, fail, i_names


def relu(x: Tensor) -> Tensor:
    """``max(x, 0)`` element-wise."""
    expect_tensor("relu", "x", x)
    if x.dtype == "bool":
        fail("relu", f"needs a number type, got {x.name} with dtype bool")
    zero = const(0, x.dtype)
    return compute_named(
        x.shape, i_names(x.ndim), lambda *i: te.max(x(*i), zero), "compute", tag.ELEMWISE
    )


def leaky_relu(x: Tensor, alpha: float) -> Tensor:
    """``x`` where positive, ``x*alpha`` elsewhere."""
    expect_tensor("leaky_relu", "x", x)
    if not dt.is_float(x.dtype):
        fail("leaky_relu", f"needs a float tensor, got {x.name} with dtype {x.dtype}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        fail("leaky_relu", f"alpha must be a number, got {alpha!r}")
    calpha = const(float(alpha), x.dtype)
    zero = const(0.0, x.dtype)

    def fcompute(*i):
        value = x(*i)
        return te.if_then_else(value > zero, value, value * calpha)

    return compute_named(x.shape, i_names(x.ndim), fcompute, "compute", tag.ELEMWISE)
