"""The mid-size rule of the default GEMM chooser (fp16, M of 512 rows and more, K of 768 to
4,096; an H100 sweep of BERT b8 s512, GPT-2 s1024 and odd products, an H200 sweep of GPT-2's
products at 1,024 tokens): its picks, where it does not speak, the replay of the stored
sweeps, and its configurations on the simulator. The 64-row tiles of 512 to 2,048 rows are
tested in ``test_default_rule_mid_rows.py``."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from ptxforge.ops.schedules.gemm import mid_size
from ptxforge.ops.schedules.gemm.chooser import mid_size_wgmma_config, wgmma_choice
from ptxforge.ops.schedules.gemm.estimate import wgmma_blocks_per_sm
from ptxforge.ops.schedules.gemm.forms import gemm_form
from ptxforge.ops.schedules.gemm.knobs import WgmmaScheduleConfig

from .bench_scripts import load_bench
from .test_tensorcore_few_rows import _product
from .test_wgmma_gemm import _dense, _ref, _run, _schedule
from .test_wgmma_gemm import _product as _product_of

SM90A = "cuda -arch=sm_90a"

WIDE = WgmmaScheduleConfig(256, 2, 4, 1, 1)   # 128 x 256, 4 stages
PAIR = WgmmaScheduleConfig(128, 2, 3, 1, 1)   # 128 x 128, 3 stages: two blocks an SM
DEEP = WgmmaScheduleConfig(128, 2, 5, 1, 1)   # 128 x 128, 5 stages
NARROW = WgmmaScheduleConfig(128, 1, 5, 1, 1)  # 64 x 128, 5 stages
SMALL = WgmmaScheduleConfig(64, 1, 5, 1, 1)    # 64 x 64, 5 stages: up to 12 steps
SHORT192 = WgmmaScheduleConfig(192, 2, 3, 1, 1, staged_epilogue=True)  # 128 x 192, C tile
LONG192 = WgmmaScheduleConfig(192, 2, 4, 1, 1)  # 128 x 192, 4 stages
FILL = WgmmaScheduleConfig(128, 1, 3, 0, 1, 4, True)  # 64 x 128 s3, none in flight, r4, C
ONE_WAVE = WgmmaScheduleConfig(128, 1, 5, 1, 1, 1, True)  # 64 x 128 s5 through the C tile
HEAD = WgmmaScheduleConfig(128, 2, 5, 1, 1, 8)  # DEEP with B read once
FUSED_NARROW = FILL  # 4,096 rows, N <= 1,024, a fused epilogue: 64 x 128 s3 f0 r4, C tile
FUSED_WIDE = WgmmaScheduleConfig(128, 2, 3, 0, 1, 4)  # N >= 3,072, few steps: 128 x 128


@pytest.mark.parametrize("shape,want", [
    ((4096, 3072, 768), SHORT192),  # 51.3 -> 51.1 us (the best, 64 x 256, 47.0)
    ((4096, 2304, 768), SHORT192),  # 44.1 -> 34.7 us, the best
    ((4096, 4096, 4096), WIDE),     # N not a multiple of 192; the estimates' pick too
    ((4096, 768, 3072), LONG192),   # 39.9 -> 33.0 us, the best
    ((4096, 768, 768), SHORT192),   # 15.6 -> 10.9 us, the best
    # an H200 (the earlier rule's PAIR, SMALL, NARROW, PAIR, NARROW here: H100 picks)
    ((1024, 2304, 768), FILL),      # 15.14 -> 9.35 us, the best
    ((1024, 3072, 768), FILL),      # 14.79 -> 9.75 us, the best
    ((1024, 768, 768), ONE_WAVE),   # fewer tiles than SMs: 5.66 -> 4.69 us (best 4.67)
    ((1024, 768, 3072), ONE_WAVE),  # 13.58 -> 12.33 us (best 12.22)
    ((1000, 1000, 1000), NARROW),   # 14.2 -> 12.6 us (an H100: padded, the C tile anyway)
    ((1024, 50257, 768), HEAD),     # padded N: the C tile leaves no room for 128 x 256
    ((3000, 1536, 2048), DEEP),     # padded M; 48.7 us, the best 46.9
])
def test_the_mid_size_rule_picks(shape, want):
    prod, epi, form = _product(*shape)
    assert mid_size_wgmma_config(form, SM90A, epilogue_tile=False) == want
    assert wgmma_choice(prod, epi, form, SM90A) == want


def test_the_pair_runs_two_blocks_an_sm_only_without_the_c_tile():
    # 3 stages of 128 x 128 (96 KiB) twice on an SM; with the float32 C tile once
    assert wgmma_blocks_per_sm(PAIR, SM90A, c_tile=False) == 2
    assert wgmma_blocks_per_sm(PAIR, SM90A, c_tile=True) == 1


def test_a_fused_epilogue_is_left_to_the_estimates_unless_the_tiles_pad():
    # the H100 sweep stored only the cast: through the C tile where its tiles padded the
    # product (1000^3, 3000 x 1536, the GPT-2 head), straight from the fragments elsewhere
    prod, _, form = _product(4096, 4096, 4096)
    assert mid_size_wgmma_config(form, SM90A, epilogue_tile=True) is None
    # the H200's staged kernels of 1,024 rows stored as a fused epilogue does
    prod, _, form = _product(1024, 768, 3072)
    assert mid_size_wgmma_config(form, SM90A, epilogue_tile=True) == replace(
        ONE_WAVE, staged_epilogue=False)
    # 4,096 rows with BERT's own epilogues (bench/results/gemm_epilogues_4096_2026-11-28.txt,
    # H100 / H200 us): the residual products 64 x 128 (4096 x 768 x 768: 10.35 / 10.26
    # against 11.27 / 11.01 for 128 x 192; 4096 x 768 x 3072: 35.53 / 33.38 against 47.28 /
    # 46.10), the GELU product 128 x 128 s3 f0 (48.05 / 49.72 against 66.12 / 60.31)
    for shape in ((4096, 768, 768), (4096, 768, 3072)):
        assert mid_size_wgmma_config(_product(*shape)[2], SM90A, True) == FUSED_NARROW
    assert mid_size_wgmma_config(_product(4096, 3072, 768)[2], SM90A, True) == FUSED_WIDE
    # the QKV product (a bias, N = 2,304) keeps 128 x 192 through the C tile
    assert mid_size_wgmma_config(_product(4096, 2304, 768)[2], SM90A, True) == SHORT192
    assert mid_size_wgmma_config(_product(1000, 1000, 1000)[2], SM90A, True) == NARROW
    # padded N: the C tile leaves 128 x 256 no room, and 128 x 128 its 5 stages (226 KB)
    assert mid_size_wgmma_config(_product(1024, 50257, 768)[2], SM90A, True) == HEAD
    # BERT's QKV with its bias takes them; its second FFN product with the residual add
    # the 64-row tiles
    y, _ = _dense(4096, 2304, 768, bias=True, cast="float16")
    prod = _product_of(y)
    assert wgmma_choice(prod, y.op, gemm_form(prod, SM90A), SM90A) == SHORT192
    y, _ = _dense(4096, 768, 3072, bias=True, cast="float16")
    prod = _product_of(y)
    assert wgmma_choice(prod, y.op, gemm_form(prod, SM90A), SM90A) == FUSED_NARROW


@pytest.mark.parametrize("shape,dtype,target", [
    ((384, 4096, 4096), "float16", SM90A),   # fewer rows than the rule covers
    ((4096, 4096, 8192), "float16", SM90A),  # K beyond the range
    ((4096, 4096, 512), "float16", SM90A),   # K below it
    ((4096, 512, 768), "float16", SM90A),    # N below it
    ((4096, 2304, 768), "bfloat16", SM90A),  # bf16 was not measured
    ((4096, 2304, 768), "float16", "cuda -arch=sm_90"),  # no wgmma
])
def test_outside_the_measured_range_the_rule_is_silent(shape, dtype, target):
    form = _product(*shape, dtype, target)[2]
    assert mid_size_wgmma_config(form, target) is None


def test_a_batch_a_conv_or_b_read_as_k_by_n_is_outside_the_rule():
    form = _product(4096, 2304, 768)[2]
    assert mid_size_wgmma_config(replace(form, b_kn=True), SM90A) is None
    assert mid_size_wgmma_config(replace(form, conv=True), SM90A) is None
    assert mid_size_wgmma_config(replace(form, batch=2, batched=True), SM90A) is None


def test_a_pick_that_breaks_a_rule_gives_way_to_the_next(monkeypatch):
    # 4096 x 3072 x 768 takes 128 x 192; were it and 128 x 256 illegal, the pair of 128 x 128
    form = _product(4096, 3072, 768)[2]
    real_rules = mid_size.wgmma_rules

    def wgmma_rules(cfg, *args, **kwargs):
        if cfg in (WIDE, SHORT192):
            return iter([(False, lambda: "need a rule that breaks")])
        return real_rules(cfg, *args, **kwargs)

    monkeypatch.setattr(mid_size, "wgmma_rules", wgmma_rules)
    assert mid_size_wgmma_config(form, SM90A, epilogue_tile=False) == PAIR


def _replay(capsys, *argv) -> list:
    replay = load_bench("few_rows_replay")
    assert replay.main(list(argv)) == 0
    return capsys.readouterr().out.strip().splitlines()


def test_the_replay_of_the_mid_sweeps_puts_every_pick_within_10_percent(capsys):
    lines = _replay(capsys, "--mid", "--within", "1.1")
    # the H100 sweeps: GPT-2's five products at 1,024 tokens take kernels they did not
    # time (the H200's picks, the head's block order); the other nine keep their picks
    assert lines[-1] == "today's pick within 1.1 of the best measured: 9 of 14 shapes"
    # "... over 9 shapes with both picks timed (5 unknown): sweep's default 0.638 (1 at
    # 0.9 or more), today's chooser 0.703 (1); best measured over all 14 shapes 0.782 (2)"
    summary = lines[-2]
    assert "over 9 shapes" in summary and "(5 unknown)" in summary, summary
    today = float(summary.split("today's chooser ")[1].split()[0])
    sweep = float(summary.split("sweep's default ")[1].split()[0])
    assert today > sweep + 0.05, summary
    # with the H200 sweep of M = 1,024 after them: only the head is unknown
    lines = _replay(capsys, "--mid", "--m1024", "--within", "1.1")
    assert lines[-1] == "today's pick within 1.1 of the best measured: 13 of 14 shapes"
    assert "(1 unknown)" in lines[-2], lines[-2]


@pytest.mark.parametrize("M,N,K,cfg,bias,act", [
    (200, 256, 192, PAIR, True, "gelu"),   # padded rows, 3 steps for 3 stages
    (130, 200, 320, NARROW, False, None),  # padded rows and columns, 5 steps
])
def test_the_rules_configurations_compute_the_product(M, N, K, cfg, bias, act):
    y, args = _dense(M, N, K, bias=bias, act=act, cast="float16")
    s, _ = _schedule(y, cfg)
    _, vals, got = _run(s, args, y)
    want = _ref(vals, bias, act, False)
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2 * np.abs(want).max())


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K,epilogue", [(4096, 768, 768, False), (1024, 768, 3072, True),
                                            (4096, 2304, 768, False), (1000, 1000, 1000, True)])
def test_the_mid_size_defaults_on_the_gpu(M, N, K, epilogue):
    """The rule's picks built by the default schedule for an H100, against float64 numpy."""
    import ptxforge
    from ptxforge.backend_ptx import array, compile_module, cuda, empty
    from ptxforge.ops.schedules import default_schedule
    from ptxforge.target import as_target

    from .lowp import f64, host

    dev = cuda(0)
    if dev.sm != "sm_90":
        pytest.skip(f"the mid-size rule is for sm_90 GPUs; this one is {dev.sm}")
    rng = np.random.default_rng(9)
    act = "gelu" if epilogue else None
    y, args = _dense(M, N, K, bias=epilogue, act=act, cast="float16")
    target = as_target(SM90A)
    with target:
        loaded = compile_module(ptxforge.lower(default_schedule(y, target), args + [y]),
                                target).load(dev)
    vals = [host(rng, a.shape, a.dtype) for a in args]
    out = empty((M, N), y.dtype, dev)
    loaded(*[array(h, dev, a.dtype) for h, a in zip(vals, args)], out)
    want = _ref([f64(h, a.dtype) for h, a in zip(vals, args)], epilogue, act, False)
    np.testing.assert_allclose(f64(out.numpy(), y.dtype), want, rtol=0,
                               atol=3e-3 * np.abs(want).max())
