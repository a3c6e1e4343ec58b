"""The wgmma form's output through the scores' float32 tile in chunks as wide as the keys
(a flush where a row's maximum moves, and the epilogue): the tile no wider than the key
tile, which fits 8 warps x 64 keys x 2 stages (218 KiB at head dim 128) and head dim 256;
on the simulator against numpy with a flush every tile, and on a GPU (``gpu``)."""

from __future__ import annotations

import numpy as np
import pytest

from ptxforge import backend_sim
from ptxforge.graph.opdefs.elemwise import cast_array
from ptxforge.ops.attention_testing import attention_python, attention_tolerance
from ptxforge.ops.schedules.attention import (
    AttentionConfig,
    AttentionWorkload,
    attention_candidates,
    attention_module,
    check_attention_config,
)
from ptxforge.ops.schedules.attention.knobs_wgmma import output_chunk, wgmma_layout
from ptxforge.ops.testing import widen
from ptxforge.target import as_target

RNG = np.random.default_rng(11)
H100 = as_target("cuda -arch=sm_90a")


def wg(warps, block_kv, stages) -> AttentionConfig:
    return AttentionConfig(warps, block_kv, stages, "wgmma")


def test_the_scores_tile_is_as_wide_as_the_keys():
    w = AttentionWorkload(1, 16, 16, 4096, 4096, 128, 128)
    assert output_chunk(w, wg(8, 64, 2)) == 64
    assert output_chunk(w, wg(4, 128, 1)) == 128
    assert output_chunk(AttentionWorkload(1, 1, 1, 64, 64, 64, 192), wg(4, 128, 1)) == 64
    lay = wgmma_layout(w, wg(8, 64, 2))
    assert lay.s_ld == 64 + 8 and lay.total == 218 * 1024
    check_attention_config(w, wg(8, 64, 2), H100)
    assert wg(8, 64, 2) in attention_candidates(w, H100)


def _ramp(lq: int, s: int, e: int):
    """Scores rising by about 10 per tile of 64 keys (past the rescale threshold): every
    tile flushes the output."""
    w = AttentionWorkload(1, 2, 2, lq, s, e, e, "float16", False, 1.0)
    q = np.full((1, 2, lq, e), 8.0 / e, np.float16)
    ramp = np.arange(s) // 64 * 1.25 + RNG.uniform(0, 0.05, s)
    k = np.broadcast_to(ramp[None, None, :, None], (1, 2, s, e)).astype(np.float16)
    v = RNG.standard_normal((1, 2, s, e)).astype(np.float16)
    return w, q, k, v


@pytest.mark.parametrize("cfg,e", [(wg(8, 64, 2), 128), (wg(8, 64, 1), 128),
                                   (wg(4, 64, 3), 128), (wg(4, 64, 1), 256)],
                         ids=["8x64x2", "8x64x1", "4x64x3", "4x64x1-d256"])
def test_flushes_and_the_epilogue_in_chunks_match_numpy(cfg, e):
    w, q, k, v = _ramp(130, 200, e)
    out = np.full((1, 2, 130, e), np.nan, np.float16)
    backend_sim.run(attention_module(w, cfg), [q, k, v, out])
    want = attention_python(q, k, v, None, 1.0, False)
    err = np.abs(out.astype(np.float64) - want).max() / max(1, np.abs(want).max())
    assert err <= attention_tolerance("float16"), err


def test_random_problem_with_two_warpgroups_and_two_stages():
    w = AttentionWorkload(2, 4, 2, 150, 190, 128, 128, "bfloat16", True)
    sh = w.shapes()
    q, k, v = (cast_array(RNG.standard_normal(sh[n]), "bfloat16") for n in "qkv")
    out = cast_array(np.full(sh["out"], np.nan), "bfloat16")
    backend_sim.run(attention_module(w, wg(8, 64, 2)), [q, k, v, out])
    want = attention_python(q, k, v, None, None, True, dtype="bfloat16")
    got = widen(out, "bfloat16")
    assert np.abs(got - want).max() <= attention_tolerance("bfloat16") * max(
        1, np.abs(want).max())


@pytest.mark.gpu
@pytest.mark.sanitize
@pytest.mark.parametrize("cfg,e", [(wg(8, 64, 2), 128), (wg(4, 64, 1), 256)],
                         ids=["8x64x2", "4x64x1-d256"])
def test_chunked_configurations_on_the_gpu(cfg, e):
    from ptxforge.backend_ptx import array, compile_module, cuda, empty

    dev = cuda(0)
    if not dev.target.has_wgmma:
        pytest.skip(f"wgmma needs a Hopper GPU (sm_90a), this one is {dev.sm}")
    for w, q, k, v in (_ramp(130, 200, e),
                       (AttentionWorkload(1, 4, 2, 300, 300, e, e, "float16", True),
                        None, None, None)):
        if q is None:
            sh = w.shapes()
            q, k, v = (cast_array(RNG.standard_normal(sh[n]), "float16") for n in "qkv")
        loaded = compile_module(attention_module(w, cfg), H100).load(dev)
        out = empty(w.shapes()["out"], "float16", dev)
        loaded(*[array(a, dev, "float16") for a in (q, k, v)], out)
        want = attention_python(q, k, v, None, w.scale, w.causal)
        got = out.numpy().astype(np.float64)
        assert np.abs(got - want).max() <= attention_tolerance("float16") * max(
            1.0, np.abs(want).max()), (w, cfg)


@pytest.mark.parametrize("w,cfg", [
    (AttentionWorkload(1, 1, 1, 128, 128, 128, 128, "float16", True), wg(8, 64, 2)),
    (AttentionWorkload(1, 1, 1, 64, 64, 256, 256, "float16", False), wg(4, 64, 1))],
    ids=["8x64x2", "4x64x1-d256"])
def test_the_chunks_are_conflict_free(w, cfg):
    from ptxforge.ops.schedules.attention.banks import shared_access_ways

    acc = shared_access_ways(attention_module(w, cfg).kernels()[0])
    assert acc and all(a.ways == 1 for a in acc), [a for a in acc if a.ways != 1]
    # the output accumulator's chunks: stored as pairs into the scores' tile, added into
    # the output tile
    assert any(a.buffer == "S_s" and a.kind == "store" and a.how != "scalar" for a in acc)
    assert any(a.buffer == "O_s" and a.kind == "store" and a.how == "scalar" for a in acc)
