"""The Hopper tensor memory accelerator (TMA) and mbarriers: the facts both backends and the
verifier share.

A *tensor map* (``CUtensorMap``, 128 opaque bytes the host encodes with
``cuTensorMapEncodeTiled``) describes a global tensor (its dtype, dims and strides) and a
*box*: the tile one ``cp.async.bulk.tensor`` copies. The copy writes the box densely into
shared memory, row-major (the innermost dim contiguous), permuted by the map's *swizzle*:
the 16-byte chunks of each 128-byte line move as the matrix descriptors of wgmma read
them. Elements of the box outside the tensor are written as zeros. The copy is tracked by
an *mbarrier* (a 64-bit shared-memory object): it completes the barrier's transaction
count by the bytes it wrote, and a phase of the barrier completes once its expected
arrivals are in and its transaction count is back at zero.

The numbers here are the PTX ISA's (sections "Tensor Maps", "cp.async.bulk.tensor" and
"mbarrier") and the CUDA driver's (``cuTensorMapEncodeTiled``).
"""

from __future__ import annotations

import numpy as np

from .. import dtype as dt

TENSOR_MAP_BYTES = 128
"""Size of a ``CUtensorMap``; a kernel takes it by value: ``.param .align 64 .b8 m[128]``."""
TENSOR_MAP_ALIGN = 64
"""Alignment of a ``CUtensorMap`` (in the parameter space and on the host)."""

MAX_RANK = 5
"""Dimensions of a tiled tensor map (1 to 5)."""
MAX_BOX = 256
"""Elements of a box along any dimension."""
MAX_DIM = 2**32
"""Elements of the global tensor along any dimension."""
MAX_STRIDE = 2**40
"""Bytes between consecutive elements of an outer dimension (a multiple of 16)."""
GLOBAL_ALIGN = 16
"""Alignment of the global tensor's address and of its outer dimensions' strides (bytes)."""
BOX_ROW_BYTES = 16
"""The box's innermost dimension is a multiple of 16 bytes."""
SHARED_ALIGN = 128
"""Alignment of a copy's shared-memory destination without a swizzle (bytes)."""

SWIZZLES = {"none": 0, "32B": 32, "64B": 64, "128B": 128}
"""Swizzle modes and the span (bytes) of the line they permute within."""

MBARRIER_DTYPE = "uint64"
"""An mbarrier is one 8-byte (8-byte aligned) element of a shared ``uint64`` buffer."""
MBARRIER_MAX_COUNT = 2**20 - 1
"""Largest expected arrival count of ``mbarrier.init`` and transaction count of
``expect_tx`` (the PTX ISA's range for both)."""

TMA_DTYPES = frozenset({
    "float16", "bfloat16", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32",
    "uint32", "int64", "uint64", "float8_e4m3fn", "float8_e5m2"})
"""Element types a tensor map copies (signed and 8-bit floating types travel as the
unsigned integers of their width: a copy moves bits, and zeros are zeros in each)."""


def swizzle_span(mode: str) -> int:
    """Bytes of the line a swizzle mode permutes (0 for ``none``)."""
    if mode not in SWIZZLES:
        raise ValueError(f"unknown TMA swizzle {mode!r}; one of {', '.join(SWIZZLES)}")
    return SWIZZLES[mode]


def shared_align(mode: str) -> int:
    """Alignment (bytes) of a copy's destination under ``mode``: the swizzle pattern's
    period (8 lines of its span: the hardware XORs address bits 4.. with bits 7..), so
    that the pattern is the box's own; 128 bytes without a swizzle."""
    span = swizzle_span(mode)
    return SHARED_ALIGN if span == 0 else max(SHARED_ALIGN, 8 * span)


def swizzle_bytes(offset, mode: str):
    """The byte position at which a swizzle puts byte ``offset`` (from a destination
    aligned to :func:`shared_align`): the 16-byte chunk bits (4 and up, as many as the span
    has chunks) XORed with the 128-byte line index's low bits. An int or a numpy array."""
    span = swizzle_span(mode)
    if span == 0:
        return offset
    bits = {32: 1, 64: 2, 128: 3}[span]
    mask = (1 << bits) - 1
    if isinstance(offset, np.ndarray):
        return offset ^ (((offset >> 7) & mask) << 4)
    return offset ^ (((int(offset) >> 7) & mask) << 4)


def tensor_map_problem(dtype: str, shape: tuple, box: tuple, swizzle: str) -> str | None:
    """Why a tiled tensor map of a compact row-major ``shape`` (outermost first) with this
    ``box`` and ``swizzle`` cannot be encoded, or None where it can."""
    if dtype not in TMA_DTYPES:
        return (f"a tensor map copies {', '.join(sorted(TMA_DTYPES))}; not {dtype}")
    if swizzle not in SWIZZLES:
        return f"unknown swizzle {swizzle!r}; one of {', '.join(SWIZZLES)}"
    if not 1 <= len(shape) <= MAX_RANK:
        return f"a tensor map has 1 to {MAX_RANK} dimensions, not {len(shape)}"
    if len(box) != len(shape):
        return (f"the box {list(box)} has {len(box)} dimensions, the tensor {len(shape)} "
                f"({list(shape)})")
    esize = dt.nbytes(dtype)
    for d, (n, b) in enumerate(zip(shape, box)):
        if not 1 <= n <= MAX_DIM:
            return f"dimension {d} of the tensor has {n} elements; 1 to 2^32"
        if not 1 <= b <= MAX_BOX:
            return f"dimension {d} of the box has {b} elements; 1 to {MAX_BOX}"
    if box[-1] * esize % BOX_ROW_BYTES:
        return (f"the box's innermost dimension is {box[-1] * esize} bytes ({box[-1]} x "
                f"{dtype}); it must be a multiple of {BOX_ROW_BYTES}")
    span = SWIZZLES[swizzle]
    if span and box[-1] * esize > span:
        return (f"the box's innermost dimension is {box[-1] * esize} bytes, more than the "
                f"{swizzle} swizzle's span; make it at most {span} bytes ({span // esize} "
                f"elements) and copy wider tiles as several boxes")
    stride = esize
    for d in range(len(shape) - 1, 0, -1):
        stride *= shape[d]
        if stride % GLOBAL_ALIGN or stride >= MAX_STRIDE:
            return (f"dimension {d - 1} of the tensor is {stride} bytes apart; a tensor map's "
                    f"strides are multiples of {GLOBAL_ALIGN} below 2^40 (pad the rows)")
    return None


def box_bytes(dtype: str, box: tuple) -> int:
    """Bytes one copy of ``box`` writes into shared memory (and completes on its
    mbarrier), the box's elements outside the tensor included."""
    n = dt.nbytes(dtype)
    for b in box:
        n *= b
    return n


__all__ = ["BOX_ROW_BYTES", "GLOBAL_ALIGN", "MAX_BOX", "MAX_RANK", "MBARRIER_DTYPE",
           "MBARRIER_MAX_COUNT", "SHARED_ALIGN", "SWIZZLES", "TENSOR_MAP_ALIGN",
           "TENSOR_MAP_BYTES", "TMA_DTYPES", "box_bytes", "shared_align", "swizzle_bytes",
           "swizzle_span", "tensor_map_problem"]
