"""The ping-pong schedule of the wgmma register form (``schedule="pingpong"``: two
warpgroups issuing their products in turns through named barriers): the simulator against
numpy (odd lengths, causal, bool and additive masks with a fully masked row, grouped-query;
the plain form with one and two stages, P in shared memory and in registers, and the
overlapped form), the protocol (the simulator catches a missing first arrival, a missing
turn's arrival and a missing last wait), the rules, the candidates and the step's text,
PTX for sm_90a (the barriers; ptxas: the cooperative twin's registers, no spills); on a GPU
(``gpu``/``sanitize``) against numpy."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from ptxforge import backend_sim
from ptxforge.backend_ptx.assemble import find_ptxas
from ptxforge.backend_sim import SimBarrierError
from ptxforge.graph.opdefs.elemwise import cast_array
from ptxforge.ir.stmt import Barrier, Module, Seq, map_stmt, walk
from ptxforge.ops.attention_testing import attention_python, attention_tolerance
from ptxforge.ops.schedules.attention import (
    AttentionConfig,
    AttentionError,
    AttentionMask,
    AttentionWorkload,
    attention_candidates,
    attention_module,
    check_attention_config,
    choose_attention_config,
)
from ptxforge.ops.schedules.attention.knobs_wgmma import pingpong_candidates
from ptxforge.ops.testing import widen
from ptxforge.target import as_target

from .test_attention_wgmma import _check, _data

RNG = np.random.default_rng(94)
H100 = as_target("cuda -arch=sm_90a")


def pp(block_kv=64, stages=2, p="registers", overlap="none") -> AttentionConfig:
    return AttentionConfig(8, block_kv, stages, "wgmma", "registers", p, overlap, "pingpong")


FORMS = [pp(64, 1, "shared"), pp(64, 2, "shared"), pp(64, 1), pp(64, 2),
         pp(64, 2, overlap="intra"), pp(128, 1)]


@pytest.mark.parametrize("cfg,causal", [(c, i % 2 == 1) for i, c in enumerate(FORMS)] + [
    (pp(64, 2, overlap="intra"), True)], ids=lambda c: f"{c.block_kv}x{c.stages}-"
    f"{c.p_operand}-{c.overlap}" if isinstance(c, AttentionConfig) else str(c))
def test_pingpong_matches_numpy(cfg, causal):
    # 130 query rows: two blocks of 128, the second with 2 live rows; 200 keys: a partial
    # last tile
    _check(AttentionWorkload(1, 2, 1, 130, 200, 64, 64, "float16", causal), cfg)


@pytest.mark.parametrize("cfg", [pp(64, 2), pp(64, 2, overlap="intra")],
                         ids=["plain", "intra"])
def test_masks_and_grouped_query(cfg):
    m = RNG.random((2, 1, 97, 150)) > 0.3
    m[1, ..., 90:] = False
    m[0, 0, 70] = False  # every key of a row of the second warpgroup dropped: zeros
    w = AttentionWorkload(2, 4, 2, 97, 150, 128, 128, "bfloat16", True,
                          mask=AttentionMask(m.shape, "bool"))
    _check(w, cfg, m)
    a = cast_array(RNG.standard_normal((1, 2, 97, 150)) * 2, "float32")
    a[0, 1, 80] = np.finfo(np.float32).min  # a row filled by an exporter: averages the keys
    w = AttentionWorkload(1, 2, 2, 97, 150, 64, 64, "float16", False, 0.2,
                          AttentionMask(a.shape, "float32"))
    args = _data(w, a)
    backend_sim.run(attention_module(w, cfg), args)
    want = attention_python(*args[:3], a, 0.2, False)
    v = args[2].astype(np.float64)
    want[0, 1, 80] = v[0, 1].mean(axis=0)
    got = widen(args[-1], w.dtype)
    assert np.abs(got - want).max() <= attention_tolerance(w.dtype) * max(
        1.0, np.abs(want).max())


# -- the protocol --------------------------------------------------------------------------


def _named(mod: Module) -> list:
    k = mod.kernels()[0]
    return [s for s in walk(k.body) if isinstance(s, Barrier) and s.named]


def _without(mod: Module, pick) -> Module:
    """``mod`` without the named barriers ``pick(index, barrier, count)`` chooses (their
    index in the kernel's walk, of ``count``)."""
    order = {id(b): i for i, b in enumerate(_named(mod))}

    def fs(x):
        if isinstance(x, Barrier) and x.named and pick(order[id(x)], x, len(order)):
            return Seq([])
        return None
    funcs = [f.replace(body=map_stmt(f.body, fstmt=fs)) if f.name != "main" else f
             for f in mod.functions.values()]
    return Module(funcs, mod.attrs)


W = AttentionWorkload(1, 1, 1, 128, 200, 64, 64, "float16", False)


@pytest.mark.parametrize("cfg", [pp(64, 2), pp(64, 2, overlap="intra")],
                         ids=["plain", "intra"])
def test_the_turns_are_in_the_kernel(cfg):
    bars = _named(attention_module(W, cfg))
    assert {(b.id, b.threads, b.arrive) for b in bars} == {
        (1, 256, False), (2, 256, False), (1, 256, True), (2, 256, True)}
    twin = replace(cfg, schedule="cooperative")
    assert _named(attention_module(W, twin)) == []
    assert str(attention_module(W, twin)) != str(attention_module(W, cfg))


@pytest.mark.parametrize("cfg", [pp(64, 2), pp(64, 2, overlap="intra")],
                         ids=["plain", "intra"])
@pytest.mark.parametrize("drop,error", [
    # warpgroup 1's arrival before the loop: warpgroup 0 waits for its first turn forever
    (lambda i, b, n: b.arrive and b.id == 1 and i == 0, r"waits at bar.sync 1 \(128 of 256"),
    # warpgroup 1's arrivals after its turns: warpgroup 0's second turn never comes
    (lambda i, b, n: b.arrive and b.id == 1 and i > 0, r"waits at bar.sync 1"),
    # warpgroup 0's arrivals: warpgroup 1 waits for its first turn forever
    (lambda i, b, n: b.arrive and b.id == 2, r"waits at bar.sync 2"),
    # warpgroup 0's wait after the loop: warpgroup 1's last arrival left open
    (lambda i, b, n: not b.arrive and b.id == 1 and i == n - 1,
     r"barrier 1 of block 0 ends the kernel with 128 of 256 threads arrived"),
])
def test_the_simulator_catches_a_broken_protocol(cfg, drop, error):
    with pytest.raises(SimBarrierError, match=error):
        backend_sim.run(_without(attention_module(W, cfg), drop), _data(W))


# -- rules, candidates, the step -----------------------------------------------------------


def test_the_rules_name_what_is_wrong():
    w = AttentionWorkload(1, 16, 16, 4096, 4096, 128, 128)
    for cfg in FORMS:
        check_attention_config(w, cfg, H100)
    for cfg, rule in [
        (AttentionConfig(4, 64, 2, "wgmma", "registers", schedule="pingpong"), "warps=8"),
        (AttentionConfig(8, 64, 2, "wgmma", "shared", schedule="pingpong"),
         "scores='registers'"),
        (AttentionConfig(8, 64, 2, schedule="pingpong"), "mma='wgmma'"),
        (AttentionConfig(8, 64, 2, "wgmma", "registers", schedule="turns"),
         "schedule must be one of"),
    ]:
        with pytest.raises(AttentionError, match=rule):
            check_attention_config(w, cfg, H100)
    with pytest.raises(AttentionError, match="sm_90a"):
        check_attention_config(w, pp(), as_target("cuda -arch=sm_80"))


def test_candidates_are_kept_from_the_default_chooser():
    w = AttentionWorkload(1, 16, 16, 4096, 4096, 128, 128, "float16", True)
    cands = pingpong_candidates(w, H100)
    assert pp(64, 2) in cands and pp(64, 2, overlap="intra") in cands
    assert all(c.schedule == "pingpong" and c.warps == 8 for c in cands)
    assert all(c.schedule == "cooperative" for c in attention_candidates(w, H100))
    assert choose_attention_config(w, H100).schedule == "cooperative"
    assert pingpong_candidates(AttentionWorkload(1, 2, 2, 64, 4096, 64, 64), H100) == []
    assert pingpong_candidates(w, as_target("cuda -arch=sm_80")) == []


def test_the_step_carries_the_knob():
    from ptxforge.ops.schedules.attention.schedule_pass import FusedAttention

    step = FusedAttention(8, 64, 2, True, None, "wgmma", scores="registers",
                          p_operand="registers", schedule="pingpong")
    assert 'schedule="pingpong"' in str(step) and step.config == pp(64, 2)
    assert "schedule" not in str(FusedAttention(8, 64, 2, True, None, "wgmma"))
    assert pp().to_dict()["schedule"] == "pingpong"
    assert "schedule" not in replace(pp(), schedule="cooperative").to_dict()


def test_device_ir_prints_and_parses_back():
    from ptxforge.ir.parser import parse_module

    text = str(attention_module(W, pp(64, 2, overlap="intra")))
    assert "barrier_arrive(2, 256)" in text and "barrier(1, 256)" in text
    assert str(parse_module(text)) == text


# -- PTX -----------------------------------------------------------------------------------


def test_ptx_has_the_turns_and_ptxas_no_spills():
    from ptxforge.backend_ptx.compile import compile_kernel

    w = AttentionWorkload(1, 16, 16, 4096, 4096, 128, 128, "float16", False)
    cfg = pp(64, 2)
    stop = "cubin" if find_ptxas() is not None else "ptx"
    ks = [compile_kernel(attention_module(w, c).kernels()[0], H100, stop_after=stop,
                         assembler="ptxas") for c in (cfg, replace(cfg, schedule="cooperative"))]
    src = " ".join(ks[0].get_source("ptx").split())
    for op in ("bar.sync 1, 256;", "bar.sync 2, 256;", "bar.arrive 1, 256;",
               "bar.arrive 2, 256;"):
        assert op in src, op
    if stop == "cubin":  # ptxas: no spills, the turns cost no registers
        res = [k.resources for k in ks]
        assert not res[0].spills and res[0].registers * cfg.threads <= H100.registers_per_block
        assert abs(res[0].registers - res[1].registers) <= 8


# -- on a GPU ------------------------------------------------------------------------------

GPU_CASES = [
    AttentionWorkload(1, 4, 2, 130, 130, 128, 128, "float16", True),
    AttentionWorkload(2, 4, 4, 200, 200, 64, 64, "bfloat16", False),
    AttentionWorkload(1, 2, 2, 1024, 1024, 128, 128, "float16", True),
    AttentionWorkload(1, 2, 2, 1000, 1000, 128, 128, "float16", False),
]


@pytest.mark.gpu
@pytest.mark.sanitize
@pytest.mark.parametrize("w", GPU_CASES, ids=lambda w: f"L{w.q_len}-d{w.head_dim}-{w.dtype}"
                         f"{'-causal' if w.causal else ''}")
def test_pingpong_on_the_gpu(w):
    from ptxforge.backend_ptx import array, compile_module, cuda, empty

    dev = cuda(0)
    if not dev.target.has_wgmma:
        pytest.skip(f"wgmma needs a Hopper GPU (sm_90a), this one is {dev.sm}")
    for cfg in (pp(64, 2), pp(64, 2, overlap="intra"), pp(64, 1, "shared")):
        check_attention_config(w, cfg, dev.target)
        loaded = compile_module(attention_module(w, cfg), H100).load(dev)
        args = _data(w)
        out = empty(args[-1].shape, w.dtype, dev)
        loaded(*[array(a, dev, w.dtype) for a in args[:3]], out)
        want = attention_python(*args[:3], None, w.scale, w.causal, dtype=w.dtype)
        got = widen(out.numpy(), w.dtype)
        assert np.abs(got - want).max() <= attention_tolerance(w.dtype) * max(
            1.0, np.abs(want).max()), cfg
