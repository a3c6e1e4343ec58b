"""A wall-clock budget for tuning: the task scheduler and the single-task loop stop searching
when the budget would be overrun, every measured candidate is on disk, the summary says the
run ended at the budget, and after the warm-up the budget goes to the task whose gradient per
second of measuring is the steepest."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from ptxforge import autosched, measure
from ptxforge.autosched.network_tuning import tune_network
from ptxforge.autosched.time_budget import TimeBudget, check_time_budget

from .test_autosched_search import FakeBuilder, seed_task
from .test_measure_stream import TimedRunner
from .test_task_scheduler import POLICY, conv_tasks


def test_the_network_tuner_stops_at_its_budget_with_every_record_on_disk(tmp_path):
    tasks = conv_tasks()
    log = str(tmp_path / "net.json")
    budget = 3.0
    t0 = time.monotonic()
    run = tune_network(tasks, [1, 1, 1], log, 100_000, runner="sim", per_round=4,
                       sim_check=False, time_budget_s=budget)
    wall = time.monotonic() - t0
    ts = run.scheduler
    assert ts.stopped_by_budget and run.time_budget_s == budget
    assert 0 < ts.ct < 100_000
    # no round was searched that would overrun the budget; the rounds in flight then (a
    # few builds of 0.1-0.5 s on a loaded 2-core machine) end it a little after
    assert wall < budget + 6.0, wall
    records = measure.load_records(log)
    assert len(records) == ts.ct == sum(ts.task_trials)
    keys = {(i.task.workload_key, json.dumps(i.payload, sort_keys=True)) for i, _ in records}
    assert len(keys) == len(records)  # every candidate measured once
    text = run.report()
    assert f"stopped at the time budget of {budget:g} s" in text and log in text


def test_the_single_task_loop_stops_at_its_budget(tmp_path):
    task = seed_task()
    log = str(tmp_path / "op.json")
    opts = autosched.TuningOptions(
        num_measure_trials=10_000, num_measures_per_round=4, builder=FakeBuilder(),
        runner=TimedRunner(seconds=0.05), verbose=0, time_budget_s=1.0,
        measure_default=False, measure_callbacks=[autosched.RecordToFile(log)])
    policy = autosched.SketchPolicy(task, autosched.RandomModel(seed=0),
                                    {"evolutionary_search_population": 64,
                                     "evolutionary_search_num_iters": 1}, seed=0, verbose=0)
    t0 = time.monotonic()
    summary = task.tune(opts, search_policy=policy)
    wall = time.monotonic() - t0
    assert summary.stopped_by_budget
    # 0.05 s a candidate: about 20 in the budget, the rounds in flight on top
    assert 4 <= summary.trials <= 40 and wall < 3.0, (summary.trials, wall)
    assert len(measure.load_records(log)) == summary.trials
    # without a budget the same options measure what they are asked
    opts.time_budget_s = None
    opts.num_measure_trials = 8
    again = task.tune(opts, search_policy=policy)
    assert not again.stopped_by_budget and again.trials == 8


class Stream:
    """What a budget reads of a measure stream."""

    def __init__(self, measured: int, pending: int):
        self.measured, self.pending = measured, pending


def test_the_budget_counts_the_candidates_in_flight():
    assert TimeBudget(None).allows_another_round(Stream(0, 10**6))
    budget = TimeBudget(10.0, started=time.monotonic() - 4.0, granted=1)  # 4 s spent
    assert budget.allows_another_round(Stream(0, 100))  # no rate known yet
    # a handful of results measures the start-up, not the rate: 10 in 4 s would make
    # 100 in flight take 40 s
    assert budget.allows_another_round(Stream(10, 100))
    # 80 measured in 4 s: 20/s; 100 in flight take 5 s more, 140 would take 7
    assert budget.allows_another_round(Stream(80, 100)) and not budget.spent
    assert not budget.allows_another_round(Stream(80, 140)) and budget.spent
    # a refusal the run outlives is not where it stopped: the last answer counts
    assert budget.allows_another_round(Stream(80, 20)) and not budget.spent
    spent = TimeBudget(1.0, started=time.monotonic() - 1.5)
    # the first round is always searched, even past the budget; none after it
    assert spent.allows_another_round(Stream(0, 0)) and not spent.spent
    assert not spent.allows_another_round(Stream(0, 0)) and spent.spent


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), float("nan"), "30", True])
def test_bad_budgets_are_refused(bad):
    with pytest.raises(ValueError, match="time_budget_s must be a positive number"):
        autosched.TuningOptions(num_measure_trials=4, time_budget_s=bad)
    assert check_time_budget(30) == 30.0 and check_time_budget(None) is None


def test_the_cli_refuses_a_bad_budget():
    import argparse

    from ptxforge.cli.tune import (
        add_tune_network_parser,
        add_tune_op_parser,
        check_time_budget_argument,
    )

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd")
    add_tune_network_parser(sub)
    add_tune_op_parser(sub)
    args = parser.parse_args(["tune-network", "bert", "--trials", "800", "--log", "x.json",
                              "--time-budget", "30"])
    assert args.time_budget == 30.0
    check_time_budget_argument(args)
    args = parser.parse_args(["tune-op", "dense", "--trials", "8", "--log", "x.json",
                              "--time-budget", "0"])
    with pytest.raises(SystemExit, match="--time-budget must be a positive"):
        check_time_budget_argument(args)
    assert parser.parse_args(["tune-op", "dense", "--trials", "8", "--log",
                              "x.json"]).time_budget is None


def test_under_a_budget_the_gradient_is_taken_per_second_of_measuring():
    tasks = conv_tasks()[:2]
    ts = autosched.TaskScheduler(tasks, callbacks=[])
    # two tasks alike in every way but what a candidate costs to build and run
    ts.task_cts = [3, 3]
    ts.task_trials = [24, 24]
    ts.best_costs = np.array([1e-3, 1e-3])
    ts.task_costs_history = [[2e-3, 1.5e-3, 1e-3], [2e-3, 1.5e-3, 1e-3]]
    ts.task_seconds = [24 * 2.0, 24 * 0.2]  # task 0: 2 s a candidate, task 1: 0.2 s
    assert ts.round_seconds() == pytest.approx([2.0, 0.2])
    grads = ts.gradients()
    assert grads[0] == pytest.approx(grads[1]) and grads[0] < 0
    ts._budget = TimeBudget(30.0)
    assert ts._next_by_gradient() == 1  # the same gain for a tenth of the time
    ts.task_seconds = [24 * 0.1, 24 * 0.2]
    assert ts._next_by_gradient() == 0
    # a task not measured yet counts at the mean of the others
    ts.task_trials, ts.task_seconds = [24, 0], [24 * 0.1, 0.0]
    assert ts.round_seconds() == pytest.approx([0.1, 0.1])


def test_task_seconds_add_up_the_build_and_run_time_of_each_task(tmp_path):
    from .test_task_scheduler import TaskRunner, options

    tasks = conv_tasks()
    ts = autosched.TaskScheduler(tasks, callbacks=[])
    ts.tune(options(TaskRunner(tasks), 8 * 4), search_policy="sketch.random",
            search_policy_params=POLICY)
    assert not ts.stopped_by_budget
    # the in-test runner reports no build or run time: nothing is known, all means are 0
    assert ts.task_seconds == [0.0, 0.0, 0.0] and ts.round_seconds() == [0.0, 0.0, 0.0]


def test_a_warm_up_cut_by_the_budget_tunes_the_tasks_it_left_first(monkeypatch):
    """The budget refuses the third warm-up round (an early, pessimistic rate) and allows
    rounds again afterwards: the tasks the warm-up left get the next rounds, not the task
    whose gradient is steepest among the ones already measured."""
    from .test_task_scheduler import TaskRunner, options

    tasks = conv_tasks()
    answers = iter([True, True, False] + [True] * 100)
    monkeypatch.setattr(TimeBudget, "allows_another_round", lambda self, stream: next(answers))
    ts = autosched.TaskScheduler(tasks, callbacks=[])
    started = []
    real = ts._start_round

    def record(idx, stream, planned):
        started.append(idx)
        return real(idx, stream, planned)

    ts._start_round = record
    # the measured tasks look steepest (as ResNet-50's did on a GPU after a warm-up cut at
    # its fourth task: 12 of 28 tasks tuned, 16 never)
    ts._next_by_gradient = lambda: 0
    ts.tune(options(TaskRunner(tasks), 8 * 4, time_budget_s=30.0),
            search_policy="sketch.random", search_policy_params=POLICY)
    assert started[:3] == [0, 1, 2] and started[3:] == [0] * (len(started) - 3), started
