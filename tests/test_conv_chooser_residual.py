"""The residual rule of the conv default (``residual_conv_config``) and split-K without a
hurdle for one-warpgroup conv tiles: the picks against ResNet-50's tuned records
(``bench/results/resnet50_conv_records_h100_2026-11-27.jsonl``, judged by
``bench/conv_records_judge.py``), the rule's range, and the picked configurations built to
sm_90a PTX and run on the simulator against float64 numpy."""

from __future__ import annotations

import numpy as np
import ptxforge
import pytest
from ptxforge.ops.schedules import default_schedule
from ptxforge.ops.schedules.gemm import chooser
from ptxforge.ops.schedules.gemm.chooser import (
    conv_config,
    epilogue_reads,
    residual_conv_config,
    wgmma_conv_choice,
)
from ptxforge.ops.schedules.gemm.forms import conv_gemm_form
from ptxforge.ops.schedules.gemm.knobs import TensorCoreConfig, WgmmaScheduleConfig
from ptxforge.ops.schedules.gemm.rules import check_conv_config, check_wgmma_conv
from ptxforge.ops.schedules.gemm.schedule import (
    schedule_conv2d_nhwc_tensorcore,
    schedule_conv2d_nhwc_wgmma,
)

from .bench_scripts import load_bench
from .test_tensorcore_conv import check, conv_layer, inlined_schedule

SM80 = "cuda -arch=sm_80"
SM90A = "cuda -arch=sm_90a"


def _judge():
    return load_bench("conv_records_judge")


JUDGE = _judge()


@pytest.fixture(scope="module")
def resnet50():
    records = JUDGE.REPLAY.load(JUDGE.REPLAY.RECORDS)
    return {layer.name.removeprefix("vm_mod_fused_"): (layer, records[(layer.name,
                                                                       layer.shapes)])
            for layer in JUDGE.REPLAY.layers("resnet_v1-50")}


def _layer(shape, epilogue="bias_add_relu"):
    tensors, arrays, reference = conv_layer(*shape, "float16", epilogue)
    s, conv = inlined_schedule(tensors[-1])
    epi = None if tensors[-1].op is conv else tensors[-1].op
    return tensors, arrays, reference, s, conv, epi


def _tiles(cfg) -> tuple:
    return (cfg.block_m, cfg.block_n, cfg.block_k, cfg.warps_m, cfg.warps_n, cfg.stages,
            cfg.split_k)


@pytest.mark.parametrize("name,tiles,us", [
    # (block_m, block_n, block_k, warps_m, warps_n, stages, split_k), the records' us
    ("nn_conv2d_add_add_nn_relu", (32, 64, 64, 1, 4, 1, 1), 2.90),     # the fastest
    ("nn_conv2d_add_add_nn_relu_1", (32, 32, 64, 2, 2, 2, 1), None),   # not measured
    ("nn_conv2d_add_add_nn_relu_2", (32, 32, 64, 2, 2, 3, 1), 3.40),   # 3.29 with 8 B copies
    ("nn_conv2d_add_add_nn_relu_3", (32, 32, 64, 2, 2, 3, 1), 3.30),   # the fastest: 3.26
])
def test_the_residual_layers_take_the_rules_mma_sync_tiles(name, tiles, us, resnet50):
    layer, times = resnet50[name]
    assert epilogue_reads(layer.op, layer.epilogue) == 1
    pick = JUDGE.REPLAY.default_config(layer, SM90A)
    assert isinstance(pick, TensorCoreConfig) and _tiles(pick) == tiles
    assert pick == conv_config(layer.op, SM90A, layer.epilogue)
    assert wgmma_conv_choice(layer.op, layer.epilogue, SM90A) is None
    check_conv_config(pick, layer.op, SM90A)
    got, _ = JUDGE.measured(pick, times)
    if us is None:
        assert np.isnan(got)
        return
    assert got == pytest.approx(us, abs=0.005)
    # every wgmma configuration the records hold for the layer ran slower
    wg = min(t for c, t in times.items() if isinstance(c, WgmmaScheduleConfig))
    assert got < wg and got <= 1.05 * min(times.values())


def test_a_layer_of_26_tiles_splits_k_under_no_hurdle(resnet50):
    # 784 x 128 x 512: 2 parts measured the fastest of the records (3.61 us); the 5%
    # hurdle kept it unsplit, its estimate 0.8% behind the split's
    layer, times = resnet50["nn_conv2d_add_nn_relu_6"]
    pick = JUDGE.REPLAY.default_config(layer, SM90A)
    assert isinstance(pick, WgmmaScheduleConfig) and pick.split_k == 2
    assert chooser.CONV_SPLIT_K_GAIN == 1.0
    assert JUDGE.measured(pick, times)[0] <= 1.01 * min(times.values())


def test_resnet50s_judged_default_is_within_3_percent_of_the_records_best(resnet50, capsys):
    out = JUDGE.judge("resnet_v1-50", {(x.name, x.shapes): t for x, t in resnet50.values()})
    assert out["judged"] == 23 and out["unjudged"] == 1  # add_add_relu_1: not measured
    assert out["default_us"] <= 1.03 * out["best_us"]
    assert max(out["ratios"]) < 1.08  # 56 x 56 x 64 -> 64: wgmma 1.85 us, mma.sync 1.73
    assert "ratio 1.0" in capsys.readouterr().out


@pytest.mark.parametrize("shape,target,epilogue,why", [
    ((1, 4, 4, 512, 256, 1, 1, 0), SM90A, "bias_add_relu", "16 rows"),
    ((1, 7, 7, 512, 2048, 1, 1, 0), SM80, "bias_add_relu", "sm_80"),
    ((1, 7, 7, 512, 2048, 1, 1, 0), SM90A, "bias_relu", "no residual"),
    ((1, 7, 7, 1024, 2048, 1, 1, 0), SM90A, "bias_add_relu", "K of 1,024"),
    ((1, 8, 8, 256, 128, 1, 1, 0), SM90A, "bias_add_relu", "128 channels"),
    ((1, 7, 7, 512, 512, 3, 1, 1), SM90A, "bias_add_relu", "K of 4,608 (ResNet-18)"),
    ((16, 14, 14, 256, 1024, 1, 1, 0), SM90A, "bias_add_relu", "batch 16"),
])
def test_the_rule_speaks_only_in_the_measured_range(shape, target, epilogue, why):
    _, _, _, _, conv, epi = _layer(shape, epilogue)
    form = conv_gemm_form(conv)
    assert residual_conv_config(form, target, epilogue_reads(conv, epi)) is None, why
    if epi is not None:  # the estimates choose, as before the rule
        assert conv_config(conv, target, epi) == chooser._best(
            chooser.gemm_candidates(form, target), form, chooser.as_target(target),
            epilogue_reads(conv, epi))


def test_the_wide_tiles_where_they_give_every_sm_two_blocks():
    # 3,136 x 256: 392 tiles of 32 x 64 (2.97 an SM of 132); 784 x 512: 200 (1.5)
    for shape, tiles in (((1, 56, 56, 64, 256, 1, 1, 0), (32, 64, 1, 4)),
                         ((1, 28, 28, 128, 512, 1, 1, 0), (32, 32, 2, 2))):
        _, _, _, _, conv, epi = _layer(shape)
        cfg = residual_conv_config(conv_gemm_form(conv), SM90A, 1)
        assert (cfg.block_m, cfg.block_n, cfg.warps_m, cfg.warps_n) == tiles
        assert cfg.block_k == 64 and cfg.split_k == 1 and cfg.async_copy


def _sim(tensors, arrays, reference, s, target="sim -arch=sm_90a"):
    mod = ptxforge.build(s, tensors, target=target)
    out = np.full(tensors[-1].shape, np.nan, tensors[-1].dtype)
    mod(*arrays, out)
    check(out.astype(np.float64), reference(), "float16")


def _ptx(s, tensors) -> str:
    """The PTX of schedule ``s`` for sm_90a (llvmlite; no GPU, no ptxas)."""
    return ptxforge.build(s, tensors, target=SM90A).get_source("ptx")


def test_the_default_residual_pick_builds_and_computes_the_convolution():
    # 49 x 256 x 64 (7 x 7, 64 -> 256, 1 x 1): the rule's 32 x 32 tiles, 1 stage
    tensors, arrays, reference, _, conv, epi = _layer((1, 7, 7, 64, 256, 1, 1, 0))
    cfg = conv_config(conv, SM90A, epi)
    assert _tiles(cfg) == (32, 32, 64, 2, 2, 1, 1)
    s = default_schedule(tensors[-1], target=SM90A)
    text = str(s.pipeline)
    assert "mma_m16n8k16" in text and "wgmma" not in text
    ptx = _ptx(default_schedule(tensors[-1], target=SM90A), tensors)
    assert "mma.sync.aligned.m16n8k16" in ptx and "cp.async" in ptx
    _sim(tensors, arrays, reference, s)


@pytest.mark.parametrize("tiles", [(32, 64, 64, 1, 4, 1), (32, 32, 64, 2, 2, 3)],
                         ids=["32x64_w1x4", "32x32_w2x2_s3"])
def test_the_rules_tiles_compute_a_small_residual_layer(tiles):
    # 2 x 5 x 5 pixels (50 rows, padded), 192 <- 192 (3 steps of 64), residual + ReLU
    tensors, arrays, reference, s, conv, epi = _layer((2, 5, 5, 192, 96, 1, 1, 0))
    form = conv_gemm_form(conv)
    bm, bn, bk, wm, wn, stages = tiles
    cfg = chooser._first_legal(form, chooser.as_target(SM90A), bm, bn, bk, wm, wn, stages)
    assert cfg is not None and cfg.stages == stages
    assert schedule_conv2d_nhwc_tensorcore(s, conv, epi, SM90A, cfg) == cfg
    assert "mma.sync.aligned.m16n8k16" in _ptx(s, tensors)
    s2, conv2 = inlined_schedule(tensors[-1])
    schedule_conv2d_nhwc_tensorcore(s2, conv2, epi, SM90A, cfg)
    _sim(tensors, arrays, reference, s2)


def test_the_split_wgmma_pick_builds_and_computes_the_convolution():
    # the 26-tile layer's pick, 64 x 64 in 2 parts of 4 stages, on 2 x 4 x 4 pixels of
    # 512 -> 64 (K of 8 steps)
    tensors, arrays, reference, s, conv, epi = _layer((1, 4, 4, 512, 64, 1, 1, 0), "bias_relu")
    cfg = WgmmaScheduleConfig(64, 1, 4, 1, 2)
    check_wgmma_conv(cfg, conv, SM90A)
    assert schedule_conv2d_nhwc_wgmma(s, conv, epi, SM90A, cfg) == cfg
    ptx = _ptx(s, tensors)
    assert "wgmma.mma_async" in ptx
    s2, conv2 = inlined_schedule(tensors[-1])
    schedule_conv2d_nhwc_wgmma(s2, conv2, epi, SM90A, cfg)
    _sim(tensors, arrays, reference, s2)
