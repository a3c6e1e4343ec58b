"""The default schedule of every task is measured as a tuning candidate and recorded like
any other: a run's log holds one default record per task (its pipeline text what
``graph.build`` compiles without records), ``ApplyHistoryBest`` over a log whose best is
the default builds the kernel the build makes without records, the option turns it off, a
resumed run does not measure it again, and a task without a default simply has none.
Measured on the simulator runner (CPU)."""

from __future__ import annotations

import argparse
import logging
import pickle
import warnings

import pytest
from ptxforge import autosched, graph, measure, ops, te
from ptxforge.autosched import default_candidate
from ptxforge.autosched.default_candidate import (
    DefaultPlan,
    NoDefaultSchedule,
    default_input,
    default_state,
    is_default_payload,
    task_default_schedule,
)
from ptxforge.autosched.network_tuning import tune_network
from ptxforge.target import as_target

from .test_cli_keep_builders_busy import tune_network_kwargs
from .test_network_tuning import two_conv_net

POLICY = {"evolutionary_search_population": 64, "evolutionary_search_num_iters": 1}


@autosched.register_workload
def default_scale_rows(n):
    a = te.placeholder((n, 48), name="a")
    return [a, te.compute((n, 48), lambda i, j: a[i, j] * 2.0 + 1.0, name="scaled")]


@autosched.register_workload
def default_softmax_rows(rows, cols):
    x = te.placeholder((rows, cols), "float32", name="x")
    return [x, ops.nn.softmax(x)]


def _defaults(log) -> list:
    return [(i, r) for i, r in measure.load_records(log) if is_default_payload(i.payload)]


@pytest.fixture(scope="module")
def net_run(tmp_path_factory):
    """A short tuning run of a three-task network on the simulator runner."""
    net, params, _ = two_conv_net()
    tasks, weights = autosched.extract_tasks(net, params)
    log = str(tmp_path_factory.mktemp("default") / "net.json")
    run = tune_network(tasks, weights, log, 3 * len(tasks), runner="sim", per_round=3,
                       sim_check=False, measure_default=True)
    return net, params, tasks, log, run


def test_a_tuning_run_records_one_default_per_task(net_run):
    _, _, tasks, log, run = net_run
    records = measure.load_records(log)
    assert len(records) == run.scheduler.ct == 3 * len(tasks)  # the default is a trial
    defaults = _defaults(log)
    assert sorted(i.task.workload_key for i, _ in defaults) == sorted(
        t.workload_key for t in tasks)
    by_key = {t.workload_key: t for t in tasks}
    for inp, res in defaults:
        assert int(res.error_no) == 0 and res.mean < 1.0
        # the builder made it for the build target ("cuda": sm_90 without a GPU)
        sch, _ = task_default_schedule(by_key[inp.task.workload_key], "cuda")
        assert inp.pipeline_text == sch.pipeline.text and inp.pipeline_text
    # the scheduler counted it in the task's best cost
    for k, t in enumerate(tasks):
        mine = [r.mean for i, r in records if i.task.workload_key == t.workload_key
                and int(r.error_no) == 0]
        assert run.scheduler.best_costs[k] == min(mine)


def test_apply_history_best_over_a_default_best_builds_the_default_kernels(net_run):
    net, params, tasks, log, _ = net_run
    # every default record made the best of its task (states kept, slower)
    pairs = []
    for inp, res in measure.load_records(log):
        if is_default_payload(inp.payload):
            res = measure.MeasureResult((1e-9,), 0, "", 0.0, 0.0, estimated=res.estimated)
        pairs.append((inp, res))
    ctx = autosched.ApplyHistoryBest(pairs)
    assert all(is_default_payload(ctx.best[t.workload_key][0].payload) for t in tasks)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", graph.NoTuningRecordWarning)
        plain = graph.build(net, "cuda", params)
    with ctx:
        tuned = graph.build(net, "cuda", params)
    assert set(plain.functions) == set(tuned.functions)
    for key, f in plain.functions.items():
        g = tuned.functions[key]
        assert g.tuned and not f.tuned
        assert str(g.device_module) == str(f.device_module)
        assert g.ptx.get_source("ptx") == f.ptx.get_source("ptx")


def test_a_resumed_run_does_not_measure_the_default_again(net_run, tmp_path):
    _, _, tasks, log, run = net_run
    again = str(tmp_path / "again.json")
    with open(log) as src, open(again, "w") as dst:
        dst.write(src.read())
    more = tune_network(tasks, [1] * len(tasks), again, 2 * len(tasks), runner="sim",
                        per_round=2, sim_check=False, measure_default=True)
    assert len(_defaults(again)) == len(tasks)
    assert more.scheduler.default_measured == set(range(len(tasks)))
    # the loaded default records count in each task's best (restored, then kept)
    assert all(c <= b for c, b in zip(more.scheduler.best_costs, run.scheduler.best_costs))


def _single_task_run(log, trials, task=None, measure_default=True, **kw):
    task = task or autosched.SearchTask(func=default_scale_rows, args=(64,))
    opts = autosched.TuningOptions(measure_default=measure_default,
        num_measure_trials=trials, num_measures_per_round=trials, verbose=0,
        builder=measure.LocalBuilder(n_parallel=1, compile_to="ir"), runner="sim",
        measure_callbacks=[autosched.RecordToFile(log)], **kw)
    policy = autosched.SketchPolicy(task, autosched.RandomModel(seed=0), POLICY, seed=0,
                                    verbose=0)
    try:
        return task, task.tune(opts, search_policy=policy)
    finally:
        opts.builder.close()


def test_the_option_turns_the_default_candidate_on_and_off(tmp_path):
    on, off = str(tmp_path / "on.json"), str(tmp_path / "off.json")
    task, summary = _single_task_run(on, 3)
    records = measure.load_records(on)
    assert summary.trials == len(records) == 3
    assert [is_default_payload(i.payload) for i, _ in records].count(True) == 1
    (inp, res), = _defaults(on)
    assert int(res.error_no) == 0
    assert inp.pipeline_text == task_default_schedule(task, "cuda")[0].pipeline.text
    _, summary = _single_task_run(off, 3, measure_default=False)
    records = measure.load_records(off)
    assert summary.trials == len(records) == 3
    assert not _defaults(off)
    # off where nothing asks for it: tune_network and the command line turn it on for the
    # GPU runner
    assert autosched.TuningOptions().measure_default is False


def test_a_default_that_raises_is_skipped_cleanly(tmp_path, monkeypatch, caplog):
    def raises(task, target=None):
        raise NoDefaultSchedule(f"{task.desc}: no default here")

    # patched before the builder's workers fork, so they inherit it
    monkeypatch.setattr(default_candidate, "task_default_schedule", raises)
    log = str(tmp_path / "raises.json")
    with caplog.at_level(logging.DEBUG, logger="ptxforge"):
        _, summary = _single_task_run(log, 3)
    records = measure.load_records(log)
    assert not _defaults(log)
    assert len(records) == 2 and all(int(r.error_no) == 0 for _, r in records)
    assert summary.trials == 3 and summary.errors == 0  # it took its trial, no error
    assert "no default candidate" in caplog.text and "no default here" in caplog.text


def test_the_default_plan_crosses_processes_and_builds_the_default():
    task = autosched.SearchTask(func=default_scale_rows, args=(64,))
    inp = default_input(task)
    again = pickle.loads(pickle.dumps(inp.plan))
    assert isinstance(again, DefaultPlan) and again.task is task
    res = measure.build_candidate(inp, measure.BuildOptions(compile_to="ir"))
    assert int(res.error_no) == 0
    assert res.pipeline_text == task_default_schedule(task, "cuda")[0].pipeline.text


@pytest.mark.parametrize("flag, want", [([], None), (["--measure-default"], True),
                                        (["--no-measure-default"], False)])
def test_the_flags_reach_the_tuners(monkeypatch, flag, want):
    from ptxforge.cli import tune

    assert tune_network_kwargs(monkeypatch, *flag)["measure_default"] is want
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd")
    tune.add_tune_op_parser(sub)
    op = parser.parse_args(["tune-op", "dense_bias:1,16,16", "--trials", "2", "--log",
                            "y.json", *flag])
    assert op.measure_default is want


def test_a_default_that_is_a_search_state_is_measured_and_learned_as_one(tmp_path):
    task = autosched.SearchTask(func=default_softmax_rows, args=(8, 256))
    state = default_state(task)
    assert task.sketches[state.sketch].name.startswith("fused_rows(")
    # the state's schedule is the default's: 32 threads for 256 columns, unrolled
    sch, _ = task_default_schedule(task, "cuda")
    assert state.pipeline_text(task) == sch.pipeline.text
    log = str(tmp_path / "rows.json")
    seen = []

    class Policy(autosched.SketchPolicy):
        def add_measured(self, rows, results, update_model=True):
            seen.extend(tuple(r) for r in rows)
            super().add_measured(rows, results, update_model)

    opts = autosched.TuningOptions(
        num_measure_trials=4, num_measures_per_round=4, verbose=0, measure_default=True,
        builder=measure.LocalBuilder(n_parallel=1, compile_to="ir"), runner="sim",
        measure_callbacks=[autosched.RecordToFile(log)])
    policy = Policy(task, autosched.RandomModel(seed=0), POLICY, seed=0, verbose=0)
    try:
        summary = task.tune(opts, search_policy=policy)
    finally:
        opts.builder.close()
    records = measure.load_records(log)
    assert summary.trials == len(records) == 4
    (inp, res), = _defaults(log)
    assert inp.payload["kind"] == "autosched" and inp.payload["default"] is True
    assert inp.pipeline_text == sch.pipeline.text and int(res.error_no) == 0
    # the policy (and its cost model) got it as a state, once
    row = tuple(state.row(task.state_width))
    assert seen.count(row) == 1 and len(seen) == 4


@pytest.mark.gpu
def test_on_the_gpu_every_task_has_a_measured_default_and_the_best_is_no_slower(tmp_path):
    net, params, _ = two_conv_net(size=32, channels=32)
    tasks, weights = autosched.extract_tasks(net, params, precision="float16")
    log = str(tmp_path / "gpu.json")
    ctx = autosched.LocalRPCMeasureContext(min_repeat_ms=5)
    try:
        ts = autosched.TaskScheduler(tasks, weights, callbacks=[])
        ts.tune(autosched.TuningOptions(num_measure_trials=8 * len(tasks),
                                        num_measures_per_round=8, runner=ctx.runner,
                                        measure_default=True,
                                        measure_callbacks=[autosched.RecordToFile(log)]))
    finally:
        ctx.close()
    defaults = {i.task.workload_key: r for i, r in _defaults(log)}
    assert set(defaults) == {t.workload_key for t in tasks}
    for k, t in enumerate(tasks):
        res = defaults[t.workload_key]
        assert int(res.error_no) == 0 and not res.estimated
        assert ts.best_costs[k] <= res.mean
    # the build with the records picks each task's best, the default where it won
    with autosched.ApplyHistoryBest(log) as best:
        lib = graph.build(net, "cuda", params, precision="float16")
    assert all(f.tuned for f in lib.functions.values())
    for t in tasks:
        assert best.query(t.workload_key)[1].mean <= defaults[t.workload_key].mean


def test_a_policy_seeded_from_a_log_with_the_default_does_not_measure_it_again(tmp_path):
    """``SearchTask.tune`` resumed with ``PreloadMeasuredStates`` (as a killed run is
    resumed): the default recorded by the first run is not measured by the second."""
    log = str(tmp_path / "resumed.json")
    task, _ = _single_task_run(log, 3)
    assert len(_defaults(log)) == 1
    policy = autosched.SketchPolicy(task, autosched.RandomModel(seed=1), POLICY, seed=1,
                                    verbose=0,
                                    init_search_callbacks=[autosched.PreloadMeasuredStates(log)])
    assert policy.default_recorded
    opts = autosched.TuningOptions(
        num_measure_trials=3, num_measures_per_round=3, verbose=0, measure_default=True,
        builder=measure.LocalBuilder(n_parallel=1, compile_to="ir"), runner="sim",
        measure_callbacks=[autosched.RecordToFile(log)])
    try:
        summary = task.tune(opts, search_policy=policy)
    finally:
        opts.builder.close()
    assert summary.trials == 3
    assert len(_defaults(log)) == 1 and len(measure.load_records(log)) == 6


H200 = "cuda -arch=sm_90a"


@autosched.register_workload
def default_wgmma_dense(M, N, K, epilogue):
    """A float16 dense layer of a transformer: ``"bias_gelu"`` (bias, erf GELU in float32,
    cast back), ``"residual"`` (bias and a residual add in float32, cast back) or
    ``"none"`` (the product alone, as GPT-2's LM head)."""
    x = te.placeholder((M, K), "float16", name="x")
    w = te.placeholder((N, K), "float16", name="w")
    if epilogue == "none":
        return [x, w, ops.nn.dense(x, w)]
    b = te.placeholder((N,), "float16", name="b")
    y = ops.nn.dense(x, w, b, out_dtype="float32")
    args = [x, w, b]
    if epilogue == "bias_gelu":
        y = ops.multiply(ops.multiply(y, ops.add(ops.erf(ops.multiply(
            y, 0.7071067811865476)), 1.0)), 0.5)
    else:
        r = te.placeholder((M, N), "float32", name="r")
        args.append(r)
        y = ops.add(y, r)
    return args + [ops.cast(y, "float16")]


@autosched.register_workload
def default_wgmma_bmm(B, M, N, K):
    a = te.placeholder((B, M, K), "float16", name="a")
    b = te.placeholder((B, N, K), "float16", name="b")
    return [a, b, ops.nn.batch_matmul(a, b)]


def _wgmma_task(fn, args):
    task = autosched.SearchTask(func=fn, args=args, target=H200)
    (k,) = [k for k, sk in enumerate(task.sketches) if sk.name.startswith("wgmma_gemm(")]
    return task, k


@pytest.mark.parametrize("fn,args,raster", [
    (default_wgmma_dense, (128, 768, 768, "bias_gelu"), 1),     # one row block of 128
    (default_wgmma_dense, (197, 3072, 768, "bias_gelu"), 1),    # ViT's few-row rule
    (default_wgmma_dense, (1024, 3072, 768, "bias_gelu"), 4),   # GPT-2's FFN, mid rows
    (default_wgmma_dense, (1024, 768, 3072, "residual"), 1),
    (default_wgmma_dense, (1024, 50257, 768, "none"), 8),       # GPT-2's head: B once
    (default_wgmma_dense, (4096, 768, 3072, "residual"), 4),    # BERT: staged C tile
    (default_wgmma_dense, (4096, 3072, 768, "bias_gelu"), 4),
    (default_wgmma_bmm, (12, 512, 512, 64), 1),
])
def test_a_wgmma_default_is_the_state_of_its_knobs(fn, args, raster):
    """The default of a wgmma product whose knobs the sketch offers is that state, and the
    state prints the default's very pipeline (the inlines in the default's order, the
    block order among the knobs)."""
    task, k = _wgmma_task(fn, args)
    state = default_state(task)
    assert state is not None and state.sketch == k
    sk = task.sketches[state.sketch]
    assert sk.describe(state.values)[sk.steps[0].slot("raster")] == raster
    sch, _ = task_default_schedule(task, H200)
    assert state.pipeline_text(task) == sch.pipeline.text


@pytest.mark.parametrize("fn,args,why", [
    # the product alone stored through the staged C tile: the sketch stores it from the
    # fragments
    (default_wgmma_dense, (1024, 768, 768, "none"), "staged_epilogue"),
    # the mid-size rule's 128 x 192 tiles: not among the widths the sketch offers
    (default_wgmma_dense, (4096, 2304, 768, "residual"), "block_n"),
    # the default runs it on mma.sync (the other sketch's kind)
    (default_wgmma_bmm, (12, 128, 64, 128), "mma.sync"),
])
def test_a_wgmma_default_outside_the_sketch_stays_the_builders(fn, args, why):
    from ptxforge.ops.schedules.gemm.chooser import wgmma_choice

    task, k = _wgmma_task(fn, args)
    step = task.sketches[k].steps[0]
    c, out = step.tensors
    with as_target(H200):
        cfg = wgmma_choice(c.op, None if out is c else out.op, step.form, H200)
    if why == "mma.sync":
        assert cfg is None
    elif why == "staged_epilogue":
        assert cfg.staged_epilogue and not step.epilogue_tile
    else:
        assert cfg.block_n == 192
    assert default_state(task) is None
