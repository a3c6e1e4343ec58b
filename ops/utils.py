"""Helpers the operators share: argument checks and index arithmetic that prints like TOPI's.

TVM folds ``x*1``, ``x + 0``, ``floordiv(x, 1)`` and ``floormod(x, 1)`` while an expression
is built, so its ComputeDAG text shows ``(yy + ry)`` where the source says
``yy*stride + ry*dilation``. Our expression constructors do not fold, so operators build
index expressions through :func:`scale`, :func:`offset`, :func:`idxdiv` and :func:`idxmod`,
which fold exactly those cases and nothing else.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import NoReturn

from ..ir import dtype as dt
from ..ir import te
from ..ir.expr import Expr, IntImm, as_expr, const, floordiv, floormod
from ..ir.te import TEError, Tensor
from . import tag


def fail(op: str, message: str) -> NoReturn:
    """Raise the error every operator raises: ``TEError("<op>: <message>")``."""
    raise TEError(f"{op}: {message}")


def shape_str(shape) -> str:
    """A shape as the messages print it: ``[1, 3, 224, 224]``."""
    return str(list(shape))


def expect_tensor(op: str, what: str, x) -> Tensor:
    """``x`` itself if it is a te tensor, else a TEError naming the argument."""
    if not isinstance(x, Tensor):
        fail(op, f"{what} must be a te tensor, got {type(x).__name__} ({x!r})")
    return x


def expect_ndim(op: str, what: str, x, ndim: int, layout: str = "") -> Tensor:
    """Check that ``x`` is a tensor of rank ``ndim``; ``layout`` names its dimensions."""
    expect_tensor(op, what, x)
    if x.ndim != ndim:
        desc = f" [{', '.join(layout)}]" if layout else ""
        fail(op, f"{what} must be {ndim}-D{desc}, got shape {shape_str(x.shape)}")
    return x


def expect_float(op: str, what: str, x: Tensor) -> None:
    """A TEError unless ``x`` has a float dtype."""
    if not dt.is_float(x.dtype):
        fail(op, f"{what} must have a float dtype, got {x.dtype}")


def expect_same_dtype(op: str, a_name: str, a: Tensor, b_name: str, b: Tensor) -> None:
    """A TEError unless the two tensors share a dtype."""
    if a.dtype != b.dtype:
        fail(op, f"{a_name} has dtype {a.dtype} but {b_name} has dtype {b.dtype}; cast one first")


def check_dtype(op: str, dtype: str | None, default: str) -> str:
    """``dtype`` (or ``default`` when None) after checking that it names a known dtype."""
    if dtype is None:
        return default
    try:
        return dt.check(dtype)
    except dt.DTypeError as err:
        fail(op, str(err))


def rounded_output_error(in_dtype: str, out_dtype: str) -> str | None:
    """Why ``out_dtype`` cannot be the output dtype of a float operator on ``in_dtype`` data
    that computes in (at least) ``in_dtype`` and rounds once at its output (softmax, layer
    norm), or None when it can: a known float dtype no wider than ``in_dtype``. A wider
    one would claim digits the computation does not have; cast the result up instead."""
    if not isinstance(out_dtype, str):
        return f"out_dtype must be a dtype name, got {out_dtype!r}"
    try:
        dt.check(out_dtype)
    except dt.DTypeError as err:
        return f"out_dtype: {err}"
    if not dt.is_float(out_dtype):
        return f"out_dtype must be a float dtype, got {out_dtype}"
    if dt.bits(out_dtype) > dt.bits(in_dtype):
        return (f"out_dtype {out_dtype} is wider than the data's {in_dtype}: the output only "
                f"rounds down; cast the {in_dtype} result up instead")
    return None


def rounded_output_dtype(op: str, in_dtype: str, out_dtype: str | None) -> str:
    """``out_dtype`` (None or "": ``in_dtype``) after :func:`rounded_output_error`'s check."""
    if not out_dtype:
        return in_dtype
    err = rounded_output_error(in_dtype, out_dtype)
    if err:
        fail(op, err)
    return out_dtype


def positive_int(op: str, what: str, value) -> int:
    """``value`` as an int, or a TEError unless it is an int of at least 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        fail(op, f"{what} must be a positive int, got {value!r}")
    return int(value)


def int_pair(op: str, what: str, value) -> tuple[int, int]:
    """An int or a pair of ints (height, width), each at least 1."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value, value)
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        fail(op, f"{what} must be an int or a pair of ints (height, width), got {value!r}")
    return positive_int(op, what, value[0]), positive_int(op, what, value[1])


def normalize_axis(op: str, axis, ndim: int) -> int:
    """``axis`` in ``[0, ndim)``; negative values count from the end as in numpy."""
    if isinstance(axis, bool) or not isinstance(axis, int):
        fail(op, f"axis must be an int, got {axis!r}")
    if not -ndim <= axis < ndim:
        fail(op, f"axis {axis} is out of range for a {ndim}-D tensor")
    return axis % ndim


# ---------------------------------------------------------------------------------------
# index arithmetic with TVM's construction-time folding


def _is_int(value, number: int) -> bool:
    if isinstance(value, IntImm):
        return value.value == number
    return isinstance(value, int) and not isinstance(value, bool) and value == number


def scale(x, factor):
    """``x*factor``, or ``x`` itself when ``factor`` is 1."""
    return x if _is_int(factor, 1) else x * factor


def offset(x, amount):
    """``x + amount``, or ``x`` itself when ``amount`` is 0."""
    return x if _is_int(amount, 0) else x + amount


def shift(x, amount):
    """``x - amount``, or ``x`` itself when ``amount`` is 0."""
    return x if _is_int(amount, 0) else x - amount


def idxdiv(x, divisor):
    """``floordiv(x, divisor)``, or ``x`` itself when ``divisor`` is 1."""
    return x if _is_int(divisor, 1) else floordiv(x, divisor)


def idxmod(x, divisor):
    """``floormod(x, divisor)``, or the constant 0 when ``divisor`` is 1."""
    return const(0) if _is_int(divisor, 1) else floormod(x, divisor)


def const_of(value, dtype: str) -> Expr:
    """A constant of ``dtype`` (an expression is returned unchanged)."""
    if isinstance(value, Expr):
        return value
    return const(value, dtype)


def cast_to(x, dtype: str) -> Expr:
    """``x`` cast to ``dtype``; no cast node when it already has that dtype (TVM's astype)."""
    x = as_expr(x)
    return x if x.dtype == dtype else x.astype(dtype)


def accumulate_dtype(dtype: str) -> str:
    """The dtype sums and products of ``dtype`` values accumulate in: float32 for float16
    and bfloat16 (a 16-bit running sum loses the small terms), else ``dtype`` itself."""
    return "float32" if dt.is_half(dtype) else dtype


def order_sensitive(op) -> bool:
    """Whether compute ``op``'s reduction gives a result that depends on the order its terms
    are taken in: a sum whose running total is a 16-bit float rounds after every term
    (``softmax(..., sum_dtype="bfloat16")``, ONNX's bfloat16 softmax). Only a serial loop
    over the reduction, in index order, computes it: schedules must not split it over
    threads or blocks (cross-thread reductions, rfactor, split-K)."""
    from ..ir.expr import Reduce

    return any(isinstance(b, Reduce) and b.combiner == "sum" and dt.is_half(b.dtype)
               for b in getattr(op, "bodies", ()))


def cast_output(t: Tensor, dtype: str) -> Tensor:
    """``t`` itself when it has ``dtype``, else a stage ``T_cast`` (tag ``elemwise``)
    rounding it to ``dtype``: how a float32 accumulation becomes a 16-bit output."""
    if t.dtype == dtype:
        return t
    return compute_named(t.shape, ax_names(t.ndim), lambda *i: t(*i).astype(dtype), "T_cast",
                         tag.ELEMWISE)


# ---------------------------------------------------------------------------------------
# computes with chosen axis names


def compute_named(
    shape,
    axis_names,
    fcompute: Callable,
    name: str,
    tag: str = "",
    attrs: dict | None = None,
) -> Tensor:
    """``te.compute`` whose axes get ``axis_names``; ``fcompute`` takes one var per axis.

    TOPI's C++ operators name their axes ``ax0, ax1, ...`` and its Python operators take
    names from the lambda; this lets any operator pick the names TOPI would print.
    """
    names = list(axis_names)

    def body(*indices):
        return fcompute(*indices)

    body.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY) for n in names]
    )
    return te.compute(shape, body, name=name, tag=tag, attrs=attrs)


def ax_names(ndim: int) -> list[str]:
    """``ax0, ax1, ...``: the axis names of TOPI's C++ computes."""
    return [f"ax{i}" for i in range(ndim)]


def i_names(ndim: int) -> list[str]:
    """``i0, i1, ...``: the axis names of a Python ``lambda *i`` compute."""
    return [f"i{i}" for i in range(ndim)]
