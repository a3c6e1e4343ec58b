"""Named barriers (``bar.sync id, n`` / ``bar.arrive id, n``): the statement's rules, its
text (print, parse, print), the verifier's count check, the PTX, and the simulator running
the ping-pong protocol of two warpgroups (each waits on its own barrier, signals the
other's) with every way it can break: a missing first arrival (deadlock), a missing last
sync, mismatched counts, a warp split at a barrier, and ``__syncthreads()`` reached while
a named barrier is still waited at."""

from __future__ import annotations

import numpy as np
import pytest
from ptxforge import backend_sim as sim
from ptxforge.backend_ptx import compile_kernel
from ptxforge.backend_sim import SimBarrierError
from ptxforge.ir.attrs import FuncAttrs
from ptxforge.ir.expr import IntImm, IRError, Var, cast
from ptxforge.ir.parser import parse_module
from ptxforge.ir.printer import print_module
from ptxforge.ir.stmt import Barrier, Buffer, For, If, Launch, Module, PrimFunc, Seq, Store
from ptxforge.ir.verify import IRVerifyError, verify

STEPS = 5


def _i(v: int) -> IntImm:
    return IntImm(v, "int32")


def pingpong(first_arrive=True, last_sync=True, sync_count=256, sync_before=False,
             threads=256) -> Module:
    """``out[t, tid] = t`` over ``STEPS`` steps, warpgroup 0 and 1 taking turns through
    barriers 1 and 2 (FlashAttention-3's order: wait on your own, signal the other's)."""
    out = Buffer("out", "float32", (STEPS * threads,))
    tx, ty, t = Var("tx"), Var("ty"), Var("t")
    tid = ty * _i(32) + tx
    wg = ty // _i(4)
    step = Seq([
        Barrier() if sync_before else None,
        If(wg == _i(0), Barrier(1, sync_count), Barrier(2, 256)),
        Store(out, [t * _i(threads) + tid], cast("float32", t)),
        If(wg == _i(0), Barrier(2, 256, arrive=True), Barrier(1, 256, arrive=True)),
    ])
    body = Seq([
        If(wg == _i(1), Barrier(1, 256, arrive=True)) if first_arrive else None,
        For(t, STEPS, step),
        If(wg == _i(0), Barrier(1, 256)) if last_sync else None,
    ])
    body = For(ty, threads // 32, For(tx, 32, body, kind="thread", thread="threadIdx.x"),
               kind="thread", thread="threadIdx.y")
    k = PrimFunc("pingpong", [out], body, FuncAttrs.kernel((2, 1, 1), (32, threads // 32, 1)))
    host = Buffer("out", "float32", (STEPS * threads,))
    main = PrimFunc("main", [host], Seq([Launch(k.name, [host])]), FuncAttrs.host())
    return Module([main, k])


def _run(mod: Module) -> np.ndarray:
    out = np.full(STEPS * 256, np.nan, np.float32)
    sim.run(mod, [out])
    return out


def test_the_statement_rules():
    assert not Barrier().named and Barrier().text == "barrier"
    assert Barrier(3, 64, arrive=True).text == "barrier_arrive(3, 64)"
    with pytest.raises(IRError, match="id must be an int 0-15"):
        Barrier(16, 32)
    with pytest.raises(IRError, match="multiple of 32"):
        Barrier(1, 48)
    with pytest.raises(IRError, match="id 0 is the whole block"):
        Barrier(0, 64)
    with pytest.raises(IRError, match="takes an id 1-15 and a thread count"):
        Barrier(2)
    with pytest.raises(IRError, match="bar.arrive needs a named barrier"):
        Barrier(arrive=True)


def test_text_round_trips():
    mod = pingpong()
    text = print_module(mod)
    assert "barrier_arrive(1, 256)" in text and "barrier(2, 256)" in text
    back = parse_module(text)
    assert print_module(back) == text
    assert "barrier\n" in print_module(pingpong(sync_before=True))
    assert print_module(parse_module(print_module(pingpong(sync_before=True)))) == \
        print_module(pingpong(sync_before=True))


def test_the_verifier_checks_the_count_against_the_block():
    verify(pingpong())
    with pytest.raises(IRVerifyError, match="256 threads named at a barrier of a block of 128"):
        verify(pingpong(threads=128))


def test_ptx_names_the_barriers():
    k = pingpong().functions["pingpong"]
    ptx = compile_kernel(k, "sm_90a", stop_after="ptx", cache=False).get_source("ptx")
    ptx = " ".join(ptx.split())
    for op in ("bar.sync 1, 256;", "bar.sync 2, 256;", "bar.arrive 1, 256;",
               "bar.arrive 2, 256;"):
        assert op in ptx, op


def test_the_protocol_runs_on_the_simulator():
    got = _run(pingpong()).reshape(STEPS, 256)
    np.testing.assert_array_equal(got, np.arange(STEPS, dtype=np.float32)[:, None]
                                  .repeat(256, 1))
    _run(pingpong(sync_before=True))  # whole-block barriers between the phases too


def test_a_missing_first_arrival_deadlocks():
    with pytest.raises(SimBarrierError, match=r"waits at bar.sync 1 \(128 of 256 threads "
                                              r"arrived\) and reaches bar.arrive 2, 256"):
        _run(pingpong(first_arrive=False))


def test_a_missing_last_sync_leaves_the_barrier_open():
    with pytest.raises(SimBarrierError, match=r"barrier 1 of block 0 ends the kernel with 128 "
                                              r"of 256 threads arrived; no thread waits"):
        _run(pingpong(last_sync=False))


def test_mismatched_counts_are_refused():
    with pytest.raises(SimBarrierError, match="every thread must name the same count"):
        _run(pingpong(sync_count=128))


def test_a_warp_split_at_a_named_barrier():
    A = Buffer("A", "float32", (64,))
    tx = Var("tx")
    body = For(tx, 64, Seq([If(tx < _i(16), Barrier(1, 64), Barrier(1, 64, arrive=True)),
                            Store(A, [tx], cast("float32", tx))]),
               kind="thread", thread="threadIdx.x")
    k = PrimFunc("split", [A], body, FuncAttrs.kernel((1, 1, 1), (64, 1, 1)))
    host = Buffer("A", "float32", (64,))
    mod = Module([PrimFunc("main", [host], Seq([Launch(k.name, [host])]), FuncAttrs.host()), k])
    with pytest.raises(SimBarrierError, match="of the same warp; a warp arrives at a named"):
        sim.run(mod, [np.zeros(64, np.float32)])


def test_syncthreads_while_a_named_barrier_is_waited_at():
    # warpgroup 1 syncs on 2 at the first step's start; a whole-block barrier follows before
    # warpgroup 0 arrives there: the GPU hangs
    out = Buffer("out", "float32", (STEPS * 256,))
    tx, ty, t = Var("tx"), Var("ty"), Var("t")
    wg = ty // _i(4)
    body = Seq([If(wg == _i(1), Barrier(1, 256, arrive=True)), For(t, STEPS, Seq([
        If(wg == _i(0), Barrier(1, 256), Barrier(2, 256)), Barrier(),
        If(wg == _i(0), Barrier(2, 256, arrive=True), Barrier(1, 256, arrive=True))]))])
    body = For(ty, 8, For(tx, 32, body, kind="thread", thread="threadIdx.x"), kind="thread",
               thread="threadIdx.y")
    k = PrimFunc("stuck", [out], body, FuncAttrs.kernel((1, 1, 1), (32, 8, 1)))
    host = Buffer("out", "float32", (STEPS * 256,))
    mod = Module([PrimFunc("main", [host], Seq([Launch(k.name, [host])]), FuncAttrs.host()), k])
    with pytest.raises(SimBarrierError, match=r"waits at bar.sync 2 .* reaches __syncthreads"):
        _run(mod)


@pytest.mark.gpu
@pytest.mark.sanitize
def test_the_protocol_runs_on_the_gpu():
    from ptxforge.backend_ptx import compile_module, cuda, empty

    dev = cuda(0)
    loaded = compile_module(pingpong(sync_before=True), dev.target).load(dev)
    out = empty((STEPS * 256,), "float32", dev)
    loaded(out)  # both blocks write the same values; a hang or a trap fails the test
    got = out.numpy().reshape(STEPS, 256)
    np.testing.assert_array_equal(got, np.arange(STEPS, dtype=np.float32)[:, None]
                                  .repeat(256, 1))
