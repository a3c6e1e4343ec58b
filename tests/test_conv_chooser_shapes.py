"""The small-convolution and long-reduction rules of the conv default
(``ops/schedules/gemm/conv_shapes.py``) and the pooling block size: the picks on layers of
MobileNetV2 b1, ResNet-18 b1 / b16 and ResNet-50 b1, their ranges, and the picked
configurations built to sm_90a PTX (llvmlite) and run on the simulator against float64
numpy. The records' judgement of the picks is ``tests/test_conv_chooser_records.py``."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge.ops.schedules import default_schedule
from ptxforge.ops.schedules.gemm import chooser
from ptxforge.ops.schedules.gemm.chooser import conv_config, epilogue_reads, wgmma_conv_choice
from ptxforge.ops.schedules.gemm.conv_shapes import (
    long_conv_wgmma_config,
    small_conv_config,
)
from ptxforge.ops.schedules.gemm.forms import conv_gemm_form
from ptxforge.ops.schedules.gemm.knobs import TensorCoreConfig, WgmmaScheduleConfig
from ptxforge.ops.schedules.gemm.rules import check_conv_config, check_wgmma_conv
from ptxforge.ops.schedules.gemm.schedule import schedule_conv2d_nhwc_wgmma
from ptxforge.ops.schedules.reduction import POOL_THREADS

from .test_conv_chooser_residual import _layer, _ptx, _sim, _tiles
from .test_tensorcore_conv import inlined_schedule

SM80 = "cuda -arch=sm_80"
SM90A = "cuda -arch=sm_90a"


@pytest.mark.parametrize("shape,epilogue,tiles", [
    # (n, h, w, ci, co, k, stride, pad) -> (block_m, block_n, block_k, warps_m, warps_n,
    # stages, split_k); MobileNetV2 b1 unless said
    ((1, 14, 14, 64, 384, 1, 1, 0), "bias", (16, 64, 64, 1, 4, 1, 1)),    # _10, 1.56 us
    ((1, 14, 14, 96, 576, 1, 1, 0), "bias", (16, 64, 32, 1, 4, 3, 1)),    # _12, 1.84
    ((1, 7, 7, 160, 960, 1, 1, 0), "bias", (16, 32, 64, 1, 4, 3, 1)),     # _15, 1.86
    ((1, 7, 7, 320, 1280, 1, 1, 0), "bias", (32, 32, 64, 1, 4, 4, 1)),    # _17, 2.50
    ((1, 7, 7, 576, 160, 1, 1, 0), "bias", (16, 32, 32, 1, 4, 4, 4)),     # add_5, 2.74
    ((1, 7, 7, 960, 160, 1, 1, 0), "bias_add", (16, 32, 32, 1, 4, 4, 8)),  # add_add_4
    ((1, 56, 56, 144, 24, 1, 1, 0), "bias_add", (32, 32, 64, 1, 4, 3, 1)),  # add_add
    ((1, 112, 112, 32, 16, 1, 1, 0), "bias", (32, 16, 32, 2, 2, 1, 1)),   # add, 1.54
    ((1, 56, 56, 64, 128, 1, 2, 0), "bias", (16, 64, 64, 1, 4, 1, 1)),    # ResNet-18 b1
])
def test_small_convolutions_take_four_warps_of_mma_sync(shape, epilogue, tiles):
    _, _, _, _, conv, epi = _layer(shape, epilogue)
    cfg = conv_config(conv, SM90A, epi)
    assert isinstance(cfg, TensorCoreConfig) and _tiles(cfg) == tiles
    assert cfg == small_conv_config(conv_gemm_form(conv), SM90A)
    assert wgmma_conv_choice(conv, epi, SM90A) is None
    check_conv_config(cfg, conv, SM90A)


@pytest.mark.parametrize("shape,why", [
    ((1, 56, 56, 64, 64, 1, 1, 0), "whole 64 x 64 wgmma tiles (ResNet-50 b1, 1.89 us)"),
    ((1, 4, 4, 512, 256, 1, 1, 0), "16 rows: fewer than measured"),
    ((1, 56, 56, 64, 256, 1, 1, 0), "103 MFLOP"),
    ((16, 14, 14, 64, 384, 1, 1, 0), "batch 16: 16 x the work"),
])
def test_the_small_rule_is_silent_outside_its_range(shape, why):
    _, _, _, _, conv, epi = _layer(shape, "bias")
    form = conv_gemm_form(conv)
    assert small_conv_config(form, SM90A) is None, why
    assert conv_config(conv, SM90A, epi) == chooser._best(
        chooser.gemm_candidates(form, SM90A), form, chooser.as_target(SM90A), 0)


def test_the_small_rule_needs_sm90():
    _, _, _, _, conv, _ = _layer((1, 14, 14, 64, 384, 1, 1, 0), "bias")
    assert small_conv_config(conv_gemm_form(conv), SM80) is None


@pytest.mark.parametrize("shape,epilogue,bn,split", [
    ((16, 14, 14, 256, 256, 3, 1, 1), "bias_relu", 128, 1),      # relu_5: 10.74 us (15.89)
    ((16, 7, 7, 512, 512, 3, 1, 1), "bias_add_relu", 256, 4),    # add_add_relu_3: 12.46
    ((16, 7, 7, 512, 512, 3, 1, 1), "bias_relu", 256, 4),        # relu_7: 12.45 (21.38)
    ((16, 14, 14, 256, 512, 3, 2, 1), "bias_relu", 256, 4),      # relu_6: 9.62 (12.16)
    ((16, 28, 28, 128, 128, 3, 1, 1), "bias_relu", 128, 1),      # relu_3: 10.32 (10.87)
    ((16, 56, 56, 64, 128, 3, 2, 1), "bias_relu", 128, 1),       # relu_2, K 576: 6.63
])
def test_long_reductions_over_many_tiles_take_one_warpgroup_of_wide_tiles(
        shape, epilogue, bn, split):
    _, _, _, _, conv, epi = _layer(shape, epilogue)
    cfg = wgmma_conv_choice(conv, epi, SM90A)
    assert cfg == WgmmaScheduleConfig(bn, 1, 4, 1, split)
    assert cfg == long_conv_wgmma_config(conv_gemm_form(conv), SM90A, True,
                                         epilogue_reads(conv, epi))
    check_wgmma_conv(cfg, conv, SM90A)


def test_the_long_rule_leaves_unsplit_residual_layers_to_the_estimates():
    # add_add_relu_2 and _1 of ResNet-18 b16: the estimates cost the residual's loads
    for shape in ((16, 14, 14, 256, 256, 3, 1, 1), (16, 28, 28, 128, 128, 3, 1, 1)):
        _, _, _, _, conv, epi = _layer(shape, "bias_add_relu")
        form = conv_gemm_form(conv)
        assert long_conv_wgmma_config(form, SM90A, True, 0) is not None
        assert long_conv_wgmma_config(form, SM90A, True, epilogue_reads(conv, epi)) is None


@pytest.mark.parametrize("shape", [
    (1, 7, 7, 512, 512, 3, 1, 1),     # ResNet-18 b1: 8 tiles, 64 x 64 in 16 parts kept
    (1, 14, 14, 256, 256, 3, 1, 1),   # ResNet-18 b1: 16 tiles
    (16, 56, 56, 64, 64, 3, 1, 1),    # 64 channels
    (16, 14, 14, 256, 512, 1, 2, 0),  # K of 256
    (16, 14, 14, 1024, 256, 1, 1, 0),  # a 1 x 1 window (ResNet-50 b16): not measured
])
def test_the_long_rule_is_silent_at_batch_1_on_narrow_short_and_1x1_reductions(shape):
    from ptxforge.ops.schedules.gemm.conv_shapes import windowed

    _, _, _, _, conv, _ = _layer(shape, "bias_relu")
    assert long_conv_wgmma_config(conv_gemm_form(conv), SM90A, windowed(conv)) is None


def test_the_small_rules_pick_builds_and_computes_a_layer():
    # 49 x 96 x 160 (7 x 7, 160 -> 96, 1 x 1), bias: 16 x 32 tiles on 1 x 4 warps
    tensors, arrays, reference, _, conv, epi = _layer((1, 7, 7, 160, 96, 1, 1, 0), "bias")
    cfg = conv_config(conv, SM90A, epi)
    assert _tiles(cfg) == (16, 32, 64, 1, 4, 3, 1)
    s = default_schedule(tensors[-1], target=SM90A)
    assert "wgmma" not in str(s.pipeline)
    ptx = _ptx(default_schedule(tensors[-1], target=SM90A), tensors)
    assert "mma.sync.aligned.m16n8k16" in ptx and "cp.async" in ptx
    _sim(tensors, arrays, reference, s)


def test_the_small_rules_split_pick_computes_a_residual_layer():
    # 49 x 64 x 576 with a residual: 8 tiles of 16 x 32, K in 4 parts of block_k 32
    tensors, arrays, reference, _, conv, epi = _layer((1, 7, 7, 576, 64, 1, 1, 0),
                                                      "bias_add")
    cfg = conv_config(conv, SM90A, epi)
    assert _tiles(cfg) == (16, 32, 32, 1, 4, 4, 4)
    s = default_schedule(tensors[-1], target=SM90A)
    assert "mma.sync.aligned.m16n8k16" in _ptx(default_schedule(tensors[-1], target=SM90A),
                                               tensors)
    _sim(tensors, arrays, reference, s)


@pytest.mark.parametrize("bn", [128, 256])
def test_the_long_rules_tiles_compute_a_split_layer(bn):
    # 64 x 128 or 64 x 256 tiles in 4 parts of 4 stages (the 7 x 7 x 512 layer's pick at
    # batch 16) on 4 x 4 pixels of 128 -> bn, 3 x 3 (K of 18 steps)
    tensors, arrays, reference, s, conv, epi = _layer((1, 4, 4, 128, bn, 3, 1, 1),
                                                      "bias_relu")
    cfg = WgmmaScheduleConfig(bn, 1, 4, 1, 4)
    check_wgmma_conv(cfg, conv, SM90A)
    assert schedule_conv2d_nhwc_wgmma(s, conv, epi, SM90A, cfg) == cfg
    assert "wgmma.mma_async" in _ptx(s, tensors)
    s2, conv2 = inlined_schedule(tensors[-1])
    schedule_conv2d_nhwc_wgmma(s2, conv2, epi, SM90A, cfg)
    _sim(tensors, arrays, reference, s2)


def _pool_threads(n, target):
    from ptxforge.ir import te
    from ptxforge.ops import nn

    x = te.placeholder((n, 112, 112, 64), "float16", "x")
    out = nn.max_pool2d(x, 3, 2, 1, layout="NHWC")
    (k,) = ptxforge.lower(default_schedule(out, target), [x, out]).kernels()
    return int(np.prod(k.launch.block))


def test_a_pooling_of_many_waves_takes_512_threads_a_block():
    # ResNet-18's max pool: batch 16 makes 12,544 blocks of 256 (12 waves on an H200):
    # 15.6 us, 9.7 at 512; at batch 1 (784 blocks, one wave) 256 and 512 tie
    assert _pool_threads(16, SM90A) == POOL_THREADS == 512
    assert _pool_threads(1, SM90A) == 256


def test_the_512_thread_pooling_computes_the_max():
    from ptxforge.ir import te
    from ptxforge.ops import nn
    from ptxforge.ops import testing as ref

    # 2 x 66 x 66 x 128 -> 2 x 33 x 33 x 128: 278,784 outputs, more than one wave of 256
    # on the simulator's 132 SMs
    x = te.placeholder((2, 66, 66, 128), "float32", "x")
    out = nn.max_pool2d(x, 3, 2, 1, layout="NHWC")
    target = "sim -arch=sm_90a"
    s = default_schedule(out, target)
    assert "factors=[512]" in str(s.pipeline)
    mod = ptxforge.build(s, [x, out], target=target)
    data = np.random.default_rng(0).standard_normal((2, 66, 66, 128)).astype(np.float32)
    got = np.zeros((2, 33, 33, 128), np.float32)
    mod(data, got)
    want = ref.pool2d_python(data, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), "max",
                             layout="NHWC")
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("c,h,stride", [(48, 14, 1), (32, 12, 2), (8, 10, 1)])
def test_depthwise_nhwc_puts_consecutive_channels_on_consecutive_threads(c, h, stride):
    from ptxforge.ops.schedules.cases import workload
    from ptxforge.ops.schedules.tiling import COALESCED_CHANNELS, choose_tiling

    w = workload("depthwise_conv2d_nhwc", n=1, c=c, h=h, w=h, stride=stride,
                 dtype="float16")
    op = w.output.op
    while not op.reduce_axis:  # the float32 sums under the cast to float16
        op = op.input_tensors[0].op
    tiling = choose_tiling(op, SM90A)
    assert tiling.threads[-1] >= min(COALESCED_CHANNELS, c) and tiling.inner[-1] == 1
    s = default_schedule(w.output, SM90A)
    assert ".target sm_90a" in ptxforge.build(s, w.tensors, target=SM90A).get_source("ptx")
    rng = np.random.default_rng(1)
    data = rng.standard_normal(w.tensors[0].shape).astype(np.float16)
    kern = (rng.standard_normal(w.tensors[1].shape) / 3).astype(np.float16)
    target = "sim -arch=sm_90a"
    mod = ptxforge.build(default_schedule(w.output, target), w.tensors, target=target)
    got = np.zeros(w.output.shape, np.float16)
    mod(data, kern, got)
    want = w.reference(data.astype(np.float64), kern.astype(np.float64))
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("shape,flight", [
    ((1, 224, 224, 4, 64, 7, 2, 3), 0),    # the stem, 4 steps: 4.15 us (4.47 in flight)
    ((1, 56, 56, 256, 64, 1, 1, 0), 0),    # 4 steps: 2.49 (2.59)
    ((1, 56, 56, 64, 64, 3, 1, 1), 1),     # 9 steps: 3.51 (3.85 waiting)
])
def test_short_reductions_wait_each_steps_wgmmas(shape, flight):
    _, _, _, _, conv, epi = _layer(shape, "bias_relu")
    cfg = wgmma_conv_choice(conv, epi, SM90A)
    assert isinstance(cfg, WgmmaScheduleConfig) and cfg.in_flight == flight
    check_wgmma_conv(cfg, conv, SM90A)
