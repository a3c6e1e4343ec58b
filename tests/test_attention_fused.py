"""The fused attention kernel (``ops.attention``, ``ops/schedules/attention``): the te op,
the kernel on the simulator against numpy (sequence lengths 1, 17, 64, 130; head dims 64,
80, 128; causal, padding, additive masks; grouped-query; fp16 and bf16), the knob space's
rules, PTX for sm_80 and sm_90a, and the same kernels on a GPU (``gpu``/``sanitize``)."""

from __future__ import annotations

import numpy as np
import ptxforge
import pytest
from ptxforge import backend_sim, te
from ptxforge.backend_ptx.assemble import find_ptxas
from ptxforge.driver import build_attention
from ptxforge.graph.opdefs.elemwise import cast_array
from ptxforge.ir.parser import parse_module
from ptxforge.ir.verify import verify
from ptxforge.ops.attention import attention, attention_workload
from ptxforge.ops.attention_testing import attention_python, attention_tolerance
from ptxforge.ops.schedules.attention import (
    AttentionConfig,
    AttentionError,
    AttentionMask,
    AttentionWorkload,
    attention_candidates,
    attention_module,
    attention_time,
    check_attention_config,
    choose_attention_config,
)
from ptxforge.ops.testing import widen
from ptxforge.target import as_target

RNG = np.random.default_rng(26)
H100 = as_target("cuda -arch=sm_90a")


def _data(w: AttentionWorkload, mask: np.ndarray | None = None):
    sh = w.shapes()
    q, k, v = (cast_array(RNG.standard_normal(sh[n]), w.dtype) for n in ("q", "k", "v"))
    out = cast_array(np.full(sh["out"], np.nan), w.dtype)  # a row never stored shows
    return [q, k, v] + ([mask] if mask is not None else []) + [out]


def _check(w: AttentionWorkload, cfg: AttentionConfig, mask=None):
    mod = attention_module(w, cfg)
    verify(mod)
    args = _data(w, mask)
    backend_sim.run(mod, args)
    want = attention_python(*args[:3], mask, w.scale, w.causal, dtype=w.dtype)
    got = widen(args[-1], w.dtype)
    assert np.isfinite(got).all()
    err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
    assert err <= attention_tolerance(w.dtype), (w, cfg, err)


# (q_len, kv_len, head_dim, dtype, causal, config)
CASES = [
    (1, 1, 64, "float16", False, AttentionConfig(1, 16, 1)),
    (1, 130, 128, "bfloat16", False, AttentionConfig(1, 64, 2)),
    (17, 17, 80, "bfloat16", True, AttentionConfig(2, 32, 2)),
    (17, 64, 128, "float16", True, AttentionConfig(2, 32, 1)),
    (64, 64, 64, "float16", True, AttentionConfig(4, 64, 2)),
    (64, 130, 80, "float16", False, AttentionConfig(4, 32, 2)),
    (130, 130, 64, "bfloat16", True, AttentionConfig(2, 32, 2)),
    (130, 17, 128, "float16", False, AttentionConfig(2, 16, 2)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"L{c[0]}-S{c[1]}-d{c[2]}-{c[3]}"
                         f"{'-causal' if c[4] else ''}-{c[5].warps}w{c[5].block_kv}s{c[5].stages}")
def test_fused_attention_matches_numpy(case):
    lq, s, e, dtype, causal, cfg = case
    _check(AttentionWorkload(1, 2, 2, lq, s, e, e, dtype, causal), cfg)


def test_grouped_query_with_padding_mask():
    # batch 2, 4 query heads over 2 key heads; the second batch's keys 20.. are padding
    m = np.ones((2, 1, 1, 33), bool)
    m[1, ..., 20:] = False
    w = AttentionWorkload(2, 4, 2, 17, 33, 64, 64, "float16",
                          mask=AttentionMask(m.shape, "bool"))
    _check(w, AttentionConfig(2, 16, 2), m)


def test_bool_mask_with_a_fully_masked_row_and_causal_gives_zeros():
    m = RNG.random((17, 33)) > 0.3
    m[3] = False
    w = AttentionWorkload(1, 4, 1, 17, 33, 64, 64, "bfloat16", True, 0.3,
                          AttentionMask(m.shape, "bool"))
    _check(w, AttentionConfig(1, 32, 2), m)


@pytest.mark.parametrize("mdtype", ["float32", "float16"])
def test_additive_mask(mdtype):
    m = cast_array(RNG.standard_normal((1, 2, 17, 33)) * 2, mdtype)
    w = AttentionWorkload(1, 2, 1, 17, 33, 80, 80, "float16",
                          mask=AttentionMask(m.shape, mdtype))
    _check(w, AttentionConfig(2, 16, 1), m)


@pytest.mark.parametrize("causal", [False, True])
def test_growing_maxima_rescale_the_output(causal):
    # scores rise by about 10 per key tile of 16 (beyond the rescale threshold of 8), and
    # fall in the second head: the running maximum moves and the output is rescaled
    w = AttentionWorkload(1, 2, 2, 40, 70, 64, 64, "float16", causal, 1.0)
    q = np.full((1, 2, 40, 64), 0.125, np.float16)
    q[:, 1] = -0.125
    ramp = (np.arange(70) // 16 * 1.25 + RNG.uniform(0, 0.05, 70)).astype(np.float16)
    k = np.broadcast_to(ramp[None, None, :, None], (1, 2, 70, 64)).astype(np.float16)
    v = RNG.standard_normal((1, 2, 70, 64)).astype(np.float16)
    out = np.full((1, 2, 40, 64), np.nan, np.float16)
    backend_sim.run(attention_module(w, AttentionConfig(2, 16, 2)), [q, k, v, out])
    want = attention_python(q, k, v, None, 1.0, causal)
    assert np.abs(out.astype(np.float64) - want).max() <= 4e-3 * max(1, np.abs(want).max())


def test_large_scores_stay_finite():
    # scores of +-60: a probability computed against anything but the row's maximum
    # overflows float16 (a score bound once, not re-read after the masked store)
    w = AttentionWorkload(1, 2, 1, 20, 40, 16, 16, "float16", True)
    sh = w.shapes()
    q, k = (RNG.standard_normal(sh[n]).astype(np.float16) * 4 for n in ("q", "k"))
    v = RNG.standard_normal(sh["v"]).astype(np.float16)
    out = np.full(sh["out"], np.nan, np.float16)
    backend_sim.run(attention_module(w, AttentionConfig(1, 16, 2)), [q, k, v, out])
    want = attention_python(q, k, v, None, None, True)
    assert np.isfinite(out).all()
    assert np.abs(out.astype(np.float64) - want).max() <= 4e-3 * max(1, np.abs(want).max())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_workloads_and_configurations(seed):
    """A random problem (lengths, head dims, heads, dtype, causal, scale, mask kind and
    shape) with a random legal configuration, on inputs of standard deviation 2."""
    rng = np.random.default_rng(seed)
    lq, s = (int(x) for x in rng.integers(1, 100, 2))
    e, ev = (int(rng.choice([16, 32, 64, 80, 128])) for _ in range(2))
    hk, g, b = int(rng.choice([1, 2])), int(rng.choice([1, 2, 3])), int(rng.choice([1, 2]))
    dtype = str(rng.choice(["float16", "bfloat16"]))
    mask, marr = None, None
    kind = int(rng.integers(3))
    if kind:
        shape = [(b, 1, 1, s), (lq, s), (1, hk * g, lq, s)][int(rng.integers(3))]
        mdt = "bool" if kind == 1 else str(rng.choice(["float32", "float16"]))
        marr = rng.random(shape) > 0.3 if kind == 1 else cast_array(
            rng.standard_normal(shape), mdt)
        mask = AttentionMask(shape, mdt)
    w = AttentionWorkload(b, hk * g, hk, lq, s, e, ev, dtype, bool(rng.integers(2)),
                          None if rng.integers(2) else 0.2, mask)
    cands = attention_candidates(w, H100)
    cfg = cands[int(rng.integers(len(cands)))]
    sh = w.shapes()
    args = [cast_array(rng.standard_normal(sh[n]) * 2, dtype) for n in ("q", "k", "v")]
    out = cast_array(np.full(sh["out"], np.nan), dtype)
    backend_sim.run(attention_module(w, cfg), [*args] + ([marr] if kind else []) + [out])
    want = attention_python(*args, marr, w.scale, w.causal, dtype=dtype)
    got = widen(out, dtype)
    assert np.isfinite(got).all(), (w, cfg)
    err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
    assert err <= attention_tolerance(dtype), (w, cfg, err)


def test_te_op_fused_and_unscheduled_agree_with_numpy():
    q = te.placeholder((1, 2, 5, 16), "float16", name="q")
    k = te.placeholder((1, 1, 5, 16), "float16", name="k")
    v = te.placeholder((1, 1, 5, 16), "float16", name="v")
    out = attention(q, k, v, causal=True, scale=0.5)
    w = attention_workload(out)
    assert (w.group, w.causal, w.scale, w.mask) == (2, True, 0.5, None)
    args = _data(w)
    want = attention_python(*args[:3], None, 0.5, True)
    build_attention(out, "sim")(*args)
    assert np.abs(args[-1].astype(np.float64) - want).max() < 4e-3
    # the te declaration itself, unscheduled (one thread): what any schedule computes
    unfused = ptxforge.build([q, k, v, out], target="sim")
    o2 = np.full(args[-1].shape, np.nan, np.float16)
    unfused(*args[:3], o2)
    assert np.abs(o2.astype(np.float64) - want).max() < 4e-3


def test_te_op_rejects_mismatched_inputs():
    q = te.placeholder((1, 3, 9, 16), "float16", name="q")
    k = te.placeholder((1, 2, 9, 16), "float16", name="k")
    with pytest.raises(AttentionError, match="do not agree"):
        attention(q, k, k)
    m = te.placeholder((9, 4), "bool", name="m")
    with pytest.raises(AttentionError, match="does not broadcast"):
        attention(q, q, q, m)


def test_device_ir_prints_and_parses_back():
    mod = attention_module(AttentionWorkload(1, 1, 1, 17, 40, 64, 64, "float16", True),
                           AttentionConfig(2, 32, 2))
    text = str(mod)
    assert str(parse_module(text)) == text


# -- the knob space ----------------------------------------------------------------------


def test_config_rules_name_what_is_wrong():
    w = AttentionWorkload(1, 16, 16, 512, 512, 128, 128)
    with pytest.raises(AttentionError, match="block_kv must be one of"):
        check_attention_config(w, AttentionConfig(4, 48, 2), H100)
    with pytest.raises(AttentionError, match="shared memory"):
        check_attention_config(w, AttentionConfig(8, 128, 2), H100)
    with pytest.raises(AttentionError, match="sm_80 or newer"):
        check_attention_config(w, AttentionConfig(), as_target("cuda -arch=sm_75"))
    with pytest.raises(AttentionError, match="multiple of 16"):
        check_attention_config(AttentionWorkload(1, 1, 1, 8, 8, 72, 72), AttentionConfig(),
                               H100)
    with pytest.raises(AttentionError, match="at most 65535"):
        check_attention_config(AttentionWorkload(70000, 1, 1, 8, 8, 64, 64),
                               AttentionConfig(), H100)
    with pytest.raises(AttentionError, match="float16 and bfloat16"):
        check_attention_config(AttentionWorkload(1, 1, 1, 8, 8, 64, 64, "float32"),
                               AttentionConfig(), H100)


def test_candidates_are_legal_and_the_chooser_ranks_by_the_estimate():
    w = AttentionWorkload(1, 16, 16, 1024, 1024, 128, 128, causal=False)
    cands = attention_candidates(w, H100)
    assert len(cands) > 8
    for c in cands:
        check_attention_config(w, c, H100)
    best = choose_attention_config(w, H100)
    assert best in cands
    t = attention_time(w, best, H100)
    assert all(attention_time(w, c, H100) >= t * 0.999 for c in cands)
    # causal blocks stop at their diagonal: cheaper where blocks wait for a slot (several
    # waves); in one wave the longest block sets the time, as measured (the calibration
    # table: 79.7 against 80.8 us at 1024, 8 warps)
    long = AttentionWorkload(1, 16, 16, 4096, 4096, 128, 128, causal=False)
    best_long = choose_attention_config(long, H100)
    causal = AttentionWorkload(1, 16, 16, 4096, 4096, 128, 128, causal=True)
    assert attention_time(causal, best_long, H100) < 0.75 * attention_time(long, best_long,
                                                                          H100)
    one_wave = AttentionWorkload(1, 16, 16, 1024, 1024, 128, 128, causal=True)
    assert attention_time(one_wave, best, H100) <= t
    # short sequences: no tile wider than the keys, no warps beyond the rows
    short = attention_candidates(AttentionWorkload(1, 2, 2, 1, 17, 64, 64), H100)
    assert {c.warps for c in short} == {1} and max(c.block_kv for c in short) == 32


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_ptx_has_the_tensor_core_instructions(arch):
    from ptxforge.backend_ptx import compile_module

    w = AttentionWorkload(1, 2, 1, 40, 70, 64, 64, "bfloat16", True)
    cfg = AttentionConfig(2, 32, 2)
    ptx = compile_module(attention_module(w, cfg), as_target(f"cuda -arch={arch}"))
    src = ptx.get_source("ptx")
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in src
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in src
    assert "cp.async" in src and "shfl.sync.bfly" in src
    assert ".local" not in src  # fragments and the running max / sum stay in registers


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas is not installed")
def test_ptxas_assembles_the_chosen_kernel_without_spills():
    from ptxforge.backend_ptx.compile import compile_kernel
    from ptxforge.ops.schedules.attention.knobs import registers_estimate

    w = AttentionWorkload(1, 16, 16, 4096, 4096, 128, 128, "float16", True)
    cfg = choose_attention_config(w, H100)
    ck = compile_kernel(attention_module(w, cfg).kernels()[0], H100, stop_after="cubin",
                        assembler="ptxas")
    res = ck.resources
    assert not res.spills and res.registers * cfg.threads <= H100.registers_per_block
    assert abs(res.registers - registers_estimate(w, cfg)) <= 40


# -- on a GPU ----------------------------------------------------------------------------

GPU_CASES = [
    AttentionWorkload(1, 4, 2, 130, 130, 128, 128, "float16", True),
    AttentionWorkload(2, 4, 4, 64, 200, 80, 80, "bfloat16", False),
    AttentionWorkload(1, 2, 2, 17, 17, 64, 64, "float16", False),
]


@pytest.mark.gpu
@pytest.mark.sanitize
@pytest.mark.parametrize("w", GPU_CASES, ids=lambda w: f"L{w.q_len}-d{w.head_dim}-{w.dtype}")
def test_fused_attention_on_the_gpu(w):
    from ptxforge.backend_ptx import array, compile_module, cuda, empty

    dev = cuda(0)
    target = as_target(f"cuda -arch={dev.sm}")
    for cfg in (choose_attention_config(w, target), AttentionConfig(1, 16, 1)):
        loaded = compile_module(attention_module(w, cfg), target).load(dev)
        args = _data(w)
        out = empty(args[-1].shape, w.dtype, dev)
        loaded(*[array(a, dev, w.dtype) for a in args[:3]], out)
        want = attention_python(*args[:3], None, w.scale, w.causal, dtype=w.dtype)
        got = widen(out.numpy(), w.dtype)
        assert np.abs(got - want).max() <= attention_tolerance(w.dtype) * max(
            1.0, np.abs(want).max()), cfg
