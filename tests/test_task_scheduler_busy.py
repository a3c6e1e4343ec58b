"""A task scheduler that keeps the builders busy (``keep_builders_busy``) searches its next
gradient round whenever the builders run low, not only once the oldest round in flight is
measured: one slow build (BERT fp16 on the H200 machine: 9.5 s beside a 0.3 s median) no
longer leaves the other workers idle. Rounds are still taken in in the order searched, a
round in flight counts as given when the next task is chosen, and a task whose space is
spent gets no empty rounds while its last one is out."""

from __future__ import annotations

import json
import math

import pytest

from ptxforge import autosched, measure
from ptxforge.autosched.task_scheduler import MAX_ROUNDS_IN_FLIGHT

from .test_task_scheduler import CONV_ARGS, TaskRunner, conv_tasks, sched_conv_relu
from .test_task_scheduler_backlog import POLICY, SlowSearch, ThreadBuilder, tune_and_read_keys


class Rounds(autosched.TaskSchedulerCallback):
    """The task of every round searched (``pre_tune``) and taken in (``post_tune``), and
    the most rounds searched and not taken in at once."""

    def __init__(self):
        self.searched: list = []
        self.taken: list = []
        self.most_out = 0

    def pre_tune(self, task_scheduler, task_id):
        self.searched.append(task_id)
        self.most_out = max(self.most_out, len(self.searched) - len(self.taken))

    def post_tune(self, task_scheduler, task_id):
        self.taken.append(task_id)


def run(tmp_path, name, busy: bool, n_tasks=3, per_round=8, rounds=11, slow_every=3,
        ahead=2):
    shapes = [(8, 8), (16, 8), (8, 16), (16, 16)][:n_tasks]
    tasks = [autosched.SearchTask(func=sched_conv_relu, args=(1, 8, 8, co, ci, 3),
                                  desc=f"conv{k}") for k, (co, ci) in enumerate(shapes)]
    model = autosched.RandomModel(seed=0)
    policies = [SlowSearch(t, model, POLICY, seed=k, verbose=0) for k, t in enumerate(tasks)]
    # every third batch handed over has a build of 0.5 s, the others 0.01 s each
    builder = ThreadBuilder(n_parallel=4, slow_every=slow_every)
    log = str(tmp_path / f"{name}.json")
    seen = Rounds()
    ts = autosched.TaskScheduler(tasks, callbacks=[seen], seed=0, keep_builders_busy=busy)
    opts = autosched.TuningOptions(
        num_measure_trials=per_round * rounds, num_measures_per_round=per_round,
        builder=builder, runner=TaskRunner(tasks), verbose=0, search_ahead=ahead,
        measure_default=False, measure_callbacks=[autosched.RecordToFile(log)])
    keys = tune_and_read_keys(ts, opts, policies, builder, log)
    return ts, seen, builder, keys


def test_gradient_rounds_keep_the_builders_fed_past_a_slow_build(tmp_path):
    ts, seen, builder, keys = run(tmp_path, "busy", busy=True)
    assert ts.ct == 11 * 8 == len(keys) == len(set(keys)) == sum(ts.task_trials)
    # taken in (records, callbacks, the cost model) in the order searched
    assert seen.taken == seen.searched and seen.taken[:3] == [0, 1, 2]
    assert 3 < seen.most_out <= MAX_ROUNDS_IN_FLIGHT
    assert all(c < 1.0 for c in ts.best_costs)
    # Waiting for the oldest gradient round left 3 of the 4 workers idle for most of each
    # slow build (0.5 s, every third round; the two rounds behind it take 0.04 s); kept
    # busy, the next rounds are searched and built meanwhile. Both orders run here, so a
    # loaded machine (slower searches) slows both alike.
    starved = builder.starved_s()
    old = run(tmp_path, "old", busy=False)
    assert old[1].most_out == 3  # the oldest of three rounds waited for
    assert starved < 0.6 * old[2].starved_s(), (starved, old[2].starved_s())


def test_without_search_ahead_every_round_still_waits(tmp_path):
    ts, seen, builder, keys = run(tmp_path, "sync", busy=True, rounds=6, ahead=0)
    assert seen.most_out == 1 and ts.ct == 48 == len(set(keys))


def test_a_round_in_flight_counts_as_given():
    tasks = conv_tasks()
    ts = autosched.TaskScheduler(tasks, callbacks=[])
    assert len(tasks) == len(CONV_ARGS) == 3
    ts.task_cts = [2, 2, 0]
    ts.best_costs[:] = [1e-3, 1e-3, 2e-3]  # finite: the objective sums them
    ts.task_costs_history = [[1e-3, 1e-3], [1e-3, 1e-3], []]
    base = ts.gradients()
    assert base[2] == -math.inf  # never tuned: first in line
    given = ts.gradients({0: 2, 2: 1})
    # one more round of task 0 is expected to gain less with two of its rounds out
    # (1/(2+2) of its cost instead of 1/2); task 2's first round is out: not first
    assert given[0] > base[0] and given[1] == base[1] and given[2] == 0.0


def test_a_task_whose_search_came_back_empty_gets_no_more_rounds_meanwhile(tmp_path):
    # a task with a 2-candidate space: its second search is empty, and while that empty
    # round waits behind the others to be taken in, the task is not chosen again
    class Tiny(SlowSearch):
        given = 0

        def search_one_round(self, num_measure):
            rows = super().search_one_round(min(num_measure, 2 - self.given))
            self.given += len(rows)
            return rows

    tasks = conv_tasks()
    model = autosched.RandomModel(seed=0)
    policies = [(Tiny if k == 0 else SlowSearch)(t, model, POLICY, seed=k, verbose=0)
                for k, t in enumerate(tasks)]
    seen = Rounds()
    ts = autosched.TaskScheduler(tasks, [100, 1, 1], callbacks=[seen], seed=0,
                                 keep_builders_busy=True)
    builder = ThreadBuilder(n_parallel=4, slow_every=2)
    opts = autosched.TuningOptions(
        num_measure_trials=8 * 10, num_measures_per_round=8, builder=builder,
        runner=TaskRunner(tasks), verbose=0, search_ahead=2, measure_default=False)
    try:
        ts.tune(opts, search_policy=policies)
    finally:
        builder.close()
    assert ts.task_trials[0] == 2 and 0 in ts.dead_tasks
    # the heavy task 0 is handed the first gradient round (its empty search); after that
    # it is never searched again
    assert seen.searched.count(0) == 2, seen.searched
    assert seen.taken == seen.searched


@pytest.mark.gpu
def test_a_gpu_network_run_keeps_the_builders_busy_and_measures_every_trial(tmp_path):
    from ptxforge.autosched.network_tuning import tune_network

    from .test_network_tuning import two_conv_net

    net, params, _ = two_conv_net(size=32, channels=32)
    tasks, weights = autosched.extract_tasks(net, params)
    log = str(tmp_path / "gpu.json")
    run = tune_network(tasks, weights, log, 24 * len(tasks), runner="gpu", per_round=8)
    assert run.scheduler.keep_builders_busy  # the default with the GPU runner
    records = measure.load_records(log)
    assert len(records) == run.trials == 24 * len(tasks)
    keys = [(inp.task.workload_key, json.dumps(inp.payload, sort_keys=True))
            for inp, _ in records]
    assert len(set(keys)) == len(keys)
    assert run.scheduler.tasks_tuned() == len(tasks)
