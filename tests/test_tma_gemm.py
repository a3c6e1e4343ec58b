"""The wgmma GEMM fed by TMA under full/empty mbarriers (``ops/schedules/tma/gemm.py``):
against numpy on the simulator (tails in M, N and K, one to four stages, both 16-bit
dtypes), its refusals, ptxas for sm_90a, and (``gpu``) on a Hopper GPU."""

from __future__ import annotations

import numpy as np
import pytest

from ptxforge.backend_ptx.assemble import find_ptxas
from ptxforge.backend_sim.host import run
from ptxforge.ir import dtype as dt
from ptxforge.ir.verify import verify
from ptxforge.ops.schedules.tma import TmaGemm, tma_gemm_module, tma_gemm_reference
from ptxforge.target import as_target

SM90A = "cuda -arch=sm_90a"


def _inputs(g: TmaGemm, seed: int = 0):
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((g.m, g.k)), rng.standard_normal((g.n, g.k))
    if g.dtype == "bfloat16":
        return dt.to_bfloat16(a), dt.to_bfloat16(b)
    return a.astype(np.float16), b.astype(np.float16)


def _wide(x: np.ndarray, dtype: str) -> np.ndarray:
    return dt.from_bfloat16(x) if dtype == "bfloat16" else x.astype(np.float32)


def _tolerance(want: np.ndarray, dtype: str) -> float:
    # the result rounds once to the 16-bit output: within one of its ulps at the largest
    # magnitude (float32 accumulation in another order adds far less)
    bits = 7 if dtype == "bfloat16" else 10
    return float(2.0 ** (np.floor(np.log2(np.abs(want).max())) - bits)) * 1.01


def _empty_c(g: TmaGemm) -> np.ndarray:
    return np.zeros((g.m, g.n), dt.to_numpy(g.dtype))


@pytest.mark.parametrize("g", [
    TmaGemm(64, 64, 64, "float16", 64, 1),
    TmaGemm(100, 130, 200, "float16", 64, 2),     # tails in M, N and K: TMA zero fill
    TmaGemm(70, 256, 264, "bfloat16", 128, 3),
    TmaGemm(128, 256, 512, "float16", 256, 4),    # more steps than stages: phases wrap
    TmaGemm(200, 130, 296, "float16", 64, 2, 2),  # two consumer warpgroups
], ids=lambda g: f"{g.m}x{g.n}x{g.k}-{g.dtype}-n{g.block_n}-s{g.stages}-c{g.consumers}")
def test_the_tma_gemm_matches_numpy_on_the_simulator(g):
    m = tma_gemm_module(g)
    t = as_target(SM90A)
    verify(m, target=t)
    a, b = _inputs(g)
    c = _empty_c(g)
    with t:
        run(m, [a, b, c])
    want = tma_gemm_reference(a, b, g.dtype)
    assert np.abs(_wide(c, g.dtype) - want).max() <= _tolerance(want, g.dtype)


@pytest.mark.parametrize("g,match", [
    (TmaGemm(64, 64, 64, "float32"), "float16 or bfloat16"),
    (TmaGemm(64, 64, 64, block_n=96), "64, 128 or 256"),
    (TmaGemm(64, 64, 60), "multiple of 8"),
    (TmaGemm(64, 64, 64, stages=9), "1-8"),
    (TmaGemm(64, 64, 64, block_n=256, stages=8), "shared memory"),
    (TmaGemm(64, 64, 64, consumers=3), "1 or 2 warpgroups"),
])
def test_the_tma_gemm_refuses_what_it_cannot_build(g, match):
    with pytest.raises(ValueError, match=match):
        tma_gemm_module(g)


def test_the_gemm_ptx_holds_the_protocol():
    from ptxforge.backend_ptx.compile import compile_kernel

    k = tma_gemm_module(TmaGemm(4096, 4096, 4096, "float16", 128, 4)).kernels()[0]
    ptx = compile_kernel(k, SM90A, stop_after="ptx").get_source("ptx")
    assert ptx.count("cp.async.bulk.tensor.2d") == 2  # A's box and B's
    assert ptx.count("wgmma.mma_async") == 4  # the four k16 steps of a stage
    assert ".param .align 64 .b8 tma_gemm_kernel0_param_1[128]" in ptx
    assert ".local" not in ptx


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas is not installed")
@pytest.mark.parametrize("g", [TmaGemm(4096, 4096, 4096, "float16", 128, 4),
                               TmaGemm(4096, 4096, 4096, "bfloat16", 256, 4, 2)],
                         ids=["n128-s4-c1", "n256-s4-c2"])
def test_ptxas_assembles_the_tma_gemm_without_spills(g):
    from ptxforge.backend_ptx.compile import compile_kernel

    ck = compile_kernel(tma_gemm_module(g).kernels()[0], SM90A, stop_after="cubin",
                        assembler="ptxas")
    assert ck.cubin and not ck.resources.spills
    assert ck.resources.registers * 128 * (g.consumers + 1) <= 65536
    assert ".local" not in ck.get_source("ptx")  # the accumulators stay in registers


# -- on a GPU ----------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.sanitize
@pytest.mark.parametrize("g", [
    TmaGemm(100, 130, 200, "float16", 64, 2),
    TmaGemm(70, 256, 264, "bfloat16", 128, 3),
    TmaGemm(512, 768, 1024, "float16", 128, 4),
    TmaGemm(1000, 1000, 1000, "bfloat16", 256, 3),
    TmaGemm(1000, 1000, 1000, "float16", 128, 6, 2),
    TmaGemm(2048, 2048, 2048, "bfloat16", 256, 4, 2),
], ids=lambda g: f"{g.m}x{g.n}x{g.k}-{g.dtype}-n{g.block_n}-s{g.stages}-c{g.consumers}")
def test_the_tma_gemm_on_the_gpu(g):
    from ptxforge.backend_ptx import array, compile_module, cuda, empty

    dev = cuda(0)
    if not dev.target.has_wgmma:
        pytest.skip(f"wgmma and TMA need sm_90a, this GPU is {dev.sm}")
    loaded = compile_module(tma_gemm_module(g), SM90A).load(dev)
    a, b = _inputs(g, 1)
    c = empty((g.m, g.n), g.dtype, dev)
    loaded(array(a, dev, g.dtype), array(b, dev, g.dtype), c)
    want = tma_gemm_reference(a, b, g.dtype)
    assert np.abs(_wide(c.numpy(), g.dtype) - want).max() <= _tolerance(want, g.dtype)


def test_a_copy_over_a_stage_a_running_wgmma_reads_is_refused():
    # waiting for all but the newest wgmma group lets stage 0's reads run on while the
    # producer (first in each step) refills it: the copy must wait for them
    from ptxforge.backend_sim.wgmma import WgmmaProtocolError
    from ptxforge.ir.stmt import WgmmaSync, map_stmt

    g = TmaGemm(64, 64, 256, "float16", 64, 1)
    m = tma_gemm_module(g)
    k = m.kernels()[0]
    late = map_stmt(k.body, fstmt=lambda s: WgmmaSync("wait", 1) if isinstance(
        s, WgmmaSync) and s.op == "wait" else None)
    m = m.with_function(k.replace(body=late))
    a, b = _inputs(g)
    with as_target(SM90A), pytest.raises(WgmmaProtocolError, match="while a wgmma not yet"):
        run(m, [a, b, _empty_c(g)])


def test_a_wgmma_on_a_stage_whose_copy_was_not_waited_for_is_refused():
    from ptxforge.backend_sim.errors import SimRaceError
    from ptxforge.ir.stmt import Seq, map_stmt
    from ptxforge.ir.stmt_tma import MbarrierWait

    g = TmaGemm(64, 64, 128, "float16", 64, 2)
    m = tma_gemm_module(g)
    k = m.kernels()[0]
    # the consumers' wait on ``full`` dropped (the producer's on ``empty`` kept)
    body = map_stmt(k.body, fstmt=lambda s: Seq([]) if isinstance(s, MbarrierWait)
                    and s.barrier.name == "full" else None)
    m = m.with_function(k.replace(body=body))
    a, b = _inputs(g)
    with as_target(SM90A), pytest.raises(SimRaceError, match="before the wgmma"):
        run(m, [a, b, _empty_c(g)])
