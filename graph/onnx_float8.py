"""8-bit floats at the ONNX boundary: ``FLOAT8E4M3FN`` and ``FLOAT8E5M2`` tensors and the
``Cast`` / ``CastLike`` rules of ONNX for them.

ONNX's Python tools hold fp8 data as ``ml_dtypes`` arrays (``numpy_helper.to_array``);
ptxforge holds it as ``uint8`` bit patterns (:mod:`ptxforge.ir.float8`): :func:`host_bits`
turns the one into the other, bit for bit.

Casting to fp8 rounds to nearest even. With ``saturate=1`` (ONNX's default) a value past the
largest finite one, infinities included, becomes that largest value of its sign, NaN stays
NaN: exactly the GPU's ``cvt.rn.satfinite`` that the compiled cast uses. With
``saturate=0`` such a value becomes NaN in ``float8_e4m3fn`` (which has no infinities) and
an infinity of its sign in ``float8_e5m2``: the saturating cast with the overflowing
elements replaced, decided on the input (:data:`OVERFLOW`); the e5m2 infinities are loaded
from a two-element constant, as no conversion makes them. fp8 constants (initializers and
values computed at import) are graph constants holding their bit patterns. The fnuz
variants and the 4-bit and 2-bit types are not supported (they have no graph dtype).
"""

from __future__ import annotations

import numpy as np

from ..ir import dtype as dt
from . import opdefs as G
from .ir import Call, Constant, Node
from .onnx_model import OnnxImportError
from .opdefs import index as GI
from .opdefs import logic as GL

FLOAT8 = {17: "float8_e4m3fn", 19: "float8_e5m2"}
"""The ONNX element types of the fp8 formats that are graph dtypes."""

OVERFLOW = {"float8_e4m3fn": 464.0, "float8_e5m2": 61440.0}
"""Per format, the magnitude from which a non-saturating cast overflows: 464 lies halfway
between 448 (mantissa ``110``) and 480 (the NaN pattern) and the tie goes to the even 448,
so only magnitudes past 464 overflow in ``float8_e4m3fn``; 61440 lies halfway between 57344
(mantissa ``11``) and 65536 and the tie goes to the even infinity in ``float8_e5m2``."""


def is_float8(dtype: str) -> bool:
    return dtype in OVERFLOW


def host_bits(value) -> np.ndarray:
    """``value`` with ``ml_dtypes`` fp8 data replaced by its ``uint8`` bit patterns (how
    ptxforge's host arrays hold fp8); any other array unchanged."""
    value = np.asarray(value)
    if value.dtype.name in OVERFLOW:
        return value.view(np.uint8)
    return value


def static_value(value, dtype: str) -> np.ndarray:
    """A value given for an fp8 input (``from_onnx(constants=)``) as the ``ml_dtypes`` array
    import-time evaluation works on: ``uint8`` data are bit patterns, other data values."""
    import ml_dtypes

    target = np.dtype(getattr(ml_dtypes, dtype))
    value = np.asarray(value)
    if value.dtype == target:
        return value
    if value.dtype == np.uint8:
        return value.view(target)
    return static_cast(value, dtype, True)


def static_cast(x: np.ndarray, to: str, saturate: bool) -> np.ndarray:
    """An import-time ``Cast`` of ``x`` to fp8 ``to``, as an ``ml_dtypes`` array (the form
    ONNX's numpy helpers and reference operators use)."""
    import ml_dtypes
    from onnx import numpy_helper

    target = np.dtype(getattr(ml_dtypes, to))
    x = np.asarray(x)
    if x.dtype.kind == "V":  # an fp8 or bfloat16 ml_dtypes array: exact in float32
        x = x.astype(np.float32)
    with np.errstate(all="ignore"):
        if saturate:
            return numpy_helper.saturate_cast(x, target)
        return x.astype(target)


def constant(value: np.ndarray, name: str) -> Node:
    """The graph constant of an import-time fp8 value (an ``ml_dtypes`` array, or uint8
    bit patterns): it holds the bit patterns, as fp8 host arrays do."""
    value = np.asarray(value)
    return Constant(value, name, value.dtype.name if value.dtype.name in OVERFLOW else None)


def _infinities(dtype: str, what: str) -> Constant:
    """``[+inf, -inf]`` in fp8 ``dtype`` (float8_e5m2) as a two-element constant: a kernel
    loads its bit patterns (one-element constants become immediates, which convert with
    saturation)."""
    import ml_dtypes

    return Constant(np.array([np.inf, -np.inf], dtype=getattr(ml_dtypes, dtype)),
                    f"{what}_infinities", dtype)


def cast(x: Node, to: str, saturate: bool, what: str) -> Node:
    """The graph of ONNX's ``Cast`` of ``x`` to ``to`` (an fp8 dtype or not) with the given
    ``saturate`` flag (which only casts to fp8 read). ``what`` names the node in errors."""
    if x.dtype == to:
        return x
    if not is_float8(to):
        return G.cast(x, to)
    if x.dtype == "float64":
        # the compiled conversion goes through float32: rounding twice could differ from
        # ONNX's one rounding of the float64 value
        raise OnnxImportError(f"{what}: casting float64 to {to} is not supported (it would "
                              "round twice, through float32); cast to float32 first")
    if is_float8(x.dtype):
        x = G.cast(x, "float32")  # one fp8 format to the other: exact through float32
    if saturate:
        return G.cast(x, to)
    src = x if dt.is_float(x.dtype) else G.cast(x, "float32")
    limit = OVERFLOW[to]
    if to == "float8_e5m2":
        # an overflow is an infinity of its sign, which no conversion makes (cvt.rn.satfinite
        # saturates): the saturating cast, with the infinities' bit patterns selected where
        # the magnitude reaches the halfway point to 65536 (the tie rounds to the even
        # infinity)
        over = Call("greater_equal", [Call("abs", [src]),
                                      Constant(np.array(limit), f"{what}_limit", src.dtype)])
        negative = Call("less", [src, Constant(np.array(0.0), f"{what}_zero", src.dtype)])
        inf = GI.take(_infinities(to, what), G.cast(negative, "int64"), 0)
        return GL.where(over, inf, G.cast(src, to))
    # float8_e4m3fn: an overflow is NaN, which the saturating conversion keeps
    over = Call("greater", [Call("abs", [src]), Constant(np.array(limit), f"{what}_limit",
                                                          src.dtype)])
    nan = Constant(np.array(np.nan), f"{what}_nan", src.dtype)
    return G.cast(GL.where(over, nan, src), to)
