"""Shared-memory layouts: the XOR swizzle pass, storage_align padding of fp16 tiles, and
16-byte vectorized global loads."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge.backend_ptx import find_ptxas
from ptxforge.backend_ptx.compile import compile_kernel
from ptxforge.ir.expr import IntImm, IRError
from ptxforge.ir.simplify import simplify
from ptxforge.passes.lower.swizzle_layout import swizzled

from .test_async_copy import flat, matmul_schedule, run_matmul

needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas is not installed here")


def _swz(i: int, per_chunk: int, bits: int) -> int:
    return simplify(swizzled(IntImm(i), per_chunk, bits)).value


@pytest.mark.parametrize("per_chunk,bits", [(8, 3), (4, 3), (8, 2), (4, 1)])
def test_swizzle_permutes_chunks_within_groups(per_chunk, bits):
    group = per_chunk << bits
    n = 4 * group
    image = [_swz(i, per_chunk, bits) for i in range(n)]
    assert sorted(image) == list(range(n))  # a permutation of the buffer
    for i in range(n):
        assert image[i] // group == i // group  # stays in its group
        assert image[i] % per_chunk == i % per_chunk  # a chunk moves whole
    # chunk c of group g lands at chunk c ^ (g mod 2**bits)
    g, c = 1, 2 % (1 << bits)
    assert image[g * group + c * per_chunk] == g * group + (c ^ (g % (1 << bits))) * per_chunk


def test_swizzle_spreads_a_column_of_rows_over_all_banks():
    # fp16 rows of 64 elements (128 bytes): the 8 rows ldmatrix reads in one column of
    # 16-byte chunks must fall in 8 different 16-byte bank groups
    for col in range(8):
        banks = {(_swz(r * 64 + col * 8, 8, 3) * 2 // 16) % 8 for r in range(8)}
        assert len(banks) == 8
        plain = {((r * 64 + col * 8) * 2 // 16) % 8 for r in range(8)}
        assert len(plain) == 1  # unswizzled: an 8-way conflict


@pytest.mark.parametrize("kw", [
    dict(), dict(stages=3), dict(M=60, N=56, K=44, stages=2, use_async=False),
    dict(dtype="float16", BK=16, vec=8, stages=3),
])
def test_swizzled_matmul_matches_numpy(kw):
    s, args = matmul_schedule(**kw)
    plain = flat(ptxforge.lower(s, args))
    s["A.shared"].swizzle(3)
    s["B.shared"].swizzle(2)
    assert "swizzle(A.shared, 3)" in s.pipeline.text
    mod = ptxforge.lower(s, args)
    assert mod.kernels()[0].attrs.swizzle == {"A.shared": 3, "B.shared": 2}
    # the chunk XOR is spelled with power-of-two floordiv / floormod
    assert flat(mod).count("floormod(") > plain.count("floormod(") + 8
    M, K = (int(x) for x in args[0].shape)
    N = int(args[1].shape[1])
    c, ref = run_matmul(mod, M, N, K, kw.get("dtype", "float32"))
    np.testing.assert_allclose(c, ref, rtol=1e-5)


def test_swizzle_errors():
    s, args = matmul_schedule()
    with pytest.raises(IRError, match="bits=4; use 1 to 3"):
        s["A.shared"].swizzle(4)
    with pytest.raises(IRError, match="swizzling spreads shared-memory banks"):
        s["C"].swizzle(2)
    s, args = matmul_schedule(BK=2, vec=2)  # A.shared: 32 x 2 fp32 = 256 bytes
    s["A.shared"].swizzle(3)
    s["B.shared"].swizzle(3)  # 2 x 32 fp32 = 256 bytes; a group of 8 chunks is 128: fine
    ptxforge.lower(s, args)
    s, args = matmul_schedule(M=40, BM=40, BN=32, BK=1, vec=1)  # 40 x 1 fp32 = 160 bytes
    s["A.shared"].swizzle(2)
    with pytest.raises(IRError, match=r"the buffer holds 160 bytes, not a multiple of 64"):
        ptxforge.lower(s, args)


def test_storage_align_pads_fp16_tiles_and_keeps_16_byte_copies():
    s, args = matmul_schedule(dtype="float16", BK=16, vec=8, stages=2)
    s["A.shared"].storage_align(0, 32, 24)  # rows of 16 fp16 padded to a stride of 24
    mod = ptxforge.lower(s, args)
    text = flat(mod)
    # 2 pipeline slots of 31 * 24 + 16 = 760 elements (1520 bytes, 16-byte aligned)
    assert "alloc A.shared: float16[1520] shared" in text
    copies = [ln for ln in text.splitlines() if ln.startswith("async_copy(A.shared")]
    assert len(copies) == 2 and all(ln.endswith(", 16)") for ln in copies)
    assert all("(floordiv(ax1.inner.outer, 2) * 24)" in ln for ln in copies)
    c, ref = run_matmul(mod, 64, 64, 64, "float16")
    np.testing.assert_allclose(c, ref, rtol=1e-5)


@needs_ptxas
@pytest.mark.parametrize("dtype,vec,bk", [("float32", 4, 8), ("float16", 8, 16)])
def test_vectorized_copy_is_one_16_byte_global_load(dtype, vec, bk):
    s, args = matmul_schedule(use_async=False, dtype=dtype, vec=vec, BK=bk)
    k = compile_kernel(ptxforge.lower(s, args).kernels()[0], "sm_90", stop_after="ptx",
                       cache=False)
    ptx = k.get_source("ptx")
    # the unrolled vector loop's loads merge into 128-bit loads and stores
    assert "ld.global.nc.v4.b32" in ptx and "st.shared.v4.b32" in ptx


@pytest.mark.parametrize("kw", [dict(), dict(stages=2, vec=4)])
def test_layout_panels_stores_a_tile_in_panels(kw):
    # B.shared [8, 32] as 4 panels of [8, 8] (panel index outermost), A.shared [32, 8] as 2
    # of [32, 4]; every access goes through the panels, so the product is unchanged
    from ptxforge.ir.attrs import FuncAttrs
    from ptxforge.ir.stmt import Alloc, walk

    s, args = matmul_schedule(**kw)
    s["B.shared"].layout_panels(8)
    s["A.shared"].layout_panels(4)
    assert "layout_panels(B.shared, 8)" in s.pipeline.text
    mod = ptxforge.lower(s, args)
    sizes = {x.buffer.name: x.buffer.shape for x in walk(mod.kernels()[0].body)
             if isinstance(x, Alloc)}
    assert sizes["B.shared"][0] == 8 * 32 * max(kw.get("stages", 1), 1)
    c, want = run_matmul(mod, 64, 64, 64)
    np.testing.assert_allclose(c, want, rtol=1e-5)
    attrs = FuncAttrs(panels={"B.shared": 8})
    assert FuncAttrs.from_json(attrs.to_json()) == attrs


def test_layout_panels_places_the_buffer_and_refuses_what_it_cannot():
    from ptxforge.ir.attrs import FuncAttrs
    from ptxforge.passes.errors import PassError

    s, args = matmul_schedule()
    s["B.shared"].layout_panels(12)  # the tile's 32 columns are not whole panels of 12
    with pytest.raises(Exception, match=r"layout_panels B.shared: the buffer's last extent "
                                        r"\(32\) is not a multiple of the panel width 12"):
        ptxforge.lower(s, args)
    s, args = matmul_schedule()
    s["B.shared"].storage_align(0, 36, 0)
    with pytest.raises(PassError, match="padded rows"):
        s["B.shared"].layout_panels(8)
    with pytest.raises(PassError, match="width must be a positive int"):
        s["A.shared"].layout_panels(0)
    s["A.shared"].layout_panels(4)
    with pytest.raises(PassError, match="stored in panels"):
        s["A.shared"].storage_align(0, 12, 0)
    with pytest.raises(IRError, match="panels belongs to tensor-IR"):
        FuncAttrs.kernel().replace(panels={"B.shared": 8})
