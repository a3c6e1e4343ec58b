"""Activation functions as element-wise stages (tag ``elemwise``; ``prelu`` ``broadcast``).

Each is built from the IR's intrinsics (exp, log, tanh, erf, fabs) so both backends run
the same formula. 16-bit floats compute in float32 and round once at the end, as the
backends do for every transcendental; functions that overflow in a naive form use a
stable one (softplus as ``max(x, 0) + log(1 + exp(-|x|))``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ..ir import dtype as dt
from ..ir import te
from ..ir.expr import Expr, const, emax, emin, select
from ..ir.te import Tensor
from .logic import broadcast_map
from .utils import expect_tensor, fail


def float_map(op: str, x: Tensor, rule: Callable[[Expr], Expr]) -> Tensor:
    """A stage ``T_<op>`` applying ``rule`` to each element of float tensor ``x``; 16-bit
    floats are widened to float32 for ``rule`` and rounded back once."""
    expect_tensor(op, "x", x)
    if not dt.is_float(x.dtype):
        fail(op, f"needs a float tensor, got {x.name} with dtype {x.dtype}; cast it first")
    wide = "float32" if dt.is_half(x.dtype) else x.dtype

    def body(v: Expr) -> Expr:
        out = rule(v.astype(wide) if wide != x.dtype else v)
        return out.astype(x.dtype) if out.dtype != x.dtype else out

    return broadcast_map(op, [x], body)


def _c(value: float, like: Expr) -> Expr:
    return const(float(value), like.dtype)


def softplus_expr(v: Expr) -> Expr:
    """``log(1 + exp(v))`` without overflow for large ``v``."""
    return emax(v, _c(0, v)) + te.log(_c(1, v) + te.exp(-te.abs(v)))


def hard_sigmoid(x: Tensor, alpha: float = 0.2, beta: float = 0.5) -> Tensor:
    """``max(0, min(1, alpha * x + beta))``."""
    return float_map("hard_sigmoid", x, lambda v: emax(
        _c(0, v), emin(_c(1, v), v * _c(alpha, v) + _c(beta, v))))


def hard_swish(x: Tensor) -> Tensor:
    """``x * max(0, min(1, x / 6 + 1 / 2))``."""
    return float_map("hard_swish", x, lambda v: v * emax(
        _c(0, v), emin(_c(1, v), v * _c(1 / 6, v) + _c(0.5, v))))


def softplus(x: Tensor) -> Tensor:
    """``log(1 + exp(x))``."""
    return float_map("softplus", x, softplus_expr)


def softsign(x: Tensor) -> Tensor:
    """``x / (1 + |x|)``."""
    return float_map("softsign", x, lambda v: v / (_c(1, v) + te.abs(v)))


def mish(x: Tensor) -> Tensor:
    """``x * tanh(softplus(x))``."""
    return float_map("mish", x, lambda v: v * te.tanh(softplus_expr(v)))


def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """``x`` for ``x > 0``, else ``alpha * (exp(x) - 1)``."""
    return float_map("elu", x, lambda v: select(
        v > _c(0, v), v, _c(alpha, v) * (te.exp(v) - _c(1, v))))


def selu(x: Tensor, alpha: float = 1.67326319217681884765625,
         gamma: float = 1.05070102214813232421875) -> Tensor:
    """``gamma * x`` for ``x > 0``, else ``gamma * alpha * (exp(x) - 1)``."""
    return float_map("selu", x, lambda v: _c(gamma, v) * select(
        v > _c(0, v), v, _c(alpha, v) * (te.exp(v) - _c(1, v))))


def celu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""
    if alpha == 0:
        fail("celu", "alpha must not be 0")
    return float_map("celu", x, lambda v: emax(_c(0, v), v) + emin(
        _c(0, v), _c(alpha, v) * (te.exp(v * _c(1 / alpha, v)) - _c(1, v))))


def thresholded_relu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """``x`` where ``x > alpha``, else 0."""
    return float_map("thresholded_relu", x, lambda v: select(v > _c(alpha, v), v, _c(0, v)))


def swish(x: Tensor, alpha: float = 1.0) -> Tensor:
    """``x * sigmoid(alpha * x)``."""
    return float_map("swish", x, lambda v: v * te.sigmoid(v * _c(alpha, v)))


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """``x * (1 + erf(x / sqrt(2))) / 2``; ``approximate="tanh"``: the tanh form
    ``x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))) / 2``."""
    if approximate == "none":
        return float_map("gelu", x, lambda v: v * _c(0.5, v) * (
            _c(1, v) + te.erf(v * _c(1 / math.sqrt(2), v))))
    if approximate == "tanh":
        return float_map("gelu_tanh", x, lambda v: v * _c(0.5, v) * (_c(1, v) + te.tanh(
            _c(math.sqrt(2 / math.pi), v) * (v + _c(0.044715, v) * v * v * v))))
    fail("gelu", f"approximate must be 'none' or 'tanh', got {approximate!r}")


def prelu(x: Tensor, slope: Tensor) -> Tensor:
    """``x`` where ``x >= 0``, else ``slope * x``, the slope broadcast against ``x``."""
    expect_tensor("prelu", "x", x)
    if isinstance(slope, Tensor) and slope.dtype != x.dtype:
        fail("prelu", f"slope has dtype {slope.dtype} but x has {x.dtype}; cast one first")
    if x.dtype == "bool" or dt.is_uint(x.dtype):
        fail("prelu", f"needs a signed number type, got {x.dtype}")
    return broadcast_map("prelu", [x, slope], lambda v, s: select(
        v < const(0, v.dtype), v * s, v))
