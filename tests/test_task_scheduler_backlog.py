"""The task scheduler's warm-up keeps the builders fed: the next round is searched while the
builders still have work, not only once the oldest round in flight is measured (a round
with one slow build used to hold back the rounds behind it while the builders idled).

A threaded in-test builder with a few workers logs when its workers wait with nothing
queued; one candidate of every round builds slowly."""

from __future__ import annotations

import json
import queue
import threading
import time

from ptxforge import autosched, measure
from ptxforge.autosched.search_policy import SketchPolicy
from ptxforge.autosched.task_scheduler import BACKLOG_PER_WORKER, builder_low_water

from .test_task_scheduler import Order, TaskRunner, sched_conv_relu

POLICY = {"evolutionary_search_population": 64, "evolutionary_search_num_iters": 1}
SLOW_BUILD_S = 0.5
FAST_BUILD_S = 0.01


class SlowSearch(SketchPolicy):
    """A search of ``delay`` seconds a round (the main process's share of a real one)."""

    delay = 0.03

    def search_one_round(self, num_measure):
        time.sleep(self.delay)
        return super().search_one_round(num_measure)


class ThreadBuilder(measure.Builder):
    """``n_parallel`` worker threads; the first candidate of every ``slow_every``-th batch
    handed over (none for 0) takes :data:`SLOW_BUILD_S`, the others ``fast_s``.
    Each worker logs the intervals it waited with nothing queued."""

    def __init__(self, n_parallel: int = 4, slow_every: int = 3, fast_s: float = FAST_BUILD_S):
        self.n_parallel = n_parallel
        self.slow_every = slow_every
        self.fast_s = fast_s
        self._jobs: queue.Queue = queue.Queue()
        self._done: list = []
        self._lock = threading.Lock()
        self._pending = 0
        self.waits: list = []  # (start, end) of a worker waiting for a job
        self.submits: list = []
        self.most = 0  # the most candidates it held at once
        self._seen_batches: set = set()
        self._threads = [threading.Thread(target=self._work, daemon=True)
                         for _ in range(n_parallel)]
        for t in self._threads:
            t.start()

    def _work(self):
        while True:
            t0 = time.monotonic()
            job = self._jobs.get()
            self.waits.append((t0, time.monotonic()))
            if job is None:
                return
            key, seconds = job
            time.sleep(seconds)
            with self._lock:
                self._done.append((key, measure.BuildResult("built", 0, "", seconds)))

    def seconds(self, key, inp) -> float:
        """How long ``inp``'s build takes (subclasses choose otherwise)."""
        batch = key[0] if isinstance(key, tuple) else key
        slow = (batch not in self._seen_batches and self.slow_every > 0
                and len(self._seen_batches) % self.slow_every == 0)
        self._seen_batches.add(batch)
        return SLOW_BUILD_S if slow else self.fast_s

    def submit(self, key, inp):
        with self._lock:
            self._pending += 1
            self.most = max(self.most, self._pending)
        self.submits.append(time.monotonic())
        self._jobs.put((key, self.seconds(key, inp)))

    def collect(self, timeout=0.0):
        with self._lock:
            out, self._done = self._done, []
            self._pending -= len(out)
        return out

    @property
    def pending(self):
        return self._pending

    def close(self):
        for _ in self._threads:
            self._jobs.put(None)

    def starved_s(self) -> float:
        """Worker-seconds spent waiting with nothing queued between the first and the last
        candidate handed over (the waits after the last one are the unavoidable tail)."""
        lo, hi = self.submits[0], self.submits[-1]
        return sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in self.waits)


def tune_and_read_keys(ts, opts, policies, builder, log: str) -> list:
    """Run ``ts`` with ``opts`` and close ``builder``; the (workload, payload) key of each
    record written to ``log``, in order."""
    try:
        ts.tune(opts, search_policy=policies)
    finally:
        builder.close()
    return [(inp.task.workload_key, json.dumps(inp.payload, sort_keys=True))
            for inp, _ in measure.load_records(log)]


class LateRunner(TaskRunner):
    """A runner that hands back nothing for ``start_s`` after its first candidate (a GPU
    worker coming up, or stalled by a candidate that runs into its timeout)."""

    def __init__(self, tasks, start_s: float):
        super().__init__(tasks)
        self.start_s = start_s
        self.first = None

    def submit(self, key, inp, build):
        if self.first is None:
            self.first = time.monotonic()
        super().submit(key, inp, build)

    def collect(self, timeout=0.0):
        if self.first is None or time.monotonic() < self.first + self.start_s:
            return []
        return super().collect(timeout)


class StallAfterFirstRound(TaskRunner):
    """Hands back the first ``first`` results at once, then nothing for ``stall_s``."""

    def __init__(self, tasks, first: int, stall_s: float):
        super().__init__(tasks)
        self.first, self.stall_s = first, stall_s
        self.handed = 0
        self.stall_until = None

    def collect(self, timeout=0.0):
        if self.stall_until is not None and time.monotonic() < self.stall_until:
            return []
        out = super().collect(timeout)
        room = self.first - self.handed if self.stall_until is None else len(out)
        out, self._done = out[:room], out[room:] + self._done
        self.handed += len(out)
        if self.stall_until is None and self.handed >= self.first:
            self.stall_until = time.monotonic() + self.stall_s
        return out


def tune_once(tmp_path, name, ahead, n_tasks=8, per_round=8, runner_start_s=0.0,
              slow_every=3, fast_s=FAST_BUILD_S, runner=None):
    shapes = [(co, ci) for co in (8, 16, 32) for ci in (8, 16, 32)][:n_tasks]
    tasks = [autosched.SearchTask(func=sched_conv_relu, args=(1, 8, 8, co, ci, 3),
                                  desc=f"conv{k}") for k, (co, ci) in enumerate(shapes)]
    model = autosched.RandomModel(seed=0)
    policies = [SlowSearch(t, model, POLICY, seed=k, verbose=0) for k, t in enumerate(tasks)]
    builder = ThreadBuilder(slow_every=slow_every, fast_s=fast_s)
    log = str(tmp_path / f"{name}.json")
    order = Order()
    ts = autosched.TaskScheduler(tasks, callbacks=[order])
    opts = autosched.TuningOptions(
        num_measure_trials=n_tasks * per_round, num_measures_per_round=per_round,
        builder=builder, runner=runner(tasks) if runner else LateRunner(tasks, runner_start_s),
        verbose=0, search_ahead=ahead, measure_default=False,
        measure_callbacks=[autosched.RecordToFile(log)])
    t0 = time.monotonic()
    try:
        ts.tune(opts, search_policy=policies)
    finally:
        builder.close()
    wall = time.monotonic() - t0
    records = measure.load_records(log)
    keys = [(inp.task.workload_key, json.dumps(inp.payload, sort_keys=True))
            for inp, _ in records]
    return ts, order, builder, keys, wall


class Workers:
    def __init__(self, n):
        self.n_parallel = n


def test_low_water_is_a_backlog_per_worker():
    assert builder_low_water(Workers(16)) == 16 * BACKLOG_PER_WORKER
    assert builder_low_water(Workers(0)) >= BACKLOG_PER_WORKER  # in-process: one per CPU


def without_backlog(monkeypatch):
    """The order before the backlog: a warm-up round waits for the oldest in flight."""
    from ptxforge.autosched import task_scheduler

    monkeypatch.setattr(task_scheduler, "BACKLOG_PER_WORKER", 0)


def test_warm_up_keeps_the_builders_fed_past_a_slow_build(tmp_path, monkeypatch):
    ts, order, builder, keys, wall = tune_once(tmp_path, "a", ahead=2)
    n = len(ts.tasks)
    # every task got its round, taken in the order searched; every state measured once
    assert order.ids[:n] == list(range(n))
    assert ts.ct == n * 8 == sum(ts.task_trials) == len(keys)
    assert len(set(keys)) == len(keys)
    assert all(c < 1.0 for c in ts.best_costs)
    # Waiting for the oldest round (with a build of 0.5 s, while the two rounds behind it
    # take 0.04 s on 4 workers) left 3 workers idle for 0.4 s every third round, some
    # 3.5 worker-s in all; fed by the backlog, they idle only while a search runs. Both
    # orders run here, so a loaded machine (slower searches) slows both alike.
    starved = builder.starved_s()
    with monkeypatch.context() as m:
        without_backlog(m)
        before = tune_once(tmp_path, "old", ahead=2)[2].starved_s()
    assert starved < 0.6 * before, (
        f"the builders waited {starved:.2f} worker-s with nothing queued ({before:.2f} "
        "without the backlog)")
    # the warm-up searches see no results, so the rounds are the same run after run
    again = tune_once(tmp_path, "b", ahead=2)
    assert sorted(again[3]) == sorted(keys)


def test_warm_up_keeps_building_while_the_runner_stalls(tmp_path, monkeypatch):
    # The runner hands back nothing for its first 1.6 s: waiting for the oldest round left
    # the 4 workers idle once three rounds (0.08 s of builds each) were built, about 5
    # worker-s (2.7 with a 0.8 s stall); fed by the backlog, every warm-up round is built
    # meanwhile (0.3 worker-s idle on an idle machine). Both orders run here, so a loaded
    # machine slows both alike.
    ts, order, builder, keys, _ = tune_once(tmp_path, "stall", ahead=2, runner_start_s=1.6,
                                            slow_every=0, fast_s=0.04)
    assert order.ids[:len(ts.tasks)] == list(range(len(ts.tasks)))
    assert ts.ct == len(keys) == len(set(keys)) == 64
    starved = builder.starved_s()
    with monkeypatch.context() as m:
        without_backlog(m)
        before = tune_once(tmp_path, "stall_old", ahead=2, runner_start_s=1.6, slow_every=0,
                           fast_s=0.04)[2].starved_s()
    assert starved < 0.5 * before, (
        f"the builders waited {starved:.2f} worker-s with nothing queued ({before:.2f} "
        "without the backlog)")


def test_no_search_ahead_still_waits_for_every_round(tmp_path):
    ts, order, builder, keys, _ = tune_once(tmp_path, "sync", ahead=0, n_tasks=3)
    assert order.ids == [0, 1, 2] and len(keys) == 24
    # the second round was handed over only after the first one, with its slow build,
    # was measured: no backlog rule searches ahead of it
    first = [builder.submits[8 * k] for k in range(3)]
    assert first[1] - first[0] >= SLOW_BUILD_S, first


def test_stream_counts_candidates_until_their_build_comes_back():
    from ptxforge.measure.stream import MeasureStream

    from .test_measure_stream import TimedRunner, inputs

    builder = ThreadBuilder(n_parallel=2)
    try:
        with MeasureStream(builder, TimedRunner(seconds=0.2)) as stream:
            assert stream.unbuilt == 0
            fut = stream.submit(inputs([1, 2, 3, 4, 5]))
            # the first build takes 0.5 s: at least it is still out; the runner's 1 s
            # of work does not count
            assert 1 <= stream.unbuilt <= 5
            deadline = time.monotonic() + 5
            while stream.unbuilt and time.monotonic() < deadline:
                time.sleep(0.01)
            assert stream.unbuilt == 0 and not fut.done()  # built, still being run
            assert [r.costs[0] for r in fut.result(timeout=5)] == [1.0, 2.0, 3.0, 4.0, 5.0]
    finally:
        builder.close()


def test_the_first_round_reaches_the_disk_while_the_backlog_is_searched(tmp_path):
    # the runner hands back the first round, then stalls 1.5 s: the warm-up's main thread
    # keeps searching rounds for the builders meanwhile, and the records of the first
    # round are on disk long before the stall ends (the measure thread writes each result
    # as it arrives, whatever the main thread does)
    log = tmp_path / "first.json"
    seen: list = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            if log.exists() and len(log.read_text().splitlines()) >= 8:
                seen.append(time.monotonic())
                return
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    made: list = []

    def runner(tasks):
        made.append(StallAfterFirstRound(tasks, first=8, stall_s=1.5))
        return made[0]

    try:
        ts, *_ = tune_once(tmp_path, "first", ahead=2, slow_every=0, runner=runner)
    finally:
        stop.set()
        watcher.join(5)
    assert ts.ct == 64
    assert seen and made[0].stall_until is not None
    assert seen[0] < made[0].stall_until - 0.5, (
        f"the first 8 records reached the disk {seen[0] - made[0].stall_until:+.2f} s from "
        "the end of the runner's stall")
