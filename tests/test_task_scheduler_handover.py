"""The warm-up hands over to the gradient phase without draining: its last ``search_ahead``
rounds stay in flight while the first gradient rounds are searched and built (a drain left
every builder idle while the warm-up's stragglers were built); those first gradient rounds
go to the heaviest tasks (weight times flop), so a seeded run gives the same rounds and
records whatever the timing."""

from __future__ import annotations

import time

from ptxforge import autosched

from .test_task_scheduler import Order, TaskRunner, sched_conv_relu
from .test_task_scheduler_backlog import POLICY, SlowSearch, ThreadBuilder, tune_and_read_keys


class Stamped(Order):
    """The task and time of every round taken in."""

    def __init__(self):
        super().__init__()
        self.times: list = []

    def post_tune(self, task_scheduler, task_id):
        super().post_tune(task_scheduler, task_id)
        self.times.append(time.monotonic())


def run(tmp_path, name, slow_every=4, n_tasks=4, per_round=8, rounds=7):
    shapes = [(8, 8), (16, 8), (8, 16), (16, 16)][:n_tasks]
    tasks = [autosched.SearchTask(func=sched_conv_relu, args=(1, 8, 8, co, ci, 3),
                                  desc=f"conv{k}") for k, (co, ci) in enumerate(shapes)]
    model = autosched.RandomModel(seed=0)
    policies = [SlowSearch(t, model, POLICY, seed=k, verbose=0) for k, t in enumerate(tasks)]
    # the first candidate of the warm-up's last round (the 4th batch) builds for 0.5 s
    builder = ThreadBuilder(n_parallel=4, slow_every=slow_every)
    log = str(tmp_path / f"{name}.json")
    order = Stamped()
    ts = autosched.TaskScheduler(tasks, [4, 1, 1, 1], callbacks=[order], seed=0)
    opts = autosched.TuningOptions(
        num_measure_trials=per_round * rounds, num_measures_per_round=per_round,
        builder=builder, runner=TaskRunner(tasks), verbose=0, search_ahead=2,
        measure_default=False, measure_callbacks=[autosched.RecordToFile(log)])
    keys = tune_and_read_keys(ts, opts, policies, builder, log)
    return ts, order, builder, keys


def test_gradient_rounds_are_built_while_the_warm_up_finishes(tmp_path):
    ts, order, builder, keys = run(tmp_path, "a", slow_every=3)
    n = len(ts.tasks)
    assert order.ids[:n] == list(range(n))  # the warm-up taken in in order
    assert ts.ct == 7 * 8 == len(keys) == len(set(keys))
    # the batches handed over: 8 candidates each; the first gradient round (the 5th
    # batch) went to the builders before the warm-up's last round was taken in
    first_gradient = builder.submits[8 * n]
    assert first_gradient < order.times[n - 1], (first_gradient, order.times[:n])
    # the first two gradient rounds: the heaviest tasks (weight 4 x the smallest conv,
    # and the largest conv, 4 times its flop), then the gradient's choices
    assert order.ids[n:n + 2] == [0, 3], order.ids


def test_a_seeded_run_takes_the_same_rounds_whatever_the_timing(tmp_path):
    a = run(tmp_path, "fast", slow_every=0)
    b = run(tmp_path, "slow", slow_every=2)  # other builds slow: other timing
    assert a[1].ids == b[1].ids
    assert sorted(a[3]) == sorted(b[3])
