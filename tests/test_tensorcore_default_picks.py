"""The default picks against measured kernels: GPT-2's products at 1,024 tokens (an H200)
and its LM head (an H100, in the block order reading its weight once) take the best
configuration the sweeps measured; ResNet-50's convolutions
take the tile and split-K part count its tuned records measured fastest
(``bench/results/resnet50_conv_records_h100_2026-11-27.jsonl``, replayed by
``bench/conv_records_replay.py``); a residual's epilogue reads move the choice to split-K
or to tiles of fewer elements a thread; every pick passes the rules, and the residual
picks compute the convolution on the simulator."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import ptxforge
import pytest
from ptxforge.ops.schedules import default_schedule
from ptxforge.ops.schedules.gemm.chooser import (
    conv_config,
    epilogue_reads,
    wgmma_choice,
    wgmma_conv_choice,
)
from ptxforge.ops.schedules.gemm.estimate import epilogue_read_time
from ptxforge.ops.schedules.gemm.forms import conv_gemm_form
from ptxforge.ops.schedules.gemm.knobs import WgmmaScheduleConfig
from ptxforge.ops.schedules.gemm.rules import (
    check_conv_config,
    check_wgmma_conv,
    first_broken,
    needs_c_tile,
    wgmma_rules,
)

from .bench_scripts import load_bench
from .test_tensorcore_conv import check, conv_layer, inlined_schedule
from .test_tensorcore_few_rows import _product

SM90A = "cuda -arch=sm_90a"


def _bench(name: str):
    return load_bench(name)


REPLAY = _bench("few_rows_replay")
CONV = _bench("conv_records_replay")


@pytest.fixture(scope="module")
def sweeps():
    return REPLAY.load_all([REPLAY.SWEEP, REPLAY.MID_SWEEP, REPLAY.MID_KNOBS,
                            REPLAY.M1024_KNOBS])


@pytest.mark.parametrize("shape,want,slack", [
    # an H200 (M1024_KNOBS); us, cuBLAS/ours
    ((1024, 2304, 768), WgmmaScheduleConfig(128, 1, 3, 0, 1, 4, True), 1.0),  # 9.35, 0.837
    ((1024, 768, 768), WgmmaScheduleConfig(128, 1, 5, 1, 1, 1, True), 1.01),  # 4.69, 0.936
    ((1024, 3072, 768), WgmmaScheduleConfig(128, 1, 3, 0, 1, 4, True), 1.0),  # 9.75, 0.974
    ((1024, 768, 3072), WgmmaScheduleConfig(128, 1, 5, 1, 1, 1, True), 1.01),  # 12.33, 0.754
])
def test_gpt2_products_take_the_best_measured_configuration(shape, want, slack, sweeps):
    prod, epi, form = _product(*shape)
    pick = wgmma_choice(prod, epi, form, SM90A)
    assert pick == want
    assert first_broken(wgmma_rules(pick, form, SM90A, needs_c_tile(pick, form, False))) is None
    s = sweeps[shape]
    assert s["device"] == "NVIDIA H200"
    best_cfg, best_us = min([*s["times"].items(), s["default"]], key=lambda x: x[1])
    # the best, or within 1% of it in the plain block order (one wave: all blocks at once)
    assert s["times"][REPLAY.todays_pick(*shape)] <= slack * best_us, (best_cfg, best_us)


def test_the_lm_head_takes_the_best_measured_tiles_in_the_order_reading_b_once(sweeps):
    # the H100 sweep's best of the plain order, 128 x 128 s5 f1 (269.6 us, cuBLAS 830),
    # its 8 row blocks in one group: the grouped order itself was not timed there
    prod, epi, form = _product(1024, 50257, 768)
    pick = wgmma_choice(prod, epi, form, SM90A)
    assert pick == WgmmaScheduleConfig(128, 2, 5, 1, 1, 8)
    s = sweeps[(1024, 50257, 768)]
    best_cfg, _ = min([*s["times"].items(), s["default"]], key=lambda x: x[1])
    assert REPLAY.todays_pick(1024, 50257, 768) == best_cfg + " r8"
    assert best_cfg == "wgmma 128x128 s5 f1 sk1"


@pytest.fixture(scope="module")
def resnet50():
    records = CONV.load(CONV.RECORDS)
    return [(layer, records.get((layer.name, layer.shapes), {}))
            for layer in CONV.layers("resnet_v1-50")]


def _group(cfg) -> tuple:
    """The tile and split of a wgmma configuration (its stages and waits aside: they
    measured within 5% of each other in the records)."""
    return (cfg.warpgroups, cfg.block_n, cfg.split_k)


def test_every_resnet50_conv_pick_passes_the_rules(resnet50):
    assert len(resnet50) == 24 and all(times for _, times in resnet50)
    for layer, _ in resnet50:
        cfg = CONV.default_config(layer, SM90A)
        if isinstance(cfg, WgmmaScheduleConfig):
            check_wgmma_conv(cfg, layer.op, SM90A)
        else:
            check_conv_config(cfg, layer.op, SM90A)


@pytest.mark.parametrize("name,split", [
    ("nn_conv2d_add_nn_relu_12", 4),   # 196 pixels, 512 <- 1024: 6.55 us unsplit, 4.09
    ("nn_conv2d_add_3", 4),            # 49 pixels, 2048 <- 1024: 5.52 us unsplit, 4.20
    ("nn_conv2d_add_nn_relu_13", 16),  # 49 pixels, 3x3 of 512: 4.95 us in 8 parts, 4.41
    ("nn_conv2d_add_nn_relu_15", 16),
    ("nn_conv2d_add_nn_relu_14", 8),
    ("nn_conv2d_add_nn_relu_11", 8),
    ("nn_conv2d_add_nn_relu_10", 4),
])
def test_few_pixel_resnet50_convs_split_as_the_records_measured_fastest(name, split, resnet50):
    layer, times = next((x, t) for x, t in resnet50 if x.name == f"vm_mod_fused_{name}")
    pick = CONV.default_config(layer, SM90A)
    assert isinstance(pick, WgmmaScheduleConfig) and pick.split_k == split
    best = min((c for c in times if isinstance(c, WgmmaScheduleConfig)), key=times.get)
    assert _group(pick) == _group(best)


def test_resnet50_conv_picks_are_the_records_best_tile_and_split(resnet50):
    """Of the 20 layers without a residual, each pick's tile and split is the fastest the
    records measured of wgmma (its stages and waits aside), but for one within 4%."""
    ratios = []
    for layer, times in resnet50:
        if epilogue_reads(layer.op, layer.epilogue):
            continue
        pick = CONV.default_config(layer, SM90A)
        groups: dict = {}
        for c, us in times.items():
            if isinstance(c, WgmmaScheduleConfig):
                groups[_group(c)] = min(us, groups.get(_group(c), math.inf))
        if _group(pick) in groups:
            ratios.append(groups[_group(pick)] / min(groups.values()))
    assert len(ratios) >= 18
    assert max(ratios) < 1.04 and sum(r > 1.0 for r in ratios) <= 1, ratios


def test_the_residual_layers_take_split_k_or_fewer_elements_a_thread(resnet50):
    by_name = {x.name.removeprefix("vm_mod_fused_"): (x, t) for x, t in resnet50}
    # 49 pixels, 2048 <- 512: the residual rule's mma.sync 32 x 32 tiles (8 elements a
    # thread), 3.30 us (8-byte copies) against 3.71 for wgmma in 2 parts (the second
    # kernel adding the residual) and 5.86 for the unsplit wgmma pick
    layer, times = by_name["nn_conv2d_add_add_nn_relu_3"]
    pick = CONV.default_config(layer, SM90A)
    assert epilogue_reads(layer.op, layer.epilogue) == 1
    assert not isinstance(pick, WgmmaScheduleConfig) and pick.split_k == 1
    assert pick.block_m * pick.block_n // (32 * pick.warps_m * pick.warps_n) == 8
    assert times[replace(pick, vec=4)] < times[WgmmaScheduleConfig(64, 1, 4, 1, 2)]
    # 196 pixels, 1024 <- 256 (K has 4 steps): today's default, told the epilogue, moves
    # the residual to split-K's second kernel or to at most 8 elements a thread
    layer, _ = by_name["nn_conv2d_add_add_nn_relu_2"]
    pick = CONV.default_config(layer, SM90A)
    assert not isinstance(pick, WgmmaScheduleConfig)
    assert pick == conv_config(layer.op, SM90A, layer.epilogue)

    def per_thread(c) -> int:
        return c.block_m * c.block_n // (32 * c.warps_m * c.warps_n)
    assert pick.split_k > 1 or per_thread(pick) <= 8
    # not told it, mma.sync's 16 elements a thread (4.8 us) over wgmma's 32 (5.6 us)
    blind = conv_config(layer.op, SM90A, None)
    assert blind.split_k == 1 and per_thread(blind) <= 16


def test_epilogue_reads_count_the_output_sized_inputs_only():
    for epi, reads in (("", 0), ("bias_relu", 0), ("bias_add_relu", 1)):
        tensors, _, _ = conv_layer(1, 4, 4, 512, 256, 1, 1, 0, "float16", epi)
        _, conv = inlined_schedule(tensors[-1])
        epilogue = None if tensors[-1].op is conv else tensors[-1].op
        assert epilogue_reads(conv, epilogue) == reads
    form = conv_gemm_form(conv)
    unsplit, split = WgmmaScheduleConfig(64, 1, 4, 1, 1), WgmmaScheduleConfig(64, 1, 4, 1, 2)
    assert epilogue_read_time(unsplit, form, 0, SM90A) == 0.0
    assert epilogue_read_time(split, form, 1, SM90A) == 0.0
    # one wave of 64 x 64 tiles, 32 elements a thread, 120 cycles each
    assert epilogue_read_time(unsplit, form, 1, SM90A) == pytest.approx(32 * 120 / 1.755e9)


@pytest.mark.parametrize("shape,wgmma", [
    ((1, 4, 4, 512, 256, 1, 1, 0), True),   # wgmma, 2 split-K parts
    ((1, 8, 8, 256, 128, 1, 1, 0), False),  # mma.sync, 16 elements a thread
], ids=["wgmma_split", "mma_sync"])
def test_the_residual_picks_compute_the_convolution(shape, wgmma):
    tensors, arrays, reference = conv_layer(*shape, "float16", "bias_add_relu")
    _, conv = inlined_schedule(tensors[-1])
    w = wgmma_conv_choice(conv, tensors[-1].op, SM90A)
    assert (w is not None) == wgmma
    if wgmma:
        assert w.split_k == 2
    else:
        assert conv_config(conv, SM90A).split_k == 1
    mod = ptxforge.build(default_schedule(tensors[-1], target=SM90A), tensors,
                         target="sim -arch=sm_90a")
    out = np.full(tensors[-1].shape, np.nan, tensors[-1].dtype)
    mod(*arrays, out)
    check(out.astype(np.float64), reference(), "float16")
