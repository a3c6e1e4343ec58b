"""wgmma with B read as ``[K, N]`` (MN-major B, ``imm-trans-b`` 1): the layout against the
PTX ISA's canonical MN-major layout, the simulator reading it through descriptors (a wrong
layout gives wrong numbers), te matmul / batch_matmul on ``sim -arch=sm_90a`` against numpy,
refusals, and PTX for sm_90a."""

from __future__ import annotations

import re

import numpy as np
import pytest

import ptxforge
from ptxforge import ops, te
from ptxforge.ir.dtype import BFLOAT16_HOST
from ptxforge.ir.intrin.wgmma import (
    MatrixDescriptor,
    WgmmaError,
    descriptors_for_tile_mn,
    get_wgmma,
    operand_addresses,
    swizzle_address,
    tile_offsets,
    tile_offsets_mn,
)
from ptxforge.ops.schedules.gemm.knobs import WgmmaScheduleConfig
from ptxforge.ops.schedules.gemm.schedule import schedule_gemm_wgmma
from ptxforge.passes.schedule.common import ScheduleError

from .lowp import f64, host, measure_on_sim

SIM = "sim -arch=sm_90a"
RNG = np.random.default_rng(17)


def test_mn_major_addresses_match_the_isa_example():
    # PTX ISA, "Canonical Layouts" example: MN-major, 64B swizzle, bf16, LBO 256 and SBO 512
    # elements: Swizzle<2,4,3> o ((8,4,2),(8,2)):((1,8,256),(32,512)) (element units)
    d = MatrixDescriptor(0, 256 * 2, 512 * 2, "64B")
    got = operand_addresses(MatrixDescriptor.decode(d.encode()), 64, 16, 2, mn_major=True)
    k = np.arange(16)[:, None]
    n = np.arange(64)[None, :]
    elem = (n % 8) + 8 * ((n // 8) % 4) + 256 * (n // 32) + 32 * (k % 8) + 512 * (k // 8)
    np.testing.assert_array_equal(got, swizzle_address(elem * 2, "64B"))
    assert got.shape == (16, 64)


@pytest.mark.parametrize("n", [64, 128, 256])
def test_mn_major_tiles_read_back_through_their_descriptors(n):
    # a [64, n] tile stored as n / 64 panels of 64 K-rows x 128 bytes, 128B swizzle
    b = RNG.standard_normal((64, n))
    off = tile_offsets_mn(64, n, 2) // 2
    assert sorted(off.reshape(-1)) == list(range(64 * n))  # a permutation
    mem = np.zeros(64 * n)
    mem[off] = b
    descs = descriptors_for_tile_mn(0, 64, n, 2)
    assert [(d.lbo, d.sbo) for d in descs] == [(64 * 128, 1024)] * 4
    for s, d in enumerate(descs):
        addr = operand_addresses(MatrixDescriptor.decode(d.encode()), n, 16, 2, mn_major=True)
        np.testing.assert_array_equal(mem[addr // 2], b[16 * s:16 * s + 16])
        # LBO and SBO in their K-major roles read other bytes
        swapped = MatrixDescriptor(d.address, d.sbo, d.lbo, "128B")
        if n > 64:
            bad = operand_addresses(swapped, n, 16, 2, mn_major=True)
            assert not np.array_equal(mem[bad // 2], b[16 * s:16 * s + 16])
    # an LBO inside an atom cannot separate the N atoms
    with pytest.raises(WgmmaError, match="leading byte offset"):
        operand_addresses(MatrixDescriptor(0, 16, 1024, "128B"), 128, 16, 2, mn_major=True)
    # the tile stored K-major (as B^T) and read MN-major gives other numbers
    kmaj = np.zeros(64 * n)
    kmaj[tile_offsets(n, 64, 2, "128B")[:, :16] // 2] = b[:16].T
    addr = operand_addresses(descs[0], n, 16, 2, mn_major=True)
    assert not np.allclose(kmaj[addr // 2], b[:16])


def _matmul(M, N, K, ab, out=None, batch=None):
    if batch:
        a = te.placeholder((batch, M, K), ab, name="a")
        b = te.placeholder((batch, K, N), ab, name="b")
        y = ops.nn.batch_matmul(a, b, out_dtype="float32", transpose_b=False)
    else:
        a = te.placeholder((M, K), ab, name="a")
        b = te.placeholder((K, N), ab, name="b")
        y = ops.nn.matmul(a, b, out_dtype="float32")
    if out:
        y = ops.cast(y, out)
    return [a, b], y


def _schedule(y, cfg, target=SIM):
    from ptxforge.ir.te import ComputeOp

    s = te.create_schedule(y.op)
    prod = next(op for op in s.dag.ops if isinstance(op, ComputeOp) and op.reduce_axis)
    used = schedule_gemm_wgmma(s, prod, y.op if y.op is not prod else None, cfg, target)
    return s, used


@pytest.mark.parametrize("M,N,K,ab,out,batch,cfg", [
    (128, 128, 256, "float16", None, None, (64, 2, 3, 1)),       # one group in flight
    (64, 192, 192, "bfloat16", "bfloat16", None, (64, 1, 3, 1)),
    (100, 70, 136, "float16", "float16", None, (64, 1, 2, 0)),   # padded M, N, K
    (64, 128, 128, "bfloat16", None, 3, (64, 1, 2, 0)),          # P x V of attention
    (96, 128, 512, "float16", "float16", None, (64, 1, 3, 1, 2)),  # split-K, padded M
])
def test_matmul_with_b_as_kn_matches_numpy(M, N, K, ab, out, batch, cfg):
    args, y = _matmul(M, N, K, ab, out, batch)
    s, _ = _schedule(y, WgmmaScheduleConfig(*cfg))
    text = str(s.pipeline)
    assert f"wgmma_m64n64k16_{'f16' if ab == 'float16' else 'bf16'}_f32_kn" in text
    _check_matmul(s, args, y, ab)


def _check_matmul(s, args, y, ab):
    """Build schedule ``s`` for the simulator, run it on random inputs and compare with
    numpy's product of the same 16-bit values."""
    vals = [host(RNG, a.shape, a.dtype) for a in args]
    got = np.full(y.shape, np.nan, y.dtype)
    ptxforge.build(s, args + [y], target=SIM)(*vals, got)
    want = np.matmul(f64(vals[0], ab), f64(vals[1], ab))
    tol = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 8e-3}[y.dtype]
    np.testing.assert_allclose(f64(got, y.dtype), want, rtol=0, atol=tol * np.abs(want).max())


def test_the_simulator_reads_b_through_the_mn_major_descriptor(monkeypatch):
    # the simulator computes with the bytes the descriptor addresses: the same tile read
    # through another layout gives another product
    import ptxforge.backend_sim.wgmma as simw
    from ptxforge.ir.intrin import wgmma as w

    args, y = _matmul(64, 64, 128, "float16")
    s, _ = _schedule(y, WgmmaScheduleConfig(64, 1, 2, 0))
    vals = [host(RNG, a.shape, a.dtype) for a in args]
    want = f64(vals[0], "float16") @ f64(vals[1], "float16")

    def run():
        got = np.full(y.shape, np.nan, y.dtype)
        ptxforge.build(s, args + [y], target=SIM)(*vals, got)
        return got

    np.testing.assert_allclose(run(), want, rtol=0, atol=1e-5 * np.abs(want).max())
    # the MN-major B read without the swizzle's XOR (the same bytes, permuted: what a
    # descriptor without the 128B mode would read from the swizzled tile)
    real = w.operand_addresses

    def unswizzled(d, rows, k, itemsize, mn_major=False):
        addr = real(d, rows, k, itemsize, mn_major)
        return w.swizzle_address(addr, "128B") if mn_major else addr

    monkeypatch.setattr(simw, "operand_addresses", unswizzled)
    got = run()
    assert np.abs(got - want).max() > 0.1 * np.abs(want).max()


@pytest.mark.parametrize("M,N,K,ab,out,batch,cfg", [
    (64, 256, 128, "float16", "float16", 2, (128, 1, 2, 0)),     # two 128-wide tiles
    (100, 200, 136, "bfloat16", None, None, (256, 1, 2, 0)),     # padded M, N, K
])
def test_matmul_with_b_as_kn_in_panels_matches_numpy(M, N, K, ab, out, batch, cfg):
    # block_n 128 / 256: the shared B tile in 64-column panels read by one m64n{128,256}k16
    args, y = _matmul(M, N, K, ab, out, batch)
    s, _ = _schedule(y, WgmmaScheduleConfig(*cfg))
    text = str(s.pipeline)
    assert f"wgmma_m64n{cfg[0]}k16_{'f16' if ab == 'float16' else 'bf16'}_f32_kn" in text
    assert re.search(r"layout_panels\(([\w.]*\.)?[bB]\.shared, 64\)", text), text
    _check_matmul(s, args, y, ab)


def test_the_simulator_reads_the_b_panels_through_the_leading_byte_offset(monkeypatch):
    # the panels are LBO apart: a descriptor with another LBO reads other numbers
    import ptxforge.backend_sim.wgmma as simw
    from ptxforge.ir.intrin import wgmma as w

    args, y = _matmul(64, 128, 128, "float16")
    s, _ = _schedule(y, WgmmaScheduleConfig(128, 1, 2, 0))
    vals = [host(RNG, a.shape, a.dtype) for a in args]
    want = f64(vals[0], "float16") @ f64(vals[1], "float16")

    def run():
        got = np.full(y.shape, np.nan, y.dtype)
        ptxforge.build(s, args + [y], target=SIM)(*vals, got)
        return got

    np.testing.assert_allclose(run(), want, rtol=0, atol=1e-5 * np.abs(want).max())

    def half_panel(intrin, operand, address):  # LBO 32 K-rows: inside the first panel
        d = w.descriptor_for(intrin, operand, address)
        return w.MatrixDescriptor(d.address, 32 * 128, d.sbo, d.swizzle) if intrin.b_kn \
            and operand == "B" else d

    monkeypatch.setattr(simw, "descriptor_for", half_panel)
    got = run()
    assert np.abs(got[:, :64] - want[:, :64]).max() < 1e-5 * np.abs(want).max()
    assert np.abs(got[:, 64:] - want[:, 64:]).max() > 0.1 * np.abs(want).max()
    # the matcher holds the panels' stride to the descriptor's LBO
    monkeypatch.setattr(w, "B_KN_LBO", 2 * 64 * 128)
    with pytest.raises(Exception, match="16384 bytes apart .* are 8192 bytes apart"):
        run()


def test_kn_refusals_name_the_rule():
    args, y = _matmul(128, 256, 256, "float16")
    with pytest.raises(ScheduleError, match=r"need block_n in \(64, 128, 256\) \(got 96"):
        _schedule(y, WgmmaScheduleConfig(96, 2, 3, 1))
    # the default tiles of this B read as [K, N] are 64 wide (the estimate's pick)
    s, used = _schedule(y, None)
    assert used.block_n == 64 and "_kn" in str(s.pipeline)
    # a wide MN-major B tensorized without its panel layout
    from ptxforge.ir.te import ComputeOp
    from ptxforge.ops.schedules.gemm import schedule as tw
    from ptxforge.passes.errors import PassError

    def no_panels(s, sh, f, ko, vec, threads, async_copy, block_n):
        from ptxforge.ops.schedules.gemm.pieces import schedule_tile_copy
        schedule_tile_copy(s, sh, f, ko, vec, threads, async_copy, swizzle=3)

    s = te.create_schedule(y.op)
    prod = next(op for op in s.dag.ops if isinstance(op, ComputeOp) and op.reduce_axis)
    orig = tw.schedule_b_kn_copy
    tw.schedule_b_kn_copy = no_panels
    try:
        with pytest.raises(PassError, match=r"b.shared with no panel layout; .* read as 2 "
                                            r"panels of 64 columns .* layout_panels\(64\)"):
            schedule_gemm_wgmma(s, prod, None, WgmmaScheduleConfig(128, 2, 3, 1), SIM)
    finally:
        tw.schedule_b_kn_copy = orig


def test_a_kn_tile_off_the_128_byte_rows_is_refused():
    from ptxforge.ir.expr import IntImm
    from ptxforge.ir.intrin.match import IntrinError, _check_wgmma_mn_operand
    from ptxforge.ir.intrin.registry import get_intrin

    class Op:  # a B operand: rows of 128 N elements (256 bytes), not one atom
        buffer = type("Buf", (), {"dtype": "float16", "name": "b_sh"})()
        ld = 128
        base = IntImm(0)
        panel = 0

    with pytest.raises(IntrinError, match="rows of exactly 128 bytes"):
        _check_wgmma_mn_operand(Op, get_intrin("wgmma_m64n64k16_f16_f32_kn"), "ci")
    with pytest.raises(IntrinError, match=r"stored as 2 panels of 64 columns \(layout_panels"):
        _check_wgmma_mn_operand(Op, get_intrin("wgmma_m64n128k16_f16_f32_kn"), "ci")
    with pytest.raises(IntrinError, match="whole 128B swizzle atoms of 64 N elements"):
        _check_wgmma_mn_operand(Op, get_intrin("wgmma_m64n96k16_f16_f32_kn"), "ci")

    class Paneled(Op):  # rows of one atom, but panels 32 K-rows (4096 bytes) apart
        ld = 64
        panel = 32 * 64

    with pytest.raises(IntrinError, match="8192 bytes apart .* are 4096 bytes apart"):
        _check_wgmma_mn_operand(Paneled, get_intrin("wgmma_m64n256k16_f16_f32_kn"), "ci")
    Paneled.panel = 64 * 64
    _check_wgmma_mn_operand(Paneled, get_intrin("wgmma_m64n256k16_f16_f32_kn"), "ci")


@pytest.mark.parametrize("ab", ["float16", "bfloat16"])
def test_kn_ptx_for_sm_90a(ab):
    from ptxforge.backend_ptx.assemble import find_ptxas, run_ptxas

    args, y = _matmul(256, 256, 512, ab, ab)
    s, _ = _schedule(y, WgmmaScheduleConfig(64, 2, 4, 1), "cuda -arch=sm_90a")
    ptx = ptxforge.build(s, args + [y], target="cuda -arch=sm_90a").get_source("ptx")
    spec = get_wgmma(64, ab, b_kn=True)
    assert spec.ptx in ptx
    # scale-d predicate, scale-a 1, scale-b 1, imm-trans-a 0, imm-trans-b 1
    assert ", p, 1, 1, 0, 1;" in ptx and ", p, 1, 1, 0, 0;" not in ptx
    # B's descriptor: LBO 8192 (between 64-element N panels), SBO 1024, 128B swizzle; A's
    # the K-major one (LBO 16, unused)
    assert str(MatrixDescriptor(0, 8192, 1024, "128B").encode()) in ptx
    assert str(MatrixDescriptor(0, 16, 1024, "128B").encode()) in ptx
    if find_ptxas() is not None:
        _, log = run_ptxas(ptx, "sm_90a")
        assert "0 bytes spill stores" in log and "serialized" not in log


@pytest.mark.parametrize("what,cfg", [("conv", (128, 2, 4, 1)), ("matmul", (256, 1, 3, 1))])
def test_kn_panels_ptx_for_sm_90a(what, cfg):
    # one m64n{128,256}k16 per k16 step over the paneled B: imm-trans-b 1, B's descriptor
    # LBO 8192 (the panel stride), SBO 1024; ptxas takes it without spills
    from ptxforge.backend_ptx import compile_module
    from ptxforge.backend_ptx.assemble import find_ptxas, run_ptxas
    from ptxforge.ops.schedules.gemm.schedule import schedule_conv2d_nhwc_wgmma
    from ptxforge.target import as_target

    from .test_tensorcore_conv import conv_layer, inlined_schedule

    target = as_target("cuda -arch=sm_90a")
    if what == "conv":  # ResNet-18's layer4 3x3 conv at batch 16
        tensors, _, _ = conv_layer(16, 7, 7, 512, 512, 3, 1, 1, "float16", "bias_add_relu")
        s, conv = inlined_schedule(tensors[-1])
        schedule_conv2d_nhwc_wgmma(s, conv, tensors[-1].op, target, WgmmaScheduleConfig(*cfg))
    else:
        args, y = _matmul(256, 512, 512, "bfloat16", "bfloat16")
        s, _ = _schedule(y, WgmmaScheduleConfig(*cfg), target)
        tensors = args + [y]
    with target:
        (kernel,) = compile_module(ptxforge.lower(s, tensors), target).kernels.values()
    ptx = kernel.get_source("ptx")
    assert get_wgmma(cfg[0], "float16" if what == "conv" else "bfloat16", b_kn=True).ptx in ptx
    assert ", p, 1, 1, 0, 1;" in ptx and ", p, 1, 1, 0, 0;" not in ptx
    assert str(MatrixDescriptor(0, 8192, 1024, "128B").encode()) in ptx
    if find_ptxas() is not None:
        _, log = run_ptxas(ptx, "sm_90a")
        assert "0 bytes spill stores" in log and "serialized" not in log


def test_the_default_takes_the_kn_wgmma_for_large_products():
    from ptxforge.ops.schedules import default_schedule

    _, y = _matmul(1024, 1024, 1024, "float16")
    assert "wgmma_m64n64k16_f16_f32_kn" in str(default_schedule(y, SIM).pipeline)
    _, y = _matmul(64, 512, 512, "bfloat16", batch=4)
    assert "_kn" in str(default_schedule(y, SIM).pipeline)


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K,ab,out,batch,cfg", [
    (512, 768, 1024, "float16", "float16", None, (64, 2, 4, 1)),
    (256, 320, 512, "bfloat16", None, None, (64, 1, 3, 0)),
    (100, 200, 264, "float16", "float16", None, (64, 2, 3, 1)),
    (128, 128, 256, "float16", "float16", 4, (64, 2, 3, 1)),
    (512, 768, 1024, "float16", "float16", None, (128, 2, 4, 1)),   # B in 64-column panels
    (100, 200, 264, "bfloat16", None, 2, (256, 1, 3, 1)),
])
def test_kn_wgmma_on_the_gpu(M, N, K, ab, out, batch, cfg):
    from ptxforge.backend_ptx import array, compile_module, cuda, empty
    from ptxforge.target import as_target

    dev = cuda(0)
    if dev.sm != "sm_90":
        pytest.skip(f"wgmma needs an sm_90 GPU (sm_90a code); this one is {dev.sm}")
    args, y = _matmul(M, N, K, ab, out, batch)
    target = as_target("cuda -arch=sm_90a")
    with target:
        s, _ = _schedule(y, WgmmaScheduleConfig(*cfg), target)
        loaded = compile_module(ptxforge.lower(s, args + [y]), target).load(dev)
    vals = [host(RNG, a.shape, a.dtype) for a in args]
    c = empty(y.shape, y.dtype, dev)
    loaded(*[array(v, dev, ab) for v in vals], c)
    want = np.matmul(f64(vals[0], ab), f64(vals[1], ab))
    tol = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 8e-3}[y.dtype]
    assert np.abs(f64(c.numpy(), y.dtype) - want).max() / np.abs(want).max() < tol


# -- the implicit-GEMM convolution (HWIO kernel: B as [K, N]) on wgmma ----------------------


@pytest.mark.parametrize("shape,epilogue,dtype,cfg", [
    ((2, 14, 14, 64, 128, 3, 1, 1), "bias_add_relu", "float16", (64, 2, 4, 1)),
    ((1, 9, 9, 24, 16, 3, 2, 1), "bias", "bfloat16", (64, 1, 2, 0)),   # padded N, K
    ((1, 7, 7, 128, 96, 1, 1, 0), "", "float16", None),
    ((1, 8, 8, 20, 40, 3, 1, 1), "bias_relu", "float16", (64, 2, 3, 1)),
    # split-K: float32 partial sums on blockIdx.z, a second kernel with the epilogue
    ((2, 6, 6, 32, 64, 3, 1, 1), "bias_add_relu", "float16", (64, 1, 2, 0, 2)),
    ((1, 5, 5, 64, 64, 3, 1, 1), "bias_add_relu", "bfloat16", (64, 2, 1, 0, 4)),
    # 128 and 256 output channels a block: the kernel tile in 64-column panels
    ((1, 6, 6, 32, 128, 3, 1, 1), "bias_add_relu", "float16", (128, 1, 2, 0)),
    ((1, 5, 5, 64, 256, 3, 1, 1), "bias_relu", "bfloat16", (128, 2, 3, 1, 2)),
    ((1, 5, 5, 64, 256, 1, 1, 0), "bias", "float16", (256, 1, 1, 0)),
], ids=["resnet_3x3", "bf16_stride2", "1x1", "narrow_channels", "split_k2", "split_k4",
        "n128", "n128_c256_split_k2", "n256"])
def test_conv2d_nhwc_on_wgmma_matches_numpy(shape, epilogue, dtype, cfg):
    from ptxforge.ops.schedules.gemm.chooser import choose_wgmma_conv_config
    from ptxforge.ops.schedules.gemm.schedule import schedule_conv2d_nhwc_wgmma

    from .test_tensorcore_conv import check, conv_layer, inlined_schedule

    tensors, arrays, reference = conv_layer(*shape, dtype, epilogue)
    s, conv = inlined_schedule(tensors[-1])
    epi = None if tensors[-1].op is conv else tensors[-1].op
    used = schedule_conv2d_nhwc_wgmma(s, conv, epi, SIM,
                                      cfg and WgmmaScheduleConfig(*cfg))
    assert (f"wgmma_m64n{used.block_n}k16_{'f16' if dtype == 'float16' else 'bf16'}_f32_kn"
            in str(s.pipeline))
    if cfg is None:
        assert used == choose_wgmma_conv_config(conv, SIM)
    split = used.split_k
    assert ("rfactor" in str(s.pipeline)) == (split > 1)
    mod = ptxforge.build(s, tensors, target=SIM)
    if split > 1:  # the product into [split, M, N] partial sums, then the summing kernel
        grids = [tuple(k.attrs.launch.grid) for k in mod.device_module.kernels()]
        assert len(grids) == 2 and grids[0][2] == split, grids
    out = np.full(tensors[-1].shape, np.nan,
                  dtype if dtype == "float16" else BFLOAT16_HOST)
    mod(*arrays, out)
    check(f64(out, dtype), reference(), dtype)


def test_conv2d_nhwc_wgmma_refusals_and_ptx():
    from ptxforge.backend_ptx import compile_module
    from ptxforge.backend_ptx.assemble import find_ptxas, run_ptxas
    from ptxforge.ops.schedules.gemm.schedule import schedule_conv2d_nhwc_wgmma
    from ptxforge.target import as_target

    from .test_tensorcore_conv import conv_layer, inlined_schedule

    tensors, _, _ = conv_layer(1, 7, 7, 128, 64, 1, 1, 0, "float16", "bias_relu")
    for target, cfg, rule in (("sim", None, "wgmma needs sm_90a"),
                              (SIM, (192, 1, 1, 0), r"need block_n in \(64, 128, 256\)"),
                              (SIM, (64, 1, 3, 1), "need at least 3 steps of 64 for 3 "
                                                   r"pipeline stages \(K = 128"),
                              (SIM, (64, 1, 1, 0, 0), r"need split_k a positive int \(got 0"),
                              (SIM, (64, 1, 1, 0, 2.0), "need split_k a positive int"),
                              (SIM, (64, 1, 2, 0, 2), "need at least 2 steps of 64 for 2 "
                                                      "pipeline stages .* gives 1 per "
                                                      "split_k part")):
        s, conv = inlined_schedule(tensors[-1])
        with pytest.raises(ScheduleError, match=rule):
            schedule_conv2d_nhwc_wgmma(s, conv, tensors[-1].op, target,
                                       cfg and WgmmaScheduleConfig(*cfg))
    tensors, _, _ = conv_layer(1, 14, 14, 256, 256, 3, 1, 1, "float16", "bias_add_relu")
    for split in (1, 2):  # split-K: the wgmma kernel of partial sums, then their sum
        s, conv = inlined_schedule(tensors[-1])
        schedule_conv2d_nhwc_wgmma(s, conv, tensors[-1].op, "cuda -arch=sm_90a",
                                   WgmmaScheduleConfig(64, 2, 4, 1, split))
        with as_target("cuda -arch=sm_90a") as t:
            kernels = list(compile_module(ptxforge.lower(s, tensors), t).kernels.values())
        assert len(kernels) == split
        ptx = kernels[0].get_source("ptx")
        assert get_wgmma(64, "float16", b_kn=True).ptx in ptx and ", p, 1, 1, 0, 1;" in ptx
        if find_ptxas() is not None:
            _, log = run_ptxas(ptx, "sm_90a")
            assert "0 bytes spill stores" in log and "serialized" not in log


@pytest.mark.gpu
@pytest.mark.parametrize("shape,epilogue,dtype,cfg", [
    ((2, 14, 14, 256, 256, 3, 1, 1), "bias_add_relu", "float16", None),
    ((1, 28, 28, 64, 128, 1, 2, 0), "bias", "bfloat16", None),
    # ResNet-18's 7x7 layer at batch 16 in 2 and 4 split-K parts
    ((16, 7, 7, 512, 512, 3, 1, 1), "bias_add_relu", "float16", (64, 2, 4, 1, 2)),
    ((16, 7, 7, 512, 512, 3, 1, 1), "bias_relu", "bfloat16", (64, 1, 4, 1, 4)),
    # 128 and 256 output channels a block (the kernel tile in 64-column panels)
    ((16, 7, 7, 512, 512, 3, 1, 1), "bias_add_relu", "float16", (128, 2, 4, 1)),
    ((16, 7, 7, 512, 512, 3, 1, 1), "bias_relu", "bfloat16", (128, 1, 4, 1, 4)),
    ((2, 14, 14, 128, 256, 3, 1, 1), "bias", "float16", (256, 1, 4, 1)),
    ((4, 28, 28, 128, 128, 3, 1, 1), "bias_add_relu", "float16", (128, 2, 4, 1)),
])
def test_conv2d_nhwc_wgmma_on_the_gpu(shape, epilogue, dtype, cfg):
    from ptxforge.backend_ptx import array, compile_module, cuda, empty
    from ptxforge.ops.schedules.gemm.schedule import schedule_conv2d_nhwc_wgmma
    from ptxforge.target import as_target

    from .test_tensorcore_conv import check, conv_layer, inlined_schedule

    dev = cuda(0)
    if dev.sm != "sm_90":
        pytest.skip(f"wgmma needs an sm_90 GPU (sm_90a code); this one is {dev.sm}")
    tensors, arrays, reference = conv_layer(*shape, dtype, epilogue)
    target = as_target("cuda -arch=sm_90a")
    with target:
        s, conv = inlined_schedule(tensors[-1])
        schedule_conv2d_nhwc_wgmma(s, conv, tensors[-1].op, target,
                                   cfg and WgmmaScheduleConfig(*cfg))
        loaded = compile_module(ptxforge.lower(s, tensors), target).load(dev)
    out = empty(tensors[-1].shape, tensors[-1].dtype, dev)
    loaded(*[array(a, dev, t.dtype) for a, t in zip(arrays, tensors)], out)
    check(f64(out.numpy(), dtype), reference(), dtype)


def _kn_layer(M, N, K):
    """A product with B read as [K, N] (fp16), cast to fp16."""
    args, y = _matmul(M, N, K, "float16", "float16")
    return args + [y]


def test_the_auto_scheduler_offers_the_kn_wgmma_sketch():
    from ptxforge import autosched
    from ptxforge.autosched.evolution import random_population
    from ptxforge.autosched.features import population_features
    from ptxforge.autosched.state import State
    from ptxforge.autosched.workload_registry import register_workload

    fn = register_workload(_kn_layer)
    task = autosched.SearchTask(func=fn, args=(100, 192, 256), target="cuda -arch=sm_90a")
    wg = len(task.sketches) - 1
    sk = task.sketches[wg]
    assert sk.name.startswith("wgmma_gemm(")
    step = sk.steps[0]
    # B as [K, N] in 64-column panels: every block_n up to N (192, rounded up to 256)
    assert step.b_kn and dict((sl.name, sl.choices) for sl in sk.slots)[
        step.slot("block_n")] == (64, 128, 256)
    pop = random_population(task, 300, np.random.default_rng(3))
    pop = pop[pop[:, 0] == wg]
    _, valid, _ = population_features(task.models, pop, task.flop_ct, 132)
    assert valid.any()
    states = [State.from_row(r, task) for r in pop[valid][:2]]
    for st in states:
        assert re.search(r"wgmma_m64n(64|128|256)k16_f16_f32_kn", st.pipeline_text(task))
    for r in measure_on_sim(task, states):
        assert r.ok and r.correctness == "passed", r


def _conv_layer_nhwc(n, h, w, ci, co, k, stride, pad):
    """conv2d NHWC fp16 (float32 sums cast to fp16) + bias + ReLU, as a network fuses it."""
    d = te.placeholder((n, h, w, ci), "float16", name="data")
    kern = te.placeholder((k, k, ci, co), "float16", name="kernel")
    b = te.placeholder((co,), "float16", name="bias")
    y = ops.nn.conv2d_nhwc(d, kern, stride, pad, out_dtype="float16")
    y = te.compute(y.shape, lambda *i: te.max(y[i] + b[i[3]], te.const(0, "float16")),
                   name="T_relu")
    return [d, kern, b, y]


def test_the_auto_scheduler_offers_the_wgmma_conv_sketch_on_sm_90a():
    from ptxforge import autosched
    from ptxforge.autosched.evolution import random_population
    from ptxforge.autosched.features import population_features
    from ptxforge.autosched.state import State
    from ptxforge.autosched.tensorcore import WgmmaConvStep
    from ptxforge.autosched.workload_registry import register_workload

    fn = register_workload(_conv_layer_nhwc)
    args = (1, 10, 10, 64, 64, 3, 1, 1)  # 100 pixels (padded), K = 9 x 64
    plain = autosched.SearchTask(func=fn, args=args, target="cuda -arch=sm_90").sketches
    assert not any(s.name.startswith("wgmma") for s in plain)
    task = autosched.SearchTask(func=fn, args=args, target="cuda -arch=sm_90a")
    names = [s.name for s in task.sketches]
    wg = len(names) - 1
    assert names[wg].startswith("wgmma_conv(") and names[wg - 1].startswith("tensorcore_conv(")
    sk = task.sketches[wg]
    assert isinstance(sk.steps[0], WgmmaConvStep)
    slots = {sl.name: sl.choices for sl in sk.slots}
    step = sk.steps[0]
    # K = 9 steps of 64: split-K parts of at least one step each
    assert slots[step.slot("block_n")] == (64,) and slots[step.slot("split_k")] == (1, 2, 4, 8)
    pop = random_population(task, 300, np.random.default_rng(4))
    pop = pop[pop[:, 0] == wg]
    _, valid, est = population_features(task.models, pop, task.flop_ct, 132)
    assert valid.any() and np.isfinite(est[valid]).all()
    # one state without split-K, one with (its partial sums summed by a second kernel)
    k = 1 + [sl.name for sl in sk.slots].index(step.slot("split_k"))
    rows = pop[valid]
    states = [State.from_row(rows[rows[:, k] == 0][0], task),
              State.from_row(rows[rows[:, k] > 0][0], task)]
    for st, split in zip(states, (False, True)):
        text = st.pipeline_text(task)
        assert "wgmma_m64n64k16_f16_f32_kn" in text and ("rfactor" in text) == split
    for r in measure_on_sim(task, states):
        assert r.ok and r.correctness == "passed", r


def test_the_default_conv_schedule_takes_wgmma_on_sm_90a_only():
    """fp16 3x3 256 -> 256 at 14x14, batch 16: the estimates take wgmma on sm_90a (H100:
    15 us against 37 us on mma.sync); sm_80, sm_90 and TF32 stay on mma.sync; a batch-1
    7x7 layer (49 pixels, K = 4608) splits the reduction."""
    from ptxforge.ops.schedules import default_schedule
    from ptxforge.ops.schedules.gemm.chooser import choose_conv_config, wgmma_conv_choice
    from ptxforge.ops.schedules.gemm.estimate import gemm_time, wgmma_time
    from ptxforge.ops.schedules.gemm.forms import conv_gemm_form

    from .test_tensorcore_conv import conv_layer, inlined_schedule

    sm90a = "cuda -arch=sm_90a"
    for target, dtype, wgmma in ((sm90a, "float16", True), (sm90a, "float32", False),
                                 ("cuda -arch=sm_80", "float16", False),
                                 ("cuda -arch=sm_90", "float16", False)):
        tensors, _, _ = conv_layer(16, 14, 14, 256, 256, 3, 1, 1, dtype, "bias_add_relu",
                                   precision="tf32" if dtype == "float32" else None)
        text = str(default_schedule(tensors[-1], target).pipeline)
        assert ("wgmma_m64n64k16_f16_f32_kn" in text) == wgmma, (target, dtype)
        assert ("mma_m16n8k" in text) != wgmma, (target, dtype)
        _, conv = inlined_schedule(tensors[-1])
        w = wgmma_conv_choice(conv, tensors[-1].op, target)
        assert (w is not None) == wgmma
        if wgmma:
            form = conv_gemm_form(conv)
            # the DRAM floor is the input and kernel (2.2 MB), not the window matrix
            assert form.input_bytes == (16 * 14 * 14 * 256 + 9 * 256 * 256) * 2
            assert 2 * wgmma_time(w, form, target, c_tile=True) < gemm_time(
                choose_conv_config(conv, target), form, target)
    tensors, _, _ = conv_layer(1, 7, 7, 512, 512, 3, 1, 1, "float16", "bias_relu")
    _, conv = inlined_schedule(tensors[-1])
    w = wgmma_conv_choice(conv, tensors[-1].op, sm90a)
    assert w is not None and w.split_k > 1


def test_the_default_conv_takes_wide_kernel_tiles_where_the_estimate_does():
    """B as [K, N] offers block_n 128 and 256 (up to C_out): the chooser takes 128 where
    the estimate ranks it first (batch-16 3x3 128 -> 128 at 28x28: 128 x 128 tiles);
    ResNet-18's layer1 (64 channels) has only 64-wide tiles to choose."""
    from ptxforge.ops.schedules.gemm.chooser import wgmma_candidates, wgmma_conv_choice
    from ptxforge.ops.schedules.gemm.estimate import wgmma_time
    from ptxforge.ops.schedules.gemm.forms import conv_gemm_form

    from .test_tensorcore_conv import conv_layer, inlined_schedule

    sm90a = "cuda -arch=sm_90a"
    for shape, bn in (((16, 28, 28, 128, 128, 3, 1, 1), 128), ((16, 56, 56, 64, 64, 3, 1, 1),
                                                               64)):
        tensors, _, _ = conv_layer(*shape, "float16", "bias_add_relu")
        _, conv = inlined_schedule(tensors[-1])
        form = conv_gemm_form(conv)
        cands = wgmma_candidates(form, sm90a)
        assert {c.block_n for c in cands} == ({64, 128} if bn == 128 else {64})
        w = wgmma_conv_choice(conv, tensors[-1].op, sm90a)
        assert w.block_n == bn and w.split_k == 1
        assert wgmma_time(w, form, sm90a, True) == min(
            wgmma_time(c, form, sm90a, True) for c in cands if c.split_k == 1)


def test_the_autotvm_wgmma_conv_template_takes_split_k():
    from ptxforge import autotvm
    from ptxforge.autotvm import tensorcore_wgmma as tw
    from ptxforge.autotvm.space import InstantiationError
    from ptxforge.ops import testing as ref
    from ptxforge.target import as_target

    from .test_tensorcore_conv import check

    args = (1, 6, 6, 64, 64, 3, 3, 1, 1, "float16")
    task = autotvm.task.create(tw.CONV_NAME, args=args, target=SIM)
    space = task.config_space
    assert list(space.space_map) == list(tw.KNOBS)
    assert task.flop == 2 * 36 * 64 * 576
    # block_n 64, 1 warpgroup (36 pixels), stages 1-5 and split_k 1-8 (K: 9 steps of 64)
    assert space.dims == [1, 1, 5, 2, 4]
    with as_target(SIM):
        # 2 stages over split_k 8: K padded to 8 x 128, 2 steps per part
        s, tensors = task.instantiate(space.get(space.knob2point([0, 0, 1, 0, 3])))
        assert "rfactor" in str(s.pipeline)
        # 3 stages over split_k 4: K padded to 4 x 192, 3 steps per part; 4 stages are too many
        with pytest.raises(InstantiationError, match="need at least 4 steps of 64 for 4 "
                                                     "pipeline stages .* per split_k part"):
            task.instantiate(space.get(space.knob2point([0, 0, 3, 0, 2])))
    x = RNG.standard_normal((1, 6, 6, 64)).astype("float16")
    w = (RNG.standard_normal((3, 3, 64, 64)) / 24).astype("float16")
    mod = ptxforge.build(s, tensors, target=SIM)
    assert len(mod.device_module.kernels()) == 2
    got = np.full(tensors[-1].shape, np.nan, "float16")
    mod(x, w, got)
    want = ref.conv2d_nhwc_python(x.astype(np.float64), w.astype(np.float64), 1, 1)
    check(got.astype(np.float64), want, "float16")
    with pytest.raises(ScheduleError, match="wgmma takes float16 or bfloat16"):
        autotvm.task.create(tw.CONV_NAME, args=args[:-1] + ("float32",), target=SIM)
    with pytest.raises(WgmmaError, match="wgmma needs sm_90a"):
        autotvm.task.create(tw.CONV_NAME, args=args, target="sim -arch=sm_90")
