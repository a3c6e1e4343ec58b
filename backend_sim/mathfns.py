"""Scalar and element-wise helpers with GPU semantics, called from generated kernel code.

Every function takes numpy arrays or scalars and keeps the dtype it is given (float32 math
stays float32). Plain arithmetic is emitted inline; these cover what numpy or Python
would do differently from the GPU (rounding, truncating division, integer wrap-around,
fused multiply-add, division by zero that must not raise).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..ir import dtype as dt


@functools.cache
def int_range(dtype: str) -> tuple[int, int]:
    """(smallest, largest) value of an integer or bool dtype."""
    if dtype == "bool":
        return 0, 1
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def wrap(value: int, dtype: str) -> int:
    """A Python int reduced to ``dtype`` with two's-complement wrap-around."""
    lo, hi = int_range(dtype)
    span = hi - lo + 1
    return (value - lo) % span + lo


def wrap_int32(value: int) -> int:
    return ((value + 0x80000000) & 0xFFFFFFFF) - 0x80000000


def floordiv_scalar(a: int, b: int) -> int:
    """Python floor division, except that dividing by zero gives 0 instead of raising
    (the GPU does not trap; its result is undefined)."""
    return a // b if b else 0


def floormod_scalar(a: int, b: int) -> int:
    return a % b if b else 0


def trunc_div(a, b, dtype: str):
    """C integer division (rounds toward zero), for ``div`` on integers; exact for every
    width (no detour through float64, which would round int64 values beyond 2**53)."""
    q, _ = _trunc_divmod(a, b, dtype)
    return q


def trunc_mod(a, b, dtype: str):
    """C's integer ``%`` (the remainder of :func:`trunc_div`, with the sign of ``a``)."""
    _, r = _trunc_divmod(a, b, dtype)
    return r


def _trunc_divmod(a, b, dtype: str):
    if np.ndim(a) == 0 and np.ndim(b) == 0:
        x, y = int(a), int(b)
        if y == 0:
            return 0, 0  # division by zero does not trap on the GPU; its result is undefined
        q = abs(x) // abs(y)
        q = q if (x < 0) == (y < 0) else -q
        return wrap(q, dtype), wrap(x - q * y, dtype)
    a = np.asarray(a, dtype)
    b = np.asarray(b, dtype)
    zero = b == 0
    safe = np.where(zero, np.ones((), dtype), b)
    with np.errstate(all="ignore"):  # MIN // -1 wraps, as the two's-complement hardware
        q = a // safe
        r = a - q * safe
        fix = (r != 0) & ((a < 0) != (safe < 0))  # floor went one below the truncation
        q = np.where(fix, q + np.ones((), dtype), q).astype(dtype, copy=False)
        r = np.where(fix, r - safe, r).astype(dtype, copy=False)
    return np.where(zero, 0, q).astype(dtype), np.where(zero, 0, r).astype(dtype)


def float_to_int(x, dtype: str):
    """Float to integer conversion that truncates toward zero and saturates: NaN gives 0,
    values beyond the range give its ends (LLVM's ``fptosi.sat``, which the GPU code uses).
    Works on scalars and arrays."""
    lo, hi = int_range(dtype)
    wide = np.asarray(x, np.float64)
    out = np.where(np.isnan(wide), 0, np.clip(np.trunc(wide), lo, hi))
    if out.ndim == 0:
        return int(out)
    return out.astype(dtype)


def round_half_away(x):
    """``round``: halfway cases away from zero (CUDA's roundf), not to even."""
    t = np.trunc(x)
    frac = np.abs(x - t)
    one = np.ones_like(x)
    return np.where(frac >= 0.5, t + np.copysign(one, x), t).astype(np.asarray(x).dtype)[()]


def rsqrt(x):
    one = np.asarray(x).dtype.type(1)
    return one / np.sqrt(x)


def sigmoid(x):
    one = np.asarray(x).dtype.type(1)
    return one / (one + np.exp(-x))


def erf(x):
    dtype = np.asarray(x).dtype
    try:
        from scipy.special import erf as _erf
    except ImportError:  # scipy comes with scikit-learn; this keeps erf working without it
        _erf = np.vectorize(math.erf, otypes=[np.float64])
    return np.asarray(_erf(np.asarray(x, dtype=np.float64))).astype(dtype)[()]


def fma(a, b, c):
    """Fused multiply-add with one rounding, as the GPU's fma (exact through float64 for
    float32 operands, up to rare double-rounding cases)."""
    dtype = np.result_type(a, b, c)
    if dtype.kind != "f" or dtype.itemsize >= 8:
        return a * b + c
    wide = np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64)
    return wide.astype(dtype)[()]


def fma_wide(a, b, c):
    """``a * b + c`` in float64, for 16-bit operands: exact product, so rounding the result
    to float16 or bfloat16 once gives the GPU's ``fma.rn.f16`` / ``fma.rn.bf16``."""
    return (np.asarray(a, np.float64) * np.asarray(b, np.float64)
            + np.asarray(c, np.float64))[()]


def fp8_value(bits, dtype: str):
    """The float32 value of fp8 bit patterns (``cvt`` from e4m3 / e5m2: exact)."""
    from ..ir.float8 import float8_from_bits

    return float8_from_bits(bits, dtype)[()]


def fp8_bits(x, dtype: str):
    """fp8 bit patterns of float32 ``x`` (``cvt.rn.satfinite.{e4m3,e5m2}x2.f32``)."""
    from ..ir.float8 import float8_bits

    return float8_bits(np.asarray(x, np.float32), dtype)[()]


def round_bf16(x):
    """``x`` rounded to bfloat16 (nearest even), held in float32: how the simulator keeps
    bfloat16 values, rounding after every operation."""
    if isinstance(x, (bool, np.bool_)) or np.asarray(x).dtype.kind in "biu":
        x = np.asarray(x, np.float64)
    return dt.round_to(x, "bfloat16")[()]


def round_tf32(x):
    """float32 ``x`` rounded to TF32 (10-bit mantissa, ties away from zero), as the GPU's
    ``cvt.rna.tf32.f32``."""
    return dt.round_to(x, "tf32")[()]


def to_f32(x):
    """A 16-bit float value widened to float32 (scalars and arrays)."""
    return np.asarray(x, np.float32)[()]


def to_f16(x):
    """``x`` rounded to float16 once."""
    return np.asarray(x).astype(np.float16)[()]


def full(value, lanes: int, dtype: str) -> np.ndarray:
    """A lane-independent value spread over all lanes."""
    return np.full(lanes, value, dtype=dtype)
