"""Element-wise math beyond ``ops.math``: rounding, sign, reciprocal, the trigonometric and
hyperbolic functions and their inverses, C-style remainder, truncating integer division,
integer powers and bitwise operators.

The IR's intrinsics are exp, log, sqrt, sin, cos, tanh, erf, floor, ceil, round (halfway
cases away from zero) and pow; every other function here is a formula over them, chosen to
keep float32 accuracy: Taylor polynomials near zero where the closed form cancels (sinh,
asinh, atanh), Cephes' single-precision polynomial for atan, and asin/acos through atan.
"""

from __future__ import annotations

import math

from ..ir import dtype as dt
from ..ir import te
from ..ir.expr import (
    Expr,
    call,
    const,
    floordiv,
    floormod,
    logical_and,
    select,
    truncdiv,
    truncmod,
)
from ..ir.te import Tensor
from .activation import float_map
from .logic import broadcast_map
from .utils import expect_tensor, fail

_LN2 = math.log(2.0)


def _c(value: float, like: Expr) -> Expr:
    return const(float(value), like.dtype)


def _poly_odd(v: Expr, coeffs: list[float]) -> Expr:
    """``v * (c0 + c1 v^2 + c2 v^4 + ...)`` by Horner's rule."""
    z = v * v
    acc = _c(coeffs[-1], v)
    for c in reversed(coeffs[:-1]):
        acc = acc * z + _c(c, v)
    return v * acc


# -- rounding and sign ----------------------------------------------------------------------


def floor(x: Tensor) -> Tensor:
    """Element-wise round towards minus infinity."""
    return float_map("floor", x, lambda v: call("floor", v))


def ceil(x: Tensor) -> Tensor:
    """Element-wise round towards plus infinity."""
    return float_map("ceil", x, lambda v: call("ceil", v))


def round_even_expr(v: Expr) -> Expr:
    """``v`` rounded to the nearest integer, halfway cases to the even one (numpy's
    ``rint``; the IR's ``round`` goes away from zero)."""
    f = call("floor", v)
    d = v - f
    odd = (f - _c(2, v) * call("floor", f * _c(0.5, v))) == _c(1, v)
    half = select(odd, f + _c(1, v), f)
    return select(d > _c(0.5, v), f + _c(1, v), select(d < _c(0.5, v), f, half))


def round_even(x: Tensor) -> Tensor:
    """Element-wise round half to even (ONNX ``Round``)."""
    return float_map("round", x, round_even_expr)


def sign(x: Tensor) -> Tensor:
    """Element-wise -1, 0 or 1 by the sign of ``x`` (NaN stays NaN)."""
    expect_tensor("sign", "x", x)
    if x.dtype == "bool":
        fail("sign", f"needs a number type, got {x.name} with dtype bool")

    def rule(v: Expr) -> Expr:
        one, zero = const(1, v.dtype), const(0, v.dtype)
        if dt.is_uint(v.dtype):
            return select(v > zero, one, zero)
        out = select(v > zero, one, select(v < zero, const(-1, v.dtype), zero))
        return select(v != v, v, out) if dt.is_float(v.dtype) else out

    return broadcast_map("sign", [x], rule)


def reciprocal(x: Tensor) -> Tensor:
    """Element-wise ``1 / x``."""
    return float_map("reciprocal", x, lambda v: _c(1, v) / v)


# -- trigonometric and hyperbolic functions -----------------------------------------------------


def _horner(z: Expr, coeffs: list[float], like: Expr, monic: bool = False) -> Expr:
    """``c0 z^n + ... + cn`` (``monic``: ``z^(n+1) + c0 z^n + ... + cn``), Cephes' polevl
    and p1evl."""
    acc = z + _c(coeffs[0], like) if monic else _c(coeffs[0], like)
    for c in coeffs[1:]:
        acc = acc * z + _c(c, like)
    return acc


# Cephes' atan (double precision): a rational approximation on [0, 0.66]
_ATAN_P = [-8.750608600031904122785e-1, -1.615753718733365076637e1, -7.500855792314704667340e1,
           -1.228866684490136173410e2, -6.485021904942025371773e1]
_ATAN_Q = [2.485846490142306297962e1, 1.650270098316988542046e2, 4.328810604912902668951e2,
           4.853903996359136964868e2, 1.945506571482613964425e2]
_MOREBITS = 6.123233995736765886130e-17


def atan_expr(v: Expr) -> Expr:
    """Arc tangent by Cephes: reduce ``|v|`` by ``atan(x) = pi/2 - atan(1/x)`` and
    ``pi/4 + atan((x - 1)/(x + 1))``, then a degree-9 odd polynomial (``atanf``, relative
    error about 1e-7) for float32, or a rational function (``atan``, about 1e-16) for
    float64."""
    a = te.abs(v)
    double = v.dtype == "float64"
    big = a > _c(2.414213562373095, v)
    mid = a > _c(0.66 if double else 0.4142135623730950, v)
    xr = select(big, _c(-1, v) / a, select(mid, (a - _c(1, v)) / (a + _c(1, v)), a))
    z = xr * xr
    if double:
        base = select(big, _c(math.pi / 2 + _MOREBITS, v),
                      select(mid, _c(math.pi / 4 + 0.5 * _MOREBITS, v), _c(0, v)))
        p = xr * (z * _horner(z, _ATAN_P, v) / _horner(z, _ATAN_Q, v, monic=True)) + xr
    else:
        base = select(big, _c(math.pi / 2, v), select(mid, _c(math.pi / 4, v), _c(0, v)))
        p = (((_c(8.05374449538e-2, v) * z - _c(1.38776856032e-1, v)) * z
              + _c(1.99777106478e-1, v)) * z - _c(3.33329491539e-1, v)) * z * xr + xr
    r = base + p
    return select(v < _c(0, v), -r, r)


def sin(x: Tensor) -> Tensor:
    """Element-wise sine."""
    return float_map("sin", x, lambda v: call("sin", v))


def cos(x: Tensor) -> Tensor:
    """Element-wise cosine."""
    return float_map("cos", x, lambda v: call("cos", v))


def tan(x: Tensor) -> Tensor:
    """Element-wise tangent, ``sin / cos``."""
    return float_map("tan", x, lambda v: call("sin", v) / call("cos", v))


def atan(x: Tensor) -> Tensor:
    """Element-wise arc tangent."""
    return float_map("atan", x, atan_expr)


def asin(x: Tensor) -> Tensor:
    """Element-wise arc sine, ``atan(x / sqrt((1 - x)(1 + x)))`` (NaN outside [-1, 1])."""
    return float_map("asin", x, lambda v: atan_expr(
        v / te.sqrt((_c(1, v) - v) * (_c(1, v) + v))))


def acos(x: Tensor) -> Tensor:
    """Element-wise arc cosine, ``2 atan(sqrt((1 - x) / (1 + x)))`` (NaN outside [-1, 1])."""
    return float_map("acos", x, lambda v: _c(2, v) * atan_expr(
        te.sqrt((_c(1, v) - v) / (_c(1, v) + v))))


def _small(v: Expr) -> Expr:
    """Where the closed forms cancel: ``|v| < 1/8`` (float32) or ``< 1/100`` (float64,
    where the Taylor polynomials below reach 1e-16 relative only that close to 0)."""
    return te.abs(v) < _c(0.01 if v.dtype == "float64" else 0.125, v)


def sinh(x: Tensor) -> Tensor:
    """Element-wise hyperbolic sine (a Taylor polynomial for ``|x| < 1/8``)."""
    def rule(v: Expr) -> Expr:
        closed = te.exp(v - _c(_LN2, v)) - te.exp(-v - _c(_LN2, v))
        return select(_small(v), _poly_odd(v, [1, 1 / 6, 1 / 120, 1 / 5040, 1 / 362880]), closed)

    return float_map("sinh", x, rule)


def cosh(x: Tensor) -> Tensor:
    """Element-wise hyperbolic cosine."""
    return float_map("cosh", x, lambda v: te.exp(v - _c(_LN2, v)) + te.exp(-v - _c(_LN2, v)))


def asinh(x: Tensor) -> Tensor:
    """Element-wise inverse hyperbolic sine (Taylor near 0, ``log(2|x|)`` for huge ``|x|``)."""
    def rule(v: Expr) -> Expr:
        a = te.abs(v)
        mid = te.log(a + te.sqrt(a * a + _c(1, v)))
        big = te.log(a) + _c(_LN2, v)
        r = select(a > _c(1e18, v), big, mid)
        r = select(v < _c(0, v), -r, r)
        return select(_small(v), _poly_odd(v, [1, -1 / 6, 3 / 40, -15 / 336, 105 / 3456]), r)

    return float_map("asinh", x, rule)


def acosh(x: Tensor) -> Tensor:
    """Element-wise inverse hyperbolic cosine (NaN below 1)."""
    def rule(v: Expr) -> Expr:
        mid = te.log(v + te.sqrt(v * v - _c(1, v)))
        return select(v > _c(1e18, v), te.log(v) + _c(_LN2, v), mid)

    return float_map("acosh", x, rule)


def atanh(x: Tensor) -> Tensor:
    """Element-wise inverse hyperbolic tangent (Taylor near 0)."""
    def rule(v: Expr) -> Expr:
        closed = _c(0.5, v) * te.log((_c(1, v) + v) / (_c(1, v) - v))
        return select(_small(v), _poly_odd(v, [1, 1 / 3, 1 / 5, 1 / 7, 1 / 9]), closed)

    return float_map("atanh", x, rule)


# -- division, remainder and powers ----------------------------------------------------------


def _int_pair(op: str, a: Tensor, b: Tensor) -> None:
    for t in (a, b):
        if isinstance(t, Tensor) and not dt.is_int(t.dtype):
            fail(op, f"needs integer tensors, got {t.name} with dtype {t.dtype}")
    if isinstance(a, Tensor) and isinstance(b, Tensor) and a.dtype != b.dtype:
        fail(op, f"operand dtypes differ: {a.dtype} and {b.dtype}; cast one first")


def trunc_div_expr(x: Expr, y: Expr) -> Expr:
    """Integer ``x / y`` rounded towards zero (C's and ONNX's integer division)."""
    return truncdiv(x, y)


def trunc_divide(lhs: Tensor, rhs: Tensor) -> Tensor:
    """Integer division rounding towards zero, with broadcasting (stage ``T_trunc_divide``)."""
    _int_pair("trunc_divide", lhs, rhs)
    return broadcast_map("trunc_divide", [lhs, rhs], trunc_div_expr)


def fmod(lhs: Tensor, rhs: Tensor) -> Tensor:
    """C's ``fmod`` / ``%``: the remainder of the division rounded towards zero, with the
    sign of ``lhs`` (exact on floats: LLVM's ``frem``, numpy's ``fmod``), with
    broadcasting."""
    for t in (lhs, rhs):
        if isinstance(t, Tensor) and t.dtype == "bool":
            fail("fmod", f"needs number tensors, got {t.name} with dtype bool")
    if isinstance(lhs, Tensor) and isinstance(rhs, Tensor) and lhs.dtype != rhs.dtype:
        fail("fmod", f"operand dtypes differ: {lhs.dtype} and {rhs.dtype}; cast one first")
    return broadcast_map("fmod", [lhs, rhs], truncmod)


def floor_mod(lhs: Tensor, rhs: Tensor) -> Tensor:
    """Python's ``lhs % rhs`` (the sign of ``rhs``) for integers and floats, with
    broadcasting; floats: C's remainder moved by one ``rhs`` when the signs differ."""
    for t in (lhs, rhs):
        if isinstance(t, Tensor) and t.dtype == "bool":
            fail("floor_mod", f"needs number tensors, got {t.name} with dtype bool")
    if isinstance(lhs, Tensor) and isinstance(rhs, Tensor) and lhs.dtype != rhs.dtype:
        fail("floor_mod", f"operand dtypes differ: {lhs.dtype} and {rhs.dtype}; cast one first")
    if not dt.is_float((lhs if isinstance(lhs, Tensor) else rhs).dtype):
        return broadcast_map("floor_mod", [lhs, rhs], floormod)
    r = fmod(lhs, rhs)

    def rule(v: Expr, b: Expr) -> Expr:
        zero = const(0, v.dtype)
        moved = logical_and(v != zero, (v < zero) != (b < zero))
        return select(moved, v + b, v)

    return broadcast_map("floor_mod", [r, rhs], rule)


def int_power(base: Tensor, exponent: Tensor) -> Tensor:
    """``base ** exponent`` for an integer ``base`` and an integer or float ``exponent``,
    computed in float64 and converted back towards zero: exact while the result's
    magnitude stays below 2**53."""
    expect_tensor("int_power", "base", base)
    if not dt.is_int(base.dtype):
        fail("int_power", f"the base must be an integer tensor, got {base.dtype}")

    def rule(a: Expr, b: Expr) -> Expr:
        return call("pow", a.astype("float64"), b.astype("float64")).astype(a.dtype)

    return broadcast_map("int_power", [base, exponent], rule)


# -- bitwise operators -----------------------------------------------------------------------


def _unsigned(dtype: str) -> str:
    return dtype if dt.is_uint(dtype) else "u" + dtype


def _bitwise_rule(op: str):
    """A two's-complement bitwise operator spelled with arithmetic on the unsigned view: bit
    ``k`` of ``v`` is ``(v // 2**k) % 2`` (LLVM turns these into shifts and masks); ``or``
    and ``xor`` follow from ``and`` exactly in wrapping arithmetic: ``a | b = a + b - (a &
    b)``, ``a ^ b = a + b - 2 (a & b)``."""
    def rule(a: Expr, b: Expr) -> Expr:
        u = _unsigned(a.dtype)
        ua, ub = a.astype(u) if u != a.dtype else a, b.astype(u) if u != b.dtype else b
        two = const(2, u)
        both = const(0, u)
        for k in range(dt.bits(u)):
            p = const(1 << k, u)
            bit = floormod(floordiv(ua, p), two) * floormod(floordiv(ub, p), two)
            both = both + bit * p
        if op == "and":
            out = both
        elif op == "or":
            out = ua + ub - both
        else:
            out = ua + ub - two * both
        return out.astype(a.dtype) if u != a.dtype else out

    return rule


def bitwise(op: str, lhs: Tensor, rhs: Tensor) -> Tensor:
    """Bitwise ``and``, ``or`` or ``xor`` of integer tensors, with broadcasting."""
    if op not in ("and", "or", "xor"):
        fail("bitwise", f"op must be 'and', 'or' or 'xor', got {op!r}")
    _int_pair(f"bitwise_{op}", lhs, rhs)
    return broadcast_map(f"bitwise_{op}", [lhs, rhs], _bitwise_rule(op))


def bitwise_not(x: Tensor) -> Tensor:
    """Bitwise complement of an integer tensor: ``max_unsigned - v`` on the unsigned view."""
    expect_tensor("bitwise_not", "x", x)
    if not dt.is_int(x.dtype):
        fail("bitwise_not", f"needs an integer tensor, got {x.dtype}")
    u = _unsigned(x.dtype)

    def rule(v: Expr) -> Expr:
        uv = v.astype(u) if u != v.dtype else v
        out = const((1 << dt.bits(u)) - 1, u) - uv
        return out.astype(v.dtype) if u != v.dtype else out

    return broadcast_map("bitwise_not", [x], rule)


def bit_shift(lhs: Tensor, rhs: Tensor, direction: str) -> Tensor:
    """``lhs << rhs`` (``direction="left"``) or ``lhs >> rhs`` ("right") of integers, as
    ONNX defines them: a signed right shift is arithmetic (a floor division by ``2**rhs``);
    a left shift wraps in the unsigned view; a shift by a negative amount or by the bit
    width or more leaves only the sign fill (-1 for a negative ``lhs`` shifted right, else
    0)."""
    if direction not in ("left", "right"):
        fail("bit_shift", f"direction must be 'left' or 'right', got {direction!r}")
    _int_pair("bit_shift", lhs, rhs)

    def rule(a: Expr, b: Expr) -> Expr:
        n = dt.bits(a.dtype)
        u = _unsigned(a.dtype)
        # 2**b in the unsigned view; 0 when b is out of range
        p = const(0, u)
        for k in range(n):
            p = select(b == const(k, b.dtype), const(1 << k, u), p)
        if direction == "left":
            ua = a.astype(u) if u != a.dtype else a
            out = ua * p
            return out.astype(a.dtype) if u != a.dtype else out
        if dt.is_uint(a.dtype):
            return select(p == const(0, u), p, floordiv(a, _nonzero(p)))
        zero = const(0, a.dtype)
        fill = select(a < zero, const(-1, a.dtype), zero)
        # 2**(n-1) does not fit the signed type: that shift leaves only the sign fill
        in_range = logical_and(p != const(0, u), p != const(1 << (n - 1), u))
        divisor = select(in_range, p, const(1, u)).astype(a.dtype)
        return select(in_range, floordiv(a, divisor), fill)

    return broadcast_map(f"bit_shift_{direction}", [lhs, rhs], rule)


def _nonzero(p: Expr) -> Expr:
    """``p`` with 0 replaced by 1 (a divisor that is never zero)."""
    return select(p == const(0, p.dtype), const(1, p.dtype), p)


__all__ = [
    "floor", "ceil", "round_even", "sign", "reciprocal", "sin", "cos", "tan", "asin", "acos",
    "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "trunc_divide", "fmod", "floor_mod",
    "int_power",
    "bitwise", "bitwise_not", "bit_shift",
]
