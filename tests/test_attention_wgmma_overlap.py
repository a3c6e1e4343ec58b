"""The overlapped register form of the wgmma attention kernel (``overlap="intra"``: the
next tile's ``Q K^T`` into a second score accumulator and the previous tile's ``P V`` in
flight during the softmax): the simulator against numpy (odd lengths, one to seven key
tiles, causal, head dims 64, 80 and 128, fp16 and bf16, one and two warpgroups, GQA with a
padding mask and a fully masked row, additive masks), the rescaling of the output, the
protocol (each wait, fence and the step's barrier dropped), the rules, the candidates
(never the default chooser's), the step's text and the sketch, PTX for sm_90a and ptxas;
on a GPU (``gpu``/``sanitize``) against numpy."""

from __future__ import annotations

import re

import numpy as np
import pytest
from ptxforge import backend_sim
from ptxforge.backend_ptx.assemble import find_ptxas
from ptxforge.backend_sim.errors import SimRaceError
from ptxforge.backend_sim.wgmma import WgmmaProtocolError
from ptxforge.graph.opdefs.elemwise import cast_array
from ptxforge.ir.stmt import Barrier, Module, Seq, WgmmaSync, map_stmt
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
from ptxforge.ops.schedules.attention.kernel_wgmma_overlap import OverlappedKernel
from ptxforge.ops.schedules.attention.knobs import registers_estimate, shared_layout
from ptxforge.ops.schedules.attention.knobs_wgmma import overlap_candidates
from ptxforge.ops.testing import widen
from ptxforge.target import as_target

from .test_attention_wgmma import _check, _data, _ramp_problem
from .test_attention_wgmma_registers import _register_hazards

RNG = np.random.default_rng(93)
H100 = as_target("cuda -arch=sm_90a")


def ov(warps=4, block_kv=64) -> AttentionConfig:
    return AttentionConfig(warps, block_kv, 2, "wgmma", "registers", "registers", "intra")


# (q_len, kv_len, head_dim, v_dim, dtype, causal, config): 1, 2, 3 (odd: the loop's second
# step guarded), 4 and 7 key tiles
CASES = [
    (1, 1, 64, 64, "float16", False, ov(4)),
    (17, 130, 64, 64, "float16", False, ov(4)),
    (64, 200, 128, 128, "bfloat16", True, ov(4)),
    (130, 130, 128, 128, "float16", True, ov(8)),
    (64, 256, 80, 64, "bfloat16", False, ov(4)),
    (130, 420, 64, 128, "float16", True, ov(8)),
    (64, 100, 64, 64, "float16", True, ov(4)),
    (130, 384, 64, 64, "bfloat16", True, ov(8, 128)),
    (64, 300, 64, 64, "float16", False, ov(4, 128)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"L{c[0]}-S{c[1]}-d{c[2]}v{c[3]}-"
                         f"{c[4]}{'-causal' if c[5] else ''}-{c[6].warps}w{c[6].block_kv}")
def test_overlap_matches_numpy(case):
    lq, s, e, ev, dtype, causal, cfg = case
    _check(AttentionWorkload(1, 2, 2, lq, s, e, ev, dtype, causal), cfg)


def test_grouped_query_with_a_padding_mask_and_a_fully_masked_row():
    m = RNG.random((2, 1, 17, 150)) > 0.3
    m[1, ..., 40:] = False
    m[0, 0, 3] = False  # every key of a row dropped: zeros
    w = AttentionWorkload(2, 4, 2, 17, 150, 64, 64, "float16", True,
                          mask=AttentionMask(m.shape, "bool"))
    _check(w, ov(4), m)


@pytest.mark.parametrize("mdt", ["float32", "float16"])
def test_additive_masks(mdt):
    m = cast_array(RNG.standard_normal((1, 2, 33, 165)) * 2, mdt)
    w = AttentionWorkload(1, 2, 1, 33, 165, 128, 128, "bfloat16", False, 0.2,
                          AttentionMask(m.shape, mdt))
    _check(w, ov(4), m)


def test_the_bshd_layout_and_views_of_one_combined_tensor():
    # whole tiles, so the copies take their constant offsets, in the [B, L, H, E] layout
    # and through the views of a combined projection (rows of (Hq + 2 Hkv) E + 8)
    from .test_attention_layout import _run
    from .test_fold_attention_layout_views import _combined

    _run(AttentionWorkload(2, 4, 2, 128, 192, 64, 64, "float16", True, layout="bshd"), ov(4))
    b, lq, hq, hk, e = 2, 128, 2, 1, 64
    base, views, (q, k, v) = _combined(b, lq, hq, hk, e, "bfloat16", pad=8)
    w = AttentionWorkload(b, hq, hk, lq, lq, e, e, "bfloat16", False, layout="bshd",
                          views=views)
    out = cast_array(np.full((b, lq, hq, e), np.nan), "bfloat16")
    backend_sim.run(attention_module(w, ov(4)), [base, base, base, out])
    want = attention_python(q, k, v, None, None, False, dtype="bfloat16", layout="bshd")
    got = widen(out, "bfloat16")
    assert np.abs(got - want).max() <= attention_tolerance("bfloat16") * max(
        1, np.abs(want).max())


def _ramp_error() -> float:
    w, q, k, v = _ramp_problem()
    out = np.full((1, 1, 64, 64), np.nan, np.float16)
    backend_sim.run(attention_module(w, ov(4)), [q, k, v, out])
    want = attention_python(q, k, v, None, 1.0, False)
    return float(np.abs(out.astype(np.float64) - want).max() / max(1, np.abs(want).max()))


def test_growing_maxima_rescale_the_output_registers(monkeypatch):
    assert _ramp_error() <= 4e-3
    # without the rescaling after P V's wait the earlier tiles keep their old scale
    monkeypatch.setattr(OverlappedKernel, "rescale_output", lambda self, tiles: None)
    assert _ramp_error() > 0.05


def _without(mod: Module, drop, in_step: bool = False) -> Module:
    """``mod`` without the statements ``drop`` selects (in the kernels' sequences; with
    ``in_step`` only in the loop's steps, the sequences holding a ``wait_group 1``)."""
    def fs(x):
        if isinstance(x, Seq) and any(drop(y) for y in x.stmts) and (
                not in_step or any(_sync("wait", 1)(y) for y in x.stmts)):
            return Seq([y for y in x.stmts if not drop(y)])
        return None
    funcs = [f.replace(body=map_stmt(f.body, fstmt=fs)) if f.name != "main" else f
             for f in mod.functions.values()]
    return Module(funcs, mod.attrs)


def _sync(op, pending=None):
    return lambda s: isinstance(s, WgmmaSync) and s.op == op and (
        pending is None or s.pending == pending)


@pytest.mark.parametrize("drop,error", [
    # the softmax reads the next scores before their Q K^T is done
    (_sync("wait", 1), "in flight"),
    # the step's wait for P V: the rescaling, the next copies of V or the next step's
    # accumulator fill while P V still runs
    (_sync("wait", 0), "in flight|not yet waited"),
    (_sync("fence"), "no wgmma.fence"),
    (_sync("fence_proxy_async"), "no fence.proxy.async"),
], ids=["wait1", "wait0", "fence", "fence_proxy"])
def test_the_simulator_holds_the_overlap_to_the_wgmma_protocol(drop, error):
    w = AttentionWorkload(1, 1, 1, 17, 260, 64, 64, "float16", False)
    bad = _without(attention_module(w, ov(4)), drop, in_step=True)
    with pytest.raises(WgmmaProtocolError, match=error):
        backend_sim.run(bad, _data(w))


@pytest.mark.parametrize("warps", [4, 8])
def test_the_step_needs_its_barrier(warps):
    # without the loop step's barrier the copies of the next tiles overwrite stages that
    # other threads' (one warpgroup) or the other warpgroup's wgmmas read in the step before
    def fs(x):
        if isinstance(x, Seq) and any(_sync("wait", 1)(y) for y in x.stmts):
            return Seq([y for y in x.stmts if not isinstance(y, Barrier)])
        return None
    w = AttentionWorkload(1, 1, 1, 130, 260, 64, 64, "float16", False)
    mod = attention_module(w, ov(warps))
    funcs = [f.replace(body=map_stmt(f.body, fstmt=fs)) if f.name != "main" else f
             for f in mod.functions.values()]
    with pytest.raises(SimRaceError, match="missing barrier.*cp.async to K_s"):
        backend_sim.run(Module(funcs, mod.attrs), _data(w))


def test_device_ir_prints_and_parses_back():
    from ptxforge.ir.parser import parse_module

    mod = attention_module(AttentionWorkload(1, 2, 1, 40, 170, 80, 128, "float16", True),
                           ov(8))
    text = str(mod)
    assert "S_acc0" in text and "S_acc1" in text
    assert str(parse_module(text)) == text


# -- rules, candidates, the step ---------------------------------------------------------


def test_the_rules_name_what_is_wrong():
    w = AttentionWorkload(1, 16, 16, 4096, 4096, 128, 128)
    check_attention_config(w, ov(4), H100)
    check_attention_config(w, ov(8), H100)
    for cfg, rule in [
        (AttentionConfig(4, 64, 2, "wgmma", "registers", "shared", "intra"),
         "p_operand='registers'"),
        (AttentionConfig(4, 64, 2, "wgmma", "shared", "shared", "intra"), "scores='registers'"),
        (AttentionConfig(4, 64, 2, "mma_sync", overlap="intra"), "mma='wgmma'"),
        (AttentionConfig(4, 64, 1, "wgmma", "registers", "registers", "intra"), "stages=2"),
        (ov(4, 128), "two score accumulators.*block_kv 64"),
        (AttentionConfig(4, 64, 2, "wgmma", "registers", "registers", "inter"),
         "overlap must be one of"),
    ]:
        with pytest.raises(AttentionError, match=rule):
            check_attention_config(w, cfg, H100)
    with pytest.raises(AttentionError, match="sm_90a"):
        check_attention_config(w, ov(4), as_target("cuda -arch=sm_80"))
    # the layout of P in registers (no P_s), the registers of two accumulators
    assert shared_layout(w, ov(4)).total == 80 * 1024  # Q, 2 x K, 2 x V
    # 64 more keys: 32 more registers in each of the two score accumulators
    assert registers_estimate(w, ov(4, 128)) - registers_estimate(w, ov(4)) == 64


def test_candidates_are_kept_from_the_default_chooser():
    w = AttentionWorkload(1, 16, 16, 4096, 4096, 128, 128, "float16", True)
    cands = overlap_candidates(w, H100)
    assert ov(4) in cands and ov(8) in cands and ov(4, 128) not in cands
    assert all(c.overlap == "none" for c in attention_candidates(w, H100))
    assert choose_attention_config(w, H100).overlap == "none"
    assert overlap_candidates(w, as_target("cuda -arch=sm_80")) == []
    assert overlap_candidates(AttentionWorkload(1, 2, 2, 17, 4096, 64, 64), H100) == []


def test_the_step_and_the_sketch_carry_the_knob():
    from ptxforge import te
    from ptxforge.autosched.attention import attention_sketches
    from ptxforge.autosched.search_task import SearchTask
    from ptxforge.ir.compute_dag import ComputeDAG
    from ptxforge.ops.attention import attention
    from ptxforge.ops.schedules.attention.schedule_pass import FusedAttention

    step = FusedAttention(4, 64, 2, True, None, "wgmma", scores="registers",
                          p_operand="registers", overlap="intra")
    assert 'overlap="intra"' in str(step) and step.config == ov(4)
    assert "overlap" not in str(FusedAttention(4, 64, 2, True, None, "wgmma"))
    q = te.placeholder((1, 2, 256, 64), "float16", name="q")
    k = te.placeholder((1, 2, 256, 64), "float16", name="k")
    v = te.placeholder((1, 2, 256, 64), "float16", name="v")
    task = SearchTask(compute_dag=ComputeDAG([q, k, v, attention(q, k, v)]), target=H100)
    (sk,) = attention_sketches(task)
    (slot,) = sk.steps
    picks = [i for i, c in enumerate(slot.configs) if c.overlap == "intra"]
    assert picks and 'overlap="intra"' in sk.pipeline_text((picks[0],))


# -- PTX ---------------------------------------------------------------------------------


def _group_hazards(ptx: str) -> list:
    """Instructions of the PTX that read or write the accumulator registers of a wgmma
    group not yet retired: groups close at ``wgmma.commit_group``, ``wgmma.wait_group N``
    retires all but the newest ``N`` (so after ``wait_group 1`` the scores are free and
    ``P V``'s output is not). Checked in program order within the straight-line code
    between waits (each path of the loop's body is laid out in order)."""
    lines = [x.split("//")[0].strip() for x in ptx.splitlines()]
    found, open_regs, groups = [], set(), []
    for x in lines:
        if "wgmma.mma_async" in x:
            d = re.search(r"\{(%[^}]*)\}", x.split("wgmma.mma_async")[1]).group(1)
            open_regs |= {r.strip() for r in d.split(",")}
        elif "wgmma.commit_group" in x:
            groups.append(open_regs)
            open_regs = set()
        elif "wgmma.wait_group" in x:
            n = int(x.split()[-1].rstrip(";"))
            groups = groups[len(groups) - n:] if n else []
        elif x and not x.startswith(("$", "wgmma.fence", "@", "bra")):
            busy = set().union(*groups) if groups else set()
            if busy & set(re.findall(r"%\w+", x)):
                found.append(x)
    return found


@pytest.mark.parametrize("causal", [False, True])
def test_ptx_issues_both_products_before_the_softmax(causal):
    from ptxforge.backend_ptx import compile_module

    w = AttentionWorkload(1, 16, 16, 4096, 4096, 128, 128, "float16", causal)
    src = compile_module(attention_module(w, ov(4)), H100).get_source("ptx")
    ss = [x for x in src.splitlines() if "wgmma.mma_async" in x and "}, {%r" not in x]
    rs = [x for x in src.splitlines() if "wgmma.mma_async" in x and "}, {%r" in x]
    # Q K^T: 8 wgmmas (head dim 128) for the first tile, each of the loop's two steps and
    # the odd tile left over; P V: 4 RS wgmmas (64 keys) a step and for the last tile
    # (after the odd tile, and where the count is not known one more: an even last tile)
    assert len(ss) == 8 * 4
    assert len(rs) == 4 * 3 + 4 * (2 if causal else 1)
    assert "wgmma.wait_group.sync.aligned \t1" in src
    assert "st.shared" not in src and "ld.shared" not in src and ".local" not in src
    assert _register_hazards(src) == []
    # each thread's copies of a tile at its first copy's addresses plus constants
    assert re.search(r"cp\.async\.cg\.shared\.global \t?\[%rd\d+\+\d+\], \[%rd\d+\+\d+\]",
                     src), "the copies' constant offsets are not folded into their addresses"
    # the softmax after wait_group 1 touches none of P V's output registers
    assert _group_hazards(src) == []
    bad = src.replace("wgmma.wait_group.sync.aligned \t1", "wgmma.wait_group.sync.aligned \t2")
    assert _group_hazards(bad)


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas is not installed")
@pytest.mark.parametrize("cfg,causal", [(ov(4), False), (ov(4), True), (ov(8), True)])
def test_ptxas_assembles_the_overlap_without_spills(cfg, causal):
    from ptxforge.backend_ptx.compile import compile_kernel

    w = AttentionWorkload(1, 16, 16, 4096, 4096, 128, 128, "float16", causal)
    ck = compile_kernel(attention_module(w, cfg).kernels()[0], H100, stop_after="cubin",
                        assembler="ptxas")
    res = ck.resources
    assert not res.spills and res.registers * cfg.threads <= H100.registers_per_block
    assert abs(res.registers - registers_estimate(w, cfg)) <= 40


# -- on a GPU ----------------------------------------------------------------------------

GPU_CASES = [
    AttentionWorkload(1, 4, 2, 130, 130, 128, 128, "float16", True),
    AttentionWorkload(2, 4, 4, 64, 200, 64, 64, "bfloat16", False),
    AttentionWorkload(1, 2, 2, 17, 17, 64, 64, "float16", False),
    AttentionWorkload(1, 2, 2, 1024, 1024, 128, 128, "float16", True),
    AttentionWorkload(1, 2, 2, 1000, 1000, 128, 128, "float16", False),
]


@pytest.mark.gpu
@pytest.mark.sanitize
@pytest.mark.parametrize("w", GPU_CASES, ids=lambda w: f"L{w.q_len}-d{w.head_dim}-{w.dtype}"
                         f"{'-causal' if w.causal else ''}")
def test_overlap_on_the_gpu(w):
    from ptxforge.backend_ptx import array, compile_module, cuda, empty

    dev = cuda(0)
    if not dev.target.has_wgmma:
        pytest.skip(f"wgmma needs a Hopper GPU (sm_90a), this one is {dev.sm}")
    for cfg in (ov(4), ov(8)):
        check_attention_config(w, cfg, dev.target)
        loaded = compile_module(attention_module(w, cfg), H100).load(dev)
        args = _data(w)
        out = empty(args[-1].shape, w.dtype, dev)
        loaded(*[array(a, dev, w.dtype) for a in args[:3]], out)
        want = attention_python(*args[:3], None, w.scale, w.causal, dtype=w.dtype)
        got = widen(out.numpy(), w.dtype)
        assert np.abs(got - want).max() <= attention_tolerance(w.dtype) * max(
            1.0, np.abs(want).max()), cfg
