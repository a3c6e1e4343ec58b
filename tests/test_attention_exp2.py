"""The softmax's base-2 exponent: the ``exp2`` intrinsic (simulator: numpy's exp2; PTX:
one ``ex2.approx.ftz.f32``; float64: an accurate helper checked on the host), and the
fused attention kernel computing its probabilities and rescale factors with it, in both
forms: the same results as numpy under every scale and mask, and the key loop's PTX
instruction counts (``bench/bench_attention_ptx.py``)."""

from __future__ import annotations

import ctypes
import math

import numpy as np
import ptxforge
import pytest
from ptxforge import backend_sim, te
from ptxforge.backend_ptx import compile_module
from ptxforge.backend_ptx.compile import llvm_binding
from ptxforge.backend_ptx.llvm_text import ModuleParts
from ptxforge.backend_ptx.mathlib import MATH_OPS, helper_name, math_call
from ptxforge.graph.opdefs.elemwise import cast_array
from ptxforge.ir.expr import IntImm, IRError, call
from ptxforge.ops.attention_testing import attention_python, attention_tolerance
from ptxforge.ops.schedules import default_schedule
from ptxforge.ops.schedules.attention import (
    AttentionConfig,
    AttentionMask,
    AttentionWorkload,
    attention_module,
)
from ptxforge.ops.schedules.attention.kernel import _Kernel
from ptxforge.ops.testing import widen
from ptxforge.target import as_target

from .bench_scripts import load_bench

RNG = np.random.default_rng(2)
SM90 = as_target("cuda -arch=sm_90a")
SM80 = as_target("cuda -arch=sm_80")


def _bench():
    return load_bench("bench_attention_ptx")


# -- the intrinsic ------------------------------------------------------------------------


def _exp2_op(dtype: str):
    x = te.placeholder((300,), dtype, name="x")
    y = te.compute((300,), lambda i: call("exp2", x[i]), name="y")
    return x, y


def test_exp2_needs_a_float_argument():
    with pytest.raises(IRError, match="exp2 needs a float"):
        call("exp2", IntImm(3, "int32"))
    with pytest.raises(IRError, match="exp2 takes 1"):
        call("exp2", 1.0, 2.0)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_exp2_on_the_simulator_is_numpy_exp2(dtype):
    x, y = _exp2_op(dtype)
    mod = ptxforge.build(default_schedule(y), [x, y], target="sim")
    top = 15 if dtype == "float16" else 100
    xs = np.concatenate([RNG.uniform(-30, top, 296), [0.0, -np.inf, 3.0, -149.0]])
    xs = xs.astype(dtype)
    out = np.full(300, np.nan, dtype)
    mod(xs, out)
    want = np.exp2(xs.astype(np.float32)).astype(dtype)  # half types: float32, one rounding
    np.testing.assert_array_equal(out, want)


def test_exp2_is_one_ex2_approx_ftz_in_ptx():
    for dtype in ("float32", "float16"):
        x, y = _exp2_op(dtype)
        mod = ptxforge.build(default_schedule(y), [x, y], target="cuda -arch=sm_90a")
        ptx = mod.get_source("ptx")
        ex2 = ptx.count("ex2.approx.ftz.f32")
        assert ex2 >= 1 and "cvt.rni" not in ptx, dtype  # no polynomial, no rounding
        assert ex2 == ptx.count("ex2.")


def test_exp2_stays_out_of_the_host_math_ops():
    # the f32 helper is a GPU instruction: MATH_OPS is what the host JIT checks
    assert "exp2" not in MATH_OPS
    parts = ModuleParts()
    math_call(parts, "exp2", "float")
    assert "llvm.nvvm.ex2.approx.ftz.f" in "\n".join(parts.declarations.values())
    with pytest.raises(ValueError, match="no math helper for 'exp3'"):
        math_call(ModuleParts(), "exp3", "float")


def test_exp2_float64_helper_matches_numpy_on_the_host():
    llvm = llvm_binding()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    parts = ModuleParts()
    math_call(parts, "exp2", "double")
    text = "\n".join(parts.declarations.values()) + "\n\n" + "\n\n".join(parts.helpers.values())
    mod = llvm.parse_assembly(text.replace("define internal", "define"))
    mod.verify()
    engine = llvm.create_mcjit_compiler(mod, llvm.Target.from_default_triple()
                                        .create_target_machine())
    engine.finalize_object()
    fn = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)(
        engine.get_function_address(helper_name("exp2", "double")))
    xs = np.concatenate([RNG.uniform(-1100, 1100, 2000), RNG.uniform(-2, 2, 500),
                         [0.0, 0.5, -0.5, 1.0, 1023.0, -1022.0, -1074.0, -1060.3]])
    got = np.array([fn(float(v)) for v in xs])
    with np.errstate(over="ignore"):
        want = np.exp2(xs)
    normal = np.abs(want) >= 2.0 ** -1022
    np.testing.assert_allclose(got[normal], want[normal], rtol=4e-16)
    # subnormal results: within one unit of the last place of the subnormal range
    np.testing.assert_allclose(got[~normal], want[~normal], rtol=0, atol=2.0 ** -1074)
    assert fn(-math.inf) == 0.0 and fn(math.inf) == math.inf and math.isnan(fn(math.nan))
    assert fn(3.0) == 8.0 and fn(-1074.0) == 2.0 ** -1074


# -- the kernel ---------------------------------------------------------------------------


def _run(w: AttentionWorkload, cfg: AttentionConfig, mask=None, data=None) -> float:
    sh = w.shapes()
    q, k, v = data or [cast_array(RNG.standard_normal(sh[n]), w.dtype) for n in "qkv"]
    out = cast_array(np.full(sh["out"], np.nan), w.dtype)
    args = [q, k, v] + ([mask] if mask is not None else []) + [out]
    backend_sim.run(attention_module(w, cfg), args)
    want = attention_python(q, k, v, mask, w.scale, w.causal, dtype=w.dtype)
    got = widen(out, w.dtype)
    assert np.isfinite(got).all()
    return float(np.abs(got - want).max() / max(1.0, np.abs(want).max()))


def test_the_score_units_fold_the_scale_where_the_maximum_commutes():
    w = AttentionWorkload(1, 1, 1, 16, 16, 64, 64, "float16", False)
    cfg = AttentionConfig(1, 16, 1)
    assert _Kernel(w, cfg).score_units() == pytest.approx(math.log2(math.e) / 8)
    neg = AttentionWorkload(1, 1, 1, 16, 16, 64, 64, "float16", False, scale=-0.2)
    add = AttentionWorkload(1, 1, 1, 16, 16, 64, 64, "float16", False,
                            mask=AttentionMask((16, 16), "float32"))
    pad = AttentionWorkload(1, 1, 1, 16, 16, 64, 64, "float16", False,
                            mask=AttentionMask((16, 16), "bool"))
    assert _Kernel(neg, cfg).score_units() == 1.0
    assert _Kernel(add, cfg).score_units() == 1.0
    assert _Kernel(pad, cfg).score_units() == _Kernel(w, cfg).score_units()


@pytest.mark.parametrize("cfg", [AttentionConfig(2, 32, 2),
                                 AttentionConfig(4, 64, 1, "wgmma")], ids=["mma", "wgmma"])
@pytest.mark.parametrize("scale", [-0.3, 0.05, 1.7])
def test_any_scale_matches_numpy(cfg, scale):
    # a negative scale turns the raw scores' maximum into the minimum: the kernel scales
    # first there; a large one spreads the scores across the rescale threshold
    w = AttentionWorkload(1, 2, 2, 70, 150, 64, 64, "float16", True, scale=scale)
    assert _run(w, cfg) <= attention_tolerance("float16")


@pytest.mark.parametrize("cfg", [AttentionConfig(2, 32, 2),
                                 AttentionConfig(4, 64, 2, "wgmma")], ids=["mma", "wgmma"])
def test_an_additive_mask_in_natural_units(cfg):
    # a mask of -20 .. 20 added in natural units: wrong by a factor log2(e) if it were
    # added to the base-2 scores unconverted
    w = AttentionWorkload(1, 2, 2, 64, 130, 64, 64, "float16", False,
                          mask=AttentionMask((64, 130), "float32"))
    mask = RNG.uniform(-20, 20, (64, 130)).astype(np.float32)
    assert _run(w, cfg, mask) <= attention_tolerance("float16")


# -- the instructions ---------------------------------------------------------------------


@pytest.mark.parametrize("target,cfg", [(SM90, AttentionConfig(8, 64, 1, "wgmma")),
                                        (SM90, AttentionConfig(4, 64, 3, "wgmma")),
                                        (SM80, AttentionConfig(8, 32, 2))],
                         ids=["wgmma-8x64x1", "wgmma-4x64x3", "mma-8x32x2"])
def test_the_key_loop_takes_one_ex2_a_score(target, cfg):
    bench = _bench()
    w = AttentionWorkload(1, 16, 16, 4096, 4096, 128, 128, "float16", False)
    ptx = compile_module(attention_module(w, cfg), target).get_source("ptx")
    row = bench.count(ptx)
    tiles = bench.tiles_per_iteration(cfg)
    per_tile = cfg.block_q * cfg.block_kv // cfg.threads
    per_thread = per_tile * tiles
    # a probability each score and a rescale factor each of the thread's two rows, a tile
    assert row["ex2"] == (per_tile + 2) * tiles, row
    assert ptx.count("ex2.approx.ftz.f32") == ptx.count("ex2.")
    # no exp polynomial left: its rint and float-to-int conversions are gone
    assert "cvt.rni.f32.f32" not in ptx and "cvt.rzi.s32.f32" not in ptx
    # beside the products and their operands' loads, the accurate exp took 48 to 55
    # instructions a score in these loops (every branch counted); now 21 to 29
    assert row["total"] - row["mma"] - row["ldmatrix"] <= 30 * per_thread, row
    # what an interior tile runs (no rescaling, no edge masks): 11 to 16 a score
    inner = bench.count(bench.interior_ptx(w, cfg, target))
    assert inner["total"] - inner["mma"] - inner["ldmatrix"] <= 17 * per_thread, inner


# -- the edge tiles -----------------------------------------------------------------------


@pytest.mark.parametrize("cfg", [AttentionConfig(2, 32, 2), AttentionConfig(4, 64, 1, "wgmma"),
                                 AttentionConfig(4, 64, 3, "wgmma")],
                         ids=["mma", "wgmma", "wgmma-3"])
@pytest.mark.parametrize("lq,s", [(150, 190), (190, 150)])
def test_causal_edge_and_interior_tiles_match_numpy(cfg, lq, s):
    # several query blocks, each with interior tiles (no masks), diagonal tiles and a
    # last partial tile of keys
    w = AttentionWorkload(1, 1, 1, lq, s, 64, 64, "float16", True)
    assert _run(w, cfg) <= attention_tolerance("float16")


def test_causal_interior_tiles_skip_the_position_masks():
    bench = _bench()
    cfg = AttentionConfig(8, 64, 1, "wgmma")
    causal, plain = (AttentionWorkload(1, 16, 16, 4096, 4096, 64, 64, "float16", c)
                     for c in (True, False))
    c = bench.count(bench.interior_ptx(causal, cfg, SM90))
    p = bench.count(bench.interior_ptx(plain, cfg, SM90))
    # the edge test is a few instructions a tile, nothing a score (the masks on every
    # tile cost about 4 instructions a score: 128 a thread)
    assert c["total"] - p["total"] <= 8, (c, p)
    # the loop holds both forms of the softmax: masked for the edge tiles, plain
    full = bench.count(compile_module(attention_module(causal, cfg), SM90).get_source("ptx"))
    assert full["ex2"] == 2 * (cfg.block_q * cfg.block_kv // cfg.threads + 2)
