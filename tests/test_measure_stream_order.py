"""The measure stream chooses the order of the builds: it hands the builder two candidates
per worker and holds the rest, builds each batch's slowest candidates first (by the build
times of the same task and sketch measured so far) and, once told that no more batches
follow, every waiting candidate slowest first, so the run does not end waiting on a slow
build that could have started earlier. Results still come back per batch in input
order."""

from __future__ import annotations

import time

from ptxforge import measure
from ptxforge.measure.build_times import BuildTimes, rule_of, sketch_of
from ptxforge.measure.stream import HANDED_PER_WORKER, MeasureStream, builder_capacity

from .instant import Instant
from .test_task_scheduler_backlog import ThreadBuilder

SPEC = measure.TaskSpec("order-key", "cuda", "", 1.0)
OTHER = measure.TaskSpec("other-key", "cuda", "", 1.0)
SECONDS = {"slow(x)": 0.3, "fast(x)": 0.02}


def cand(sketch: str, v: int, spec=SPEC) -> measure.MeasureInput:
    return measure.MeasureInput(spec, "", {"kind": "autosched", "sketch": sketch, "v": v})


class SketchBuilder(ThreadBuilder):
    """``n_parallel`` worker threads; a build takes ``SECONDS[sketch]``. Logs the order in
    which candidates were handed over (their ``v``) and the most it ever held."""

    def __init__(self, n_parallel: int = 1):
        super().__init__(n_parallel, slow_every=0)
        self.order: list = []

    def seconds(self, key, inp) -> float:
        self.order.append(inp.payload["v"])
        return SECONDS[inp.payload["sketch"]]


class BuildTimeRunner(Instant, measure.Runner):
    """Runs nothing: each result's ``all_cost`` is its build time, its cost its ``v``."""

    def __init__(self):
        self._done: list = []

    def submit(self, key, inp, build):
        self._done.append((key, measure.MeasureResult(
            (float(inp.payload["v"]),), 0, "", build.time_cost, time.time())))


def test_build_time_estimates_by_sketch_then_rule_then_task():
    times = BuildTimes()
    assert times.estimate(cand("slow(x)", 0)) == 0.0  # nothing known yet
    times.add(cand("slow(x)", 0), 0.9)
    times.add(cand("fast(x)", 0), 0.1)
    times.add(cand("fast(y)", 0, OTHER), 0.3)
    assert times.samples == 3
    assert times.estimate(cand("slow(x)", 1)) == 0.9
    # an unseen sketch of a known rule on another task: the task's mean scaled by the
    # rule's mean over every build's
    overall = (0.9 + 0.1 + 0.3) / 3
    assert abs(times.estimate(cand("slow(z)", 1, OTHER)) - 0.3 * 0.9 / overall) < 1e-12
    assert abs(times.estimate(cand("new(x)", 1)) - 0.5) < 1e-12  # the task's mean
    assert abs(times.estimate(cand("new(x)", 1, measure.TaskSpec("k", "cuda", "", 1.0)))
               - overall) < 1e-12
    times.add(cand("fast(x)", 0), float("nan"))  # a result without a time is ignored
    assert times.samples == 3
    zero = BuildTimes()  # runners that report no time: every estimate 0, none fails
    zero.add(cand("slow(x)", 0), 0.0)
    assert zero.estimate(cand("slow(z)", 0)) == 0.0
    assert zero.estimate(cand("slow(z)", 0, OTHER)) == 0.0
    assert sketch_of(measure.MeasureInput(SPEC, "", None)) is None
    assert rule_of("tile(T_matmul_NT)") == "tile" and rule_of(None) is None


def test_the_builder_gets_two_candidates_per_worker_and_the_stream_holds_the_rest():
    assert builder_capacity(SketchBuilder.__new__(SketchBuilder)) is None  # no n_parallel
    builder = SketchBuilder(n_parallel=2)
    try:
        assert builder_capacity(builder) == 2 * HANDED_PER_WORKER
        with MeasureStream(builder, BuildTimeRunner()) as stream:
            fut = stream.submit([cand("fast(x)", v) for v in range(12)])
            time.sleep(0.01)
            assert stream.unbuilt >= 12 - 2  # held candidates count as not built
            got = [r.costs[0] for r in fut.result(timeout=10)]
        assert got == [float(v) for v in range(12)]
        assert builder.most <= 2 * HANDED_PER_WORKER
        assert builder.order == list(range(12))  # equal estimates: the order searched
    finally:
        builder.close()


def test_a_batch_builds_its_slowest_sketch_first():
    builder = SketchBuilder(n_parallel=1)
    try:
        with MeasureStream(builder, BuildTimeRunner()) as stream:
            # the first batch teaches the stream what each sketch costs
            stream.submit([cand("fast(x)", 0), cand("slow(x)", 1)]).result(timeout=10)
            mixed = [cand("fast(x)", 10), cand("fast(x)", 11), cand("slow(x)", 12),
                     cand("fast(x)", 13), cand("slow(x)", 14)]
            got = stream.submit(mixed).result(timeout=10)
        assert [r.costs[0] for r in got] == [10.0, 11.0, 12.0, 13.0, 14.0]  # input order
        assert builder.order[2:] == [12, 14, 10, 11, 13]
    finally:
        builder.close()


def tail_wall(longest_first: bool) -> tuple:
    """Two workers: a batch that teaches the sketches' costs, then a batch of 20 fast
    candidates and one of a slow one, with nothing to follow. In the order searched the
    slow build starts once the fast ones are built and the run waits for it; slowest
    first, it starts at once, beside them."""
    builder = SketchBuilder(n_parallel=2)
    try:
        with MeasureStream(builder, BuildTimeRunner()) as stream:
            stream.submit([cand("slow(x)", 0), cand("fast(x)", 1)]).result(timeout=10)
            t0 = time.monotonic()
            futs = [stream.submit([cand("fast(x)", v) for v in range(10, 30)]),
                    stream.submit([cand("slow(x)", 100)])]
            if longest_first:
                stream.build_longest_first()
            results = [[r.costs[0] for r in f.result(timeout=10)] for f in futs]
            wall = time.monotonic() - t0
    finally:
        builder.close()
    assert results == [[float(v) for v in range(10, 30)], [100.0]]
    return wall, builder.order[2:]


def test_after_the_last_batch_the_slowest_waiting_builds_start_first():
    wall, order = tail_wall(True)
    before, fifo = tail_wall(False)
    assert fifo.index(100) == 20, fifo
    # only the candidates handed to the builder before the call go first
    assert order.index(100) <= 2 * HANDED_PER_WORKER + 1, order
    # in order: 20 fast builds of 0.02 s on two workers, then the slow one, ~0.5 s;
    # slowest first, the slow build runs beside the fast ones, ~0.36 s. Both runs here,
    # so a loaded machine slows both alike.
    assert wall < before - 0.05, (wall, before)


def test_batches_submitted_after_the_last_call_join_the_slowest_first_order():
    builder = SketchBuilder(n_parallel=1)
    try:
        with MeasureStream(builder, BuildTimeRunner()) as stream:
            stream.submit([cand("slow(x)", 0), cand("fast(x)", 1)]).result(timeout=10)
            stream.build_longest_first()
            stream.build_longest_first()  # once is enough; again changes nothing
            first = stream.submit([cand("fast(x)", v) for v in range(10, 16)])
            second = stream.submit([cand("slow(x)", 20)])
            assert [r.costs[0] for r in second.result(timeout=10)] == [20.0]
            first.result(timeout=10)
        # the slow candidate of the later batch did not wait behind the earlier one's
        # fast builds (at most the two handed over before it arrived)
        assert builder.order[2:].index(20) <= 2, builder.order
    finally:
        builder.close()
