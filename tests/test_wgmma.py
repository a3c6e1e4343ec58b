"""wgmma (sm_90a): descriptors, the swizzled shared layouts, the accumulator layout, the
simulator's products and protocol rules, and PTX that assembles for sm_90a."""

from __future__ import annotations

import numpy as np
import pytest

from ptxforge.backend_sim.wgmma import WarpgroupSim, WgmmaProtocolError, to_bits
from ptxforge.ir.intrin.wgmma import (
    MatrixDescriptor,
    WgmmaError,
    accumulator_map,
    descriptors_for_tile,
    get_wgmma,
    require_wgmma,
    swizzle_address,
    tile_offsets,
)

RNG = np.random.default_rng(14)


def _random(shape):
    x = RNG.uniform(-1, 1, shape)
    x[x == 0] = 0.5  # never zeros: a dropped element must show
    return x


def test_descriptor_encodes_the_isa_fields():
    d = MatrixDescriptor(address=0x2400, lbo=16, sbo=1024, swizzle="128B")
    v = d.encode()
    assert v & 0x3FFF == 0x240 and (v >> 16) & 0x3FFF == 1 and (v >> 32) & 0x3FFF == 64
    assert v >> 62 == 1 and (v >> 49) & 7 == 0
    assert MatrixDescriptor.decode(v) == d
    for mode, bits in (("none", 0), ("64B", 2), ("32B", 3)):
        assert MatrixDescriptor(0, 16, 256, mode).encode() >> 62 == bits
    with pytest.raises(WgmmaError, match="multiple of 16"):
        MatrixDescriptor(8, 16, 1024, "128B").encode()
    with pytest.raises(WgmmaError, match="14 bits"):
        MatrixDescriptor(1 << 18, 16, 1024, "128B").encode()


def test_128b_swizzle_xors_the_16_byte_chunk_with_the_row():
    # row r of an atom (128 bytes), chunk c lands on chunk c ^ r: a permutation per row
    offs = tile_offsets(8, 64, 2, "128B")
    chunks = offs[:, ::8] // 16
    for r in range(8):
        assert list(chunks[r] % 8) == [c ^ r for c in range(8)]
        assert (chunks[r] // 8 == r).all()
    assert int(swizzle_address(0x80 + 0x10, "128B")) == 0x80
    assert int(swizzle_address(0x380 + 0x20, "64B")) == 0x380 + (0x20 ^ 0x30)
    for mode in ("none", "32B", "64B", "128B"):  # every element has its own 2 bytes
        o = tile_offsets(64, 64, 2, mode).reshape(-1)
        assert len(np.unique(o)) == o.size and o.max() < 64 * 64 * 2


def test_accumulator_layout_follows_the_isa():
    rows, cols = accumulator_map(128)
    # thread 37 = warp 1, lane 5 (g 1, t 1): d0 (17, 2), d1 (17, 3), d2 (25, 2), d5 (17, 11)
    assert list(rows[37, :3]) == [17, 17, 25] and list(cols[37, :3]) == [2, 3, 2]
    assert (rows[37, 5], cols[37, 5]) == (17, 11)
    flat = rows * 128 + cols
    assert len(np.unique(flat)) == 64 * 128  # each element once


def test_wgmma_needs_sm_90a():
    require_wgmma("cuda -arch=sm_90a")
    for t in ("cuda -arch=sm_90", "cuda -arch=sm_80"):
        with pytest.raises(WgmmaError, match="wgmma needs sm_90a"):
            require_wgmma(t)
    with pytest.raises(WgmmaError, match="N must be one of"):
        get_wgmma(100)


def _gemm(M, N, K, ab="float16", swizzle="128B", layout=None, stages=2, n_tile=None):
    """C = A[M, K] x B[N, K]^T with one warpgroup per 64 rows of A, K in steps of 64 through
    ``stages`` shared buffers, N in tiles of ``n_tile``: the loop structure of the wgmma
    schedule, run on the simulator."""
    n_tile = n_tile or N
    spec = get_wgmma(n_tile, ab)
    a, b = _random((M, K)), _random((N, K))
    a_tile, b_tile = 64 * 64 * 2, n_tile * 64 * 2
    stage_bytes = -(-(a_tile * (M // 64) + b_tile) // 1024) * 1024
    wg = {(i, j): WarpgroupSim(stages * stage_bytes) for i in range(M // 64)
          for j in range(N // n_tile)}
    lay = layout or (lambda rows: tile_offsets(rows, 64, 2, swizzle))
    for (i, j), sim in wg.items():
        sim.zero_accumulator("acc", n_tile)
        for kt in range(K // 64):
            base = (kt % stages) * stage_bytes
            if kt >= stages:
                sim.wait_group(0)  # the buffer's previous wgmmas are done before reuse
            ka = a[64 * i:64 * i + 64, 64 * kt:64 * kt + 64]
            kb = b[n_tile * j:n_tile * j + n_tile, 64 * kt:64 * kt + 64]
            sim.store_shared(base + lay(64), to_bits(ka, ab))
            sim.store_shared(base + a_tile + lay(n_tile), to_bits(kb, ab))
            sim.fence_proxy_async()
            sim.fence()
            da = descriptors_for_tile(base, 64, 64, 2, swizzle)
            db = descriptors_for_tile(base + a_tile, n_tile, 64, 2, swizzle)
            for x, y in zip(da, db):
                sim.mma_async(spec, "acc", x.encode(), y.encode())
            sim.commit_group()
            sim.wait_group(1)
        sim.wait_group(0)
    c = np.empty((M, N))
    for (i, j), sim in wg.items():
        c[64 * i:64 * i + 64, n_tile * j:n_tile * j + n_tile] = sim.accumulator_tile("acc")
    if ab == "bfloat16":
        ar, br = (to_bits(x, ab).astype(np.uint32) << 16 for x in (a, b))
        want = ar.view(np.float32).astype(np.float64) @ br.view(np.float32).astype(
            np.float64).T
    else:
        want = a.astype(np.float16).astype(np.float64) @ b.astype(np.float16).astype(
            np.float64).T
    return float(np.abs(c - want).max() / np.abs(want).max())


@pytest.mark.parametrize("M,N,K,ab,swizzle,n_tile", [
    (128, 128, 64, "float16", "128B", 128),
    (128, 256, 128, "float16", "128B", 256),
    (128, 256, 128, "bfloat16", "128B", 128),
    (64, 64, 192, "float16", "64B", 64),
    (64, 64, 128, "bfloat16", "32B", 64),
    (64, 128, 64, "float16", "none", 128),
])
def test_simulated_wgmma_gemm_matches_numpy(M, N, K, ab, swizzle, n_tile):
    assert _gemm(M, N, K, ab, swizzle, n_tile=n_tile) < 1e-6


def test_a_tile_in_the_wrong_layout_gives_wrong_results():
    # row-major unswizzled stores read through 128B-swizzled descriptors
    plain = lambda rows: (np.arange(rows)[:, None] * 128 + np.arange(64)[None, :] * 2)  # noqa
    assert _gemm(64, 64, 64, layout=plain) > 0.1
    swz64 = lambda rows: tile_offsets(rows, 64, 2, "64B")  # noqa: E731
    assert _gemm(64, 64, 64, layout=swz64) > 0.1


def _ready_sim():
    spec = get_wgmma(64)
    sim = WarpgroupSim(8192)
    sim.store_shared(0, to_bits(_random(64 * 64), "float16"))
    da = descriptors_for_tile(0, 64, 16, 2, "32B")[0].encode()
    return spec, sim, da


def test_protocol_errors():
    spec, sim, d = _ready_sim()
    sim.fence()
    with pytest.raises(WgmmaProtocolError, match="fence.proxy.async"):
        sim.mma_async(spec, "acc", d, d)
    sim.fence_proxy_async()
    spec, sim2, _ = _ready_sim()
    sim2.fence_proxy_async()
    with pytest.raises(WgmmaProtocolError, match="no wgmma.fence"):
        sim2.mma_async(spec, "acc", d, d)
    sim.mma_async(spec, "acc", d, d)
    with pytest.raises(WgmmaProtocolError, match="not committed"):
        sim.wait_group(0)
    sim.commit_group()
    with pytest.raises(WgmmaProtocolError, match="in flight"):
        sim.accumulator("acc")
    with pytest.raises(WgmmaProtocolError, match="not yet waited"):
        sim.store_shared(0, np.zeros(8, np.uint16))
    sim.wait_group(0)
    sim.accumulator("acc")
    with pytest.raises(WgmmaProtocolError, match="no wgmma.fence"):  # registers touched
        sim.mma_async(spec, "acc", d, d)


def test_wgmma_ptx_assembles_for_sm_90a_only():
    from ptxforge.backend_ptx.assemble import AssemblerError, find_ptxas, run_ptxas
    from ptxforge.backend_ptx.wgmma import tile_kernel_ptx

    if find_ptxas() is None:
        pytest.skip("ptxas not installed")
    for n, ab in ((128, "float16"), (256, "bfloat16")):
        ptx = tile_kernel_ptx(get_wgmma(n, ab), "128B")
        for s in ("wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned",
                  "wgmma.wait_group.sync.aligned", "fence.proxy.async.shared::cta",
                  get_wgmma(n, ab).ptx):
            assert s in ptx
        run_ptxas(ptx, "sm_90a")
    with pytest.raises(AssemblerError):
        run_ptxas(ptx, "sm_90")
    with pytest.raises(WgmmaError, match="wgmma needs sm_90a"):
        tile_kernel_ptx(get_wgmma(128), "128B", target="cuda -arch=sm_90")


@pytest.mark.parametrize("ab,bn,stages,in_flight", [("float16", 256, 4, 1),
                                                    ("bfloat16", 128, 3, 0)])
def test_wgmma_gemm_kernel_assembles(ab, bn, stages, in_flight):
    from ptxforge.backend_ptx.assemble import find_ptxas, run_ptxas

    from .wgmma_llvm_gemm import gemm_kernel_ptx

    ptx = gemm_kernel_ptx(512, 512, 512, ab, bn, stages, in_flight=in_flight)
    assert ptx.count(get_wgmma(bn, ab).ptx) == 4  # four k16 steps per 64-wide K tile
    assert f"wgmma.wait_group.sync.aligned \t{in_flight};" in ptx
    assert "cp.async.cg.shared.global" in ptx and "fence.proxy.async.shared::cta" in ptx
    if find_ptxas() is not None:
        _, log = run_ptxas(ptx, "sm_90a")
        assert "0 bytes spill stores" in log and "serialized" not in log


def test_wgmma_gemm_kernel_rejects_what_it_cannot_run():
    from .wgmma_llvm_gemm import gemm_kernel_ptx

    with pytest.raises(WgmmaError, match="multiples of 128"):
        gemm_kernel_ptx(100, 256, 64)
    with pytest.raises(WgmmaError, match="block N"):
        gemm_kernel_ptx(128, 192, 64, bn=192)
    with pytest.raises(WgmmaError, match="stages"):
        gemm_kernel_ptx(128, 256, 64, stages=2, in_flight=1)
    for t in ("cuda -arch=sm_90", "cuda -arch=sm_80"):
        with pytest.raises(WgmmaError, match="wgmma needs sm_90a"):
            gemm_kernel_ptx(128, 256, 64, target=t)


def test_wgmma_dense_entry_point():
    from .wgmma_llvm_gemm import WgmmaConfig, compile_wgmma_dense

    k = compile_wgmma_dense(256, 512, 128, "bfloat16", WgmmaConfig(256, 3, 1))
    assert k.grid == (2, 2, 1) and k.block == (256, 1, 1)
    assert k.dynamic_shared_bytes == 3 * (128 + 256) * 64 * 2
    assert "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16" in k.ptx
    with pytest.raises(WgmmaError, match="wgmma needs sm_90a"):
        compile_wgmma_dense(256, 512, 128, target="cuda -arch=sm_80")
    with pytest.raises(WgmmaError, match="float16 or bfloat16"):
        compile_wgmma_dense(256, 512, 128, "float32")
