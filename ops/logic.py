"""Element-wise maps over any number of broadcast tensors, comparisons, logic and selection.

:func:`broadcast_map` is the n-ary form of ``ops.broadcast``'s binary stages: one stage
``T_<op>`` over axes ``ax0, ax1, ...`` tagged ``broadcast`` (``elemwise`` when every
operand has the output's shape), reading a stretched dimension at index 0. Unlike the
arithmetic stages it accepts bool operands, since comparisons, logic and ``where`` read
and write them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..ir import dtype as dt
from ..ir.expr import Expr, Not, as_expr, const, logical_and, logical_or, select
from ..ir.te import Tensor
from . import tag
from .broadcast import _is_scalar, broadcast_indices, broadcast_shape
from .utils import ax_names, compute_named, fail


def broadcast_map(op: str, operands: Sequence, rule: Callable[..., Expr]) -> Tensor:
    """A stage ``T_<op>`` whose element is ``rule(*operand elements)``, with numpy
    broadcasting over the tensor operands (Python numbers and expressions pass through)."""
    tensors = [x for x in operands if isinstance(x, Tensor)]
    if not tensors:
        fail(op, "at least one operand must be a te tensor")
    for x in operands:
        if not isinstance(x, Tensor) and not _is_scalar(x):
            fail(op, f"operands must be te tensors or scalars, got {type(x).__name__}")
    shape = tuple(tensors[0].shape)
    for t in tensors[1:]:
        shape = broadcast_shape(op, shape, t.shape)
    same = all(tuple(t.shape) == shape for t in tensors)

    def fcompute(*i):
        args = [x(*broadcast_indices(x, shape, i)) if isinstance(x, Tensor) else as_expr(x)
                for x in operands]
        return rule(*args)

    return compute_named(shape, ax_names(len(shape)), fcompute, f"T_{op}",
                         tag.ELEMWISE if same else tag.BROADCAST)


def _same_dtype(op: str, a: Tensor, b: Tensor) -> None:
    if a.dtype != b.dtype:
        fail(op, f"operand dtypes differ: {a.name} is {a.dtype}, {b.name} is {b.dtype}; "
                 "cast one of them first")


def _compare(op: str, rule: Callable[[Expr, Expr], Expr]):
    def fn(lhs: Tensor, rhs: Tensor) -> Tensor:
        if isinstance(lhs, Tensor) and isinstance(rhs, Tensor):
            _same_dtype(op, lhs, rhs)
        return broadcast_map(op, [lhs, rhs], rule)

    fn.__name__ = op
    fn.__doc__ = f"Element-wise ``{op}`` with broadcasting; the result is bool."
    return fn


equal = _compare("equal", lambda x, y: x == y)
not_equal = _compare("not_equal", lambda x, y: x != y)
less = _compare("less", lambda x, y: x < y)
less_equal = _compare("less_equal", lambda x, y: x <= y)
greater = _compare("greater", lambda x, y: x > y)
greater_equal = _compare("greater_equal", lambda x, y: x >= y)


def _expect_bool(op: str, *xs) -> None:
    for x in xs:
        if isinstance(x, Tensor) and x.dtype != "bool":
            fail(op, f"needs bool tensors, got {x.name} with dtype {x.dtype}")


def logical_and_(lhs: Tensor, rhs: Tensor) -> Tensor:
    """Element-wise logical and of two bool tensors, with broadcasting."""
    _expect_bool("logical_and", lhs, rhs)
    return broadcast_map("logical_and", [lhs, rhs], logical_and)


def logical_or_(lhs: Tensor, rhs: Tensor) -> Tensor:
    """Element-wise logical or of two bool tensors, with broadcasting."""
    _expect_bool("logical_or", lhs, rhs)
    return broadcast_map("logical_or", [lhs, rhs], logical_or)


def logical_xor(lhs: Tensor, rhs: Tensor) -> Tensor:
    """Element-wise exclusive or of two bool tensors, with broadcasting."""
    _expect_bool("logical_xor", lhs, rhs)
    return broadcast_map("logical_xor", [lhs, rhs], lambda x, y: x != y)


def logical_not(x: Tensor) -> Tensor:
    """Element-wise negation of a bool tensor."""
    _expect_bool("logical_not", x)
    return broadcast_map("logical_not", [x], Not)


def where(cond: Tensor, lhs: Tensor, rhs: Tensor) -> Tensor:
    """``lhs`` where ``cond`` holds, else ``rhs``, all three broadcast together."""
    if not isinstance(cond, Tensor) or cond.dtype != "bool":
        fail("where", f"the condition must be a bool tensor, got {cond!r}")
    if isinstance(lhs, Tensor) and isinstance(rhs, Tensor):
        _same_dtype("where", lhs, rhs)
    return broadcast_map("where", [cond, lhs, rhs], select)


def isnan(x: Tensor) -> Tensor:
    """Element-wise ``x != x`` (true exactly on NaN) of a float tensor."""
    if not dt.is_float(x.dtype):
        fail("isnan", f"needs a float tensor, got {x.name} with dtype {x.dtype}")
    return broadcast_map("isnan", [x], lambda v: v != v)


def isinf(x: Tensor, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
    """Element-wise test for +inf (``detect_positive``) and -inf (``detect_negative``)."""
    if not dt.is_float(x.dtype):
        fail("isinf", f"needs a float tensor, got {x.name} with dtype {x.dtype}")

    def rule(v: Expr) -> Expr:
        pos = v == const(float("inf"), x.dtype)
        neg = v == const(float("-inf"), x.dtype)
        if detect_positive and detect_negative:
            return logical_or(pos, neg)
        if detect_positive:
            return pos
        if detect_negative:
            return neg
        return const(False)

    return broadcast_map("isinf", [x], rule)
