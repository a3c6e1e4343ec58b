"""The default schedule of every task is measured as a tuning candidate and recorded like
any other: a run's log holds one default record per task (its pipeline text what
``graph.build`` compiles without records), ``ApplyHistoryBest`` over a log whose best is
the default builds the kernel the build makes without records, the option turns it off, a
resumed run does not measure it again, and a task without a default simply has none.
Measured on the simulator runner (CPU).

A default that fails (it cannot be made, its build fails or times out, it gives a wrong
answer) is an error record like any failed candidate, so a log holds a record per trial; a
wrong answer is a warning; a resumed run measures a failed default again only where it
timed out; the readers of records pass over it. Those tests use fakes of the builder and
runner that fail the default as asked."""

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
    is_default_input,
    is_default_payload,
    task_default_schedule,
)
from ptxforge.autosched.network_tuning import tune_network
from ptxforge.autosched.records import state_rows
from ptxforge.autosched.state import state_from_payload
from ptxforge.cli.records import records_command
from ptxforge.measure import MeasureErrorNo
from ptxforge.target import as_target

from .instant import Instant
from .test_autosched_search import FakeBuilder, fake_costs
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


def test_a_default_that_cannot_be_made_leaves_one_error_record(tmp_path, monkeypatch, caplog):
    def raises(task, target=None):
        raise NoDefaultSchedule(f"{task.desc}: no default here")

    # patched before the builder's workers fork, so they inherit it
    monkeypatch.setattr(default_candidate, "task_default_schedule", raises)
    log = str(tmp_path / "raises.json")
    with caplog.at_level(logging.DEBUG, logger="ptxforge"):
        _, summary = _single_task_run(log, 3)
    records = measure.load_records(log)
    assert summary.trials == len(records) == 3  # it took its trial, and it is in the log
    (inp, res), = _defaults(log)
    assert inp.payload == {"kind": "default"} and inp.pipeline_text == ""
    assert int(res.error_no) != 0 and "no default here" in res.error_msg
    assert summary.errors == 1 and all(int(r.error_no) == 0 for i, r in records
                                       if not is_default_payload(i.payload))
    assert "no default candidate" in caplog.text and "no default here" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


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


# -- failed defaults, with fakes of the measure layer ------------------------------------------

DEFAULT_COST = 1e-3
"""What the fake runner times a default candidate that does not fail (the states' fake
times are far below it, so a default never makes the best)."""


class DefaultBuilder(FakeBuilder):
    """Builds nothing; the default candidate's build fails with ``error`` (``(error_no,
    message)``) when one is given."""

    def __init__(self, error=None):
        super().__init__()
        self.error = error

    def submit(self, key, inp):
        if self.error is None or not is_default_input(inp):
            return super().submit(key, inp)
        self._done.append((key, measure.BuildResult(None, int(self.error[0]), self.error[1],
                                                    0.0)))
        return None


class DefaultRunner(Instant, measure.Runner):
    """A state's fake time (:func:`fake_costs`), :data:`DEFAULT_COST` for a default
    without a state; the default fails with ``error`` (``(error_no, message)``) when one is
    given."""

    def __init__(self, task, error=None):
        self.task, self.error = task, error
        self._done: list = []

    def submit(self, key, inp, build):
        if self.error is not None and is_default_input(inp):
            res = measure.MeasureResult((measure.ERROR_COST,), int(self.error[0]),
                                        self.error[1], 0.0, 0.0)
        else:
            st = state_from_payload(self.task, inp.payload)
            cost = (DEFAULT_COST if st is None
                    else float(fake_costs(self.task, st.row(self.task.state_width)[None])[0]))
            res = measure.MeasureResult((cost,), 0, "", 0.0, 0.0, estimated=True)
        self._done.append((key, res))


WRONG = (MeasureErrorNo.WRONG_ANSWER, "max abs error 3.5 at (0, 1)\nsecond line")
TIMEOUT = (MeasureErrorNo.RUN_TIMEOUT, "the run took over 10 s")
BUILD_TIMEOUT = (MeasureErrorNo.BUILD_TIMEOUT, "the build took over 10 s")
BROKEN = (MeasureErrorNo.COMPILE_DEVICE, "ptxas failed")


def _fake_run(log, task, build_error=None, run_error=None, trials=3, resume=False,
              scheduler=False):
    """Tune ``task`` for ``trials`` trials with the fakes above (the default failing at
    build or run where asked), its records going to ``log``; resumed from ``log`` with
    ``resume``, by ``PreloadMeasuredStates`` (``SearchTask.tune``, as ``tune-op``) or, with
    ``scheduler``, by the task scheduler's ``load_log_file`` (as ``tune-network``). Returns
    what the run reports: the summary's trials, or the scheduler's count of them."""
    opts = autosched.TuningOptions(
        num_measure_trials=trials, num_measures_per_round=trials, verbose=0,
        measure_default=True, builder=DefaultBuilder(build_error),
        runner=DefaultRunner(task, run_error), measure_callbacks=[autosched.RecordToFile(log)],
        search_ahead=0)
    if scheduler:
        ts = autosched.TaskScheduler([task], [1], callbacks=[],
                                     load_log_file=log if resume else None)
        ts.tune(opts, search_policy="sketch.random", search_policy_params=POLICY)
        return ts.ct
    seed = [autosched.PreloadMeasuredStates(log)] if resume else None
    policy = autosched.SketchPolicy(task, autosched.RandomModel(seed=0), POLICY, seed=0,
                                    verbose=0, init_search_callbacks=seed)
    return task.tune(opts, search_policy=policy).trials


@autosched.register_workload
def default_matmul(n):
    a = te.placeholder((n, n), name="a")
    b = te.placeholder((n, n), name="b")
    k = te.reduce_axis((0, n), name="k")
    return [a, b, te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="mm")]


def _matmul_task():
    """A task whose default is no state, with a tile sketch's space: resumed runs find
    states enough."""
    return autosched.SearchTask(func=default_matmul, args=(64,))


@pytest.mark.parametrize("build_error, run_error", [(BUILD_TIMEOUT, None), (None, TIMEOUT),
                                                    (BROKEN, None), (None, WRONG)])
@pytest.mark.parametrize("scheduler", [False, True])
def test_a_failed_default_leaves_one_error_record(tmp_path, build_error, run_error, scheduler):
    log = str(tmp_path / "failed.json")
    trials = _fake_run(log, _matmul_task(), build_error, run_error, scheduler=scheduler)
    records = measure.load_records(log)
    assert trials == len(records) == 3
    (inp, res), = _defaults(log)
    error_no, message = build_error or run_error
    assert inp.payload == {"kind": "default"} and res.error_no == error_no
    assert res.error_msg == message
    # what the builder could not build holds no pipeline; what it built, the default's
    assert inp.pipeline_text == ("" if build_error else
                                 task_default_schedule(_matmul_task(), "cuda")[0].pipeline.text)


@pytest.mark.parametrize("error, level", [(WRONG, logging.WARNING),
                                          ((MeasureErrorNo.RUNTIME_DEVICE, "a fault"),
                                           logging.WARNING),
                                          (TIMEOUT, logging.INFO), (BROKEN, logging.DEBUG)])
def test_a_default_with_a_wrong_answer_or_a_fault_is_a_warning(tmp_path, caplog, error, level):
    task = _matmul_task()
    with caplog.at_level(logging.DEBUG, logger="ptxforge"):
        _fake_run(str(tmp_path / "wrong.json"), task, run_error=error)
    said = [r for r in caplog.records if error[1].splitlines()[0] in r.getMessage()]
    assert [r.levelno for r in said] == [level]
    if level == logging.WARNING:
        text = said[0].getMessage()
        assert task.desc in text and MeasureErrorNo(error[0]).name in text
        assert "second line" not in text and "graph.build" in text and "records" in text


@pytest.mark.parametrize("scheduler", [False, True])
@pytest.mark.parametrize("error, again", [(WRONG, False), (BROKEN, False),
                                          (TIMEOUT, True), (BUILD_TIMEOUT, True)])
def test_a_resumed_run_skips_a_failed_default_but_retries_a_timed_out_one(
        tmp_path, scheduler, error, again):
    log = str(tmp_path / "resumed.json")
    task = _matmul_task()
    _fake_run(log, task, *((error, None) if error == BUILD_TIMEOUT else (None, error)),
              scheduler=scheduler)
    trials = _fake_run(log, task, resume=True, scheduler=scheduler)
    assert trials == 3 and len(measure.load_records(log)) == 6
    defaults = _defaults(log)
    assert len(defaults) == 1 + again
    if again:  # measured once more, and this time it did not time out
        assert int(defaults[-1][1].error_no) == 0


@pytest.mark.parametrize("scheduler", [False, True])
def test_a_default_that_times_out_twice_is_not_tried_a_third_time(tmp_path, scheduler):
    log = str(tmp_path / "twice.json")
    task = _matmul_task()
    for resume in (False, True, True):
        assert _fake_run(log, task, run_error=TIMEOUT, resume=resume, scheduler=scheduler) == 3
    assert len(measure.load_records(log)) == 9
    assert [int(r.error_no) for _, r in _defaults(log)] == [int(TIMEOUT[0])] * 2


@pytest.mark.parametrize("scheduler", [False, True])
def test_a_default_state_that_timed_out_is_measured_again_as_a_state(tmp_path, scheduler):
    task = autosched.SearchTask(func=default_softmax_rows, args=(8, 256))
    log = str(tmp_path / "rows.json")
    _fake_run(log, task, run_error=TIMEOUT, trials=4, scheduler=scheduler)
    (inp, res), = _defaults(log)
    assert inp.payload["default"] is True and int(res.error_no) == int(TIMEOUT[0])
    assert _fake_run(log, task, trials=4, resume=True, scheduler=scheduler) == 4
    assert len(measure.load_records(log)) == 8
    first, again = _defaults(log)
    assert again[0].payload == first[0].payload and int(again[1].error_no) == 0


def _failed_default_log(tmp_path, error):
    """A log of a run whose default failed with ``error``, its record's cost then made the
    lowest of the log: a reader that looked only at costs would take it for the best."""
    first = str(tmp_path / "run.json")
    _fake_run(first, _matmul_task(), run_error=error)
    pairs = []
    for inp, res in measure.load_records(first):
        if is_default_payload(inp.payload):
            assert int(res.error_no) == int(error[0])
            res = measure.MeasureResult((1e-12,), res.error_no, res.error_msg, 0.0, 0.0)
        pairs.append((inp, res))
    assert sum(is_default_payload(i.payload) for i, _ in pairs) == 1
    log = str(tmp_path / "failed.json")
    measure.save_records(log, *zip(*pairs))
    return log


def test_the_readers_of_records_pass_over_a_failed_default(tmp_path, capsys):
    log = _failed_default_log(tmp_path, WRONG)
    key = _matmul_task().workload_key
    best = autosched.ApplyHistoryBest(log)
    best_inp = best.query(key)[0]
    assert not is_default_payload(best_inp.payload)
    assert not any(is_default_payload(i.payload) for i, _ in best.query_ranked(key))
    assert autosched.load_best_record(log, key)[0] == best_inp
    distilled = str(tmp_path / "distilled.json")
    args = argparse.Namespace(action="distill", log=log, output=distilled)
    assert records_command(args) == 0
    assert [i for i, _ in measure.load_records(distilled)] == [best_inp]
    for action in ("list", "show"):
        assert records_command(argparse.Namespace(action=action, log=log, output=None)) == 0
    assert "WRONG_ANSWER" in capsys.readouterr().out  # show names the default's error
    assert records_command(argparse.Namespace(action="best", log=log, output=None)) == 0
    assert f"pipeline {best_inp.pipeline_text}\n" in capsys.readouterr().out


def test_a_log_whose_only_record_is_a_default_without_a_pipeline_reads(tmp_path, capsys,
                                                                        monkeypatch):
    task = _matmul_task()
    log = str(tmp_path / "only.json")
    _fake_run(log, task, build_error=(MeasureErrorNo.INSTANTIATION_ERROR, "no default"),
              trials=1)
    (inp, res), = measure.load_records(log)
    assert inp.pipeline_text == "" and is_default_payload(inp.payload)
    assert autosched.ApplyHistoryBest(log).query(task.workload_key) is None
    assert autosched.load_best_record(log, task.workload_key) == (None, None)
    assert records_command(argparse.Namespace(action="show", log=log, output=None)) == 0
    assert "INSTANTIATION_ERROR" in capsys.readouterr().out
    assert records_command(argparse.Namespace(action="best", log=log, output=None)) == 1
    assert "no successful record (1 failed)" in capsys.readouterr().err
    # no sample for the cost model, no state for the search
    model = autosched.XGBModel()
    model.update_from_file(log)
    assert not model.num_samples
    rows, results = state_rows(task, measure.load_records(log))
    assert not len(rows) and not results


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
