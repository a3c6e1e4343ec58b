"""FP8 on wgmma (sm_90a): the ``m64nNk32`` e4m3 / e5m2 instruction kind, its intrinsics,
the simulator's products on fp8 shared tiles, and PTX that assembles for sm_90a."""

from __future__ import annotations

import numpy as np
import pytest

from ptxforge.backend_sim.wgmma import WarpgroupSim
from ptxforge.ir.float8 import float8_bits, float8_from_bits, quantize
from ptxforge.ir.intrin import IntrinKey, get_intrin, lookup
from ptxforge.ir.intrin.kinds import WGMMA, WGMMA_FP8, mma_kind
from ptxforge.ir.intrin.wgmma import WgmmaError, descriptors_for_tile, get_wgmma, tile_offsets

FP8 = ("float8_e4m3fn", "float8_e5m2")


@pytest.mark.parametrize("ab,ptx", [("float8_e4m3fn", "e4m3"), ("float8_e5m2", "e5m2")])
def test_fp8_wgmma_is_one_more_kind(ab, ptx):
    name = WGMMA_FP8.mma(ab, "float32", n=256)
    assert name == f"wgmma_m64n256k32_{ptx}_f32"
    it = get_intrin(name)
    assert it.ptx == f"wgmma.mma_async.sync.aligned.m64n256k32.f32.{ptx}.{ptx}"
    assert it.shapes == {"A": (64, 32), "B": (256, 32), "C": (64, 256)}
    assert it.dtypes == {"A": ab, "B": ab, "C": "float32"}
    assert lookup(IntrinKey("wgmma", ab=ab, acc="float32", n=256)) is it
    # the same accumulators, zeroing and stores as the 16-bit wgmma
    assert it.init == WGMMA.fill("float32", 256) == WGMMA_FP8.fill("float32", 256)
    assert WGMMA_FP8.store("float32", "bfloat16") == WGMMA.store("float32", "bfloat16")
    assert WGMMA_FP8.k == 32 and WGMMA_FP8.acc_scope == "warpgroup"
    assert mma_kind(ab, wgmma=True) is WGMMA_FP8
    spec = get_wgmma(256, ab)
    assert (spec.k, spec.itemsize, spec.fp8) == (32, 1, True)


def test_fp8_refusals():
    from ptxforge.ir.intrin import IntrinError

    with pytest.raises(IntrinError, match="takes B as \\[N, K\\] only"):
        WGMMA_FP8.mma("float8_e4m3fn", b_kn=True, n=128)
    with pytest.raises(WgmmaError, match="K-major only"):
        get_wgmma(128, "float8_e5m2", b_kn=True)
    with pytest.raises(IntrinError, match="run on wgmma m64nNk32 fp8 only"):
        mma_kind("float8_e4m3fn")
    with pytest.raises(IntrinError, match="accumulates in float32"):
        WGMMA_FP8.mma("float8_e4m3fn", "float16", n=128)
    with pytest.raises(WgmmaError, match="not float64"):
        get_wgmma(128, "float64")


def _fp8_gemm(M, N, K, ab, swizzle, n_tile):
    """C = A[M, K] x B[N, K]^T of fp8 tiles through the simulator's warpgroups: K in tiles
    of one 128-byte row (128 fp8 elements), each four k32 wgmmas; the numpy reference on
    the decoded fp8 values."""
    rng = np.random.default_rng(5)
    a = float8_bits(rng.standard_normal((M, K)) * 3, ab)
    b = float8_bits(rng.standard_normal((N, K)) * 3, ab)
    spec = get_wgmma(n_tile, ab)
    kt_el = 128  # fp8 elements in a 128-byte row
    a_tile, b_tile = 64 * 128, n_tile * 128
    c = np.empty((M, N), np.float32)
    for i in range(M // 64):
        for j in range(N // n_tile):
            sim = WarpgroupSim(-(-(a_tile + b_tile) // 1024) * 1024)
            sim.zero_accumulator("acc", n_tile)
            for kt in range(K // kt_el):
                if kt:
                    sim.wait_group(0)
                ka = a[64 * i:64 * i + 64, kt_el * kt:kt_el * kt + kt_el]
                kb = b[n_tile * j:n_tile * j + n_tile, kt_el * kt:kt_el * kt + kt_el]
                sim.store_shared(tile_offsets(64, kt_el, 1, swizzle), ka)
                sim.store_shared(a_tile + tile_offsets(n_tile, kt_el, 1, swizzle), kb)
                sim.fence_proxy_async()
                sim.fence()
                da = descriptors_for_tile(0, 64, kt_el, 1, swizzle, k_step=32)
                db = descriptors_for_tile(a_tile, n_tile, kt_el, 1, swizzle, k_step=32)
                assert len(da) == 4  # four k32 steps per 128-byte row
                for x, y in zip(da, db):
                    sim.mma_async(spec, "acc", x.encode(), y.encode())
                sim.commit_group()
            sim.wait_group(0)
            c[64 * i:64 * i + 64, n_tile * j:n_tile * j + n_tile] = sim.accumulator_tile("acc")
    want = (float8_from_bits(a, ab).astype(np.float64)
            @ float8_from_bits(b, ab).astype(np.float64).T)
    return c, want


@pytest.mark.parametrize("ab", FP8)
@pytest.mark.parametrize("M,N,K,swizzle,n_tile", [
    (64, 128, 128, "128B", 128),
    (128, 256, 256, "128B", 256),
    (64, 64, 256, "none", 64),
])
def test_simulated_fp8_wgmma_matches_numpy(ab, M, N, K, swizzle, n_tile):
    c, want = _fp8_gemm(M, N, K, ab, swizzle, n_tile)
    # fp8 products are exact; only the float32 accumulator rounds
    np.testing.assert_allclose(c, want, rtol=0, atol=1e-5 * np.abs(want).max())


def test_an_fp8_tile_in_the_wrong_layout_gives_wrong_results():
    # A stored unswizzled but read through 128B-swizzled descriptors: the simulator reads
    # the bytes where the hardware would, so the product is wrong, not right
    ab = "float8_e4m3fn"
    rng = np.random.default_rng(6)
    a = float8_bits(rng.standard_normal((64, 128)), ab)
    b = float8_bits(rng.standard_normal((64, 128)), ab)
    sim = WarpgroupSim(64 * 128 * 2)
    sim.zero_accumulator("acc", 64)
    sim.store_shared(tile_offsets(64, 128, 1, "none"), a)
    sim.store_shared(64 * 128 + tile_offsets(64, 128, 1, "128B"), b)
    sim.fence_proxy_async()
    sim.fence()
    for x, y in zip(descriptors_for_tile(0, 64, 128, 1, "128B", 32),
                    descriptors_for_tile(64 * 128, 64, 128, 1, "128B", 32)):
        sim.mma_async(get_wgmma(64, ab), "acc", x.encode(), y.encode())
    sim.commit_group()
    sim.wait_group(0)
    want = float8_from_bits(a, ab).astype(np.float64) @ float8_from_bits(b, ab).T
    assert np.abs(sim.accumulator_tile("acc") - want).max() > 1e-2


def test_per_tensor_scaled_reference():
    """The FP8 GEMM's meaning: out = (scale_a * scale_b) * (A8 x B8^T), A8 and B8 the fp8
    quantizations of A / scale_a and B / scale_b; close to the float product."""
    rng = np.random.default_rng(8)
    a = rng.standard_normal((64, 256)).astype(np.float32)
    b = rng.standard_normal((64, 256)).astype(np.float32)
    for ab in FP8:
        a8, sa = quantize(a, ab)
        b8, sb = quantize(b, ab)
        out = sa * sb * (float8_from_bits(a8, ab).astype(np.float64)
                         @ float8_from_bits(b8, ab).astype(np.float64).T)
        ref = a.astype(np.float64) @ b.astype(np.float64).T
        err = np.abs(out - ref).max() / np.abs(ref).max()
        assert err < (0.05 if ab == "float8_e4m3fn" else 0.1)


@pytest.mark.parametrize("ab", FP8)
def test_fp8_wgmma_ptx_assembles_for_sm_90a(ab):
    from ptxforge.backend_ptx.assemble import AssemblerError, find_ptxas, run_ptxas
    from ptxforge.backend_ptx.wgmma import tile_kernel_ptx

    spec = get_wgmma(128, ab)
    ptx = tile_kernel_ptx(spec, "128B")
    lines = [ln for ln in ptx.splitlines() if spec.ptx in ln]
    assert len(lines) == 4  # four k32 steps of a 128-byte row
    assert all(ln.rstrip().endswith("p, 1, 1; }") for ln in lines)  # no transpose immediates
    assert "ld.global.nc.b8" in ptx  # byte loads of the fp8 operands
    if find_ptxas() is None:
        pytest.skip("ptxas not installed")
    run_ptxas(ptx, "sm_90a")
    with pytest.raises(AssemblerError):
        run_ptxas(ptx, "sm_90")
