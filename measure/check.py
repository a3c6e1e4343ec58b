"""Inputs and output comparison shared by the runners' correctness checks."""

from __future__ import annotations

import numpy as np

from ..ir import dtype as dt

RTOL = 1e-3
ATOL_FRACTION = 1e-4  # absolute tolerance, as a fraction of the largest reference magnitude
RTOL_16BIT = {"float16": 2e-3, "bfloat16": 1.6e-2}
"""Two units in the last place: schedules that sum in another order may round a 16-bit
output to the neighbouring value."""


def random_array(buffer, rng: np.random.Generator) -> np.ndarray:
    """Random data for one host parameter: uniform in [0, 1) for floats (as TVM's runners
    fill inputs), small integers otherwise."""
    dtype = dt.to_numpy(buffer.dtype)
    shape = tuple(buffer.shape)
    if buffer.dtype == "bfloat16":
        return dt.to_bfloat16(rng.uniform(size=shape))
    if np.dtype(dtype).kind == "f":
        return rng.uniform(size=shape).astype(dtype)
    if np.dtype(dtype).kind == "b":
        return rng.integers(0, 2, size=shape).astype(dtype)
    return rng.integers(0, 8, size=shape).astype(dtype)


def poisoned(buffer) -> np.ndarray:
    """An output buffer's start value: NaN (or a loud integer), so elements a kernel never
    writes show up as mismatches."""
    if buffer.dtype == "bfloat16":
        return dt.to_bfloat16(np.full(tuple(buffer.shape), np.nan, np.float32))
    dtype = np.dtype(dt.to_numpy(buffer.dtype))
    fill = np.nan if dtype.kind == "f" else (False if dtype.kind == "b" else np.iinfo(dtype).max)
    return np.full(tuple(buffer.shape), fill, dtype)


def _as_float32(a: np.ndarray) -> np.ndarray:
    return dt.from_bfloat16(a) if a.dtype == dt.BFLOAT16_HOST else a


def compare(outputs: list, references: list, names: list) -> str:
    """``""`` when every output matches its reference, else what differs."""
    for out, ref, name in zip(outputs, references, names):
        out = np.asarray(out)
        ref = np.asarray(ref)
        rtol = RTOL
        if not dt.BFLOAT16_IS_BITS and dt.BFLOAT16_HOST in (out.dtype, ref.dtype):
            out, ref = _as_float32(out), _as_float32(ref)  # bfloat16: compare values
            rtol = RTOL_16BIT["bfloat16"]
        elif np.float16 in (out.dtype, ref.dtype):
            rtol = RTOL_16BIT["float16"]
        if out.shape != ref.shape:
            return f"{name}: shape {out.shape}, the reference has {ref.shape}"
        if out.dtype.kind == "f":
            finite = np.isfinite(ref)
            scale = float(np.abs(ref[finite]).max()) if finite.any() else 0.0
            atol = ATOL_FRACTION * max(scale, 1e-30)
            bad = ~np.isclose(out, ref, rtol=rtol, atol=atol, equal_nan=True)
        else:
            bad = out != ref
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            return (f"{name}: {int(bad.sum())} of {bad.size} elements differ from the "
                    f"reference (first at {list(idx)}: got {out[idx]!r}, expected {ref[idx]!r})")
    return ""
