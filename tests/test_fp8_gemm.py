"""FP8 GEMMs (``scaled_mm``: e4m3 / e5m2 inputs, float32 accumulation, per-tensor scales,
fp16 / bf16 / fp32 output) through the tensor-core GEMM template on wgmma: on the
simulator against numpy, as PTX through ptxas for sm_90a, the conversions to and from
fp8, the refusals, and (``gpu``) on an H100."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import te
from ptxforge.ir.dtype import round_to
from ptxforge.ir.float8 import float8_bits, float8_from_bits, quantize
from ptxforge.ops.scaled_mm import ScaledMMError, scaled_mm, scaled_mm_reference
from ptxforge.ops.schedules.default import default_schedule
from ptxforge.ops.schedules.gemm.knobs import WgmmaScheduleConfig
from ptxforge.ops.schedules.gemm.schedule import schedule_gemm_wgmma
from ptxforge.passes.schedule.common import ScheduleError
from ptxforge.target import as_target

SIM = "sim -arch=sm_90a"
SM90A = "cuda -arch=sm_90a"


def _decl(M, N, K, ab, out_dtype):
    a = te.placeholder((M, K), ab, name="A")
    b = te.placeholder((N, K), ab, name="B")
    sa = te.placeholder((1,), "float32", name="scale_a")
    sb = te.placeholder((1,), "float32", name="scale_b")
    return [a, b, sa, sb, scaled_mm(a, b, sa, sb, out_dtype)]


def _inputs(M, N, K, ab, seed=0):
    rng = np.random.default_rng(seed)
    a8, sa = quantize(rng.standard_normal((M, K)) * 3, ab)
    b8, sb = quantize(rng.standard_normal((N, K)), ab)
    return a8, b8, sa, sb


def _run_sim(tensors, s, M, N, K, ab, out_dtype):
    mod = ptxforge.build(s, tensors, target=SIM)
    a8, b8, sa, sb = _inputs(M, N, K, ab)
    host = np.float16 if out_dtype == "float16" else np.float32
    out = np.full((M, N), np.nan, host)  # a store past the real extent would show
    if out_dtype == "bfloat16":
        from ptxforge.ir.dtype import BFLOAT16_HOST

        out = np.zeros((M, N), BFLOAT16_HOST)
    mod(a8, b8, np.float32([sa]), np.float32([sb]), out)
    got = np.asarray(out, np.float32).astype(np.float64)
    want = scaled_mm_reference(a8, b8, sa, sb, ab, out_dtype).astype(np.float64)
    # float32 accumulation in another order (k steps, split-K parts) than the float64
    # reference: at most K roundings of 2^-24 of the sum of magnitudes
    mag = (np.abs(float8_from_bits(a8, ab)).astype(np.float64)
           @ np.abs(float8_from_bits(b8, ab)).astype(np.float64).T) * sa * sb
    return got, want, K * 2.0 ** -24 * mag


def _ulp(want, out_dtype):
    """One unit in the last place of ``out_dtype`` at each reference value: the float32
    accumulation order may move the one rounding to the output by one step."""
    bits = {"float16": 10, "bfloat16": 7, "float32": 23}[out_dtype]
    return np.exp2(np.floor(np.log2(np.maximum(np.abs(want), 1e-30))) - bits)


@pytest.mark.parametrize("M,N,K,ab,out_dtype", [
    (128, 128, 256, "float8_e4m3fn", "float16"),
    (100, 200, 300, "float8_e5m2", "bfloat16"),   # padded to the tiles (zero-filled)
    (64, 128, 2048, "float8_e4m3fn", "float32"),
    # K padded from a multiple of 16: the padding guards come in groups of 16 elements,
    # one test per 16-byte cp.async (groups of 8 made the copies 1-byte, refused)
    (100, 192, 160, "float8_e5m2", "bfloat16"),
])
def test_default_schedule_on_wgmma_matches_numpy(M, N, K, ab, out_dtype):
    tensors = _decl(M, N, K, ab, out_dtype)
    s = default_schedule(tensors[-1], target=SIM)
    text = "\n".join(str(p) for p in s.pipeline)
    assert "wgmma_m64n" in text and f"k32_{'e4m3' if 'e4m3' in ab else 'e5m2'}_f32" in text
    got, want, acc = _run_sim(tensors, s, M, N, K, ab, out_dtype)
    assert np.all(np.abs(got - want) <= _ulp(want, out_dtype) * 1.01 + acc)


@pytest.mark.parametrize("K", [96, 160, 224])
def test_padded_k_copies_16_bytes_at_a_time(K):
    """A reduction padded to the 128-element step from a multiple of 16: every operand copy
    is a 16-byte cp.async whose padding guard tests the whole vector."""
    from ptxforge.ir.stmt import AsyncCopy, walk

    tensors = _decl(64, 128, K, "float8_e4m3fn", "float16")
    with as_target(SIM):
        s = default_schedule(tensors[-1], target=SIM)
        kernels = ptxforge.lower(s, tensors).kernels()
    copies = [c for k in kernels for c in walk(k.body) if isinstance(c, AsyncCopy)]
    assert {c.src.name for c in copies} == {"A", "B"}
    assert {c.bytes for c in copies} == {16}


def test_explicit_wgmma_config_with_split_k():
    M, N, K, ab = 128, 256, 1024, "float8_e4m3fn"
    tensors = _decl(M, N, K, ab, "float16")
    out = tensors[-1]
    prod = out.op.input_tensors[0].op
    s = te.create_schedule(out.op)
    cfg = schedule_gemm_wgmma(s, prod, out.op, WgmmaScheduleConfig(128, 2, 3, 1, 2),
                              target=SIM)
    assert cfg.split_k == 2
    got, want, acc = _run_sim(tensors, s, M, N, K, ab, "float16")
    assert np.all(np.abs(got - want) <= _ulp(want, "float16") * 1.01 + acc)


@pytest.mark.parametrize("ab,fmt", [("float8_e4m3fn", "e4m3"), ("float8_e5m2", "e5m2")])
def test_ptx_assembles_for_sm_90a(ab, fmt):
    from ptxforge.backend_ptx import compile_module
    from ptxforge.backend_ptx.assemble import find_ptxas, run_ptxas

    tensors = _decl(256, 256, 512, ab, "bfloat16")
    with as_target(SM90A):
        s = default_schedule(tensors[-1], target=SM90A)
        pm = compile_module(ptxforge.lower(s, tensors), SM90A)
    ptx = "\n".join(k.get_source("ptx") for k in pm.kernels.values())
    assert f"k32.f32.{fmt}.{fmt}" in ptx and "cp.async" in ptx
    if find_ptxas() is None:
        pytest.skip("ptxas not installed")
    for k in pm.kernels.values():
        run_ptxas(k.get_source("ptx"), "sm_90a")


@pytest.mark.parametrize("ab", ["float8_e4m3fn", "float8_e5m2"])
def test_conversions_to_and_from_fp8(ab):
    n = 1024
    x = te.placeholder((n,), "float32", name="x")
    q = te.compute((n,), lambda i: (x[i] * 2.0).astype(ab), name="q")
    y = te.compute((n,), lambda i: q[i].astype("float32")
                   + q[i].astype("float16").astype("float32"), name="y")
    s = default_schedule([q, y], target="sim")
    mod = ptxforge.build(s, [x, q, y], target="sim")
    xs = (np.random.default_rng(3).standard_normal(n) * 300).astype(np.float32)
    xs[:4] = [np.inf, np.nan, -1e6, -np.inf]
    qs, ys = np.zeros(n, np.uint8), np.zeros(n, np.float32)
    mod(xs, qs, ys)
    want = float8_bits(xs * 2, ab)
    np.testing.assert_array_equal(qs, want)
    v = float8_from_bits(want, ab)
    np.testing.assert_array_equal(ys, v + v)
    # the same kernels as PTX: cvt.rn.satfinite to fp8, cvt.rn.f16x2 from it
    from ptxforge.backend_ptx import compile_module
    from ptxforge.backend_ptx.assemble import find_ptxas, run_ptxas

    with as_target(SM90A):
        s = default_schedule([q, y], target=SM90A)
        pm = compile_module(ptxforge.lower(s, [x, q, y]), SM90A)
    fmt = "e4m3" if "e4m3" in ab else "e5m2"
    ptx = "\n".join(k.get_source("ptx") for k in pm.kernels.values())
    assert f"cvt.rn.satfinite.{fmt}x2.f32" in ptx and f"cvt.rn.f16x2.{fmt}x2" in ptx
    if find_ptxas() is not None:
        for k in pm.kernels.values():
            run_ptxas(k.get_source("ptx"), "sm_90a")


@pytest.mark.parametrize("M,N,K,target", [(64, 64, 96, "sim -arch=sm_90"),
                                            (64, 32, 128, SIM)])
def test_what_wgmma_does_not_take_runs_on_the_cuda_cores(M, N, K, target):
    """No wgmma (sm_90), or a product narrower than its tiles: the fp8 operands are
    converted to float32 on the CUDA cores, still exact products."""
    ab = "float8_e4m3fn"
    tensors = _decl(M, N, K, ab, "float32")
    s = default_schedule(tensors[-1], target=target)
    assert "wgmma" not in "\n".join(str(p) for p in s.pipeline)
    mod = ptxforge.build(s, tensors, target=target)
    a8, b8, sa, sb = _inputs(M, N, K, ab)
    out = np.zeros((M, N), np.float32)
    mod(a8, b8, np.float32([sa]), np.float32([sb]), out)
    want = scaled_mm_reference(a8, b8, sa, sb, ab, "float32")
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_refusals():
    from ptxforge.backend_ptx import compile_module
    from ptxforge.backend_ptx.exprgen import CodegenError
    from ptxforge.ops.schedules.gemm.schedule import schedule_gemm_tensorcore

    # mma.sync has no fp8 here: its schedule says so
    tensors = _decl(128, 128, 256, "float8_e4m3fn", "float16")
    prod = tensors[-1].op.input_tensors[0].op
    with pytest.raises(ScheduleError, match="run on wgmma only"):
        schedule_gemm_tensorcore(te.create_schedule(tensors[-1].op), prod, target=SIM)
    # fp8 conversions need sm_89+
    sm80 = "cuda -arch=sm_80"
    with as_target(sm80):
        s = default_schedule(tensors[-1], target=sm80)
        with pytest.raises(CodegenError, match="sm_89 or newer"):
            compile_module(ptxforge.lower(s, tensors), sm80)
    a = te.placeholder((64, 32), "float16", name="A")
    s1 = te.placeholder((1,), "float32", name="s")
    with pytest.raises(ScaledMMError, match="takes fp8"):
        scaled_mm(a, a, s1, s1)
    b = te.placeholder((64, 32), "float8_e5m2", name="B")
    e4 = te.placeholder((64, 32), "float8_e4m3fn", name="E")
    with pytest.raises(ScaledMMError, match="same fp8 format"):
        scaled_mm(e4, b, s1, s1)
    with pytest.raises(ScaledMMError, match="one element"):
        scaled_mm(e4, e4, te.placeholder((2,), "float32", name="s2"), s1)


def test_reference_rounds_once_to_the_output():
    a8, b8, sa, sb = _inputs(64, 64, 128, "float8_e4m3fn")
    full = (float8_from_bits(a8, "float8_e4m3fn").astype(np.float64)
            @ float8_from_bits(b8, "float8_e4m3fn").astype(np.float64).T)
    ref = scaled_mm_reference(a8, b8, sa, sb, "float8_e4m3fn", "bfloat16")
    np.testing.assert_array_equal(ref, round_to((full.astype(np.float32)
                                                 * np.float32(sa * sb)), "bfloat16"))


@pytest.mark.gpu
@pytest.mark.parametrize("ab,out_dtype", [("float8_e4m3fn", "bfloat16"),
                                          ("float8_e5m2", "float16")])
def test_scaled_mm_on_the_gpu(ab, out_dtype):
    from ptxforge.backend_ptx import array, cuda, empty

    M, N, K = 512, 768, 1024
    tensors = _decl(M, N, K, ab, out_dtype)
    s = default_schedule(tensors[-1], target=SM90A)
    mod = ptxforge.build(s, tensors, target=SM90A)
    dev = cuda(0)
    a8, b8, sa, sb = _inputs(M, N, K, ab)
    out = empty((M, N), out_dtype, dev)
    mod(array(a8, dev, ab), array(b8, dev, ab), array(np.float32([sa]), dev),
        array(np.float32([sb]), dev), out)
    got = np.asarray(out.numpy(), np.float32).astype(np.float64)
    want = scaled_mm_reference(a8, b8, sa, sb, ab, out_dtype).astype(np.float64)
    # the hardware's fp8 products accumulate in float32 of its own order
    assert np.abs(got - want).max() <= 4 * _ulp(np.abs(want).max(), out_dtype) + 1e-3


# -- the per-tensor scales applied to the accumulator registers ------------------------------


def test_scales_applied_in_registers_store_like_the_fp16_kernel():
    """An fp8 product whose tiles divide it stores its accumulators times ``scale_a *
    scale_b`` with the scaled warpgroup store (one multiply per element by one scalar):
    no float32 C tile in shared memory, so its PTX has no shared load or store besides
    the cp.async copies, reads the two scales once, and has the fp16 kernel's tile."""
    from ptxforge.backend_ptx import compile_module
    from ptxforge.ops.schedules.gemm.chooser import wgmma_choice
    from ptxforge.ops.schedules.gemm.forms import gemm_form

    tensors = _decl(4096, 4096, 4096, "float8_e4m3fn", "bfloat16")
    prod = tensors[-1].op.input_tensors[0].op
    with as_target(SM90A) as t:
        cfg = wgmma_choice(prod, tensors[-1].op, gemm_form(prod, t), t)
        s = default_schedule(tensors[-1], target=SM90A)
        pm = compile_module(ptxforge.lower(s, tensors), SM90A)
    # the fp16 kernel's tile of a large product: 128 x 256, the C tile's memory gone
    assert (cfg.block_m, cfg.block_n, cfg.stages) == (128, 256, 4)
    assert "store_wg_f32_bf16_scaled" in "\n".join(str(p) for p in s.pipeline)
    (k,) = pm.kernels.values()
    ptx = k.get_source("ptx")
    assert "st.shared" not in ptx and "ld.shared" not in ptx
    assert ptx.count("ld.global") == 2  # scale_a and scale_b, once per thread
    assert ptx.count("mul.rn.f32") == 128  # 64 x 256 accumulators / 128 threads


@pytest.mark.parametrize("out_dtype", ["float16", "bfloat16", "float32"])
def test_scaled_store_matches_numpy(out_dtype):
    """The scaled store on the simulator: each output element rounded once from the float32
    accumulator times the float32 product of the scales (what the C-tile epilogue
    computed), checked to the bit where the accumulation order cannot differ (K of one
    step)."""
    M, N, K = 128, 256, 128
    tensors = _decl(M, N, K, "float8_e5m2", out_dtype)
    s = default_schedule(tensors[-1], target=SIM)
    assert "_scaled\"" in "\n".join(str(p) for p in s.pipeline)
    got, want, acc = _run_sim(tensors, s, M, N, K, "float8_e5m2", out_dtype)
    assert np.all(np.abs(got - want) <= acc + _ulp(want, out_dtype) * 1.01)
    # scales far from one: a store that forgot them would be off by their product
    _, _, sa, sb = _inputs(M, N, K, "float8_e5m2")
    assert abs(sa * sb - 1) > 0.1 and np.abs(want).max() > 0


def test_only_a_scalar_scale_is_stored_from_registers():
    """The scaled store takes one scalar for the whole tile: a per-column factor, a 16-bit
    product's scale and a padded fp8 product keep the epilogue over the C tile."""
    from ptxforge.ops.schedules.gemm.forms import accumulator_scale, direct_store, gemm_form

    a, b, sa, sb, out = _decl(256, 256, 256, "float8_e4m3fn", "float16")
    prod = out.op.input_tensors[0].op
    form = gemm_form(prod, SM90A)
    assert accumulator_scale(prod, out.op) is not None and direct_store(prod, out.op, form)
    col = te.placeholder((256,), "float32", name="col")
    per_col = te.compute((256, 256), lambda i, j: prod.output(0)[i, j] * col[j], name="P")
    assert accumulator_scale(prod, per_col.op) is None
    assert not direct_store(prod, per_col.op, form)
    from dataclasses import replace

    assert not direct_store(prod, out.op, replace(form, in_dtype="float16"))
    tensors = _decl(200, 256, 256, "float8_e4m3fn", "float16")  # padded: through the C tile
    s = default_schedule(tensors[-1], target=SIM)
    assert "_scaled\"" not in "\n".join(str(p) for p in s.pipeline)


def test_a_scale_that_varies_in_the_nest_is_refused_by_the_intrinsic(monkeypatch):
    """``tensorize`` of the scaled store checks that its factor is one scalar for the
    64 x 8 tile: were a per-column factor taken for a scale, the nest would not match."""
    from ptxforge.ir.intrin.registry import get_intrin
    from ptxforge.ops.schedules.gemm import schedule as gemm_schedule
    from ptxforge.passes.errors import PassError

    assert get_intrin("store_wg_f32_f16_scaled").scalars == ("alpha",)
    a, b, sa, sb, out = _decl(128, 256, 256, "float8_e4m3fn", "float16")
    prod = out.op.input_tensors[0].op
    col = te.placeholder((256,), "float32", name="col")
    per_col = te.compute((128, 256), lambda i, j: (prod.output(0)[i, j] * col[j]).astype(
        "float16"), name="P")
    monkeypatch.setattr(gemm_schedule, "direct_store", lambda *args: True)
    monkeypatch.setattr(gemm_schedule, "accumulator_scale", lambda *args: col)
    s = te.create_schedule(per_col.op)
    with pytest.raises((ScheduleError, PassError), match="invariant in the nest"):
        schedule_gemm_wgmma(s, prod, per_col.op, WgmmaScheduleConfig(256, 2, 2, 0, 1),
                            SIM)
