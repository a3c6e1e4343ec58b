"""Inputs and output comparison shared by the runners' correctness checks."""

from __future__ import annotations

import numpy as np

from ..ir import dtype as dt

RTOL = 1e-3
ATOL_FRACTION = 1e-4  # absolute tolerance, as a fraction of the largest reference magnitude


def random_array(buffer, rng: np.random.Generator) -> np.ndarray:
    """Random data for one host parameter: uniform in [0, 1) for floats (as TVM's runners
    fill inputs), small integers otherwise."""
    dtype = dt.to_numpy(buffer.dtype)
    shape = tuple(buffer.shape)
    if np.dtype(dtype).kind == "f":
        return rng.uniform(size=shape).astype(dtype)
    if np.dtype(dtype).kind == "b":
        return rng.integers(0, 2, size=shape).astype(dtype)
    return rng.integers(0, 8, size=shape).astype(dtype)


def poisoned(buffer) -> np.ndarray:
    """An output buffer's start value: NaN (or a loud integer), so elements a kernel never
    writes show up as mismatches."""
    dtype = np.dtype(dt.to_numpy(buffer.dtype))
    fill = np.nan if dtype.kind == "f" else (False if dtype.kind == "b" else np.iinfo(dtype).max)
    return np.full(tuple(buffer.shape), fill, dtype)


def compare(outputs: list, references: list, names: list) -> str:
    """``""`` when every output matches its reference, else what differs."""
    for out, ref, name in zip(outputs, references, names):
        out = np.asarray(out)
        ref = np.asarray(ref)
        if out.shape != ref.shape:
            return f"{name}: shape {out.shape}, the reference has {ref.shape}"
        if out.dtype.kind == "f":
            finite = np.isfinite(ref)
            scale = float(np.abs(ref[finite]).max()) if finite.any() else 0.0
            atol = ATOL_FRACTION * max(scale, 1e-30)
            bad = ~np.isclose(out, ref, rtol=RTOL, atol=atol, equal_nan=True)
        else:
            bad = out != ref
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            return (f"{name}: {int(bad.sum())} of {bad.size} elements differ from the "
                    f"reference (first at {list(idx)}: got {out[idx]!r}, expected {ref[idx]!r})")
    return ""
