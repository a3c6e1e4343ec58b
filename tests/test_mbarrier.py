"""The mbarrier protocol on the simulator: phases and parities, transaction bytes, and the
errors a broken protocol raises (a wait nothing completes, expect_tx bytes that differ from
the copies', a missing fence.mbarrier_init, a barrier used before its initialisation, too
many arrivals, a read of a TMA destination before the wait, a copy over one in flight)."""

from __future__ import annotations

import numpy as np
import pytest

from ptxforge.backend_sim.errors import SimBarrierError, SimRaceError
from ptxforge.backend_sim.host import run
from ptxforge.ir.attrs import FuncAttrs
from ptxforge.ir.expr import IntImm, Var
from ptxforge.ir.stmt import (
    Alloc,
    Barrier,
    Buffer,
    For,
    If,
    Launch,
    Module,
    PrimFunc,
    Seq,
    Stmt,
    Store,
)
from ptxforge.ir.stmt_tma import (
    FenceMbarrierInit,
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
    TensorMap,
    TmaLoad,
)
from ptxforge.ir.verify import verify

THREADS = 64
SHAPE, BOX = (16, 32), (8, 32)


def _i(v: int) -> IntImm:
    return IntImm(v, "int32")


class _K:
    """The pieces of a one-block kernel: a tensor map of 16 x 32 float32 in boxes of 8 x 32,
    two slots of a box, two mbarriers, 64 threads; ``tx`` is the thread."""

    def __init__(self):
        self.t = TensorMap("t", "float32", SHAPE, BOX, "none")
        self.out = Buffer("out", "float32", [256])
        self.tile = Buffer("tile", "float32", [512], "shared")
        self.bar = Buffer("bar", "uint64", [2], "shared")
        self.tx = Var("tx")
        self.first = self.tx == _i(0)

    def init(self, count: int = 1, fence: bool = True) -> Stmt:
        inits = [MbarrierInit(self.bar, _i(b), count) for b in range(2)]
        return Seq([If(self.first, Seq(inits + ([FenceMbarrierInit()] if fence else []))),
                    Barrier()])

    def load(self, row: int, slot: int = 0, tx_bytes: int | None = None,
             arrive: bool = True) -> Stmt:
        """Thread 0 arms ``bar[slot]`` and copies the box at ``row`` into ``slot``."""
        t = self.t
        arm = [MbarrierArrive(self.bar, _i(slot), t.box_bytes if tx_bytes is None
                              else tx_bytes)] if arrive else []
        return If(self.first, Seq(arm + [TmaLoad(self.tile, _i(256 * slot), t,
                                                 [_i(row), _i(0)], self.bar, _i(slot))]))

    def wait(self, slot: int, parity: int) -> Stmt:
        return MbarrierWait(self.bar, _i(slot), _i(parity))

    def store(self, slot: int, base: int = 0) -> Stmt:
        """Every thread stores 4 elements of ``slot`` to ``out``."""
        it = Var("it")
        e = it * _i(THREADS) + self.tx
        return For(it, 4, Store(self.out, [_i(base) + e], self.tile[_i(256 * slot) + e]))

    def module(self, *stmts, extra: Buffer | None = None) -> Module:
        """The kernel of ``stmts`` (with ``extra``, a 16-byte shared buffer, placed too)."""
        body = For(self.tx, THREADS, Seq(list(stmts)), "thread", "threadIdx.x")
        if extra is not None:
            body = Alloc(extra, body, 2064)
        body = Alloc(self.tile, Alloc(self.bar, body, 2048), 0)
        kernel = PrimFunc("k_kernel0", [self.t, self.out], body, FuncAttrs.kernel(
            (1, 1, 1), (THREADS, 1, 1), dynamic_shared_bytes=2080))
        ht, ho = Buffer("t", "float32", list(SHAPE)), Buffer("out", "float32", [256])
        m = Module([PrimFunc("main", [ht, ho], Launch(kernel.name, [ht, ho]),
                             FuncAttrs.host()), kernel])
        verify(m)
        return m



def _run(m: Module):
    x = np.arange(SHAPE[0] * SHAPE[1], dtype=np.float32).reshape(SHAPE)
    out = np.full(256, -1, np.float32)
    run(m, [x, out])
    return x, out


def test_phases_alternate_and_a_fresh_barrier_passes_a_wait_for_parity_one():
    # one slot reused: phase 0 holds rows 0-7, phase 1 rows 8-15; the consumers arrive
    # at bar[1] (64 threads) to free the slot, and thread 0 waits for that before reusing
    k = _K()
    inits = [MbarrierInit(k.bar, _i(0), 1), MbarrierInit(k.bar, _i(1), THREADS),
             FenceMbarrierInit()]
    m = k.module(
        If(k.first, Seq(inits)), Barrier(),
        k.wait(1, 1),  # the free-slot barrier's phase "before" 0: passes at once
        k.load(0), k.wait(0, 0), k.store(0), MbarrierArrive(k.bar, _i(1)),
        If(k.first, k.wait(1, 0)), k.load(8), k.wait(0, 1),
        k.store(0, 0),
    )
    x, out = _run(m)
    np.testing.assert_array_equal(out, x[8:16].reshape(-1))


def test_a_wait_nothing_completes_is_a_deadlock():
    k = _K()
    with pytest.raises(SimBarrierError, match="still expects 1 arrival"):
        _run(k.module(k.init(), k.wait(0, 0)))


def test_expect_tx_bytes_that_differ_from_the_copy_leave_the_phase_open():
    k = _K()
    with pytest.raises(SimBarrierError, match="transaction bytes"):
        _run(k.module(k.init(), k.load(0, tx_bytes=512), k.wait(0, 0)))
    k = _K()
    with pytest.raises(SimBarrierError, match="-512 transaction bytes outstanding"):
        _run(k.module(k.init(), k.load(0, tx_bytes=512)))


def test_a_copy_on_a_barrier_whose_init_was_not_fenced_is_refused():
    k = _K()
    with pytest.raises(SimBarrierError, match="fence_mbarrier_init"):
        _run(k.module(k.init(fence=False), k.load(0), k.wait(0, 0)))


def test_a_barrier_used_before_its_initialisation_is_refused():
    k = _K()
    with pytest.raises(SimBarrierError, match="before any thread initialised it"):
        _run(k.module(k.load(0), k.wait(0, 0)))


def test_more_arrivals_than_the_phase_expects_are_refused():
    k = _K()
    # 64 threads arrive at a barrier expecting one arrival a phase (the copy's bytes keep
    # the phase open after the first)
    with pytest.raises(SimBarrierError, match="expected arrivals are all in"):
        _run(k.module(k.init(), If(k.first, MbarrierArrive(k.bar, _i(0), 2048)),
                      MbarrierArrive(k.bar, _i(0))))


def test_reading_a_tma_destination_before_the_wait_is_a_race():
    k = _K()
    with pytest.raises(SimRaceError, match="TMA copy not waited for"):
        _run(k.module(k.init(), k.load(0), k.store(0), k.wait(0, 0)))


def test_a_copy_over_one_not_landed_is_a_race():
    k = _K()
    with pytest.raises(SimRaceError, match="has not landed"):
        _run(k.module(k.init(), k.load(0), k.load(8, arrive=False), k.wait(0, 0)))


def test_the_data_lands_at_the_wait():
    k = _K()
    x, out = _run(k.module(k.init(), k.load(8, slot=1), k.wait(1, 0), k.store(1)))
    np.testing.assert_array_equal(out, x[8:16].reshape(-1))


def test_two_barrier_buffers_of_one_name_keep_their_own_state():
    k = _K()
    other = Buffer("bar", "uint64", [2], "shared")  # another buffer, the same name
    m = k.module(
        If(k.first, Seq([MbarrierInit(k.bar, _i(0), 1), MbarrierInit(other, _i(0), 2),
                         FenceMbarrierInit()])),
        Barrier(), k.load(0), k.wait(0, 0), k.store(0), extra=other)
    x, out = _run(m)
    np.testing.assert_array_equal(out, x[:8].reshape(-1))
