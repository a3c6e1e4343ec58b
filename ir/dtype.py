"""Scalar data types.

A dtype is written as a plain string (``"float32"``, ``"int32"``, ``"bool"``); the helpers
here validate and classify them so the rest of the compiler never parses type names itself.

Low precision: ``float16`` is numpy's ``float16``. ``bfloat16`` has no numpy type; on the
host it is ``ml_dtypes.bfloat16`` when the ``ml_dtypes`` package is installed, else its raw
bit patterns in ``uint16`` arrays (:data:`BFLOAT16_HOST`); :func:`to_bfloat16` and
:func:`from_bfloat16` convert either way. The rounding helpers here (:func:`round_to`) are
the one place that rounds to float16, bfloat16 and TF32; the simplifier, the simulator,
the code generator's literals and the numpy references all use them.
"""

from __future__ import annotations

import functools

import numpy as np

try:  # bfloat16 on the host: ml_dtypes if present, else uint16 bit patterns
    import ml_dtypes as _ml_dtypes

    BFLOAT16_HOST: np.dtype = np.dtype(_ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes comes with onnx, which the tests use
    BFLOAT16_HOST = np.dtype(np.uint16)
BFLOAT16_IS_BITS = BFLOAT16_HOST == np.dtype(np.uint16)
"""True when host bfloat16 arrays are uint16 bit patterns (``ml_dtypes`` is missing)."""

_BITS = {
    "bool": 1,
    "int8": 8,
    "int16": 16,
    "int32": 32,
    "int64": 64,
    "uint8": 8,
    "uint16": 16,
    "uint32": 32,
    "uint64": 64,
    "float16": 16,
    "bfloat16": 16,
    "float32": 32,
    "float64": 64,
}

INDEX = "int32"
"""The dtype of loop variables and index arithmetic."""


class DTypeError(TypeError):
    """A dtype name that is unknown, or two dtypes that do not fit together."""


def check(dtype: str) -> str:
    """Return ``dtype`` if it names a known scalar type, else raise :class:`DTypeError`."""
    if not isinstance(dtype, str) or dtype not in _BITS:
        raise DTypeError(
            f"unknown dtype {dtype!r}; use one of: {', '.join(sorted(_BITS))}"
        )
    return dtype


def bits(dtype: str) -> int:
    return _BITS[check(dtype)]


def nbytes(dtype: str) -> int:
    """Storage size in bytes (bool is stored as one byte)."""
    return max(1, bits(dtype) // 8)


def is_float(dtype: str) -> bool:
    return check(dtype).startswith(("float", "bfloat"))


def is_int(dtype: str) -> bool:
    return check(dtype).startswith(("int", "uint"))


def is_uint(dtype: str) -> bool:
    return check(dtype).startswith("uint")


def is_bool(dtype: str) -> bool:
    return check(dtype) == "bool"


def is_half(dtype: str) -> bool:
    """float16 or bfloat16 (16-bit floats, computed through float32 where PTX has no op)."""
    return dtype in ("float16", "bfloat16")


@functools.cache
def int_range(dtype: str) -> tuple[int, int]:
    """(smallest, largest) value of an integer dtype (bool: 0 and 1), as Python ints."""
    if check(dtype) == "bool":
        return 0, 1
    if not is_int(dtype):
        raise DTypeError(f"int_range needs an integer or bool dtype, got {dtype}")
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def to_numpy(dtype: str) -> np.dtype:
    """The numpy dtype of host arrays of ``dtype`` (bfloat16: :data:`BFLOAT16_HOST`)."""
    if check(dtype) == "bfloat16":
        return BFLOAT16_HOST
    return np.dtype("bool" if dtype == "bool" else dtype)


def host_array(src, dtype: str, what: str = "copy") -> np.ndarray:
    """``src`` as a host array of ``dtype`` (:func:`to_numpy`'s type) for a copy into a
    device array, refusing conversions that would change integer or bool values silently:
    float data into an integer or bool array (it would truncate), and integers that do not
    fit the target (they would wrap). Conversions into float arrays round as numpy does;
    bfloat16 targets are left to the caller."""
    src = np.asarray(src)
    target = to_numpy(dtype)
    if src.dtype == target or not (is_int(dtype) or is_bool(dtype)):
        return src
    if src.dtype.kind not in "biu":
        raise DTypeError(
            f"{what}: {src.dtype} data into a {dtype} array would truncate its values; "
            f"convert it first (x.astype({dtype!r}))")
    out = src.astype(target)
    if not np.array_equal(out, src):
        bad = src.reshape(-1)[np.flatnonzero(out.reshape(-1) != src.reshape(-1))[0]]
        raise DTypeError(
            f"{what}: the {src.dtype} value {bad} does not fit {dtype} (it would "
            f"{'not be 0 or 1' if dtype == 'bool' else 'wrap'}); pass {dtype} data")
    return out


def from_numpy(dt) -> str:
    name = np.dtype(dt).name
    return check(name)


# ---------------------------------------------------------------------------------------
# rounding to low precisions


def bfloat16_bits(x) -> np.ndarray:
    """The bfloat16 bit patterns (uint16) nearest to ``x`` (round to nearest even, as
    ``cvt.rn.bf16.f32``). Rounds float64 input directly, not through float32."""
    x = np.asarray(x)
    if x.dtype == np.float64:
        b64 = x.view(np.uint64)
        r = (b64 + np.uint64(0x0FFFFFFFFFFF) + ((b64 >> np.uint64(45)) & np.uint64(1))) \
            & np.uint64(0xFFFFE00000000000)
        with np.errstate(over="ignore"):
            f = np.where(np.isnan(x), x, r.view(np.float64)).astype(np.float32)
    else:
        f = np.asarray(x, dtype=np.float32)
    b = f.view(np.uint32)
    rounded = ((b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1)))
               >> np.uint32(16)).astype(np.uint16)
    quiet = ((b >> np.uint32(16)) | np.uint32(0x0040)).astype(np.uint16)  # keep NaN a NaN
    return np.where(np.isnan(f), quiet, rounded)


def bfloat16_from_bits(bits) -> np.ndarray:
    """float32 values of bfloat16 bit patterns (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(
        np.float32)


def round_to(x, dtype: str) -> np.ndarray:
    """``x`` rounded to the nearest value of ``dtype`` (round to nearest even), as a float32
    array for bfloat16 and ``"tf32"`` (TF32 rounds ties away from zero, as
    ``cvt.rna.tf32.f32``), a float16 array for float16, else cast to ``dtype``."""
    with np.errstate(over="ignore", invalid="ignore"):
        if dtype == "bfloat16":
            return bfloat16_from_bits(bfloat16_bits(x))
        if dtype == "tf32":
            f = np.asarray(x, dtype=np.float32)
            b = f.view(np.uint32)
            r = ((b + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
            return np.where(np.isfinite(f), r, f)
        return np.asarray(x).astype(to_numpy(dtype))


def to_bfloat16(x) -> np.ndarray:
    """A host bfloat16 array (:data:`BFLOAT16_HOST`) holding ``x`` rounded to nearest even."""
    x = np.asarray(x)
    if x.dtype == BFLOAT16_HOST and not BFLOAT16_IS_BITS:
        return x.copy()
    bits = bfloat16_bits(x if x.dtype == np.float64 else x.astype(np.float32))
    return bits if BFLOAT16_IS_BITS else bits.view(BFLOAT16_HOST)


def from_bfloat16(a) -> np.ndarray:
    """float32 values of a host bfloat16 array (``ml_dtypes.bfloat16`` or uint16 bits)."""
    a = np.asarray(a)
    if a.dtype.itemsize != 2 or a.dtype.kind == "f":
        raise DTypeError(f"from_bfloat16 takes a bfloat16 (or uint16 bit pattern) array, "
                         f"got {a.dtype}")
    return bfloat16_from_bits(a.view(np.uint16))


def promote(a: str, b: str) -> str:
    """The dtype of a binary arithmetic op on ``a`` and ``b`` (float wins, then width)."""
    if a == b:
        return a
    if is_float(a) != is_float(b):
        return a if is_float(a) else b
    if is_float(a) and bits(a) == bits(b):
        return "float32"  # float16 with bfloat16: neither holds the other
    if is_bool(a):
        return b
    if is_bool(b):
        return a
    return a if bits(a) >= bits(b) else b
