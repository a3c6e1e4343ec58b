"""The wgmma GEMM's knobs for mid-size products (issue 26): 192-wide tiles (``block_n``
192 where B is read K-major) and the grouped block order (``raster``), on the simulator
against numpy (direct stores, epilogues over the C tile, padding, split-K, a remapped
epilogue), their refusals, the PTX for sm_90a and the sweep that measures them."""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import ptxforge
import pytest
from ptxforge import ops, te
from ptxforge.ir.te import ComputeOp
from ptxforge.ops.schedules.gemm.knobs import WgmmaScheduleConfig
from ptxforge.ops.schedules.gemm.schedule import schedule_gemm_wgmma
from ptxforge.passes.schedule.common import ScheduleError

from .bench_scripts import load_bench
from .lowp import f64, host
from .test_wgmma_gemm import RNG, SIM, _dense, _ref, _run, _schedule

SM90A = "cuda -arch=sm_90a"
BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")


def _grid(mod) -> list:
    line = next(x for x in str(mod.device_module).splitlines() if '"grid"' in x)
    return [int(v) for v in line.split('"grid": [')[1].split("]")[0].split(",")]


@pytest.mark.parametrize("M,N,K,bias,act,residual,cast,cfg,grid", [
    # 192-wide tiles: direct stores; bias + gelu over the C tile with padded M and N
    (128, 384, 192, False, None, False, "float16", (192, 2, 3, 1), [2, 1, 1]),
    (100, 200, 256, True, "gelu", False, "float16", (192, 1, 4, 1), [2, 2, 1]),
    # 192 in split-K parts (the partial sums' kernel first)
    (128, 384, 512, False, None, True, None, (192, 2, 3, 1, 2), [2, 1, 2]),
    # grouped order: 4 row blocks of one column block after another, on blockIdx.x alone
    (256, 128, 128, False, None, False, "float16", (64, 1, 2, 0, 1, 4), [8, 1, 1]),
    (200, 192, 128, True, "gelu", False, "float16", (64, 1, 2, 0, 1, 2), [12, 1, 1]),
    (256, 128, 256, False, None, False, None, (64, 2, 2, 0, 2, 2), [4, 1, 2]),
    # the staged epilogue: only the cast, yet through the C tile, in the grouped order
    (256, 128, 128, False, None, False, "float16", (128, 2, 2, 0, 1, 2, True), [2, 1, 1]),
])
def test_the_knobs_compute_the_product(M, N, K, bias, act, residual, cast, cfg, grid):
    y, args = _dense(M, N, K, bias=bias, act=act, residual=residual, cast=cast)
    s, used = _schedule(y, WgmmaScheduleConfig(*cfg))
    mod, vals, got = _run(s, args, y)
    want = _ref(vals, bias, act, residual)
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2 * np.abs(want).max())
    assert _grid(mod) == grid
    if used.block_n == 192:
        assert "wgmma_m64n192k16_f16_f32" in s.pipeline.text
    if used.staged_epilogue:
        assert '"shared", [T_matmul_NT]' in s.pipeline.text
        assert "store_wg_f32_f16" not in s.pipeline.text


def test_a_remapped_epilogue_takes_the_grouped_order():
    # [2, 128, 64] products stored through the head transpose back to [128, 128]
    a = te.placeholder((2, 128, 64), "float16", name="a")
    b = te.placeholder((2, 64, 64), "float16", name="b")
    c = ops.nn.batch_matmul(a, b, transpose_b=False, out_dtype="float16")
    prod = c.op.input_tensors[0].op
    y = ops.reshape(ops.transpose(ops.reshape(c, (1, 2, 128, 64)), [0, 2, 1, 3]), (128, 128))
    s = te.create_schedule(y.op)
    for op in s.dag.ops:
        if isinstance(op, ComputeOp) and op is not prod and op is not y.op:
            s[op].compute_inline()
    schedule_gemm_wgmma(s, prod, y.op, WgmmaScheduleConfig(64, 1, 1, 0, 1, 2), SIM)
    mod = ptxforge.build(s, [a, b, y], target=SIM)
    av, bv = host(RNG, a.shape, a.dtype), host(RNG, b.shape, b.dtype)
    out = np.full(y.shape, np.nan, y.dtype)
    mod(av, bv, out)
    want = np.matmul(f64(av, "float16"), f64(bv, "float16")).transpose(1, 0, 2).reshape(128, 128)
    np.testing.assert_allclose(f64(out, y.dtype), want, rtol=0, atol=4e-3 * np.abs(want).max())
    assert _grid(mod) == [2, 1, 2]  # the batch stays on blockIdx.z


@pytest.mark.parametrize("shape,cfg,rule", [
    ((256, 256, 128), (64, 1, 2, 0, 1, 3), r"need raster 3 to divide the 4 row blocks of 64"),
    ((256, 256, 128), (64, 1, 2, 0, 1, 0), r"need raster a positive int \(got 0\)"),
    ((128, 192, 128), (96, 1, 2, 0), r"need block_n in \(64, 128, 256, 192\) \(got 96\)"),
    ((128, 128, 128), (128, 2, 2, 0, 1, 1, 1), r"need staged_epilogue True or False \(got 1\)"),
])
def test_refusals_name_the_rule(shape, cfg, rule):
    y, _ = _dense(*shape, cast="float16")
    with pytest.raises(ScheduleError, match=rule):
        _schedule(y, WgmmaScheduleConfig(*cfg))


def test_192_wide_tiles_stay_refused_where_b_is_read_mn_major():
    # B as [K, N]: the MN-major tile is made of 64-column panels of the three widths
    from .test_wgmma_kn import _matmul
    from .test_wgmma_kn import _schedule as kn_schedule

    _, y = _matmul(128, 384, 256, "float16")
    with pytest.raises(ScheduleError, match=r"need block_n in \(64, 128, 256\) \(got 192"):
        kn_schedule(y, WgmmaScheduleConfig(192, 2, 3, 1))


def test_a_convolution_refuses_a_raster():
    from ptxforge.ops.schedules.gemm.schedule import schedule_conv2d_nhwc_wgmma

    from .test_tensorcore_conv import conv_layer, inlined_schedule

    tensors, _, _ = conv_layer(1, 7, 7, 128, 64, 1, 1, 0, "float16", "bias_relu")
    s, conv = inlined_schedule(tensors[-1])
    with pytest.raises(ScheduleError, match="need raster 1 on a convolution"):
        schedule_conv2d_nhwc_wgmma(s, conv, tensors[-1].op, SIM,
                                   WgmmaScheduleConfig(64, 1, 1, 0, 1, 2))


@pytest.mark.parametrize("shape,cfg", [
    ((4096, 2304, 768), (192, 2, 4, 1)),           # 384 blocks: 2.9 waves of 132
    ((1024, 50257, 768), (128, 2, 5, 1, 1, 8)),    # the lm head, B read once
])
def test_the_mid_size_kernels_compile_for_sm_90a(shape, cfg):
    sys.path.insert(0, BENCH)
    from bench_gemm_few_rows import build
    from ptxforge.backend_ptx.assemble import find_ptxas, run_ptxas

    _, mod, _ = build((shape, "wgmma", WgmmaScheduleConfig(*cfg)))
    assert not isinstance(mod, str), mod
    ptx = mod.get_source("ptx")
    n = cfg[0]
    assert ptx.count(f"wgmma.mma_async.sync.aligned.m64n{n}k16") == 4  # one K step of 64
    assert "cp.async" in ptx and "st.local" not in ptx
    if cfg[5:] and cfg[5] > 1:
        # one grid dimension: the row and column blocks out of blockIdx.x
        assert "%ctaid.x" in ptx and "%ctaid.y" not in ptx
    if find_ptxas() is not None:
        _, log = run_ptxas(ptx, "sm_90a")
        assert "0 bytes spill stores" in log and "bytes stack frame" in log, log


def test_the_sweep_offers_the_new_knobs():
    bench = load_bench("bench_gemm_few_rows")
    args = argparse.Namespace(stages=[4], splits=[1], in_flight=[0, 1], raster=[1, 4, 8],
                              block_n=[192], top_mma=0, staged=[0])
    names = {bench.describe(kind, cfg) for kind, cfg, _ in bench.configs(1024, 2304, 768, args)}
    assert {"wgmma 128x192 s4 f1 sk1", "wgmma 128x192 s4 f0 sk1", "wgmma 128x128 s4 f1 sk1 r4",
            "wgmma 64x256 s4 f0 sk1 r8"} <= names
    # 8 row blocks of 128 in one group of 8 is the same order turned: not built
    assert "wgmma 128x128 s4 f1 sk1 r8" not in names
    args = argparse.Namespace(stages=[4], splits=[1, 2], in_flight=[1], raster=[1],
                              block_n=[], top_mma=0, staged=[0, 1])
    names = {bench.describe(kind, cfg) for kind, cfg, _ in bench.configs(1024, 2304, 768, args)}
    assert "wgmma 128x128 s4 f1 sk1 staged" in names
    assert "wgmma 128x128 s4 f1 sk2 staged" not in names  # split-K: the C tile anyway
    # a bias (a fused epilogue) goes through the C tile in every configuration
    args.epilogue = "bias"
    names = {bench.describe(kind, cfg) for kind, cfg, _ in bench.configs(1024, 2304, 768, args)}
    assert "wgmma 128x128 s4 f1 sk1" in names and not any("staged" in n for n in names)
    inputs, y, prod, form = bench.layer_args(1024, 2304, 768, "bias")
    assert [t.name for t in inputs] == ["x", "w", "b"] and y.op is not prod
    # the default sweep is the one measured before: no 192, one group in flight, raster 1
    args = argparse.Namespace(stages=[4], splits=[1], in_flight=[1], raster=[1], block_n=[],
                              top_mma=0, staged=[0])
    names = {bench.describe(kind, cfg) for kind, cfg, _ in bench.configs(1024, 2304, 768, args)}
    assert names == {"default", "wgmma 64x64 s4 f1 sk1", "wgmma 64x128 s4 f1 sk1",
                     "wgmma 64x256 s4 f1 sk1", "wgmma 128x64 s4 f1 sk1",
                     "wgmma 128x128 s4 f1 sk1", "wgmma 128x256 s4 f1 sk1"}


def test_the_estimate_reads_a_b_larger_than_the_l2_once_per_group_of_row_blocks():
    from ptxforge.ops.schedules.gemm.estimate import dram_passes, wgmma_time
    from ptxforge.ops.schedules.gemm.forms import gemm_form
    from ptxforge.target import as_target

    t = as_target(SM90A)
    assert list(dram_passes([8, 8, 8, 32], [1, 2, 8, 1], 77e6, t)) == [8, 4, 1, 32]
    assert list(dram_passes([8, 32], [1, 1], 32e6, t)) == [1, 1]  # 4096^2 fp16 stays in L2
    x = te.placeholder((1024, 768), "float16", name="x")
    w = te.placeholder((50257, 768), "float16", name="w")
    y = ops.nn.dense(x, w)
    prod = next(op for op in te.create_schedule(y.op).dag.ops
                if isinstance(op, ComputeOp) and op.reduce_axis)
    form = gemm_form(prod, t)
    grouped, plain = (wgmma_time(WgmmaScheduleConfig(128, 2, 5, 1, 1, r), form, t, True)
                      for r in (8, 1))
    # 8 passes over the head's 77 MB at 3 TB/s: about 206 us; once, the kernel's own time
    assert plain > 200e-6 and grouped < 0.75 * plain


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K,cfg", [
    (512, 768, 768, (192, 2, 4, 1)),          # direct stores
    (300, 576, 512, (192, 1, 5, 1)),          # padded: bias + gelu over the C tile
    (1024, 1000, 768, (128, 2, 4, 1, 1, 8)),  # grouped order, padded N
    (1024, 768, 768, (128, 2, 3, 0, 1, 4)),   # two blocks an SM, two tiles ahead
    (1024, 768, 768, (128, 2, 4, 1, 1, 1, True)),  # the cast through the C tile
])
def test_the_knobs_on_the_gpu(M, N, K, cfg):
    """The new knobs' kernels built for an H100 against float64 numpy."""
    from ptxforge.backend_ptx import array, compile_module, cuda, empty
    from ptxforge.target import as_target

    dev = cuda(0)
    if dev.sm != "sm_90":
        pytest.skip(f"wgmma needs an sm_90 GPU; this one is {dev.sm}")
    rng = np.random.default_rng(7)
    bias = M % 64 != 0
    y, args = _dense(M, N, K, bias=bias, act="gelu" if bias else None, cast="float16")
    target = as_target(SM90A)
    with target:
        s = te.create_schedule(y.op)
        ops_ = [op for op in s.dag.ops if isinstance(op, ComputeOp)]
        prod = next(op for op in ops_ if op.reduce_axis)
        for op in ops_:
            if op is not prod and op is not y.op:
                s[op].compute_inline()
        schedule_gemm_wgmma(s, prod, y.op, WgmmaScheduleConfig(*cfg), target)
        loaded = compile_module(ptxforge.lower(s, args + [y]), target).load(dev)
    vals = [host(rng, a.shape, a.dtype) for a in args]
    out = empty((M, N), y.dtype, dev)
    loaded(*[array(h, dev, a.dtype) for h, a in zip(vals, args)], out)
    want = _ref([f64(h, a.dtype) for h, a in zip(vals, args)], bias, "gelu" if bias else None,
                False)
    np.testing.assert_allclose(f64(out.numpy(), y.dtype), want, rtol=0,
                               atol=3e-3 * np.abs(want).max())


def test_the_dense_template_tunes_the_block_order_where_there_are_row_blocks():
    from ptxforge import autotvm
    from ptxforge.autotvm import tensorcore_wgmma as tw
    from ptxforge.autotvm.space import ConfigEntity, InstantiationError
    from ptxforge.target import as_target

    small = autotvm.task.create(tw.NAME, args=(128, 128, 256, "float16"), target=SIM)
    assert list(small.config_space.space_map) == list(tw.KNOBS)  # as before: no raster
    task = autotvm.task.create(tw.NAME, args=(256, 64, 128, "float16"), target=SIM)
    space = task.config_space
    assert list(space.space_map) == [*tw.KNOBS, "raster"]
    assert [e.val for e in space.space_map["raster"].entities] == [1, 2, 4, 8]
    # the indices of the space without the knob keep their configurations (raster 1)
    plain = space.get(space.knob2point([0, 0, 1, 0, 0, 0]))
    assert plain["raster"].val == 1 and plain.index < len(space) // 4
    # a record from before the knob replays in the plain order
    old = ConfigEntity.from_json_dict({"index": plain.index, "code_hash": None, "entity": [
        [k, "ot", plain[k].val] for k in tw.KNOBS]}, space)
    assert str(task.instantiate(old)[0].pipeline) == str(task.instantiate(plain)[0].pipeline)
    # raster 4 runs the 4 row blocks of 64 under one column block on blockIdx.x
    grouped = space.get(space.knob2point([0, 0, 1, 0, 0, 2]))
    s, tensors = task.instantiate(grouped)
    mod = ptxforge.build(s, tensors, target=SIM)
    assert _grid(mod) == [4, 1, 1]
    a, b = host(RNG, (256, 128), "float16"), host(RNG, (64, 128), "float16")
    c = np.full((256, 64), np.nan, np.float16)
    mod(a, b, c)
    want = f64(a, "float16") @ f64(b, "float16").T
    np.testing.assert_allclose(f64(c, "float16"), want, rtol=0, atol=4e-3 * np.abs(want).max())
    bad = space.get(space.knob2point([0, 1, 1, 0, 0, 3]))  # 2 row blocks of 128: raster 8
    with pytest.raises(InstantiationError, match="need raster 8 to divide the 2 row blocks"):
        task.instantiate(bad)
    with as_target("cuda -arch=sm_90a"):
        assert task.default_config() is not None and task.default_config()["raster"].val == 1
