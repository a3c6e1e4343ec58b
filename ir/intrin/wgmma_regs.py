"""Register access to a wgmma accumulator: a warpgroup fragment read and written by its
threads as their own registers.

A ``warpgroup`` buffer of ``64 * n`` float32 elements (role ``wg_c``, the accumulator of
``wgmma m64nNk16``) is ``n / 2`` registers in each of the warpgroup's 128 threads. Inside a
tensorized nest its index is the tile's ``(row, col)``, which the intrinsic maps to
registers; outside one, a plain load or store of it is a *register access*: the index is
the register *slot*, the same in every thread, and thread ``tx`` of the warpgroup touches
the element the ISA's layout puts in that slot (:func:`~.wgmma.accumulator_map`):

* slot ``s = 4 b + 2 h + e`` (8-column block ``b``, row half ``h``, element ``e`` of the
  pair) of thread ``tx`` (warp ``w = tx / 32``, ``g = (tx % 32) / 4``, ``t = tx % 4``)
  holds row ``16 w + g + 8 h``, column ``8 b + 2 t + e`` of the 64 x n tile;
* so each thread holds two rows (``h`` 0 and 1), and each row is held by the 4 threads of
  a quad (``t`` 0..3, lanes ``4 g .. 4 g + 3`` of the warp): a row's maximum or sum is the
  thread's own ``n / 4`` elements of it, then two ``shfl.bfly`` (lane masks 1 and 2);
* an element-wise map with a per-row operand (a scale, ``exp2``, a maximum, a mask by
  position) is one expression per slot, the row operand held per thread for ``h`` 0 and 1.

This is what FlashAttention-3 does with the accumulator of ``Q K^T``: the softmax runs on
the registers, never on a copy in shared memory. The rules:

* the verifier (:func:`~.verify.check_fragment_access`) takes a register access of a
  ``warpgroup`` fragment only at a slot free of ``threadIdx.x`` (the same slot in every
  thread: a varying one would be local memory); ``warp`` fragments stay intrinsic-only;
* the wgmma protocol holds as for the intrinsics that touch the registers: no access while
  a wgmma writing them is in flight (``wgmma.commit_group`` and ``wgmma.wait_group``
  first) and a ``wgmma.fence`` before the next wgmma; the simulator checks both, and
  rejects a slot that differs between threads;
* on the GPU the buffer is an ``alloca`` of ``n / 2`` registers per thread: the slots must
  be constants once loops are unrolled, or the registers become local memory (the PTX
  tests look for ``.local``).

The helpers below build the positions as IR expressions for one thread.
"""

from __future__ import annotations

from ..expr import Expr, IntImm

WARPGROUP = 128


def _i(v: int) -> IntImm:
    return IntImm(v, "int32")


def _e(v: int | Expr) -> Expr:
    return _i(v) if isinstance(v, int) else v


def acc_slot(block: int | Expr, half: int | Expr, e: int | Expr) -> int | Expr:
    """The register slot of element ``e`` of the pair in 8-column block ``block``, row half
    ``half`` (0: row ``g``, 1: row ``g + 8`` of the warp's 16); an int where all three
    are, else an expression (of unrolled loops' variables)."""
    if all(isinstance(x, int) for x in (block, half, e)):
        return 4 * block + 2 * half + e
    return _e(block) * _i(4) + _e(half) * _i(2) + _e(e)


def acc_row(tx: Expr, half: int | Expr) -> Expr:
    """The row (of the warpgroup's 64) that thread ``tx`` holds in its row half ``half``."""
    return (tx // _i(32)) * _i(16) + (tx % _i(32)) // _i(4) + _e(half) * _i(8)


def acc_col(tx: Expr, block: int | Expr, e: int | Expr) -> Expr:
    """The column that thread ``tx`` holds as element ``e`` of 8-column block ``block``."""
    return _e(block) * _i(8) + (tx % _i(4)) * _i(2) + _e(e)


def acc_elements(n: int):
    """``(half, block, e, slot)`` of every register of an ``n``-column accumulator, rows
    first (all of half 0, then half 1), columns in order within a row."""
    if n % 8:
        raise ValueError(f"a wgmma accumulator has a multiple of 8 columns, not {n}")
    return [(h, b, e, acc_slot(b, h, e)) for h in (0, 1) for b in range(n // 8)
            for e in (0, 1)]
