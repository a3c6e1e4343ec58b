"""A 2-D tile copy through the tensor memory accelerator, built as device IR: the smallest
real kernel of the TMA and mbarrier protocol (``docs/tma.md``).

``out`` (``[rows, cols]`` rounded up to whole boxes) receives the tensor ``a`` (``[rows,
cols]``, read through a tensor map of ``box`` and ``swizzle``), with zeros where a box
reaches past ``a``: the TMA's fill. Block ``b`` copies the row of boxes ``b``, one box a
step, through ``stages`` shared-memory slots under two mbarriers each:

* ``full[s]`` (1 arrival: the producer's ``expect_tx``, plus the box's bytes) completes
  when slot ``s`` holds its box;
* ``empty[s]`` (one arrival per thread) completes when every thread has stored the slot
  out.

Thread 0 is the producer: at step ``k`` it waits for ``empty[k % stages]`` of the box
``stages`` earlier (a fresh barrier's "previous" phase passes at once), arms ``full`` with
the box's bytes and issues the copy. Every thread is a consumer of the box ``stages - 1``
steps behind: it waits for ``full``, stores its elements of the box (un-swizzling the
shared layout as the hardware wrote it) and arrives at ``empty``. The two roles share one
loop skewed by ``stages - 1`` steps, so the order the simulator runs (program order) is
one the GPU may run, while on the GPU the producer runs ahead on its own, bounded by the
``empty`` barriers.
"""

from __future__ import annotations

from dataclasses import dataclass

from ....ir import dtype as dt
from ....ir.attrs import FuncAttrs
from ....ir.expr import Expr, IntImm, Var, floordiv, floormod
from ....ir.intrin.tma import SWIZZLES, shared_align, tensor_map_problem
from ....ir.stmt import Alloc, Barrier, Buffer, For, If, Launch, Module, PrimFunc, Seq, Stmt, Store
from ....ir.stmt_tma import (
    FenceMbarrierInit,
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
    TensorMap,
    TmaLoad,
)

THREADS = 128
"""Threads of a block."""
MAX_STAGES = 8


def _i(v: int) -> IntImm:
    return IntImm(v, dt.INDEX)


def swizzled_element(e: Expr, esize: int, swizzle: str) -> Expr:
    """Where element ``e`` of a dense box lies in shared memory once the hardware swizzles
    it (``ir/intrin/tma.swizzle_bytes`` in elements): the 16-byte chunk bits XORed with
    the 128-byte line index's low bits (1, 2 or 3 of them for 32B, 64B, 128B)."""
    span = SWIZZLES[swizzle]
    if span == 0:
        return e
    from ....passes.lower.swizzle_layout import xor_bits

    bits = {32: 1, 64: 2, 128: 3}[span]
    per_chunk = 16 // esize
    chunk = floormod(floordiv(e, per_chunk), 1 << bits)
    line = floormod(floordiv(e, 128 // esize), 1 << bits)
    return e + (xor_bits(chunk, line, bits) - chunk) * _i(per_chunk)


@dataclass(frozen=True)
class TmaCopy:
    """A tile copy: ``rows x cols`` of ``dtype`` in boxes of ``box`` (rows, columns)."""

    rows: int
    cols: int
    dtype: str = "float16"
    box: tuple = (64, 64)
    swizzle: str = "128B"
    stages: int = 2

    def check(self) -> None:
        """Raise ValueError naming what cannot be built."""
        problem = tensor_map_problem(self.dtype, (self.rows, self.cols), tuple(self.box),
                                     self.swizzle)
        if problem:
            raise ValueError(f"TMA copy {self.rows} x {self.cols} {self.dtype}: {problem}")
        if not 1 <= self.stages <= MAX_STAGES:
            raise ValueError(f"TMA copy: stages must be 1-{MAX_STAGES}, got {self.stages}")

    @property
    def padded(self) -> tuple:
        """The output's shape: the tensor rounded up to whole boxes."""
        br, bc = self.box
        return (-(-self.rows // br) * br, -(-self.cols // bc) * bc)

    @property
    def box_elems(self) -> int:
        return self.box[0] * self.box[1]

    @property
    def slot_elems(self) -> int:
        """Elements of one shared slot: the box, rounded up to the swizzle's period."""
        align = shared_align(self.swizzle) // dt.nbytes(self.dtype)
        return -(-self.box_elems // align) * align


def tma_copy_module(c: TmaCopy, name: str = "tma_copy") -> Module:
    """The device IR of the copy: a host function ``main(a, out)`` and one kernel."""
    c.check()
    br, bc = c.box
    pr, pc = c.padded
    steps = pc // bc
    esize = dt.nbytes(c.dtype)
    a = TensorMap("a", c.dtype, (c.rows, c.cols), c.box, c.swizzle)
    out = Buffer("out", c.dtype, [pr * pc])
    slots = Buffer("slots", c.dtype, [c.stages * c.slot_elems], "shared")
    full = Buffer("full", "uint64", [c.stages], "shared")
    empty = Buffer("empty", "uint64", [c.stages], "shared")
    tx, bx = Var("tx"), Var("bx")
    first = tx == _i(0)
    stages = c.stages

    def produce(k: Var) -> Stmt:
        s = floormod(k, stages)
        use = floordiv(k, stages)
        return Seq([
            MbarrierWait(empty, s, floormod(use, 2) * _i(-1) + _i(1)),
            MbarrierArrive(full, s, a.box_bytes),
            TmaLoad(slots, s * _i(c.slot_elems), a, [bx * _i(br), k * _i(bc)], full, s),
        ])

    def consume(j: Expr) -> Stmt:
        s = floormod(j, stages)
        it = Var("it")
        e = it * _i(THREADS) + tx
        at = s * _i(c.slot_elems) + swizzled_element(e, esize, c.swizzle)
        row, col = bx * _i(br) + floordiv(e, bc), j * _i(bc) + floormod(e, bc)
        store = Store(out, [row * _i(pc) + col], slots[at])
        per = -(-c.box_elems // THREADS)
        if c.box_elems % THREADS:
            store = If(e < _i(c.box_elems), store)
        return Seq([
            MbarrierWait(full, s, floormod(floordiv(j, stages), 2)),
            For(it, per, store),
            MbarrierArrive(empty, s),
        ])

    k = Var("k")
    loop = For(k, steps + stages - 1, Seq([
        If(first & (k < _i(steps)), produce(k)),
        If(k >= _i(stages - 1), consume(k - _i(stages - 1))),
    ]))
    init = If(first, Seq(
        [MbarrierInit(full, _i(s), 1) for s in range(stages)]
        + [MbarrierInit(empty, _i(s), THREADS) for s in range(stages)]
        + [FenceMbarrierInit()]))
    body: Stmt = For(tx, THREADS, Seq([init, Barrier(), loop]), "thread", "threadIdx.x")
    slot_bytes = c.stages * c.slot_elems * esize
    bar_bytes = -(-8 * stages // 16) * 16  # dynamic shared buffers start 16-byte aligned
    body = Alloc(full, Alloc(empty, body, slot_bytes + bar_bytes), slot_bytes)
    body = Alloc(slots, body, 0)
    body = For(bx, pr // br, body, "thread", "blockIdx.x")
    dyn = slot_bytes + 2 * bar_bytes
    kernel = PrimFunc(f"{name}_kernel0", [a, out], body,
                      FuncAttrs.kernel((pr // br, 1, 1), (THREADS, 1, 1), stages=("out",),
                                       dynamic_shared_bytes=dyn))
    host_a = Buffer("a", c.dtype, [c.rows, c.cols])
    host_out = Buffer("out", c.dtype, [pr, pc])
    host = PrimFunc("main", [host_a, host_out], Launch(kernel.name, [host_a, host_out]),
                    FuncAttrs.host())
    return Module([host, kernel])


def tma_copy_reference(a, c: TmaCopy):
    """What the kernel computes: ``a`` zero-padded to whole boxes (numpy)."""
    import numpy as np

    out = np.zeros(c.padded, a.dtype)
    out[:c.rows, :c.cols] = a
    return out
