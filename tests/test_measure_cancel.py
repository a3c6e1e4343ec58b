"""Stopping a measurement promptly: a closed stream drops the candidates still queued for a
build (an interrupted tuner has no use for them), and pool workers unblock the signals that
stop them."""

from __future__ import annotations

import signal
import time

from ptxforge import measure
from ptxforge.measure.pool import WorkerPool
from ptxforge.measure.stream import MeasureStream

from .test_measure_stream import TimedRunner, inputs


def _nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def _blocked_signals() -> list:
    return sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, []))


def test_pool_cancels_the_jobs_no_worker_took():
    with WorkerPool(1, "fork") as pool:
        for k in range(5):
            pool.submit(k, _nap, (0.3,), timeout=30)
        deadline = time.monotonic() + 30
        while len(pool._queue) == 5:  # the first job goes to the worker once it is up
            assert time.monotonic() < deadline, "the worker did not start"
            pool.poll(0.05)
        dropped = pool.cancel_queued()
        assert dropped == [1, 2, 3, 4]
        assert pool.pending == 1
        done = []
        while pool.pending:
            done += pool.poll(None)
        assert [o.key for o in done] == [0] and done[0].status == "ok"


def test_workers_unblock_the_stop_signals_they_inherit():
    # a worker forked from a thread that blocks SIGTERM would ignore terminate()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    try:
        with WorkerPool(1, "fork") as pool:
            (out,) = pool.run([("mask", _blocked_signals, ())], timeout=30)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    assert out.status == "ok"
    assert int(signal.SIGTERM) not in out.value and int(signal.SIGINT) not in out.value


class QueueBuilder(measure.Builder):
    """Builds one candidate at a time, each taking ``seconds``; keeps the rest queued."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.queue: list = []
        self.current = None
        self.built: list = []
        self.cancelled: list = []

    def submit(self, key, inp):
        self.queue.append(key)

    @property
    def pending(self):
        return len(self.queue) + (self.current is not None)

    def collect(self, timeout=0.0):
        now = time.monotonic()
        out = []
        if self.current is not None and now >= self.current[1]:
            out.append((self.current[0], measure.BuildResult(object(), 0, "", self.seconds)))
            self.built.append(self.current[0])
            self.current = None
        if self.current is None and self.queue:
            self.current = (self.queue.pop(0), now + self.seconds)
        return out

    def cancel_queued(self):
        keys, self.queue = self.queue, []
        self.cancelled += keys
        return keys


def test_a_closed_stream_drops_the_candidates_queued_for_a_build():
    builder = QueueBuilder(seconds=0.2)
    stream = MeasureStream(builder, TimedRunner())
    fut = stream.submit(inputs(range(6)))
    deadline = time.monotonic() + 10
    while not builder.built and time.monotonic() < deadline:
        time.sleep(0.01)
    stream.close()
    assert fut.done() and fut.exception() is not None
    # one build came back, at most one more was under way; the rest were never built
    assert len(builder.cancelled) >= 3 and not builder.queue
    assert not set(builder.cancelled) & set(builder.built)
    assert stream._flow.pending <= 2
