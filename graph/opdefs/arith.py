"""Element-wise math: ``abs``, ``sign``, ``floor``, ``ceil``, ``round`` (half to even),
``reciprocal``, the trigonometric and hyperbolic functions and their inverses, and the
integer operators ``trunc_divide``, ``floor_mod``, ``fmod``, ``int_power``,
``bitwise_and``/``or``/``xor``/``not`` and ``bit_shift``."""

from __future__ import annotations

import numpy as np

from ... import ops
from ...ir import dtype as dt
from ...ops import unary_math as um
from ..ir import Call, Node
from .common import fail
from .mapping import FLOATS, INTS, NUMBERS, register_map, widened

_FLOAT_UNARY = {
    "floor": (um.floor, np.floor),
    "ceil": (um.ceil, np.ceil),
    "round": (um.round_even, np.rint),
    "reciprocal": (um.reciprocal, lambda x: 1 / x),
    "sin": (um.sin, np.sin),
    "cos": (um.cos, np.cos),
    "tan": (um.tan, np.tan),
    "asin": (um.asin, np.arcsin),
    "acos": (um.acos, np.arccos),
    "atan": (um.atan, np.arctan),
    "sinh": (um.sinh, np.sinh),
    "cosh": (um.cosh, np.cosh),
    "asinh": (um.asinh, np.arcsinh),
    "acosh": (um.acosh, np.arccosh),
    "atanh": (um.atanh, np.arctanh),
}

for _name, (_te, _np) in _FLOAT_UNARY.items():
    register_map(_name, 1, (lambda fn: lambda a, attrs: fn(a[0]))(_te), widened(_np), FLOATS)

register_map("abs", 1, lambda a, attrs: ops.abs(a[0]), widened(np.abs), NUMBERS)
register_map("sign", 1, lambda a, attrs: um.sign(a[0]), widened(np.sign), NUMBERS)


def _trunc_div_ref(x, y):
    q = x // y
    return q + ((x % y != 0) & ((x < 0) != (y < 0))).astype(q.dtype)


register_map("trunc_divide", 2, lambda a, attrs: um.trunc_divide(a[0], a[1]),
             widened(_trunc_div_ref), INTS)
register_map("floor_mod", 2, lambda a, attrs: um.floor_mod(a[0], a[1]), widened(np.mod), NUMBERS)
register_map("fmod", 2, lambda a, attrs: um.fmod(a[0], a[1]), widened(np.fmod), NUMBERS)


def _int_power_ref(a, attrs):
    base, exponent = np.asarray(a[0]), np.asarray(a[1])
    e = exponent.astype(np.float32) if exponent.dtype == dt.BFLOAT16_HOST else exponent
    with np.errstate(all="ignore"):
        out = np.power(base.astype(np.float64), e.astype(np.float64))
        if e.dtype.kind in "iu":
            out = np.where(e < 0, np.trunc(out), np.floor(out + 0.5))
        else:
            out = np.trunc(out)
        info = np.iinfo(base.dtype)
        out = np.clip(np.nan_to_num(out, nan=0.0), info.min, np.nextafter(
            float(info.max), 0.0) if int(float(info.max)) > info.max else info.max)
        return out.astype(base.dtype)


register_map("int_power", 2, lambda a, attrs: um.int_power(a[0], a[1]), _int_power_ref, INTS,
             same_dtype=False, arg_dtypes=(INTS, NUMBERS))

for _op, _np in (("and", np.bitwise_and), ("or", np.bitwise_or), ("xor", np.bitwise_xor)):
    register_map(f"bitwise_{_op}", 2, (lambda op: lambda a, attrs: um.bitwise(op, a[0], a[1]))(
        _op), (lambda fn: lambda a, attrs: fn(a[0], a[1]))(_np), INTS)
register_map("bitwise_not", 1, lambda a, attrs: um.bitwise_not(a[0]),
             lambda a, attrs: np.invert(a[0]), INTS)


def _shift_ref(a, attrs):
    x, s = np.asarray(a[0]), np.asarray(a[1])
    bits = x.dtype.itemsize * 8
    out_of_range = (s < 0) | (s >= bits)
    safe = np.clip(s, 0, bits - 1).astype(x.dtype)
    if attrs["direction"] == "left":
        shifted, fill = np.left_shift(x, safe), np.zeros((), x.dtype)
    else:
        shifted = np.right_shift(x, safe)
        fill = np.where(x < 0, -1, 0).astype(x.dtype) if x.dtype.kind == "i" else 0
    return np.where(out_of_range, fill, shifted).astype(x.dtype)


def _shift_normalize(attrs):
    if attrs["direction"] not in ("left", "right"):
        fail("bit_shift", f"direction must be 'left' or 'right', got {attrs['direction']!r}")
    return attrs


register_map("bit_shift", 2, lambda a, attrs: um.bit_shift(a[0], a[1], attrs["direction"]),
             _shift_ref, INTS, defaults={"direction": None}, normalize=_shift_normalize)


def unary(name: str, x: Node) -> Call:
    """A call of the element-wise operator ``name`` (``"sin"``, ``"round"``, ...)."""
    return Call(name, [x])


def binary(name: str, lhs: Node, rhs: Node, **attrs) -> Call:
    """A call of the binary operator ``name`` (``"fmod"``, ``"bitwise_and"``, ...)."""
    return Call(name, [lhs, rhs], attrs)


__all__ = ["unary", "binary"]
