"""Unary element-wise operators: math functions, ``clip``, ``cast`` and ``negative``.

As in TOPI's ``math.py``, each is a stage ``compute`` over axes ``i0, i1, ...`` tagged
``elemwise`` (``cast`` and ``negative`` come from TOPI's C++ side: ``T_cast``,
``T_negative``, axes ``ax0, ...``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ..ir import dtype as dt
from ..ir import te
from ..ir.expr import Expr, const, emax, emin
from ..ir.te import Tensor
from . import tag
from .utils import ax_names, check_dtype, compute_named, expect_tensor, fail, i_names


def _unary(op: str, x: Tensor, rule: Callable[[Expr], Expr], floats_only: bool) -> Tensor:
    expect_tensor(op, "x", x)
    if floats_only and not dt.is_float(x.dtype):
        fail(op, f"needs a float tensor, got {x.name} with dtype {x.dtype}; cast it first")
    return compute_named(x.shape, i_names(x.ndim), lambda *i: rule(x(*i)), "compute", tag.ELEMWISE)


def exp(x: Tensor) -> Tensor:
    """Element-wise ``e**x``."""
    return _unary("exp", x, te.exp, True)


def log(x: Tensor) -> Tensor:
    """Element-wise natural logarithm."""
    return _unary("log", x, te.log, True)


def sqrt(x: Tensor) -> Tensor:
    """Element-wise square root."""
    return _unary("sqrt", x, te.sqrt, True)


def rsqrt(x: Tensor) -> Tensor:
    """Element-wise ``1/sqrt(x)``."""
    return _unary("rsqrt", x, te.rsqrt, True)


def sigmoid(x: Tensor) -> Tensor:
    """Element-wise logistic function ``1/(1 + e**-x)``."""
    return _unary("sigmoid", x, te.sigmoid, True)


def tanh(x: Tensor) -> Tensor:
    """Element-wise hyperbolic tangent."""
    return _unary("tanh", x, te.tanh, True)


def erf(x: Tensor) -> Tensor:
    """Element-wise error function."""
    return _unary("erf", x, te.erf, True)


def abs(x: Tensor) -> Tensor:  # noqa: A001 - TOPI's name
    """Element-wise absolute value."""
    return _unary("abs", x, te.abs, False)


def clip(x: Tensor, a_min, a_max) -> Tensor:
    """Clamp every element into ``[a_min, a_max]``: ``max(min(x, a_max), a_min)``.

    On an integer tensor the bounds are compared exactly (never through float32, which
    would round int64 bounds) and a bound beyond the dtype's range is its end of the range,
    so ``clip(x, -inf, inf)`` and float bounds such as ``float(2**63 - 1)`` keep ``x``.
    """
    expect_tensor("clip", "x", x)
    for what, value in (("a_min", a_min), ("a_max", a_max)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            fail("clip", f"{what} must be a number, got {value!r}")
        if value != value:
            fail("clip", f"{what} is NaN")
    if a_min > a_max:
        fail("clip", f"a_min ({a_min}) is larger than a_max ({a_max})")
    if dt.is_float(x.dtype):
        lo, hi = const(a_min, x.dtype), const(a_max, x.dtype)
    else:
        lo_i, hi_i = _int_bound(x, a_min), _int_bound(x, a_max)
        lo, hi = const(lo_i, x.dtype), const(hi_i, x.dtype)
    return _unary("clip", x, lambda v: emax(emin(v, hi), lo), False)


def _int_bound(x: Tensor, value) -> int:
    """A clip bound of an integer tensor as a value of its dtype (clamped into range)."""
    if isinstance(value, float) and math.isfinite(value) and value != int(value):
        fail("clip", f"bound {value} is not an integer but {x.name} is {x.dtype}")
    lo, hi = dt.int_range(x.dtype)
    if isinstance(value, float) and math.isinf(value):
        return lo if value < 0 else hi
    return min(max(int(value), lo), hi)


def cast(x: Tensor, dtype: str) -> Tensor:
    """Every element converted to ``dtype`` (stage ``T_cast``)."""
    expect_tensor("cast", "x", x)
    dtype = check_dtype("cast", dtype, x.dtype)
    return compute_named(
        x.shape, ax_names(x.ndim), lambda *i: x(*i).astype(dtype), "T_cast", tag.ELEMWISE
    )


def negative(x: Tensor) -> Tensor:
    """Element-wise ``-x`` (stage ``T_negative``)."""
    expect_tensor("negative", "x", x)
    if x.dtype == "bool" or dt.is_uint(x.dtype):
        fail("negative", f"needs a signed number type, got {x.dtype}")
    return compute_named(x.shape, ax_names(x.ndim), lambda *i: -x(*i), "T_negative", tag.ELEMWISE)
