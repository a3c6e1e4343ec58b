"""Scalar data types.

A dtype is written as a plain string (``"float32"``, ``"int32"``, ``"bool"``); the helpers
here validate and classify them so the rest of the compiler never parses type names itself.
"""

from __future__ import annotations

import numpy as np

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


def to_numpy(dtype: str) -> np.dtype:
    if check(dtype) == "bfloat16":
        raise DTypeError("bfloat16 has no numpy equivalent; use float32 on the host side")
    return np.dtype("bool" if dtype == "bool" else dtype)


def from_numpy(dt) -> str:
    name = np.dtype(dt).name
    return check(name)


def promote(a: str, b: str) -> str:
    """The dtype of a binary arithmetic op on ``a`` and ``b`` (float wins, then width)."""
    if a == b:
        return a
    if is_float(a) != is_float(b):
        return a if is_float(a) else b
    if is_bool(a):
        return b
    if is_bool(b):
        return a
    return a if bits(a) >= bits(b) else b
