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


def computed_in(dtypes) -> str | None:
    """The 16-bit float type a kernel's values pass through, judged by its parameters'
    dtypes (``"bfloat16"`` before ``"float16"``: the coarser one), or None.

    A kernel that reads 16-bit operands rounds in 16 bits on the way even when its output
    is wider: a product of float16 tensors, stored to float16, with a bias and a residual
    added in float16 and the sum cast to float32 (the last layer of a mixed-precision
    network) differs from another schedule of it by a unit or two of float16, which a
    float32 tolerance would call wrong."""
    names = {str(d) for d in dtypes}
    for name in ("bfloat16", "float16"):
        if name in names:
            return name
    return None


def compare(outputs: list, references: list, names: list, param_dtypes=()) -> str:
    """``""`` when every output matches its reference, else what differs.

    ``param_dtypes``: the dtypes of the kernel's parameters. A 16-bit float among them
    gives every float output that type's tolerance (:func:`computed_in`); without them an
    output is judged by its own dtype."""
    through = computed_in(param_dtypes)
    for out, ref, name in zip(outputs, references, names):
        out = np.asarray(out)
        ref = np.asarray(ref)
        rtol = RTOL if through is None else RTOL_16BIT[through]
        if not dt.BFLOAT16_IS_BITS and dt.BFLOAT16_HOST in (out.dtype, ref.dtype):
            out, ref = _as_float32(out), _as_float32(ref)  # bfloat16: compare values
            rtol = RTOL_16BIT["bfloat16"]
        elif np.float16 in (out.dtype, ref.dtype):
            rtol = max(rtol, RTOL_16BIT["float16"])
        if out.shape != ref.shape:
            return f"{name}: shape {out.shape}, the reference has {ref.shape}"
        if out.dtype.kind == "f":
            first, count = _float_mismatches(out, ref, rtol)
        else:
            bad = out != ref
            count = int(bad.sum())
            first = int(np.flatnonzero(bad)[0]) if count else 0
        if count:
            idx = tuple(int(i) for i in np.unravel_index(first, out.shape))
            return (f"{name}: {count} of {out.size} elements differ from the "
                    f"reference (first at {list(idx)}: got {out[idx]!r}, expected {ref[idx]!r})")
    return ""


CHUNK = 1 << 20
"""Elements compared at a time: float32 temporaries of a few MiB stay in the caches (a
batch-16 convolution's output has 12.8 million elements, and a tuner checks many)."""


def _float_mismatches(out: np.ndarray, ref: np.ndarray, rtol: float) -> tuple[int, int]:
    """``(flat index of the first mismatch, number of mismatches)`` of ``out`` against
    ``ref``: ``numpy.isclose(out, ref, rtol, atol, equal_nan=True)`` with ``atol`` the
    :data:`ATOL_FRACTION` of ``ref``'s largest finite magnitude, computed in float32 (or
    float64 for float64 data) chunk by chunk: ``isclose`` computes 16-bit data in 16 bits,
    element by element in software, about a second for a batch-16 layer's output."""
    wide = np.float64 if np.float64 in (out.dtype, ref.dtype) else np.float32
    o, r = out.reshape(-1), ref.reshape(-1)
    scale = 0.0
    for k in range(0, r.size, CHUNK):
        a = np.abs(r[k:k + CHUNK].astype(wide))
        scale = max(scale, float(np.max(a, where=np.isfinite(a), initial=0.0)))
    atol = ATOL_FRACTION * max(scale, 1e-30)
    first, count = -1, 0
    for k in range(0, r.size, CHUNK):
        oc, rc = o[k:k + CHUNK].astype(wide), r[k:k + CHUNK].astype(wide)
        with np.errstate(invalid="ignore", over="ignore"):
            ok = np.abs(oc - rc) <= atol + rtol * np.abs(rc)
        ok &= np.isfinite(rc)  # an infinite reference has no tolerance ...
        ok |= oc == rc  # ... but equals itself
        ok |= np.isnan(oc) & np.isnan(rc)
        bad = np.flatnonzero(~ok)
        if bad.size:
            count += int(bad.size)
            if first < 0:
                first = k + int(bad[0])
    return first, count
