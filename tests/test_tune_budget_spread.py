"""A time budget too short for a full warm-up: the warm-up rounds shrink to what the budget
can still afford, shared among the tasks not measured yet, so every task is measured before
the budget runs out (a task left unmeasured keeps its default schedule); the summary says
how many tasks were tuned."""

from __future__ import annotations

import time

from ptxforge import autosched
from ptxforge.autosched.network_tuning import NetworkTuning
from ptxforge.autosched.time_budget import MIN_BUDGET_ROUND, MIN_RATE_SAMPLES, TimeBudget

from .test_task_scheduler import TaskRunner, sched_conv_relu
from .test_task_scheduler_backlog import POLICY, SlowSearch, ThreadBuilder

PER_ROUND = 48


def budget_run(n_tasks: int, budget: float | None, build_s: float = 0.02,
               trials: int = 100_000):
    shapes = [(co, ci) for co in (8, 16, 32) for ci in (8, 16, 32)][:n_tasks]
    tasks = [autosched.SearchTask(func=sched_conv_relu, args=(1, 8, 8, co, ci, 3),
                                  desc=f"conv{k}") for k, (co, ci) in enumerate(shapes)]
    model = autosched.RandomModel(seed=0)
    policies = [SlowSearch(t, model, POLICY, seed=k, verbose=0) for k, t in enumerate(tasks)]
    builder = ThreadBuilder(n_parallel=4, slow_every=0, fast_s=build_s)
    sizes: list = []

    class Sizes(autosched.TaskSchedulerCallback):
        def post_tune(self, ts, task_id):
            sizes.append((task_id, ts.task_trials[task_id]))

    ts = autosched.TaskScheduler(tasks, callbacks=[Sizes()])
    opts = autosched.TuningOptions(
        num_measure_trials=trials, num_measures_per_round=PER_ROUND, builder=builder,
        runner=TaskRunner(tasks), verbose=0, search_ahead=2, time_budget_s=budget,
        measure_default=False)
    t0 = time.monotonic()
    try:
        ts.tune(opts, search_policy=policies)
    finally:
        builder.close()
    return ts, sizes, time.monotonic() - t0


def test_every_task_gets_its_first_round_within_a_short_budget():
    # 9 tasks of 48 candidates need 432 builds of 30 ms on 4 workers, about 3.2 s besides
    # the searches; the budget of 2.5 s affords less: the rounds searched once the rate is
    # known shrink, and are searched at once rather than behind the builders' backlog, so
    # that all 9 are measured (before, the first 4 took the whole budget)
    ts, sizes, wall = budget_run(9, 2.5, build_s=0.03)
    n = len(ts.tasks)
    assert ts.tasks_tuned() == n, sizes
    assert all(t > 0 for t in ts.task_trials)
    first = dict(reversed([(i, c) for i, c in sizes]))  # each task's first round
    assert len(first) == n
    assert min(first.values()) >= MIN_BUDGET_ROUND
    assert min(first.values()) < PER_ROUND, first  # some rounds were shrunk
    assert ts.stopped_by_budget
    assert wall < 2.5 + 3.0, wall


def test_without_a_budget_the_warm_up_rounds_are_full():
    ts, sizes, _ = budget_run(3, None, trials=3 * PER_ROUND)
    first = {}
    for i, c in sizes:
        first.setdefault(i, c)
    assert first == {0: PER_ROUND, 1: PER_ROUND, 2: PER_ROUND}


class Stream:
    def __init__(self, measured: int, pending: int):
        self.measured, self.pending = measured, pending


def test_affordable_candidates_follow_the_measured_rate():
    budget = TimeBudget(10.0, started=time.monotonic() - 4.0, granted=1)
    assert budget.affordable(Stream(MIN_RATE_SAMPLES - 1, 0)) is None  # no rate yet
    # 80 in 4 s: 20/s, 6 s left: 120 more, less the 50 in flight
    assert abs(budget.affordable(Stream(80, 50)) - 70) < 2
    assert budget.affordable(Stream(80, 500)) == 0
    assert TimeBudget(None).affordable(Stream(1000, 0)) is None
    # a warm-up round is allowed until the seconds are over, whatever is in flight
    assert not budget.allows_another_round(Stream(80, 500)) and budget.spent
    assert budget.allows_warm_up_round() and not budget.spent
    over = TimeBudget(1.0, started=time.monotonic() - 2.0, granted=1)
    assert not over.allows_warm_up_round() and over.spent


def test_the_report_says_how_many_tasks_were_tuned(tmp_path):
    ts, _, _ = budget_run(2, 0.3)
    ts.best_costs[1] = 1e10  # as if the second task had no successful measurement
    run = NetworkTuning(ts, 0.5, {}, None, str(tmp_path / "l.json"), "t.txt", False,
                        time_budget_s=0.3)
    ts.stopped_by_budget = True
    assert "stopped at the time budget of 0.3 s with 1 of 2 tasks tuned" in run.report()
