"""Shared buffers of disjoint live ranges share bytes of dynamic shared memory: the wgmma
products whose epilogue goes through the float32 C tile place it over the operand stages
(dead once the main loop's copies and wgmmas are waited for and a barrier passed), the
verifier accepts only overlaps the live ranges prove, and the simulator, which then runs
the dynamic shared memory as one byte array, catches a wrong aliasing."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import backend_sim
from ptxforge.backend_sim.shared_bytes import shares_bytes
from ptxforge.ir.shared_lifetimes import shared_lifetimes, step_buffers
from ptxforge.ir.stmt import Alloc, Barrier, Seq, map_stmt, walk
from ptxforge.ir.verify import IRVerifyError, verify
from ptxforge.ops.schedules.gemm.knobs import WgmmaScheduleConfig
from ptxforge.ops.schedules.gemm.rules import wgmma_shared_bytes
from ptxforge.passes.lower.plan_dynamic_shared import plan_dynamic_shared
from ptxforge.target import as_target

from .lowp import f64, host
from .test_wgmma_epilogue import _layer, _reference, _schedule

SIM = "sim -arch=sm_90a"
RNG = np.random.default_rng(7)


def _lower(M, N, K, epilogue, cfg, target=SIM):
    args, y = _layer(M, N, K, epilogue)
    t = as_target(target)
    with t:
        dev = ptxforge.lower(_schedule(args, y, WgmmaScheduleConfig(*cfg), t), args + [y])
    return args, y, dev


def _placements(func):
    return {s.buffer.name: (s.dyn_offset, s.buffer.size * (4 if s.buffer.dtype == "float32"
                                                           else 2))
            for s in walk(func.body) if isinstance(s, Alloc) and s.dyn_offset is not None}


def _run(dev, args, y, epilogue):
    vals = [host(RNG, a.shape, a.dtype) for a in args]
    out = np.full(y.shape, np.nan, y.dtype)
    backend_sim.run(dev, vals + [out])
    want = _reference([f64(v, a.dtype) for v, a in zip(vals, args)], epilogue)
    return f64(out, y.dtype), want


def _c_tile(func):
    """The float32 C tile among ``func``'s shared buffers (None without one)."""
    return next((s.buffer for s in walk(func.body) if isinstance(s, Alloc)
                 and s.buffer.scope == "shared" and s.buffer.dtype == "float32"), None)


def _kernel(dev):
    (k,) = [f for f in dev.kernels() if _c_tile(f) is not None]
    return k


def _drop_last_barrier_before_the_c_tile(func):
    """``func`` without the barrier plan_dynamic_shared put before the C tile's stores."""
    life = shared_lifetimes(func)
    first = life.first[id(_c_tile(func))]
    barrier = life.steps[first - 1]
    assert isinstance(barrier, Barrier)

    def drop(x):
        if isinstance(x, Seq) and any(c is barrier for c in x.stmts):
            return Seq([c for c in x.stmts if c is not barrier])
        return None

    return func.replace(body=map_stmt(func.body, fstmt=drop))


@pytest.mark.parametrize("stages,block_n", [(2, 128), (3, 128), (4, 128)])
def test_the_c_tile_shares_the_operand_stages_bytes(stages, block_n):
    _, _, dev = _lower(128, 256, 512, "residual", (block_n, 2, stages, 0), "cuda -arch=sm_90a")
    k = _kernel(dev)
    cfg = WgmmaScheduleConfig(block_n, 2, stages, 0)
    operands = int(wgmma_shared_bytes(cfg, c_tile=False))
    spans = _placements(k)
    c_lo, c_n = spans.pop("T_matmul_NT.warpgroup.shared")
    # the float32 C tile: 128 rows of block_n + 4 (the last row's padding left off)
    assert c_n == (128 * (block_n + 4) - 4) * 4
    # the C tile sits over the stages: the block needs the larger of the two, not the sum
    assert k.launch.dynamic_shared_bytes == max(operands, c_n) < operands + c_n
    assert k.launch.dynamic_shared_bytes <= int(wgmma_shared_bytes(cfg, c_tile=True))
    assert any(lo < c_lo + c_n and c_lo < lo + n for lo, n in spans.values())
    # the operand tiles still start on the wgmma's 1024-byte boundary
    assert all(lo % 1024 == 0 for lo, _ in spans.values())
    # and a barrier, with nothing pending, separates the main loop from the C tile's stores
    life = shared_lifetimes(k)
    c_first = min(life.first[id(s.buffer)] for s in walk(k.body) if isinstance(s, Alloc)
                  and s.buffer.name == "T_matmul_NT.warpgroup.shared")
    last_operand = max(life.last[id(s.buffer)] for s in walk(k.body) if isinstance(s, Alloc)
                       and s.buffer.name in spans)
    assert any(last_operand < q < c_first for q in life.clean_barriers)


def test_without_aliasing_every_buffer_has_its_own_bytes():
    _, _, dev = _lower(128, 256, 512, "residual", (128, 2, 3, 0), "cuda -arch=sm_90a")
    k = _kernel(dev)
    # place the kernel's buffers again, from scratch, without aliasing
    bare = map_stmt(k.body, fstmt=lambda x: x.replace(dyn_offset=None)
                    if isinstance(x, Alloc) else None)
    fresh = k.replace(body=bare, attrs=k.attrs.with_launch(dynamic_shared_bytes=0))
    own = plan_dynamic_shared(fresh, as_target("cuda -arch=sm_90a"), alias=False)
    shared = plan_dynamic_shared(fresh, as_target("cuda -arch=sm_90a"))
    # the C tile first (at 0), then the operands from the next 1024-byte boundary
    assert own.launch.dynamic_shared_bytes == -(-(128 * 132 - 4) * 4 // 1024) * 1024 + 96 * 1024
    assert shared.launch.dynamic_shared_bytes == 96 * 1024
    spans = sorted(_placements(own).values())
    assert all(a[0] + a[1] <= b[0] for a, b in zip(spans, spans[1:]))


@pytest.mark.parametrize("M,N,K,epilogue,cfg", [
    (128, 128, 256, "residual", (128, 2, 3, 0)),
    (49, 131, 200, "gelu_tanh", (64, 1, 2, 0)),  # odd N, padded M, N and K
    (30, 72, 200, "gelu16", (64, 1, 2, 0, 2)),  # split-K
])
def test_aliased_kernels_match_numpy_on_the_simulator(M, N, K, epilogue, cfg):
    args, y, dev = _lower(M, N, K, epilogue, cfg)
    assert shares_bytes(_kernel(dev))
    got, want = _run(dev, args, y, epilogue)
    np.testing.assert_allclose(got, want, rtol=0, atol=4e-3 * np.abs(want).max())


def test_the_verifier_refuses_an_overlap_without_the_barrier():
    _, _, dev = _lower(64, 128, 256, "residual", (128, 1, 2, 0))
    bad = _drop_last_barrier_before_the_c_tile(_kernel(dev))
    with pytest.raises(IRVerifyError, match="overlaps"):
        verify(bad)


def test_the_simulator_catches_a_missing_barrier():
    args, y, dev = _lower(64, 128, 256, "residual", (128, 1, 2, 0))
    k = _kernel(dev)
    bad = dev.with_function(_drop_last_barrier_before_the_c_tile(k))
    with pytest.raises(backend_sim.SimRaceError, match="missing barrier.*T_matmul_NT"):
        _run(bad, args, y, "residual")


def test_the_simulator_shows_a_buffer_overwritten_while_still_read():
    # the C tile's stores moved before the main loop, whose operand stages share its bytes:
    # the race checker names it, and without it the overwritten stages show in the results
    args, y, dev = _lower(64, 128, 256, "residual", (128, 1, 2, 0))
    k = _kernel(dev)
    life = shared_lifetimes(k)
    names = [{b.name for b in step_buffers(s)} for s in life.steps]
    c_store = life.steps[names.index({"T_matmul_NT.warpgroup.shared"})]
    main_loop = life.steps[max(i for i, n in enumerate(names) if "x.shared" in n)]

    def swap(x):
        if isinstance(x, Seq) and any(c is c_store for c in x.stmts):
            out = [c for c in x.stmts if c is not c_store]
            i = next(j for j, c in enumerate(out) if c is main_loop)
            return Seq(out[:i] + [c_store] + out[i:])
        return None

    bad = dev.with_function(k.replace(body=map_stmt(k.body, fstmt=swap)))
    with pytest.raises(backend_sim.SimRaceError, match="missing barrier"):
        _run(bad, args, y, "residual")
    vals = [host(RNG, a.shape, a.dtype) for a in args]
    out = np.zeros(y.shape, y.dtype)
    backend_sim.run(bad, vals + [out], check_races=False)
    want = _reference([f64(v, a.dtype) for v, a in zip(vals, args)], "residual")
    assert not np.allclose(f64(out, y.dtype), want, atol=4e-3 * np.abs(want).max())


def _fresh(func):
    """``func`` with its shared buffers unplaced again."""
    bare = map_stmt(func.body, fstmt=lambda x: x.replace(dyn_offset=None)
                    if isinstance(x, Alloc) else None)
    return func.replace(body=bare, attrs=func.attrs.with_launch(dynamic_shared_bytes=0))


@pytest.mark.parametrize("drop", ["async_wait", "wgmma_wait"])
def test_no_sharing_while_a_copy_or_a_wgmma_may_be_pending(drop):
    from ptxforge.ir.stmt import AsyncWait, WgmmaSync

    _, _, dev = _lower(128, 256, 512, "residual", (128, 2, 3, 1), "cuda -arch=sm_90a")
    k = _fresh(_kernel(dev))
    life = shared_lifetimes(k)
    # the block-level wait after the main loop (in_flight=1 leaves one wgmma group in it)
    waits = [s for s in life.steps if (isinstance(s, AsyncWait) if drop == "async_wait"
                                       else isinstance(s, WgmmaSync) and s.op == "wait")]
    assert waits

    def strip(x):
        if isinstance(x, Seq) and any(any(c is w for w in waits) for c in x.stmts):
            return Seq([c for c in x.stmts if not any(c is w for w in waits)])
        return None

    t = as_target("cuda -arch=sm_90a")
    unsafe = k.replace(body=map_stmt(k.body, fstmt=strip))
    planned = plan_dynamic_shared(unsafe, t)
    assert not shares_bytes(planned)
    assert planned.launch.dynamic_shared_bytes == plan_dynamic_shared(
        unsafe, t, alias=False).launch.dynamic_shared_bytes
    why = shared_lifetimes(unsafe).dead_before(
        next(s.buffer for s in walk(unsafe.body) if isinstance(s, Alloc)
             and s.buffer.name == "w.shared"),
        shared_lifetimes(unsafe).first[id(_c_tile(unsafe))])
    assert why is not None and "pending" in why


# -- the model -------------------------------------------------------------------------------


def test_the_aliased_count_is_the_larger_part_over_the_static_limit():
    from ptxforge.ops.schedules.gemm.rules import C_TILE_ALIASED, aliased_shared_bytes

    assert aliased_shared_bytes(32768, 8192) == 40960  # static: side by side
    assert aliased_shared_bytes(98304, 67584) == 98304
    assert aliased_shared_bytes(65536, 133120) == 133120
    pair = WgmmaScheduleConfig(128, 2, 3, 1)
    assert wgmma_shared_bytes(pair, True) == 98304 + 67584
    assert wgmma_shared_bytes(pair, C_TILE_ALIASED) == 98304
    assert wgmma_shared_bytes(pair, False) == 98304


def test_two_blocks_an_sm_only_with_the_c_tile_over_the_stages():
    from ptxforge.ops.schedules.gemm.estimate import wgmma_blocks_per_sm
    from ptxforge.ops.schedules.gemm.rules import C_TILE_ALIASED

    t = as_target("cuda -arch=sm_90a")
    pair = WgmmaScheduleConfig(128, 2, 3, 1)
    assert wgmma_blocks_per_sm(pair, t, True) == 1
    assert wgmma_blocks_per_sm(pair, t, C_TILE_ALIASED) == 2
    assert wgmma_blocks_per_sm(WgmmaScheduleConfig(128, 2, 4, 1), t, C_TILE_ALIASED) == 1


def _default_pick(M, N, K, epilogue):
    import sys

    sys.path.insert(0, __file__.rsplit("/tests/", 1)[0] + "/bench")
    from bench_wgmma_default import layer

    from ptxforge.ops.schedules.gemm.chooser import wgmma_choice
    from ptxforge.ops.schedules.gemm.forms import gemm_form

    args, y, prod = layer(M, N, K, epilogue)
    t = as_target("cuda -arch=sm_90a")
    with t:
        return wgmma_choice(prod, None if y.op is prod else y.op, gemm_form(prod, t), t)


@pytest.mark.parametrize("M,N,K,epilogue,want", [
    # GPT-2's FFN1: the 512-2,048-row rule's 64 x 128 tiles of 3 stages (an H200 sweep)
    (1024, 3072, 768, "gelu_tanh", (128, 1, 3)),
    # from 4,096 rows with a fused epilogue (an H100 and an H200 with BERT's own
    # epilogues, mid_size._fused_wide_config): N <= 1,024 64 x 128 of 3 stages ...
    (4096, 768, 3072, "residual", (128, 1, 3)),
    (8192, 768, 3072, "gelu", (128, 1, 3)),
    # ... and N >= 3,072 at few steps 128 x 128 of 3 stages (BERT's FFN1)
    (4096, 3072, 768, "gelu", (128, 2, 3)),
    # bare products: unchanged
    (4096, 4096, 4096, "none", (256, 2, 4)),
    (4096, 768, 3072, "none", (192, 2, 4)),
    (3000, 1536, 2048, "none", (128, 2, 5)),
])
def test_fused_epilogues_take_the_pair_where_the_model_allows(M, N, K, epilogue, want):
    pick = _default_pick(M, N, K, epilogue)
    assert (pick.block_n, pick.warpgroups, pick.stages) == want


# -- the GPU ---------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K,epilogue,cfg", [
    (1024, 3072, 768, "gelu_tanh", WgmmaScheduleConfig(128, 2, 3, 1, 1)),  # two blocks an SM
    (1024, 3072, 768, "gelu_tanh", WgmmaScheduleConfig(128, 2, 4, 1, 1)),
    (4096, 768, 3072, "residual", WgmmaScheduleConfig(128, 2, 3, 1, 1)),
    (200, 130, 264, "residual", WgmmaScheduleConfig(64, 1, 4, 1, 1)),  # padded
])
def test_kernels_with_the_c_tile_over_the_stages_on_the_gpu(M, N, K, epilogue, cfg):
    from ptxforge.backend_ptx import array, compile_module, cuda, empty

    dev = cuda(0)
    if dev.sm != "sm_90":
        pytest.skip(f"wgmma needs an sm_90 GPU (sm_90a code); this one is {dev.sm}")
    args, y = _layer(M, N, K, epilogue)
    target = as_target("cuda -arch=sm_90a")
    with target:
        low = ptxforge.lower(_schedule(args, y, cfg, target), args + [y])
        assert any(shares_bytes(k) for k in low.kernels())
        loaded = compile_module(low, target).load(dev)
    vals = [host(RNG, a.shape, a.dtype) for a in args]
    out = empty((M, N), y.dtype, dev)
    loaded(*[array(h, dev, a.dtype) for h, a in zip(vals, args)], out)
    want = _reference([f64(h, a.dtype) for h, a in zip(vals, args)], epilogue)
    got = f64(out.numpy(), y.dtype)
    np.testing.assert_allclose(got, want, rtol=0, atol=4e-3 * np.abs(want).max())
