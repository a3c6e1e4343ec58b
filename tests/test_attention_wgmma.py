"""The fused attention kernel on wgmma (``mma="wgmma"``, sm_90a): the simulator against
numpy (sequence lengths 1, 17, 64, 130; head dims 64, 80 and 128; causal, padding and
additive masks; grouped-query; fp16 and bf16; one and two warpgroups, ``block_kv`` 64 and
128, one and two stages), the flush of the output where a row's maximum moves, the wgmma
protocol, PTX for sm_90a, the rules of the knob and the chooser's preference; on a GPU
(``gpu``/``sanitize``) the chosen wgmma kernels against numpy."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from ptxforge import backend_sim, te
from ptxforge.backend_ptx.assemble import find_ptxas
from ptxforge.backend_sim.wgmma import WgmmaProtocolError
from ptxforge.driver import build_attention
from ptxforge.graph.opdefs.elemwise import cast_array
from ptxforge.ir.stmt import Module, Seq, WgmmaSync, map_stmt
from ptxforge.ir.verify import verify
from ptxforge.ops.attention import attention
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
from ptxforge.ops.schedules.attention.kernel_wgmma import WgmmaKernel
from ptxforge.ops.testing import widen
from ptxforge.target import as_target

RNG = np.random.default_rng(90)
H100 = as_target("cuda -arch=sm_90a")


def wg(warps=4, block_kv=64, stages=2) -> AttentionConfig:
    return AttentionConfig(warps, block_kv, stages, "wgmma")


def _data(w: AttentionWorkload, mask=None, scale=1.0):
    sh = w.shapes()
    q, k, v = (cast_array(RNG.standard_normal(sh[n]) * scale, w.dtype) for n in "qkv")
    out = cast_array(np.full(sh["out"], np.nan), w.dtype)  # a row never stored shows
    return [q, k, v] + ([mask] if mask is not None else []) + [out]


def _check(w: AttentionWorkload, cfg: AttentionConfig, mask=None, mod=None):
    check_attention_config(w, cfg, H100)
    mod = mod or attention_module(w, cfg)
    verify(mod, target=H100)
    args = _data(w, mask)
    backend_sim.run(mod, args)
    want = attention_python(*args[:3], mask, w.scale, w.causal, dtype=w.dtype)
    got = widen(args[-1], w.dtype)
    assert np.isfinite(got).all()
    err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
    assert err <= attention_tolerance(w.dtype), (w, cfg, err)


# (q_len, kv_len, head_dim, v_dim, dtype, causal, config)
CASES = [
    (1, 1, 64, 64, "float16", False, wg(4, 64, 1)),
    (17, 17, 128, 128, "bfloat16", True, wg(4, 64, 2)),
    (64, 130, 128, 128, "float16", False, wg(4, 128, 1)),
    (64, 64, 80, 64, "bfloat16", True, wg(4, 64, 2)),
    (130, 130, 128, 128, "bfloat16", True, wg(8, 64, 1)),
    (130, 17, 64, 64, "float16", False, wg(8, 128, 2)),
    (64, 130, 64, 64, "float16", False, wg(4, 64, 3)),
    (130, 200, 128, 128, "bfloat16", True, wg(4, 64, 3)),
    (1, 1, 64, 64, "float16", False, wg(4, 64, 3)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"L{c[0]}-S{c[1]}-d{c[2]}v{c[3]}-"
                         f"{c[4]}{'-causal' if c[5] else ''}-{c[6].warps}w{c[6].block_kv}"
                         f"s{c[6].stages}")
def test_wgmma_attention_matches_numpy(case):
    lq, s, e, ev, dtype, causal, cfg = case
    _check(AttentionWorkload(1, 2, 2, lq, s, e, ev, dtype, causal), cfg)


def test_grouped_query_with_a_padding_mask_and_a_fully_masked_row():
    m = RNG.random((2, 1, 17, 70)) > 0.3
    m[1, ..., 40:] = False
    m[0, 0, 3] = False  # every key of a row dropped: zeros
    w = AttentionWorkload(2, 4, 2, 17, 70, 64, 64, "float16", True,
                          mask=AttentionMask(m.shape, "bool"))
    _check(w, wg(4, 64, 2), m)


def test_additive_mask_bf16():
    m = cast_array(RNG.standard_normal((1, 2, 33, 65)) * 2, "float32")
    w = AttentionWorkload(1, 2, 1, 33, 65, 128, 128, "bfloat16", False, 0.2,
                          AttentionMask(m.shape, "float32"))
    _check(w, wg(4, 64, 1), m)


def check_random_problem(rng, pick) -> None:
    """A random problem (lengths, head dims, heads, dtype, causal, scale, mask) run on the
    simulator with a random legal candidate that ``pick`` keeps, on inputs of standard
    deviation 2, against the numpy reference."""
    lq, s = (int(x) for x in rng.integers(33, 150, 2))
    e, ev = int(rng.choice([64, 80, 128])), int(rng.choice([64, 128]))
    hk, g, b = int(rng.choice([1, 2])), int(rng.choice([1, 2])), int(rng.choice([1, 2]))
    dtype = str(rng.choice(["float16", "bfloat16"]))
    shape = [(b, 1, 1, s), (lq, s)][int(rng.integers(2))]
    kind = int(rng.integers(3))
    mask = marr = None
    if kind:
        mdt = "bool" if kind == 1 else "float16"
        marr = rng.random(shape) > 0.3 if kind == 1 else cast_array(
            rng.standard_normal(shape), mdt)
        mask = AttentionMask(shape, mdt)
    w = AttentionWorkload(b, hk * g, hk, lq, s, e, ev, dtype, bool(rng.integers(2)),
                          None if rng.integers(2) else 0.2, mask)
    cands = [c for c in attention_candidates(w, H100) if pick(c)]
    cfg = cands[int(rng.integers(len(cands)))]
    sh = w.shapes()
    args = [cast_array(rng.standard_normal(sh[n]) * 2, dtype) for n in "qkv"]
    out = cast_array(np.full(sh["out"], np.nan), dtype)
    backend_sim.run(attention_module(w, cfg), [*args] + ([marr] if kind else []) + [out])
    want = attention_python(*args, marr, w.scale, w.causal, dtype=dtype)
    got = widen(out, dtype)
    assert np.isfinite(got).all(), (w, cfg)
    err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
    assert err <= attention_tolerance(dtype), (w, cfg, err)


@pytest.mark.parametrize("seed", [0, 1])
def test_random_workloads_and_wgmma_configurations(seed):
    check_random_problem(np.random.default_rng(100 + seed), lambda c: c.mma == "wgmma")


def _ramp_problem():
    """Scores rising by about 10 per key tile of 64 (beyond the rescale threshold of 8):
    every tile moves the rows' maxima and flushes the output."""
    w = AttentionWorkload(1, 1, 1, 64, 200, 64, 64, "float16", False, 1.0)
    q = np.full((1, 1, 64, 64), 0.125, np.float16)
    ramp = (np.arange(200) // 64 * 1.25 + RNG.uniform(0, 0.05, 200)).astype(np.float16)
    k = np.broadcast_to(ramp[None, None, :, None], (1, 1, 200, 64)).astype(np.float16)
    v = RNG.standard_normal((1, 1, 200, 64)).astype(np.float16)
    return w, q, k, v


def _ramp_error(stages: int) -> float:
    w, q, k, v = _ramp_problem()
    out = np.full((1, 1, 64, 64), np.nan, np.float16)
    backend_sim.run(attention_module(w, wg(4, 64, stages)), [q, k, v, out])
    want = attention_python(q, k, v, None, 1.0, False)
    return float(np.abs(out.astype(np.float64) - want).max() / max(1, np.abs(want).max()))


@pytest.mark.parametrize("stages", [2, 3])
def test_growing_maxima_flush_the_output(monkeypatch, stages):
    assert _ramp_error(stages) <= 4e-3
    # without the flush the earlier tiles' output keeps its old scale: wrong numbers
    monkeypatch.setattr(WgmmaKernel, "flush", lambda self: Seq([]))
    assert _ramp_error(stages) > 0.05


def _drop(mod: Module, op: str) -> Module:
    """``mod`` without its ``WgmmaSync(op)`` steps."""
    def fs(x):
        if isinstance(x, Seq) and any(isinstance(y, WgmmaSync) and y.op == op
                                      for y in x.stmts):
            return Seq([y for y in x.stmts if not (isinstance(y, WgmmaSync) and y.op == op)])
        return None
    funcs = [f.replace(body=map_stmt(f.body, fstmt=fs)) if f.name != "main" else f
             for f in mod.functions.values()]
    return Module(funcs, mod.attrs)


@pytest.mark.parametrize("op,error,stages", [
    ("fence", "no wgmma.fence", 2), ("fence_proxy_async", "no fence.proxy.async", 2),
    ("wait", "not yet waited|in flight", 2), ("wait", "not yet waited|in flight", 3)])
def test_the_simulator_holds_the_kernel_to_the_wgmma_protocol(op, error, stages):
    w = AttentionWorkload(1, 1, 1, 17, 200, 64, 64, "float16", False)
    bad = _drop(attention_module(w, wg(4, 64, stages)), op)
    with pytest.raises(WgmmaProtocolError, match=error):
        backend_sim.run(bad, _data(w))


def test_device_ir_prints_and_parses_back():
    from ptxforge.ir.parser import parse_module

    mod = attention_module(AttentionWorkload(1, 2, 1, 40, 70, 80, 128, "float16", True),
                           wg(8, 128, 2))
    text = str(mod)
    assert '"swizzle": {"K_s": 3, "P_s": 3, "Q_s": 3, "V_s": 3}' in text
    assert str(parse_module(text)) == text


def test_build_attention_takes_wgmma_on_sm_90a():
    q = te.placeholder((1, 2, 70, 64), "float16", name="q")
    k = te.placeholder((1, 2, 90, 64), "float16", name="k")
    v = te.placeholder((1, 2, 90, 64), "float16", name="v")
    out = attention(q, k, v, causal=True)
    mod = build_attention(out, "sim -arch=sm_90a")
    assert "wgmma_m64n" in mod.get_source("ir")
    args = _data(AttentionWorkload(1, 2, 2, 70, 90, 64, 64, "float16", True))
    mod(*args)
    want = attention_python(*args[:3], None, None, True)
    assert np.abs(args[-1].astype(np.float64) - want).max() <= 4e-3 * max(
        1, np.abs(want).max())


def test_a_graph_attention_compiles_to_the_wgmma_kernel_on_sm_90a():
    from ptxforge import graph
    from ptxforge.graph import optimize
    from ptxforge.graph.fused import distinct_functions
    from ptxforge.graph.ir import Var, graph_from_outputs
    from ptxforge.graph.opdefs.attention import attention as nn_attention
    from ptxforge.graph.opdefs.attention import fused_attention_module
    from ptxforge.graph.passes.base import GraphPassContext

    q, k, v = (Var("q", (1, 4, 48, 64), "float16"), Var("k", (1, 2, 80, 64), "float16"),
               Var("v", (1, 2, 80, 64), "float16"))
    net = graph_from_outputs(nn_attention(q, k, v, None, is_causal=True))
    with GraphPassContext(config={"fused_attention": True}):
        fused = optimize(net)
    funcs, _ = distinct_functions(fused)
    mods = [m for m in (fused_attention_module(f, "sim -arch=sm_90a") for f in funcs) if m]
    assert len(mods) == 1 and "wgmma_m64n64k16" in str(mods[0])
    feeds = {n.name: cast_array(RNG.standard_normal(n.shape), "float16") for n in (q, k, v)}
    want = graph.evaluate(net, feeds).astype(np.float64)
    out = np.full(want.shape, np.nan, np.float16)
    backend_sim.run(mods[0], [feeds["q"], feeds["k"], feeds["v"], out])
    assert np.abs(out.astype(np.float64) - want).max() <= 4e-3 * max(1, np.abs(want).max())


# -- the knob ----------------------------------------------------------------------------


def test_wgmma_rules_name_what_is_wrong():
    w = AttentionWorkload(1, 16, 16, 512, 512, 128, 128)
    for cfg, target, rule in [
        (wg(), as_target("cuda -arch=sm_80"), "needs sm_90a"),
        (wg(), as_target("cuda -arch=sm_90"), "needs sm_90a"),
        (wg(2, 64, 2), H100, "warps must be one of"),
        (wg(4, 32, 2), H100, "block_kv must be one of"),
        (wg(8, 128, 2), H100, "shared memory"),
        (AttentionConfig(4, 64, 2, "tcgen05"), H100, "mma must be one of"),
        (AttentionConfig(4, 64, 3), H100, "stages must be one of"),
        (wg(4, 64, 4), H100, "stages in"),
    ]:
        with pytest.raises(AttentionError, match=rule):
            check_attention_config(w, cfg, target)
    # head dim 256 fits an H100 with the smallest configuration (190 KiB: the output
    # goes through the scores' tile in chunks as wide as the keys); on a GPU with less
    # shared memory no wgmma configuration does
    wide = AttentionWorkload(1, 1, 1, 128, 128, 256, 256)
    check_attention_config(wide, wg(4, 64, 1), H100)
    small = copy.copy(H100)
    object.__setattr__(small, "max_shared_memory_per_block_optin", 160 * 1024)
    with pytest.raises(AttentionError, match="no wgmma configuration fits"):
        check_attention_config(wide, wg(4, 64, 1), small)
    with pytest.raises(AttentionError, match="v_dim must be 64, 128, 192 or 256"):
        check_attention_config(AttentionWorkload(1, 1, 1, 128, 128, 80, 80), wg(), H100)


def test_the_chooser_prefers_wgmma_on_sm_90a_where_legal():
    w = AttentionWorkload(1, 16, 16, 4096, 4096, 128, 128, causal=True)
    best = choose_attention_config(w, H100)
    assert best.mma == "wgmma"
    assert all(c.mma == "mma_sync" for c in attention_candidates(w, as_target("cuda")))
    assert choose_attention_config(w, as_target("cuda -arch=sm_80")).mma == "mma_sync"
    # v_dim 80: no wgmma of that N here, mma.sync runs it
    w80 = AttentionWorkload(1, 16, 16, 1024, 1024, 80, 80)
    assert choose_attention_config(w80, H100).mma == "mma_sync"
    # two warpgroups only where the rows pass 64
    short = attention_candidates(AttentionWorkload(1, 2, 2, 50, 500, 64, 64), H100)
    assert {c.warps for c in short if c.mma == "wgmma"} == {4}


def test_the_template_and_the_step_carry_the_knob():
    import ptxforge.autotvm.attention  # noqa: F401
    from ptxforge import autotvm
    from ptxforge.ops.schedules.attention.schedule_pass import fused_attention_step

    args = (1, 2, 2, 130, 130, 64, 64, "float16", True)
    with H100:
        task = autotvm.task.create("attention.cuda", args=args, target=H100)
        assert "mma" in task.config_space.space_map
        want = {"warps": 8, "block_kv": 128, "stages": 1, "mma": "wgmma"}
        space = task.config_space
        entity = next(space.get(i) for i in range(len(space))
                      if all(space.get(i)[n].val == v for n, v in want.items()))
        s, _ = task.instantiate(entity)
    step = fused_attention_step(s.pipeline)
    assert step.config == wg(8, 128, 1) and 'mma="wgmma"' in str(s.pipeline)
    assert "mma" not in autotvm.task.create("attention.cuda", args=args,
                                            target="cuda").config_space.space_map


def test_the_sketch_offers_wgmma_and_builds_its_state():
    from ptxforge import autosched
    from ptxforge.autosched.attention import attention_model, attention_sketches
    from ptxforge.autotvm.attention import build_attention_candidate
    from ptxforge.ir.compute_dag import ComputeDAG
    from ptxforge.measure import BuildOptions, MeasureInput

    q = te.placeholder((1, 2, 70, 64), "bfloat16", name="q")
    k = te.placeholder((1, 1, 70, 64), "bfloat16", name="k")
    v = te.placeholder((1, 1, 70, 64), "bfloat16", name="v")
    out = attention(q, k, v)
    task = autosched.SearchTask(compute_dag=ComputeDAG([q, k, v, out]), target=H100)
    (sk,) = attention_sketches(task)
    (step,) = sk.steps
    rows = np.array([i for i, c in enumerate(step.configs) if c.mma == "wgmma"])[:, None]
    assert rows.size
    model = attention_model(step, sk.values(rows), task.hardware_params, len(rows))
    assert model["valid"].all() and (model["threads"] % 128 == 0).all()
    assert (model["shared_bytes"] % 1024 == 0).all()  # the swizzled layout's atoms
    pick = int(rows[int(np.argmin(model["est"])), 0])
    inp = MeasureInput(task.task_spec, sk.pipeline_text((pick,)))
    assert 'mma="wgmma"' in inp.pipeline_text
    res = build_attention_candidate(inp, BuildOptions(compile_to="ir"))
    assert res.error_no == 0, res.error_msg
    w = AttentionWorkload(1, 2, 1, 70, 70, 64, 64, "bfloat16")
    args = _data(w)
    backend_sim.run(res.artifact.device_module(), args)
    want = attention_python(*args[:3], dtype="bfloat16")
    assert np.abs(widen(args[-1], "bfloat16") - want).max() < 3e-2 * max(
        1, np.abs(want).max())


# -- PTX ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype,cfg", [("float16", wg(4, 64, 2)), ("bfloat16", wg(8, 128, 1))])
def test_ptx_for_sm_90a_runs_the_products_on_wgmma(dtype, cfg):
    from ptxforge.backend_ptx import compile_module

    w = AttentionWorkload(1, 16, 16, 4096, 4096, 64, 64, dtype, True)
    src = compile_module(attention_module(w, cfg), H100).get_source("ptx")
    s = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    # S = Q K^T: 4 of N = block_kv (head dim 64); P V: block_kv / 16 of N = 64 (v_dim);
    # per key tile, two tiles an iteration of the loop with two stages (each its stage)
    tiles = 2 if cfg.stages == 2 else 1
    want = {f"m64n{cfg.block_kv}k16": 4}
    want["m64n64k16"] = want.get("m64n64k16", 0) + cfg.block_kv // 16
    for shape, n in want.items():
        assert src.count(f"wgmma.mma_async.sync.aligned.{shape}.f32.{s}.{s}") == n * tiles, \
            shape
    for ins in ("wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned",
                "wgmma.wait_group.sync.aligned \t0", "fence.proxy.async.shared::cta",
                "cp.async", "shfl.sync.bfly"):
        assert ins in src, ins
    assert "mma.sync" not in src and ".local" not in src


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas is not installed")
def test_ptxas_assembles_the_chosen_wgmma_kernel_without_spills():
    from ptxforge.backend_ptx.compile import compile_kernel
    from ptxforge.ops.schedules.attention.knobs import registers_estimate

    w = AttentionWorkload(1, 16, 16, 4096, 4096, 128, 128, "float16", True)
    cfg = choose_attention_config(w, H100)
    assert cfg.mma == "wgmma"
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
]


@pytest.mark.gpu
@pytest.mark.sanitize
@pytest.mark.parametrize("w", GPU_CASES, ids=lambda w: f"L{w.q_len}-d{w.head_dim}-{w.dtype}")
def test_wgmma_attention_on_the_gpu(w):
    from ptxforge.backend_ptx import array, compile_module, cuda, empty

    dev = cuda(0)
    if not dev.target.has_wgmma:
        pytest.skip(f"wgmma needs a Hopper GPU (sm_90a), this one is {dev.sm}")
    # (4, 64, 1): the default beyond 512 keys since the calibration of 2026-11-27
    for cfg in (wg(4, 64, 3), wg(4, 64, 2), wg(8, 64, 1), wg(4, 128, 1), wg(4, 64, 1)):
        check_attention_config(w, cfg, dev.target)
        loaded = compile_module(attention_module(w, cfg), H100).load(dev)
        args = _data(w)
        out = empty(args[-1].shape, w.dtype, dev)
        loaded(*[array(a, dev, w.dtype) for a in args[:3]], out)
        want = attention_python(*args[:3], None, w.scale, w.causal, dtype=w.dtype)
        got = widen(out.numpy(), w.dtype)
        assert np.abs(got - want).max() <= attention_tolerance(w.dtype) * max(
            1.0, np.abs(want).max()), cfg


def test_a_float32_problem_has_no_wgmma_configuration():
    # its tensor-core rate is zero: the rule refuses it before any estimate divides by it
    from ptxforge.ops.schedules.attention.knobs_wgmma import check_wgmma_config, wgmma_candidates

    w = AttentionWorkload(1, 2, 2, 128, 128, 64, 64, "float32", False)
    t = as_target("cuda -arch=sm_90a")
    with pytest.raises(AttentionError, match="float16 and bfloat16"):
        check_wgmma_config(w, AttentionConfig(4, 64, 2, "wgmma"), t)
    assert wgmma_candidates(w, t) == []
    with pytest.raises(AttentionError, match="float16 and bfloat16"):
        choose_attention_config(w, t)
