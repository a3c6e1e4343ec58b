"""Verifier rules of the TMA and mbarrier statements (``ir/stmt_tma.py``).

* they belong to kernels;
* an mbarrier is an element of a shared ``uint64`` buffer (8 bytes, 8-byte aligned), at an
  integer index inside the buffer where the index is a constant;
* a ``tma_load`` reads a :class:`~.stmt_tma.TensorMap` parameter of the kernel, writes a
  shared buffer of its dtype, and its destination is provably aligned to the swizzle's
  period (1024 bytes for ``128B``; 128 without a swizzle: :func:`~.intrin.tma.shared_align`)
  from where the buffer starts, which must itself be so aligned when the buffer lives in
  dynamic shared memory; a constant destination holds the whole box;
* the coordinates are int32, the parity int32;
* no ordinary load or store touches a tensor map (the kernel has its map, not a pointer).
"""

from __future__ import annotations

import math

from . import dtype as dt
from .arith import affine_terms
from .expr import Expr, IntImm
from .intrin.tma import MBARRIER_DTYPE, shared_align
from .stmt import Buffer
from .stmt_tma import MbarrierWait, TensorMap, TmaLoad


def known_multiple(e: Expr) -> int:
    """The largest integer that ``e`` (an integer index) is provably a multiple of (0 for
    the constant 0)."""
    c0, terms = affine_terms(e)
    g = abs(int(c0))
    for _, c in terms:
        g = math.gcd(g, abs(int(c)))
    return g


def check_tma_stmt(v, s) -> None:
    """Check one TMA or mbarrier statement ``s`` for the function verifier ``v``."""
    if v.kind != "kernel":
        v.fail(lambda n: f"{type(s).__name__} in a {v.kind} function; the TMA and mbarrier "
                         "statements belong to kernels (device IR)")
    for e in s.exprs():
        v.expr(e)
        if not dt.is_int(e.dtype):
            v.fail(lambda n, e=e: f"{type(s).__name__}: operand {e} is {e.dtype}; indices, "
                                  "coordinates and parities are integers")
    if isinstance(s, MbarrierWait) and s.parity.dtype != "int32":
        v.fail(lambda n: "mbarrier_wait: the parity is int32")
    if isinstance(s, TmaLoad):
        _check_barrier(v, s.barrier, s.bar_index, "tma_load")
        _check_load(v, s)
    elif hasattr(s, "barrier"):
        _check_barrier(v, s.barrier, s.index, type(s).__name__)


def _check_barrier(v, b: Buffer, index: Expr, what: str) -> None:
    v.check_buffer_in_scope(b)
    if b.scope != "shared" or b.dtype != MBARRIER_DTYPE or b.ndim != 1:
        v.fail(lambda n: f"{what}: the mbarrier {n(b)} is a {b.dtype} {b.scope} buffer of "
                         f"shape {list(b.shape)}; mbarriers are elements of a flat shared "
                         f"{MBARRIER_DTYPE} buffer (8 bytes, 8-byte aligned)")
    if isinstance(index, IntImm) and not 0 <= index.value < b.size:
        v.fail(lambda n: f"{what}: mbarrier {n(b)}[{index.value}] is outside the buffer's "
                         f"{b.size} barriers")


def _check_load(v, s: TmaLoad) -> None:
    t, d = s.tmap, s.dst
    if not any(p is t for p in v.func.params):
        v.fail(lambda n: f"tma_load: tensor map {n(t)} is not a parameter of @{v.func.name}; "
                         "a kernel receives its tensor maps as parameters")
    v.check_buffer_in_scope(d)
    if d.scope != "shared" or d.ndim != 1:
        v.fail(lambda n: f"tma_load: the destination {n(d)} is a {d.scope} buffer of shape "
                         f"{list(d.shape)}; a TMA copy writes a flat shared buffer")
    esize = dt.nbytes(d.dtype)
    align = shared_align(t.swizzle)
    mult = known_multiple(s.dst_index) * esize
    if mult % align:
        v.fail(lambda n: f"tma_load of {n(t)} into {n(d)}: the destination element "
                         f"{s.dst_index} is provably a multiple of {mult} bytes only; a "
                         f"{t.swizzle} swizzle copy needs a multiple of {align} bytes (the "
                         "swizzle's period), so that the pattern is the box's own")
    for lo, _, other in v.dyn_spans:
        if other is d and lo % align:
            v.fail(lambda n, lo=lo: f"tma_load into {n(d)}: the buffer sits at dynamic shared "
                                    f"byte {lo}, not a multiple of {align} (the {t.swizzle} "
                                    "swizzle's period)")
    if isinstance(s.dst_index, IntImm):
        end = s.dst_index.value + t.box_elems
        if s.dst_index.value < 0 or end > d.size:
            v.fail(lambda n: f"tma_load of {n(t)}'s box ({t.box_elems} elements) at "
                             f"{n(d)}[{s.dst_index.value}] ends past the buffer's {d.size} "
                             "elements")


def check_not_tensor_map(v, b: Buffer, what: str) -> None:
    """Ordinary loads and stores never touch a tensor map parameter."""
    if isinstance(b, TensorMap):
        v.fail(lambda n: f"{what} {n(b)}, a tensor map: the kernel holds the map, not a "
                         "pointer to the tensor; read it with tma_load into shared memory")
