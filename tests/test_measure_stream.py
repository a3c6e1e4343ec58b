"""MeasureStream (batches measured in a background thread, queued without a gap) and the
tuning loop's search_ahead, which overlaps the search of a round with the measuring of
the one before."""

from __future__ import annotations

import json
import time

import pytest
from ptxforge import autosched, measure
from ptxforge.autosched.search_policy import SketchPolicy
from ptxforge.measure.stream import MeasureStream, MeasureStreamClosed

from .test_autosched_search import SMALL_POLICY, FakeBuilder, FakeRunner, seed_task


class TimedRunner(measure.Runner):
    """One fake GPU: each candidate takes ``seconds``; its cost is its input's payload
    ``{"v": cost}`` (so results can be matched to inputs), else 1 ms. Logs when each
    candidate was submitted and finished."""

    def __init__(self, seconds: float = 0.0, fail_on=None):
        self.seconds = seconds
        self.fail_on = fail_on
        self.queue: list = []
        self.busy = None
        self.log: list = []

    def submit(self, key, inp, build):
        if self.fail_on is not None and inp.payload == {"v": self.fail_on}:
            raise RuntimeError(f"the fake GPU cannot take {self.fail_on}")
        self.queue.append((key, inp))
        self.log.append(("submit", key, time.monotonic()))

    @property
    def pending(self):
        return len(self.queue) + (self.busy is not None)

    def collect(self, timeout=0.0):
        now = time.monotonic()
        out = []
        if self.busy is not None and now >= self.busy[2]:
            key, inp, _ = self.busy
            self.busy = None
            self.log.append(("done", key, now))
            cost = float((inp.payload or {}).get("v", 1e-3))
            out.append((key, measure.MeasureResult((cost,), 0, "", 0.0, 0.0)))
        if self.busy is None and self.queue:
            key, inp = self.queue.pop(0)
            self.busy = (key, inp, now + self.seconds)
        return out


def inputs(values):
    spec = measure.TaskSpec("fake-key", "cuda", "", 1.0)
    return [measure.MeasureInput(spec, "", {"v": v}) for v in values]


def test_batches_come_back_in_input_order_and_queue_without_a_gap():
    runner = TimedRunner(seconds=0.01)
    with MeasureStream(FakeBuilder(), runner) as stream:
        futs = [stream.submit(inputs([10 * b + i for i in range(5)])) for b in range(3)]
        got = [[r.costs[0] for r in f.result(timeout=10)] for f in futs]
        assert stream.pending == 0
        assert stream.submit([]).result(timeout=1) == []
    assert got == [[10.0 * b + i for i in range(5)] for b in range(3)]
    # the second batch reached the runner before the first one was finished
    first, second = sorted({key[0] for _, key, _ in runner.log})[:2]
    first_done = max(t for what, key, t in runner.log if what == "done" and key[0] == first)
    second_in = min(t for what, key, t in runner.log if what == "submit" and key[0] == second)
    assert second_in < first_done


def test_a_failing_runner_fails_the_open_batches_with_the_cause():
    stream = MeasureStream(FakeBuilder(), TimedRunner(fail_on=3))
    fut = stream.submit(inputs(range(5)))
    with pytest.raises(MeasureStreamClosed, match="cannot take 3") as info:
        fut.result(timeout=10)
    assert isinstance(info.value.__cause__, RuntimeError)
    with pytest.raises(MeasureStreamClosed, match="measurement thread failed"):
        stream.submit(inputs([1]))
    stream.close()


def test_closing_fails_the_batches_not_yet_measured():
    stream = MeasureStream(FakeBuilder(), TimedRunner(seconds=0.05))
    futs = [stream.submit(inputs(range(10))) for _ in range(3)]
    stream.close()
    for f in futs:
        with pytest.raises(MeasureStreamClosed, match="closed"):
            f.result(timeout=5)
    with pytest.raises(MeasureStreamClosed):
        stream.submit(inputs([1]))


def _pipelines(log):
    with open(log) as f:
        return [json.loads(line)["pipeline"] for line in f]


def _tune(task, tmp_path, name, seed=5, **kw):
    log = str(tmp_path / f"{name}.json")
    policy = SketchPolicy(task, autosched.XGBModel(num_warmup_sample=16), SMALL_POLICY,
                          seed=seed)
    opts = autosched.TuningOptions(num_measure_trials=40, num_measures_per_round=16,
                                   builder=FakeBuilder(), runner=FakeRunner(task),
                                   measure_callbacks=[autosched.RecordToFile(log)],
                                   verbose=0, measure_default=False, **kw)
    summary = task.tune(opts, search_policy=policy)
    return summary, _pipelines(log)


def test_search_ahead_measures_the_budget_once_each_and_is_reproducible(tmp_path):
    task = seed_task()
    runs = {}
    for name, ahead in (("sync", 0), ("ahead", 1), ("ahead_again", 1), ("two", 2)):
        summary, pipes = _tune(task, tmp_path, name, search_ahead=ahead)
        assert summary.trials == 40 and summary.rounds == 3
        assert len(pipes) == 40 and len(set(pipes)) == 40, f"{name}: a state measured twice"
        runs[name] = pipes
    assert runs["ahead"] == runs["ahead_again"]
    # the first round is the same; later ones learn from different rounds
    assert runs["sync"][:16] == runs["ahead"][:16]


def test_search_ahead_rejects_bad_values():
    for bad in (-1, 1.5, "1", True):
        with pytest.raises(ValueError, match="search_ahead"):
            autosched.TuningOptions(num_measure_trials=1, search_ahead=bad)


class SlowSearch(SketchPolicy):
    """A policy whose search takes ``delay`` seconds a round (like a large model)."""

    delay = 0.3

    def search_one_round(self, num_measure):
        time.sleep(self.delay)
        return super().search_one_round(num_measure)


def test_search_ahead_overlaps_the_search_with_measuring():
    task = seed_task()
    walls = {}
    for ahead in (0, 1):
        policy = SlowSearch(task, autosched.RandomModel(seed=0), SMALL_POLICY, seed=0)
        runner = TimedRunner(seconds=0.3 / 8)  # 0.3 s a round of 8
        opts = autosched.TuningOptions(num_measure_trials=40, num_measures_per_round=8,
                                       builder=FakeBuilder(), runner=runner, verbose=0,
                                       search_ahead=ahead, measure_default=False)
        summary = task.tune(opts, search_policy=policy)
        assert summary.trials == 40
        walls[ahead] = summary.wall_s
    # 5 rounds of 0.3 s search + 0.3 s measuring: about 3 s in turn, 1.8 s overlapped
    assert walls[1] < 0.8 * walls[0], walls


def test_results_left_by_an_abandoned_batch_are_dropped():
    """A tuning run interrupted mid-batch leaves work in the builder and runner it was
    given; a later run with the same objects must not take those results for its own."""
    runner = TimedRunner(seconds=0.02)
    builder = FakeBuilder()
    stream = MeasureStream(builder, runner)
    stream.submit(inputs([100 + i for i in range(4)]))
    time.sleep(0.01)
    stream.close()  # abandoned: its candidates are still queued in the runner
    assert runner.pending
    got = measure.measure_batch(inputs([1, 2, 3]), builder, runner)
    assert [r.costs[0] for r in got] == [1.0, 2.0, 3.0]
    with MeasureStream(builder, runner) as again:
        assert [r.costs[0] for r in again.measure(inputs([7, 8]))] == [7.0, 8.0]
