"""Constant folding for the simplifier (:mod:`ptxforge.ir.simplify`): the value of an op on
constants in any dtype, as the GPU computes it (ints wrap to their width, floats round to
theirs), or None where folding would be wrong (division by zero, an undefined conversion,
a float function whose result the target may round differently)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from . import dtype as dt
from .arith import int_range
from .expr import Expr, FloatImm, IntImm

_MANTISSA = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}


def wrap_int(v: int, dtype: str) -> int:
    """``v`` reduced to the values of an int dtype (two's complement)."""
    if dtype == "bool":
        return int(bool(v))
    b = dt.bits(dtype)
    if dt.is_uint(dtype):
        return v % (1 << b)
    half = 1 << (b - 1)
    return (v + half) % (1 << b) - half


def round_float(v: float, dtype: str) -> float:
    """``v`` rounded to the nearest value of a float dtype."""
    v = float(v)
    if dtype == "float64" or math.isnan(v):
        return v
    return float(dt.round_to(np.float64(v), dtype))


def const_of(v, dtype: str) -> Expr:
    if dtype == "int32" and -(2**31) <= v < 2**31 and type(v) is int:
        return IntImm(v, dtype)
    if dt.is_float(dtype):
        return FloatImm(round_float(v, dtype), dtype)
    return IntImm(wrap_int(int(v), dtype), dtype)


def fits(v: int, dtype: str) -> bool:
    info = np.iinfo(dt.to_numpy(dtype))
    return int(info.min) <= v <= int(info.max)


def true_imm() -> IntImm:
    return IntImm(1, "bool")


def false_imm() -> IntImm:
    return IntImm(0, "bool")


def fold_bin(op: str, x, y, dtype: str):
    """The value of ``x op y`` for constants, or None where it is not defined."""
    if dt.is_float(dtype):
        # a literal stands for the nearest value of its dtype, which the GPU computes with
        x, y = round_float(x, dtype), round_float(y, dtype)
        if op == "add":
            return x + y
        if op == "sub":
            return x - y
        if op == "mul":
            return x * y
        if op in ("div", "floordiv"):
            if y == 0:
                return None
            q = x / y
            if op == "div":
                return q
            return float(math.floor(q)) if math.isfinite(q) else None
        if op in ("min", "max"):
            if math.isnan(x) or math.isnan(y):
                return None
            return min(x, y) if op == "min" else max(x, y)
        if op == "mod":
            return math.fmod(x, y) if y != 0 and math.isfinite(x) else None
        return None
    x, y = int(x), int(y)
    if op == "add":
        return x + y
    if op == "sub":
        return x - y
    if op == "mul":
        return x * y
    if op == "floordiv":
        return None if y == 0 else x // y
    if op == "floormod":
        return None if y == 0 else x % y
    if op == "div":
        return None if y == 0 else trunc_div_int(x, y)
    if op == "mod":
        return None if y == 0 else x - trunc_div_int(x, y) * y
    if op == "min":
        return min(x, y)
    if op == "max":
        return max(x, y)
    if op == "and":
        return int(bool(x) and bool(y))
    if op == "or":
        return int(bool(x) or bool(y))
    return None


def trunc_div_int(x: int, y: int) -> int:
    """C's integer ``x / y`` (rounds toward zero), exact for any size; ``y`` is not 0."""
    q = abs(x) // abs(y)
    return q if (x < 0) == (y < 0) else -q


def fold_cmp(op: str, x, y) -> bool:
    if op == "lt":
        return x < y
    if op == "le":
        return x <= y
    if op == "gt":
        return x > y
    if op == "ge":
        return x >= y
    if op == "eq":
        return x == y
    return x != y


def fold_cast(v, dst: str):
    if dst == "bool":
        return int(v != 0)
    if dt.is_float(dst):
        return round_float(float(v), dst)
    if isinstance(v, float):
        if not math.isfinite(v):
            return None
        t = math.trunc(v)
        lo, hi = int_range(dst)
        # out-of-range float to int conversion is undefined: leave it to the target
        return t if lo <= t <= hi else None
    return wrap_int(v, dst)


def _sigmoid(v: float) -> float:
    if v >= 0:
        return 1.0 / (1.0 + math.exp(-v))
    z = math.exp(v)
    return z / (1.0 + z)


_FLOAT_FN = {
    "exp": math.exp,
    "log": math.log,
    "sqrt": math.sqrt,
    "rsqrt": lambda v: 1.0 / math.sqrt(v),
    "tanh": math.tanh,
    "sigmoid": _sigmoid,
    "erf": math.erf,
    "fabs": math.fabs,
    "abs": math.fabs,
    "floor": lambda v: float(math.floor(v)),
    "ceil": lambda v: float(math.ceil(v)),
    "sin": math.sin,
    "cos": math.cos,
    "pow": math.pow,
    # exact product and sum, rounded once
    "fma": lambda a, b, c: float(Fraction(a) * Fraction(b) + Fraction(c)),
    "round_tf32": lambda v: float(dt.round_to(np.float32(v), "tf32")),
}
# "round" is left alone: targets differ on halfway cases.


def fold_call(op: str, vals: list, dtype: str):
    if dt.is_float(dtype):
        fn = _FLOAT_FN.get(op)
        if fn is None or not all(math.isfinite(v) for v in vals):
            return None
        vals = [round_float(v, dtype) for v in vals]
        try:
            return fn(*vals)
        except (ValueError, OverflowError, ZeroDivisionError):
            return None
    if op in ("abs", "fabs"):
        return abs(vals[0])
    if op in ("floor", "ceil", "round"):
        return vals[0]
    if op == "fma":
        return vals[0] * vals[1] + vals[2]
    return None


def lossless(src: str, mid: str) -> bool:
    """Whether casting ``src`` to ``mid`` and back gives the original value."""
    if src == "bool":
        return True
    if dt.is_float(src):
        return dt.is_float(mid) and (
            mid == src or mid == "float64" or (mid == "float32" and src != "float64"))
    if dt.is_float(mid):
        need = dt.bits(src) if dt.is_uint(src) else dt.bits(src) - 1
        return need <= _MANTISSA[mid]
    return mid != "bool" and dt.bits(mid) >= dt.bits(src)
