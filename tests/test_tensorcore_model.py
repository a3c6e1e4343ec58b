"""The auto-scheduler's model of tensor-core states derives from the GEMM template: a state
is valid exactly where the template's rules accept its configuration
(:func:`~ptxforge.ops.schedules.gemm.rules.gemm_rules`, ``conv_rules``, ``wgmma_rules``;
the model adds only its register budget of accumulators), and its time is the default
chooser's estimate of that configuration (``gemm_time``, ``wgmma_time``)."""

from __future__ import annotations

import numpy as np
import pytest

from ptxforge import autosched, ops, te
from ptxforge.autosched.tensorcore import (
    TensorCoreConvStep,
    WgmmaGemmStep,
    tensorcore_model,
    tensorcore_sketches,
)
from ptxforge.ops.schedules.gemm.estimate import gemm_time, wgmma_time
from ptxforge.ops.schedules.gemm.rules import (
    check_conv_config,
    check_gemm_config,
    check_wgmma_knobs,
)
from ptxforge.passes.schedule.common import ScheduleError

SM80 = "cuda -arch=sm_80"
SM90A = "cuda -arch=sm_90a"
N_STATES = 60


def _dense(M, N, K, dt="float16"):
    a = te.placeholder((M, K), dt, name="A")
    b = te.placeholder((N, K), dt, name="B")
    k = te.reduce_axis((0, K), name="k")
    c = te.compute((M, N), lambda i, j: te.sum(
        a[i, k].astype("float32") * b[j, k].astype("float32"), axis=k), name="C",
        tag="dense")
    return [a, b, te.compute((M, N), lambda i, j: c[i, j].astype("float16"), name="D")]


def _conv(n, h, ci, co):
    x = te.placeholder((n, h, h, ci), "float16", name="x")
    w = te.placeholder((3, 3, ci, co), "float16", name="w")
    return [x, w, ops.nn.conv2d_nhwc(x, w, 1, 1, out_dtype="float32")]


def _steps(func, args, target):
    func.__name__ = f"tc_model_{func.__name__}"
    task = autosched.SearchTask(func=func, args=args, target=target)
    return task, [sk.steps[0] for sk in tensorcore_sketches(task)]


def _population(step, seed=0):
    rng = np.random.default_rng(seed)
    return {sl.name: np.asarray(sl.choices)[rng.integers(0, len(sl.choices), N_STATES)]
            for sl in step.slots()}


def _state(V, i):
    return {k: v[i] for k, v in V.items()}


def _accepts(check, *args) -> bool:
    try:
        check(*args)
    except ScheduleError:
        return False
    return True


@pytest.mark.parametrize("func,args,target", [
    (_dense, (200, 384, 768), SM80),
    (_dense, (64, 128, 4096), SM90A),
    (_conv, (1, 14, 64, 128), SM80),
])
def test_model_validity_and_time_are_the_templates(func, args, target):
    task, steps = _steps(func, args, target)
    hw = task.hardware_params
    for step in steps:
        V = _population(step)
        got = tensorcore_model(step, V, hw, N_STATES)
        f = step.form
        for i in range(N_STATES):
            vals = _state(V, i)
            if isinstance(step, WgmmaGemmStep):
                cfg = step.wgmma_config(vals)
                c_tile = bool(np.asarray(step.epilogue_tile | (cfg.split_k > 1)
                                         | (-(-f.M // cfg.block_m) * cfg.block_m != f.M)
                                         | (-(-f.N // cfg.block_n) * cfg.block_n != f.N)
                                         | (f.K % (128 * cfg.split_k) != 0)))
                ok = _accepts(check_wgmma_knobs, cfg, f, "x", step.target, c_tile)
                est = wgmma_time(cfg, f, step.target, c_tile)
            else:
                conv = isinstance(step, TensorCoreConvStep)
                cfg = step.conv_config(vals) if conv else step.gemm_config(vals)
                ok = (_accepts(check_conv_config, cfg, step.tensors[0].op, step.target)
                      if conv else _accepts(check_gemm_config, cfg, f, "x", step.target))
                wm, wn = cfg.block_m // cfg.warps_m, cfg.block_n // cfg.warps_n
                ok = ok and wm * wn // 32 <= hw.max_accumulators_per_thread
                est = gemm_time(cfg, f, step.target)
            assert bool(got["valid"][i]) == ok, (step, cfg)
            assert float(got["est"][i]) == est, (step, cfg)
        assert got["valid"].any() and not got["valid"].all()


def test_an_fp8_wgmma_state_steps_128_bytes_of_k():
    """An fp8 product's wgmma states take K steps of 128 elements (one 128-byte row), as
    the schedule does: four stages of a K of 512 are valid."""
    def fp8_dense(M, N, K):
        from ptxforge.ops.scaled_mm import scaled_mm

        a = te.placeholder((M, K), "float8_e4m3fn", name="A")
        b = te.placeholder((N, K), "float8_e4m3fn", name="B")
        sa = te.placeholder((1,), "float32", name="sa")
        sb = te.placeholder((1,), "float32", name="sb")
        return [a, b, sa, sb, scaled_mm(a, b, sa, sb, "float16")]

    task, steps = _steps(fp8_dense, (128, 256, 512), SM90A)
    (wg,) = [st for st in steps if isinstance(st, WgmmaGemmStep)]
    V = {sl.name: np.asarray([sl.choices[0]]) for sl in wg.slots()}
    V[wg.slot("stages")] = np.asarray([4])
    V[wg.slot("in_flight")] = np.asarray([1])
    got = tensorcore_model(wg, V, task.hardware_params, 1)
    assert got["valid"][0] and got["r0"][0] == 4
    V[wg.slot("stages")] = np.asarray([5])  # 5 stages of 4 steps: refused
    assert not tensorcore_model(wg, V, task.hardware_params, 1)["valid"][0]
