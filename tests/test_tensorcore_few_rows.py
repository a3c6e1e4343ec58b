"""The few-row rules of the default GEMM chooser (fp16, M <= 256, N and K of 768 to 4096,
an H100 sweep): their picks, where they do not speak (the estimates' picks stay), the replay
of the stored sweep, and kernels of their configurations on the simulator against numpy."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from ptxforge import te
from ptxforge.ir.te import ComputeOp
from ptxforge.ops import nn
from ptxforge.ops.schedules.gemm import chooser
from ptxforge.ops.schedules.gemm.chooser import (
    choose_gemm_config,
    few_row_mma_config,
    few_row_wgmma_config,
    wgmma_choice,
)
from ptxforge.ops.schedules.gemm.forms import gemm_form
from ptxforge.ops.schedules.gemm.knobs import WgmmaScheduleConfig

from .bench_scripts import load_bench
from .test_wgmma_gemm import _dense, _ref, _run, _schedule

SM90A = "cuda -arch=sm_90a"
SM90 = "cuda -arch=sm_90"
SM80 = "cuda -arch=sm_80"


def _product(M, N, K, dtype="float16", target=SM90A):
    x = te.placeholder((M, K), dtype, name="x")
    w = te.placeholder((N, K), dtype, name="w")
    y = nn.dense(x, w)
    s = te.create_schedule(y.op)
    prod = next(op for op in s.dag.ops if isinstance(op, ComputeOp) and op.reduce_axis)
    return prod, (None if y.op is prod else y.op), gemm_form(prod, target)


@pytest.mark.parametrize("shape,want", [
    ((16, 4096, 4096), WgmmaScheduleConfig(128, 1, 5, 1, 4)),  # mma.sync: 12.4 -> 8.9 us
    ((1, 3072, 3072), WgmmaScheduleConfig(128, 1, 5, 1, 4)),
    ((128, 4096, 4096), WgmmaScheduleConfig(64, 1, 5, 1, 1)),  # 26.4 -> 20.1 us
    ((256, 768, 3072), WgmmaScheduleConfig(64, 1, 5, 1, 4)),   # 11.9 -> 7.4 us; 4 row blocks
    ((128, 768, 4096), WgmmaScheduleConfig(64, 1, 5, 1, 4)),   # 24 tiles: 4 parts of 1024
    ((128, 768, 768), WgmmaScheduleConfig(64, 1, 4, 1, 1)),    # parts of 768 at least
    ((256, 3072, 768), WgmmaScheduleConfig(64, 1, 5, 1, 1)),   # 192 tiles: unsplit
    ((256, 3072, 3072), WgmmaScheduleConfig(64, 1, 5, 1, 1)),  # 48 steps: 5 stages
])
def test_the_wgmma_rule_picks(shape, want):
    prod, epi, form = _product(*shape)
    assert few_row_wgmma_config(form, SM90A) == want
    assert wgmma_choice(prod, epi, form, SM90A) == want


@pytest.mark.parametrize("shape", [(1, 4096, 768), (16, 3072, 768), (16, 3072, 2048)])
def test_the_mma_sync_rule_keeps_16_rows_off_wgmma(shape):
    prod, epi, form = _product(*shape)
    cfg = choose_gemm_config(form, SM90A)
    assert (cfg.block_m, cfg.block_n, cfg.block_k, cfg.split_k) == (16, 32, 64, 1)
    assert cfg == few_row_mma_config(form, SM90A) and cfg.stages == chooser.DEFAULT_STAGES
    assert wgmma_choice(prod, epi, form, SM90A) is None
    # on mma.sync only (sm_90) the same tiles
    assert choose_gemm_config(_product(*shape, target=SM90)[2], SM90) == cfg


@pytest.mark.parametrize("shape,dtype,target", [
    ((384, 4096, 4096), "float16", SM90A),  # more rows than measured (and than the mid rule)
    ((32, 4096, 4096), "float16", SM90A),   # 17 to 64 rows were not measured
    ((128, 4096, 8192), "float16", SM90A),  # K beyond the range
    ((128, 4096, 640), "float16", SM90A),   # K below it
    ((16, 4096, 4096), "bfloat16", SM90A),  # bf16 was not measured
    ((16, 4096, 768), "float16", SM80),     # an A100: the mma.sync rule is for sm_90 on
    ((16, 768, 768), "float16", SM90A),     # 16 rows, N below 3072
])
def test_outside_the_measured_range_the_estimates_choose(shape, dtype, target):
    prod, epi, form = _product(*shape, dtype, target)
    assert few_row_mma_config(form, target) is None
    assert few_row_wgmma_config(form, target) is None
    assert choose_gemm_config(form, target) == chooser._best(
        chooser.gemm_candidates(form, target), form, target)
    assert wgmma_choice(prod, epi, form, target) in (None, chooser.choose_wgmma_config(
        form, target, False))


def test_the_split_follows_the_sms_of_the_target():
    # 24 output tiles of 64 x 64: 4 parts on 132 SMs, 2 on 60 (96 > 1.5 x 60), none on 40
    form = _product(128, 768, 3072)[2]
    assert [few_row_wgmma_config(form, f"{SM90A} -num_sms={n}").split_k
            for n in (132, 60, 40)] == [4, 2, 1]


def test_a_rule_pick_that_breaks_a_rule_falls_back_to_the_estimates(monkeypatch):
    form = _product(16, 4096, 4096)[2]
    assert few_row_wgmma_config(replace(form, conv=True), SM90A) is None
    monkeypatch.setattr(chooser, "first_broken", lambda rules: "a broken rule")
    assert few_row_wgmma_config(form, SM90A) is None


def test_the_replay_of_the_sweep_keeps_the_new_default_near_the_best_measured(capsys):
    replay = load_bench("few_rows_replay")
    assert replay.main([]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    # "... over 36 shapes with both picks timed (0 unknown): sweep's default 0.863 (16 at
    # 0.9 or more), today's chooser 0.983 (25); best measured ... 1.011 (26)"
    assert "over 36 shapes" in last and "(0 unknown)" in last, last
    today = float(last.split("today's chooser ")[1].split()[0])
    sweep = float(last.split("sweep's default ")[1].split()[0])
    assert today >= 0.98 and today > sweep + 0.1, last


@pytest.mark.parametrize("M,N,K,cfg", [
    (16, 128, 1280, (128, 1, 5, 1, 4)),  # the 16-row rule's tiles: 5 steps a part
    (100, 64, 640, (64, 1, 5, 1, 2)),    # padded rows, 5 stages, 2 parts
])
def test_the_rules_configurations_compute_the_product(M, N, K, cfg):
    y, args = _dense(M, N, K, bias=True, act="gelu", cast="float16")
    s, _ = _schedule(y, WgmmaScheduleConfig(*cfg))
    _, vals, got = _run(s, args, y)
    want = _ref(vals, True, "gelu", False)
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2 * np.abs(want).max())


@pytest.mark.parametrize("M,N,K,wgmma", [(16, 4096, 4096, True), (1, 4096, 768, False),
                                         (256, 768, 4096, True)])
def test_the_default_schedules_of_the_rules_compile_to_ptx(M, N, K, wgmma):
    import ptxforge
    from ptxforge.backend_ptx import compile_module
    from ptxforge.ops.schedules import default_schedule
    from ptxforge.target import as_target

    y, args = _dense(M, N, K, bias=True, act="gelu", cast="float16")
    target = as_target(SM90A)
    with target:
        ptx = compile_module(ptxforge.lower(default_schedule(y, target), args + [y]),
                             target).get_source("ptx")
    assert ("wgmma.mma_async" in ptx) == wgmma and ("mma.sync" in ptx) == (not wgmma)
    assert "cp.async" in ptx and "ld.local" not in ptx and "st.local" not in ptx


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K", [(16, 4096, 4096), (1, 4096, 768), (128, 4096, 4096),
                                   (256, 768, 4096), (100, 3072, 1000)])
def test_the_few_row_defaults_on_the_gpu(M, N, K):
    """The rules' picks (and a shape between the measured ones) built by the default
    schedule for an H100, against float64 numpy."""
    import ptxforge
    from ptxforge.backend_ptx import array, compile_module, cuda, empty
    from ptxforge.ops.schedules import default_schedule
    from ptxforge.target import as_target

    from .lowp import f64, host

    dev = cuda(0)
    if dev.sm != "sm_90":
        pytest.skip(f"the few-row rules are for sm_90 GPUs; this one is {dev.sm}")
    rng = np.random.default_rng(5)
    y, args = _dense(M, N, K, bias=True, act="gelu", cast="float16")
    target = as_target(SM90A)
    with target:
        loaded = compile_module(ptxforge.lower(default_schedule(y, target), args + [y]),
                                target).load(dev)
    vals = [host(rng, a.shape, a.dtype) for a in args]
    out = empty((M, N), y.dtype, dev)
    loaded(*[array(h, dev, a.dtype) for h, a in zip(vals, args)], out)
    want = _ref([f64(h, a.dtype) for h, a in zip(vals, args)], True, "gelu", False)
    np.testing.assert_allclose(f64(out.numpy(), y.dtype), want, rtol=0,
                               atol=3e-3 * np.abs(want).max())
