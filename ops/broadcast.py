"""Binary element-wise operators with numpy broadcasting, and ``Tensor + Tensor``.

Follows TOPI's ``broadcast.h``: two tensors give a stage ``T_<op>`` tagged ``broadcast``
whose axes are ``ax0, ax1, ...``; a dimension an operand broadcasts along is read at
index ``0``; a tensor with a scalar gives a stage tagged ``elemwise``; two scalars give an
expression. Importing this module installs the operators behind ``Tensor + Tensor``,
``Tensor - x``, ``Tensor * x`` and ``Tensor / x``.
"""

from __future__ import annotations

from collections.abc import Callable

from ..ir import dtype as dt
from ..ir import te
from ..ir.expr import (
    Expr,
    FloatImm,
    IntImm,
    as_expr,
    emax,
    emin,
    floordiv,
    floormod,
    truncdiv,
    truncmod,
)
from ..ir.te import Tensor
from . import tag
from .utils import ax_names, compute_named, fail, shape_str


def broadcast_shape(op: str, shape_a, shape_b) -> tuple[int, ...]:
    """The numpy broadcast of two shapes, or a TEError saying which dimensions clash."""
    a, b = list(shape_a), list(shape_b)
    out = []
    for k in range(1, max(len(a), len(b)) + 1):
        da = a[-k] if k <= len(a) else None
        db = b[-k] if k <= len(b) else None
        if da is None or db is None:
            out.append(db if da is None else da)
        elif da == db or db == 1:
            out.append(da)
        elif da == 1:
            out.append(db)
        else:
            fail(
                op,
                f"shapes {shape_str(a)} and {shape_str(b)} cannot be broadcast together: "
                f"dimension {-k} is {da} in one and {db} in the other",
            )
    return tuple(reversed(out))


def broadcast_indices(tensor: Tensor, out_shape, indices) -> list:
    """The indices that read ``tensor`` at output position ``indices`` (numpy rules)."""
    lead = len(out_shape) - tensor.ndim
    idx = []
    for k, extent in enumerate(tensor.shape):
        out_extent = out_shape[lead + k]
        # a dimension of size 1 that the output stretches is read at 0; equal sizes
        # (including 1 == 1) share the output's index, as TVM's BroadcastShape does
        idx.append(as_expr(0) if extent == 1 and out_extent != 1 else indices[lead + k])
    return idx


def _is_scalar(x) -> bool:
    if isinstance(x, bool):
        return False
    if isinstance(x, (int, float, Expr)):
        return True
    import numpy as np

    return isinstance(x, np.generic) and not isinstance(x, np.bool_)


def _binary(name: str, rule: Callable[[Expr, Expr], Expr], a, b):
    op = name
    a_tensor, b_tensor = isinstance(a, Tensor), isinstance(b, Tensor)
    for operand, is_tensor in ((a, a_tensor), (b, b_tensor)):
        if not is_tensor and not _is_scalar(operand):
            fail(op, f"operands must be te tensors or scalars, got {type(operand).__name__}")
        if is_tensor and operand.dtype == "bool":
            fail(op, f"tensor {operand.name} has dtype bool; cast it to a number type first")
    if a_tensor and b_tensor:
        if a.dtype != b.dtype:
            fail(
                op,
                f"operand dtypes differ: {a.name} is {a.dtype}, {b.name} is {b.dtype}; "
                "cast one of them first",
            )
        shape = broadcast_shape(op, a.shape, b.shape)
        return compute_named(
            shape,
            ax_names(len(shape)),
            lambda *i: rule(a(*broadcast_indices(a, shape, i)), b(*broadcast_indices(b, shape, i))),
            name=f"T_{name}",
            tag=tag.BROADCAST,
        )
    if a_tensor or b_tensor:
        t = a if a_tensor else b
        scalar = as_expr(b if a_tensor else a)
        if a_tensor:
            def fcompute(*i):
                return rule(t(*i), scalar)
        else:
            def fcompute(*i):
                return rule(scalar, t(*i))
        return compute_named(t.shape, ax_names(t.ndim), fcompute, f"T_{name}", tag.ELEMWISE)
    return rule(as_expr(a), as_expr(b))


def _floor_rule(op: str, fn):
    def rule(x: Expr, y: Expr) -> Expr:
        if dt.is_float(x.dtype) or dt.is_float(y.dtype):
            fail(op, f"needs integer operands, got {x.dtype} and {y.dtype}")
        return fn(x, y)

    return rule


def add(lhs, rhs):
    """``lhs + rhs`` with broadcasting (stage ``T_add``)."""
    return _binary("add", lambda x, y: x + y, lhs, rhs)


def subtract(lhs, rhs):
    """``lhs - rhs`` with broadcasting (stage ``T_subtract``)."""
    return _binary("subtract", lambda x, y: x - y, lhs, rhs)


def multiply(lhs, rhs):
    """``lhs * rhs`` with broadcasting (stage ``T_multiply``)."""
    return _binary("multiply", lambda x, y: x * y, lhs, rhs)


def divide(lhs, rhs):
    """``lhs / rhs`` with broadcasting (stage ``T_divide``).

    Float operands divide exactly; integer operands round towards minus infinity, as
    numpy's ``//`` does. :func:`trunc_divide` rounds integers toward zero instead (C, ONNX
    ``Div``; the graph operator ``divide`` uses it).
    """
    return _binary("divide", lambda x, y: x / y, lhs, rhs)


def trunc_divide(lhs, rhs):
    """``lhs / rhs`` with broadcasting, integers rounding toward zero (stage ``T_divide``).

    C's ``/``, ONNX ``Div`` and ``torch.div(rounding_mode="trunc")``: ``-3 / 2`` is ``-1``
    (:func:`divide` and :func:`floor_divide` give ``-2``). Floats divide exactly. An
    integer division by zero gives an unspecified value (the GPU does not trap).
    """
    return _binary("divide", truncdiv, lhs, rhs)


def fmod(lhs, rhs):
    """The remainder of :func:`trunc_divide` with broadcasting (stage ``T_fmod``): C's
    ``%`` on integers and ``fmod`` on floats, with the sign of ``lhs`` (numpy's
    ``np.fmod``, ONNX ``Mod`` with ``fmod=1``). :func:`floor_mod` is the remainder with the
    sign of ``rhs`` (ONNX ``Mod`` with ``fmod=0``)."""
    return _binary("fmod", truncmod, lhs, rhs)


def floor_divide(lhs, rhs):
    """Integer ``lhs // rhs`` (rounding towards minus infinity) with broadcasting."""
    return _binary("floor_divide", _floor_rule("floor_divide", floordiv), lhs, rhs)


def floor_mod(lhs, rhs):
    """Integer ``lhs % rhs`` (sign of ``rhs``, as Python's ``%``) with broadcasting."""
    return _binary("floor_mod", _floor_rule("floor_mod", floormod), lhs, rhs)


def maximum(lhs, rhs):
    """Element-wise maximum with broadcasting (stage ``T_maximum``)."""
    return _binary("maximum", emax, lhs, rhs)


def minimum(lhs, rhs):
    """Element-wise minimum with broadcasting (stage ``T_minimum``)."""
    return _binary("minimum", emin, lhs, rhs)


_SMALL_POWERS: dict[float, Callable[[Expr], Expr]] = {
    1.0: lambda x: x,
    2.0: lambda x: x * x,  # the correctly rounded square, as pow's
    3.0: lambda x: x * x * x,  # within an ulp of the cube in x's dtype
}
"""Exponents :func:`power` writes as products when the exponent is a constant."""


def power(lhs, rhs):
    """Element-wise ``lhs ** rhs`` for floats with broadcasting (stage ``T_power``)."""

    def rule(x: Expr, y: Expr) -> Expr:
        if not dt.is_float(x.dtype):
            fail("power", f"needs float operands, got {x.dtype}")
        if isinstance(y, (FloatImm, IntImm)) and float(y.value) in _SMALL_POWERS:
            # a known square or cube as products (GELU's tanh form cubes, variances
            # square): the pow routine takes logarithms in float64 for a float32 base
            return _SMALL_POWERS[float(y.value)](x)
        return te.power(x, y.astype(x.dtype) if y.dtype != x.dtype else y)

    return _binary("power", rule, lhs, rhs)


_TENSOR_OPERATORS: dict[str, Callable] = {
    "add": add,
    "subtract": subtract,
    "multiply": multiply,
    "divide": divide,
}


def _tensor_operator(name: str, lhs, rhs):
    try:
        fn = _TENSOR_OPERATORS[name]
    except KeyError:
        fail(name, f"no tensor operator named {name!r}; known: {sorted(_TENSOR_OPERATORS)}")
    return fn(lhs, rhs)


te.register_tensor_operator(_tensor_operator)
