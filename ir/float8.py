"""The 8-bit floats of Hopper's tensor cores: ``float8_e4m3fn`` and ``float8_e5m2``.

``float8_e4m3fn``: 1 sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities, one
NaN pattern per sign (``S.1111.111``); largest finite 448. ``float8_e5m2``: 1 sign, 5
exponent bits (bias 15), 2 mantissa bits, IEEE-like (infinities ``S.11111.00``, NaNs with
a non-zero mantissa); largest finite 57344. Both have subnormals.

Conversion to them is the GPU's ``cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32``: round to nearest
even, and a finite or infinite value past the largest finite one becomes that largest
finite value of its sign (``satfinite``); NaN stays NaN (``0x7F``). :func:`float8_bits`
is that conversion on the host, :func:`float8_from_bits` the exact way back;
:func:`round_to_float8` both at once (the value a float32 register holds after a round
trip through fp8), which the simulator and the numpy references use. Host arrays of fp8
are their ``uint8`` bit patterns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Float8Format:
    """One 8-bit float format: exponent and mantissa widths, exponent bias, the largest
    finite value, whether it has infinities, and its short PTX name."""

    name: str
    exp_bits: int
    man_bits: int
    bias: int
    max_finite: float
    has_inf: bool
    ptx: str

    @property
    def min_normal_exp(self) -> int:
        """The exponent of the smallest normal value (``1 - bias``)."""
        return 1 - self.bias

    @property
    def nan_bits(self) -> int:
        """The canonical NaN the conversions produce."""
        return 0x7F


FORMATS = {
    "float8_e4m3fn": Float8Format("float8_e4m3fn", 4, 3, 7, 448.0, False, "e4m3"),
    "float8_e5m2": Float8Format("float8_e5m2", 5, 2, 15, 57344.0, True, "e5m2"),
}
"""The fp8 formats by dtype name."""


class Float8Error(ValueError):
    """An unknown fp8 format."""


def float8_format(dtype: str) -> Float8Format:
    """The :class:`Float8Format` of ``dtype``, or an error naming the formats."""
    try:
        return FORMATS[dtype]
    except KeyError:
        raise Float8Error(f"{dtype!r} is no 8-bit float; one of {', '.join(FORMATS)}") from None


def is_float8(dtype: str) -> bool:
    return dtype in FORMATS


def float8_bits(x, dtype: str) -> np.ndarray:
    """The ``uint8`` bit patterns of ``x`` converted to ``dtype`` as
    ``cvt.rn.satfinite`` does: nearest even, past the largest finite value (infinities
    included) that value of the sign, NaN the canonical NaN. Rounds float64 input
    directly (no double rounding through float32)."""
    f = float8_format(dtype)
    x = np.asarray(x, dtype=np.float64)
    sign = np.signbit(x)
    a = np.abs(x)
    nan = np.isnan(a)
    a = np.where(nan, 0.0, np.minimum(a, f.max_finite * 2))  # inf: saturates below
    # the quantum of a's binade (the subnormal one below the smallest normal exponent)
    _, e = np.frexp(np.where(a > 0, a, 1.0))
    exp = np.maximum(e - 1, f.min_normal_exp)
    q = np.ldexp(1.0, exp - f.man_bits)
    r = np.rint(a / q) * q  # a / q is exact (q a power of two); rint: half to even
    r = np.minimum(r, f.max_finite)  # satfinite
    m, e = np.frexp(np.where(r > 0, r, 1.0))
    biased = e - 1 + f.bias
    normal = (r > 0) & (biased >= 1)
    mant_normal = (m * 2 - 1) * (1 << f.man_bits)
    mant_sub = r / np.ldexp(1.0, f.min_normal_exp - f.man_bits)
    mant = np.where(normal, mant_normal, mant_sub)
    biased = np.where(normal, biased, 0)
    bits = (biased.astype(np.uint32) << f.man_bits) | np.rint(mant).astype(np.uint32)
    bits = bits | (sign.astype(np.uint32) << 7)
    bits = np.where(nan, f.nan_bits, bits)
    return bits.astype(np.uint8)


def float8_from_bits(bits, dtype: str) -> np.ndarray:
    """The float32 values of ``dtype`` bit patterns (exact)."""
    f = float8_format(dtype)
    b = np.asarray(bits, dtype=np.uint8).astype(np.int32)
    sign = np.where(b & 0x80, -1.0, 1.0)
    biased = (b >> f.man_bits) & ((1 << f.exp_bits) - 1)
    mant = b & ((1 << f.man_bits) - 1)
    sub = mant * np.ldexp(1.0, f.min_normal_exp - f.man_bits)
    normal = (1.0 + mant / (1 << f.man_bits)) * np.ldexp(1.0, biased - f.bias)
    v = np.where(biased == 0, sub, normal)
    top = (1 << f.exp_bits) - 1
    if f.has_inf:
        v = np.where((biased == top) & (mant == 0), np.inf, v)
        v = np.where((biased == top) & (mant != 0), np.nan, v)
    else:
        v = np.where((biased == top) & (mant == (1 << f.man_bits) - 1), np.nan, v)
    return (sign * v).astype(np.float32)


def round_to_float8(x, dtype: str) -> np.ndarray:
    """``x`` converted to ``dtype`` and back, as float32 (what a register holds)."""
    return float8_from_bits(float8_bits(x, dtype), dtype)


def quantize(x, dtype: str, amax: float | None = None) -> tuple[np.ndarray, float]:
    """Per-tensor scaling of ``x`` into ``dtype``: ``(bits, scale)`` with ``x ~= scale *
    float8_from_bits(bits)``, the scale mapping ``amax`` (default: the largest magnitude
    of ``x``) to the format's largest finite value."""
    f = float8_format(dtype)
    x = np.asarray(x, dtype=np.float32)
    amax = float(np.max(np.abs(x))) if amax is None else float(amax)
    scale = amax / f.max_finite if amax > 0 else 1.0
    return float8_bits(x / scale, dtype), scale
