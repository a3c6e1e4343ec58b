"""Text form of scalar expressions.

One printer serves two styles. ``"te"`` reproduces the ComputeDAG text users know from TVM
(``(a*b)``, ``tir.if_then_else(c, t, f)``, float zero as ``0f``). ``"ir"`` is the tensor IR's
form, which the IR parser reads back: every constant carries its dtype where it is not
int32 (``0f32``, ``1i64``, ``True``), vars are named by the caller's ``name_of``, and a
``Bin`` or ``Call`` whose dtype differs from what its operands imply says so
(``add(a, b, dtype=int64)``, ``exp(h, dtype=float32)``).
"""

from __future__ import annotations

import math

from .expr import (
    Bin,
    Call,
    Cast,
    Cmp,
    Expr,
    FloatImm,
    IntImm,
    Load,
    Not,
    Reduce,
    Select,
    TensorRead,
    Var,
)

BIN_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/", "and": "&&", "or": "||"}
CMP_SYMBOL = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
FLOAT_SUFFIX = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64",
                "float8_e4m3fn": "f8e4m3", "float8_e5m2": "f8e5m2"}


def float_text(value: float, dtype: str, style: str) -> str:
    if math.isinf(value):
        body = "inf" if value > 0 else "-inf"
    elif math.isnan(value):
        body = "nan"
    elif value == int(value) and abs(value) < 1e16:
        body = str(int(value))
        if value == 0 and math.copysign(1.0, value) < 0:
            body = "-0"
    else:
        body = repr(value)
    if style == "te" and dtype == "float32":
        return body + "f"
    return body + FLOAT_SUFFIX[dtype]


def int_text(value: int, dtype: str) -> str:
    if dtype == "bool":
        return "True" if value else "False"
    if dtype == "int32":
        return str(value)
    short = {"int64": "i64", "int16": "i16", "int8": "i8", "uint8": "u8", "uint16": "u16",
             "uint32": "u32", "uint64": "u64"}[dtype]
    return f"{value}{short}"


def bin_default_dtype(e: Bin) -> str:
    """The dtype ``Bin(op, a, b)`` gets when none is given: bool for and/or, else a's."""
    return "bool" if e.op in ("and", "or") else e.a.dtype


def expr_str(e: Expr, name_of=None, style: str = "te") -> str:
    """Print ``e``. ``name_of(var_or_buffer)`` names vars and buffers (default: their hint)."""
    name_of = name_of or (lambda v: v.name)

    def p(x: Expr) -> str:
        if isinstance(x, Var):
            return name_of(x)
        if isinstance(x, IntImm):
            return int_text(x.value, x.dtype)
        if isinstance(x, FloatImm):
            return float_text(x.value, x.dtype, style)
        if isinstance(x, Bin):
            if style == "ir" and x.dtype != bin_default_dtype(x):
                # a result type the parser cannot infer from the operands is spelled out
                return f"{x.op}({p(x.a)}, {p(x.b)}, dtype={x.dtype})"
            if x.op in BIN_SYMBOL:
                sym = BIN_SYMBOL[x.op]
                sep = "" if x.op == "mul" and style == "te" else " "
                return f"({p(x.a)}{sep}{sym}{sep}{p(x.b)})"
            return f"{x.op}({p(x.a)}, {p(x.b)})"
        if isinstance(x, Cmp):
            return f"({p(x.a)} {CMP_SYMBOL[x.op]} {p(x.b)})"
        if isinstance(x, Not):
            return f"!{p(x.a)}"
        if isinstance(x, Select):
            head = "tir.if_then_else" if style == "te" else "select"
            return f"{head}({p(x.cond)}, {p(x.t)}, {p(x.f)})"
        if isinstance(x, Cast):
            return f"{x.dtype}({p(x.value)})"
        if isinstance(x, Call):
            head = f"tir.{x.op}" if style == "te" else x.op
            args = ", ".join(p(a) for a in x.args)
            if style == "ir" and x.args and x.dtype != x.args[0].dtype:
                args += f", dtype={x.dtype}"
            return f"{head}({args})"
        if isinstance(x, Load):
            return f"{name_of(x.buffer)}[{', '.join(p(i) for i in x.indices)}]"
        if isinstance(x, TensorRead):
            return f"{x.tensor.name}[{', '.join(p(i) for i in x.indices)}]"
        if isinstance(x, Reduce):
            axes = ", ".join(a.var.name for a in x.axis)
            where = "" if x.where is None else f", where={p(x.where)}"
            return f"reduce_{x.combiner}({p(x.source)}, axis=[{axes}]{where})"
        return f"<{type(x).__name__}>"

    try:
        return p(e)
    finally:
        p = None  # it refers to itself: freed now, not by the cyclic collector
