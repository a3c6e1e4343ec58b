"""Fused attention in the tuners: the auto-scheduler's task offers the ``fused_attention``
sketch and ranks its states with the attention model; the usual builder builds candidates
holding the step as the fused kernel, in its worker processes, compiling every kernel of a
candidate with one ptxas and reporting the compiler's stage times; AutoTVM sends configs
that the builder instantiates."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ptxforge import autosched, autotvm, measure, te
from ptxforge.autotvm import attention as template
from ptxforge.backend_ptx.assemble import find_ptxas
from ptxforge.ir.compute_dag import ComputeDAG
from ptxforge.measure.build import BuildOptions, build_candidate
from ptxforge.ops.attention import attention

TARGET = "cuda -arch=sm_80"
ARGS = (1, 2, 1, 9, 24, 16, 16, "float16", True, None)


@pytest.fixture(scope="module")
def task():
    q = te.placeholder((1, 2, 40, 16), "float16", name="q")
    k = te.placeholder((1, 1, 40, 16), "float16", name="k")
    v = te.placeholder((1, 1, 40, 16), "float16", name="v")
    out = attention(q, k, v, causal=True)
    return autosched.SearchTask(compute_dag=ComputeDAG([q, k, v, out]), target=TARGET)


def _attention_sketch(task) -> int:
    names = [sk.name for sk in task.sketches]
    found = [i for i, n in enumerate(names) if n.startswith("fused_attention(")]
    assert len(found) == 1, names
    return found[0]


def test_an_attention_the_kernel_runs_gets_the_fused_sketch_alone(task):
    """The unfused CUDA-core sketches of such a task (18-28x slower, 8x the build time)
    are not offered; an attention the kernel cannot run keeps them."""
    assert [sk.name for sk in task.sketches] == ["fused_attention(T_attention_out)"]
    q = te.placeholder((1, 2, 40, 16), "float32", name="q")
    k = te.placeholder((1, 1, 40, 16), "float32", name="k")
    v = te.placeholder((1, 1, 40, 16), "float32", name="v")
    out = attention(q, k, v, causal=True)
    wide = autosched.SearchTask(compute_dag=ComputeDAG([q, k, v, out]), target=TARGET)
    names = [sk.name for sk in wide.sketches]
    assert names and not any(n.startswith("fused_attention(") for n in names), names


def test_the_task_offers_the_sketch_and_the_model_ranks_it(task):
    k = _attention_sketch(task)
    sk, model = task.sketches[k], task.models[k]
    (step,) = sk.steps
    rows = np.array([[c] for c in range(len(step.configs))])
    kernels = model.kernels(rows)
    assert [kind for kind, _ in kernels] == ["attention"]
    est = model.estimate(rows, kernels)
    assert model.valid(rows, kernels).all() and np.isfinite(est).all()
    # the estimate is the kernel's own time model, configuration by configuration
    from ptxforge.ops.schedules.attention import attention_time

    want = [attention_time(step.workload, c, step.target) for c in step.configs]
    np.testing.assert_allclose(est, want)
    assert len(set(np.round(est, 12))) > 1  # it tells configurations apart
    # the cost model's features of the population, with the launch figures of the model
    from ptxforge.autosched.features import FEATURE_NAMES, population_features

    pop = np.concatenate([np.full((len(rows), 1), k), rows], axis=1)
    feats, valid, got = population_features([None] * k + [model], pop, task.flop_ct,
                                            task.hardware_params.num_sms)
    assert valid.all() and np.allclose(got, est) and np.isfinite(feats).all()
    threads = feats[:, FEATURE_NAMES.index("log_threads")]
    np.testing.assert_allclose(threads, np.log2([c.threads + 1.0 for c in step.configs]))


def test_a_short_search_builds_fused_candidates_in_the_workers(task, tmp_path):
    log = str(tmp_path / "att.json")
    k = _attention_sketch(task)
    builder = measure.LocalBuilder(n_parallel=1, compile_to="ir", timeout=120)
    runner = measure.SimRunner(check_correctness=True, max_sim_seconds=20, target=TARGET)
    opts = autosched.TuningOptions(num_measure_trials=3, num_measures_per_round=3,
                                   builder=builder, runner=runner, verbose=0,
                                   measure_callbacks=[autosched.RecordToFile(log)])
    # the search only among the attention sketch's states: drop the unfused sketches
    only = [task.sketches[k]]
    models = [task.models[k]]
    saved = task.__dict__.get("sketches"), task.__dict__.get("models")
    task.__dict__["sketches"], task.__dict__["models"] = only, models
    try:
        pol = autosched.SketchPolicy(task, autosched.RandomModel(seed=5), seed=5, verbose=0)
        summary = task.tune(opts, search_policy=pol)
    finally:
        task.__dict__["sketches"], task.__dict__["models"] = saved
        builder.close()
        runner.close()
    assert summary.trials == 3 and builder.builds == 3
    with open(log) as f:
        recs = [json.loads(line) for line in f]
    assert len(recs) == 3
    for rec in recs:
        assert rec["pipeline"].startswith("fused_attention("), rec["pipeline"]
        assert rec["result"]["correctness"] == "passed", rec["result"]
    assert "lower" in builder.stage_totals


def _candidate(compile_to: str):
    task = autotvm.task.create(template.NAME, args=ARGS, target=TARGET)
    inp = task.candidate(task.config_space.get(0)).to_measure()
    return build_candidate(inp, BuildOptions(TARGET, compile_to))


def test_ptx_builds_report_the_compiler_stages():
    res = _candidate("ptx")
    assert res.error_no == 0, res.error_msg
    assert res.pipeline_text.startswith("fused_attention(")
    for name in ("lower", "llvm_ir", "opt", "ptx"):
        assert res.stage_seconds.get(name, 0) > 0, res.stage_seconds
    assert "ptxas" not in res.stage_seconds
    (ck,) = res.artifact.kernels.values()
    assert "mma.sync" in ck.get_source("ptx")


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas is not installed")
def test_cubin_builds_assemble_once_and_report_ptxas():
    builder = measure.LocalBuilder(n_parallel=0, target_sm=TARGET, compile_to="cubin")
    task = autotvm.task.create(template.NAME, args=ARGS, target=TARGET)
    (res,) = builder.build([task.candidate(task.config_space.get(0)).to_measure()])
    assert res.error_no == 0, res.error_msg
    totals = builder.stage_totals
    assert totals["ptxas"] > 0 and totals["opt"] > 0, totals
    (ck,) = res.artifact.kernels.values()
    assert ck.cubin and ck.resources is not None and ck.resources.registers > 0


def test_autotvm_tunes_attention_through_the_worker_pool(tmp_path):
    log = str(tmp_path / "at.json")
    task = autotvm.task.create(template.NAME, args=ARGS, target="cuda")
    builder = autotvm.LocalBuilder(n_parallel=1, compile_to="ir", timeout=120)
    option = autotvm.measure_option(builder=builder,
                                    runner=autotvm.SimRunner(max_sim_seconds=5.0))
    try:
        autotvm.tuner.GridSearchTuner(task).tune(
            n_trial=2, measure_option=option, callbacks=[autotvm.callback.log_to_file(log)])
    finally:
        builder.close()
    records = measure.load_records(log)
    assert len(records) == 2
    assert all(r.error_no == 0 and r.correctness == "passed" for _, r in records)
    assert all(i.pipeline_text.startswith("fused_attention(") for i, _ in records)
    assert builder.builds == 2 and "lower" in builder.stage_totals
    assert template.AttentionBuilder is measure.LocalBuilder
