"""The task scheduler: warm-up then gradient allocation, the similar-task speed bound, dead
tasks, the per-task table (printed and written), and resuming from a record file, with an
in-test builder and a runner whose times are a deterministic function of the state."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from ptxforge import autosched, measure, ops, te
from ptxforge.autosched.state import state_from_payload
from ptxforge.autosched.task_scheduler import MAX_ROUNDS_WITHOUT_SUCCESS, derive_similarity_tag

from .instant import Instant
from .test_autosched_search import FakeBuilder, fake_costs


@autosched.register_workload
def sched_conv_relu(N, H, W, CO, CI, K):
    data = te.placeholder((N, CI, H, W), name="data")
    kernel = te.placeholder((CO, CI, K, K), name="kernel")
    conv = ops.nn.conv2d_nchw(data, kernel, 1, K // 2, dilation=1, out_dtype="float32")
    return [data, kernel, ops.nn.relu(conv)]


@autosched.register_workload
def sched_relu(n):
    a = te.placeholder((n, 64), name="a")
    return [a, te.compute((n, 64), lambda i, j: te.max(a[i, j], 0.0), name="relu")]


CONV_ARGS = [(1, 8, 8, 8, 16, 3), (1, 8, 8, 16, 8, 3), (1, 4, 4, 16, 16, 3)]
POLICY = {"evolutionary_search_population": 128, "evolutionary_search_num_iters": 1}


def conv_tasks():
    return [autosched.SearchTask(func=sched_conv_relu, args=a, desc=f"conv{k}")
            for k, a in enumerate(CONV_ARGS)]


class TaskRunner(Instant, measure.Runner):
    """Deterministic 'times' for several tasks: the state's static estimate times a hashed
    factor, times ``scale[task]``; ``constant`` tasks take ``scale[task]`` seconds whatever
    the state, ``improving`` ones get faster with every candidate, ``failing`` ones always
    fault."""

    def __init__(self, tasks, scale=None, constant=(), failing=(), improving=(),
                 estimated=False):
        self.tasks = tasks
        self.index = {t.workload_key: i for i, t in enumerate(tasks)}
        self.scale = scale or [1.0] * len(tasks)
        self.constant, self.failing = set(constant), set(failing)
        self.improving = set(improving)
        self.estimated = estimated
        self.seen: list = []
        self._done: list = []

    def submit(self, key, inp, build):
        i = self.index[inp.task.workload_key]
        self.seen.append((i, inp.pipeline_text))
        if i in self.failing:
            res = measure.MeasureResult((measure.ERROR_COST,), 4, "fake fault", 0.0, 0.0)
        else:
            task = self.tasks[i]
            if i in self.constant:
                cost = self.scale[i]
            elif i in self.improving:
                cost = self.scale[i] * 1e-3 / sum(1 for j, _ in self.seen if j == i)
            else:
                st = state_from_payload(task, inp.payload)
                cost = float(fake_costs(task, st.row(task.state_width)[None])[0]) * self.scale[i]
            res = measure.MeasureResult((cost,), 0, "", 0.0, 0.0, estimated=self.estimated)
        self._done.append((key, res))


class Order(autosched.TaskSchedulerCallback):
    """Records the task of every round."""

    def __init__(self):
        self.ids: list = []

    def post_tune(self, task_scheduler, task_id):
        self.ids.append(task_id)


def options(runner, trials, per_round=8, log=None, verbose=0, **kw):
    """Options for these tests: every round waits for the one before (``search_ahead=0``,
    TVM's order, which the exact round counts below assume) unless said otherwise."""
    cbs = [autosched.RecordToFile(log)] if log else []
    kw.setdefault("search_ahead", 0)
    return autosched.TuningOptions(num_measure_trials=trials, num_measures_per_round=per_round,
                                   builder=FakeBuilder(), runner=runner, measure_callbacks=cbs,
                                   verbose=verbose, measure_default=False, **kw)


def test_warm_up_round_robin_then_gradient_favours_the_heavy_task():
    tasks = conv_tasks()
    counts, orders = {}, []
    for strategy in ("gradient", "round-robin", "gradient"):
        order = Order()
        ts = autosched.TaskScheduler(tasks, [8, 1, 1], strategy=strategy, callbacks=[order])
        ts.tune(options(TaskRunner(tasks), 8 * 15), search_policy="sketch.random",
                search_policy_params=POLICY)
        assert order.ids[:3] == [0, 1, 2]  # one warm-up round per task, in order
        assert ts.ct == 8 * 15 == sum(ts.task_trials)
        counts[strategy] = [order.ids.count(i) for i in range(3)]
        orders.append((order.ids, list(ts.best_costs)))
        # the objective is the weighted sum of the best costs
        assert ts.cur_score == pytest.approx(8 * ts.best_costs[0] + ts.best_costs[1]
                                             + ts.best_costs[2])
        assert all(c < 1.0 for c in ts.best_costs)
    # task 0 runs 8 times per network: the gradient gives it most rounds
    assert counts["gradient"][0] > counts["gradient"][1] + counts["gradient"][2]
    assert max(counts["round-robin"]) - min(counts["round-robin"]) <= 1
    assert orders[0] == orders[2]  # reproducible under the same seed


def test_gradient_uses_backward_progress_and_the_similar_task_speed_bound():
    tasks = conv_tasks()
    # tasks 0 and 1 have the same anchor op and nearly the same flop: similar; 2 is apart
    tags = [derive_similarity_tag(t) for t in tasks]
    assert tags[0] == tags[1] != tags[2] and tags[0].startswith("conv2d_nchw_")
    assert derive_similarity_tag(autosched.SearchTask(func=sched_relu, args=(8,))) == ""
    ts = autosched.TaskScheduler(tasks, [1, 1, 1], callbacks=[], alpha=0.2, beta=2)
    flop = ts.flop_cts
    ts.task_cts = [4, 4, 4]
    ts.best_costs = np.array([1e-5, 1e-3, 1e-3])  # task 1 is 100x slower than its twin
    ts.task_costs_history = [[1e-5] * 4, [1e-3] * 4, [2e-3, 1.8e-3, 1.5e-3, 1e-3]]
    g = ts.gradients()
    # task 1: forward bounded by running at 1/beta of task 0's speed; no recent progress
    bound = 2 * flop[1] / (flop[0] / 1e-5)
    assert g[1] == pytest.approx(0.8 * (bound - 1e-3), rel=1e-6)
    # task 2: no similar task, so only 1/rounds of its cost ahead, plus its recent progress
    assert g[2] == pytest.approx(0.2 * (1e-3 - 2e-3) / 3 + 0.8 * (-1e-3 / 4), rel=1e-6)
    assert g[1] < g[2] < g[0] < 0
    assert ts._next_by_gradient() == 1
    ts.dead_tasks.add(1)
    assert ts.gradients()[1] == 0 and ts._next_by_gradient() == 2


def test_dead_tasks_get_no_more_rounds(capsys):
    tasks = conv_tasks()[:2] + [autosched.SearchTask(func=sched_relu, args=(8,), desc="relu"),
                                autosched.SearchTask(func=sched_conv_relu,
                                                     args=(1, 6, 6, 8, 8, 3), desc="bad")]
    order = Order()
    runner = TaskRunner(tasks, scale=[1.0, 1e-4, 1.0, 1.0], constant=[1], failing=[3],
                        improving=[0])
    ts = autosched.TaskScheduler(tasks, strategy="round-robin",
                                 callbacks=[order, autosched.PrintTableInfo()])
    ts.tune(options(runner, 4 * 16, per_round=4, verbose=1), search_policy="sketch.random",
            search_policy_params=POLICY, per_task_early_stopping=4)
    counts = [order.ids.count(i) for i in range(4)]
    # task 1 never improves after its first round: dead once 8 > 4 trials passed without
    assert counts[1] == 3 and 1 in ts.dead_tasks
    # the relu task has at most 6 valid states: 4 + the rest measured, then nothing is left
    assert counts[2] == 3 and 4 < ts.task_trials[2] <= 6 and 2 in ts.dead_tasks
    # task 3 never succeeds: no improvement in 8 trials either
    assert counts[3] == 2 and 3 in ts.dead_tasks and ts.best_costs[3] >= 1e10
    # the rest of the budget goes to task 0
    assert counts[0] > 3 and 0 not in ts.dead_tasks and ts.ct == 4 * 16
    out = capsys.readouterr().out
    last = out[out.rindex("[ Task Scheduler ]"):]
    assert "|    1 |" in last and "(done)" in last
    assert "Estimated total latency: - ms" in last  # task 3 has no valid schedule

    # without per-task early stopping, a task that never succeeds still stops after
    # MAX_ROUNDS_WITHOUT_SUCCESS rounds
    order = Order()
    pair = [tasks[0], tasks[3]]
    ts = autosched.TaskScheduler(pair, callbacks=[order])
    ts.tune(options(TaskRunner(pair, failing=[1]), 4 * 8, per_round=4),
            search_policy="sketch.random", search_policy_params=POLICY)
    assert order.ids.count(1) == MAX_ROUNDS_WITHOUT_SUCCESS and ts.dead_tasks == {1}
    assert order.ids.count(0) == 8 - MAX_ROUNDS_WITHOUT_SUCCESS


def test_tuning_stops_early_when_the_objective_stops_improving(capsys):
    tasks = conv_tasks()
    ts = autosched.TaskScheduler(tasks, callbacks=[])
    runner = TaskRunner(tasks, scale=[1e-4, 2e-4, 3e-4], constant=[0, 1, 2])
    ts.tune(options(runner, 8 * 20, early_stopping=16, verbose=1),
            search_policy="sketch.random", search_policy_params=POLICY)
    # warm-up (24 trials) sets the best objective; two more flat rounds end the run
    assert ts.ct == 24 + 16 and ts.best_ct == 24 and not ts.dead_tasks
    assert "Stop early since no performance improvement in the last 16" in \
        capsys.readouterr().out


def test_the_table_is_printed_every_round_and_written_to_files(tmp_path, capsys):
    tasks = conv_tasks()[:2]
    table, tsv = tmp_path / "tasks.txt", tmp_path / "latency.tsv"
    ts = autosched.TaskScheduler(tasks, [2, 1], callbacks=[
        autosched.PrintTableInfo(table), autosched.LogEstimatedLatency(tsv)])
    runner = TaskRunner(tasks, estimated=True)
    ts.tune(options(runner, 8 * 4, verbose=1), search_policy_params=POLICY)
    out = capsys.readouterr().out
    assert out.count("[ Task Scheduler ]") == 5  # before each of the 4 rounds, and at the end
    assert "|  ID  | Task Description | Latency (ms)* | Speed (GFLOPS)* | Trials |" in out
    first = out[: out.index("[ Task Scheduler ]", out.index("[ Task Scheduler ]") + 1)]
    assert "Estimated total latency: - ms\tTrials: 0\t" in first and "Next ID: 0" in first
    # the file holds the final table: what was printed last
    text = table.read_text()
    last = out.rindex("-" * 70 + "\n" + "-" * 30 + "  [ Task Scheduler ]")
    assert out[last:].strip() == text.strip()
    for i, t in enumerate(tasks):
        row = next(line for line in text.splitlines() if line.startswith(f"| {i:4d} |"))
        cells = [c.strip() for c in row.split("|")[1:-1]]
        assert cells[1] == t.desc
        assert float(cells[2].rstrip("*")) == pytest.approx(ts.best_costs[i] * 1e3, abs=6e-4)
        assert float(cells[3].rstrip("*")) == pytest.approx(
            t.flop_ct / ts.best_costs[i] / 1e9, rel=1e-2, abs=0.01)
        assert int(cells[4]) == ts.task_trials[i] == 8 * ts.task_cts[i]
    total = 2 * ts.best_costs[0] + ts.best_costs[1]
    assert f"Estimated total latency: {total * 1e3:.3f} ms\tTrials: 32\t" in text
    assert "Next ID: -" in text and "estimated by the simulator" in text
    lines = tsv.read_text().splitlines()
    assert len(lines) == 4 and lines[0].startswith("ElapsedTime(s)\t")
    assert lines[-1].split("\t")[3] == f"{total * 1e3:.3f}" and lines[-1].endswith("\t32")


def test_resume_from_the_log_restores_the_state_and_never_remeasures(tmp_path, capsys):
    tasks = conv_tasks()
    log = str(tmp_path / "net.json")
    first = autosched.TaskScheduler(tasks, [1, 2, 1], callbacks=[])
    first.tune(options(TaskRunner(tasks), 8 * 5, log=log), search_policy_params=POLICY)
    with open(log) as f:
        done = {(r["task"]["key"], r["pipeline"]) for r in map(json.loads, f)}
    assert len(done) == 40

    order = Order()
    runner = TaskRunner(tasks)
    again = autosched.TaskScheduler(tasks, [1, 2, 1], load_log_file=log,
                                    callbacks=[order, autosched.PrintTableInfo()])
    again.tune(options(runner, 8 * 3, log=log, verbose=1), search_policy_params=POLICY)
    assert again.loaded_trials == 40
    # no warm-up: every task has rounds already; the first table shows the loaded costs
    assert len(order.ids) == 3
    out = capsys.readouterr().out
    table0 = out[: out.index("Next ID")]
    for i in range(3):
        assert f"{first.best_costs[i] * 1e3:.3f}" in table0
    assert "plus 40 trials loaded from" in out
    assert all(again.best_costs[i] <= first.best_costs[i] for i in range(3))
    # nothing measured before is measured again
    keys = [t.workload_key for t in tasks]
    assert len(runner.seen) == 24
    assert not {(keys[i], p) for i, p in runner.seen} & done
    assert sum(again.task_trials) == 64


def test_bad_arguments_are_reported():
    tasks = conv_tasks()
    with pytest.raises(ValueError, match="strategy"):
        autosched.TaskScheduler(tasks, strategy="greedy")
    with pytest.raises(ValueError, match="3 tasks"):
        autosched.TaskScheduler(tasks, [1, 2])
    ts = autosched.TaskScheduler(tasks, callbacks=[])
    with pytest.raises(ValueError, match="at least one trial"):
        ts.tune(options(TaskRunner(tasks), 2))
    with pytest.raises(ValueError, match="search_policy"):
        ts.tune(options(TaskRunner(tasks), 8), search_policy="evolution")
    assert math.isinf(ts.early_stopping_task)


def test_search_ahead_overlaps_rounds_within_the_budget_and_is_reproducible(tmp_path):
    tasks = conv_tasks()
    runs = []
    for k, ahead in enumerate((1, 1, 0)):
        order = Order()
        log = str(tmp_path / f"run{k}.json")
        ts = autosched.TaskScheduler(tasks, [8, 1, 1], callbacks=[order])
        ts.tune(options(TaskRunner(tasks), 8 * 15, log=log, search_ahead=ahead),
                search_policy="sketch.random", search_policy_params=POLICY)
        assert order.ids[:3] == [0, 1, 2] and ts.ct == 8 * 15 == sum(ts.task_trials)
        records = measure.load_records(log)
        assert len(records) == 8 * 15
        keys = [(inp.task.workload_key, inp.pipeline_text) for inp, _ in records]
        assert len(set(keys)) == len(keys), "a state was measured twice"
        runs.append((order.ids, keys))
    assert runs[0] == runs[1]  # the same rounds learn from the same results: reproducible
    # the gradient still favours the heavy task with one round in flight
    ids = runs[0][0]
    assert ids.count(0) > ids.count(1) + ids.count(2)


def test_search_ahead_stops_early_within_one_more_round(capsys):
    tasks = conv_tasks()
    ts = autosched.TaskScheduler(tasks, callbacks=[])
    runner = TaskRunner(tasks, scale=[1e-4, 2e-4, 3e-4], constant=[0, 1, 2])
    ts.tune(options(runner, 8 * 20, early_stopping=16, verbose=1, search_ahead=1),
            search_policy="sketch.random", search_policy_params=POLICY)
    # as with search_ahead=0 (24 + 16 trials), plus the round already being measured
    assert ts.ct == 24 + 16 + 8 and ts.best_ct == 24
    assert "Stop early since no performance improvement in the last 16" in \
        capsys.readouterr().out
