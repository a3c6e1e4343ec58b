"""Measuring batches in the background, so a tuner can search while its last round runs.

:class:`MeasureStream` owns a builder and a runner and drives them from a thread. Each
:meth:`MeasureStream.submit` of a batch returns a future of its results (in input order).
Batches queue up behind each other without a gap: the candidates of a batch submitted
while an earlier one is still being measured start building at once, and reach the
runner as soon as they are built, so the GPUs never wait for the search of the next
round. The thread spends its time waiting on the workers' pipes; the search in the
calling thread is what uses the CPU.

The stream hands the builder only what keeps its workers busy (two candidates per worker:
one building, one waiting in its pipe) and holds the rest, so it still chooses the order
of the builds: batch after batch, and within a batch the slowest to build first (by the
build times of the candidates of the same task and sketch measured so far,
:class:`~ptxforge.measure.build_times.BuildTimes`), so that a round's slow sketch does not
start last and hold the round back. Once the caller says no more batches follow
(:meth:`MeasureStream.build_longest_first`), every candidate still held is built slowest
first, whatever its batch: the run's last seconds are not spent waiting on one slow build
that could have started while the others were built.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future
from multiprocessing.connection import Pipe

from .build_times import BuildTimes
from .measure import Builder, Flow, Runner, batch_ids

HANDED_PER_WORKER = 2
"""Candidates per build worker handed to the builder at a time (one building, one sent
ahead); the rest wait in the stream, where their order can still change."""


def builder_capacity(builder: Builder) -> int | None:
    """How many candidates the stream hands ``builder`` at a time: :data:`HANDED_PER_WORKER`
    per worker of a builder that says how many it has (``n_parallel``), else no limit (an
    in-process builder takes everything at once)."""
    workers = getattr(builder, "n_parallel", None)
    if not isinstance(workers, int) or isinstance(workers, bool) or workers <= 0:
        return None
    return HANDED_PER_WORKER * workers


class MeasureStreamClosed(RuntimeError):
    """The stream was closed (or its thread failed) before this batch was measured."""


class MeasureStream:
    """Builds and runs batches of :class:`~ptxforge.measure.MeasureInput` in a background
    thread, in the order they are submitted.

    While the stream is open it is the only user of ``builder`` and ``runner`` (they are
    not thread-safe); :meth:`close` stops the thread and, with ``close_workers``, closes
    both. Use it as a context manager.
    """

    def __init__(self, builder: Builder, runner: Runner, name: str = "ptxforge-measure"):
        self.builder = builder
        self.runner = runner
        self._flow = Flow(builder, runner)
        self._lock = threading.Lock()
        self._inbox: deque = deque()
        self._wake_r, self._wake_w = Pipe(duplex=False)
        self._batches: dict = {}  # id -> [future, results, remaining, inputs, on_result]
        self._held: deque = deque()  # (batch id, index) not handed to the builder yet
        self._capacity = builder_capacity(builder)
        self._longest_first = False  # no more batches follow: hold slowest first
        self._resort = False
        self.build_times = BuildTimes()
        self._building = 0  # candidates handed to the builder whose build has not come back
        self._stopping = False
        self._measured = 0  # candidates whose result came back
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    # -- the calling side ---------------------------------------------------------------------
    def submit(self, inputs, on_result=None) -> Future:
        """Queue a batch; the future's result is its list of
        :class:`~ptxforge.measure.MeasureResult` in input order (an empty batch is done at
        once). ``on_result(input, result)``, when given, is called from the stream's thread
        as each result arrives (how records reach the disk before the batch is done; an
        exception in it fails the stream: the batches then fail with
        :class:`MeasureStreamClosed`, or with the ``OSError`` itself, such as a
        :class:`~ptxforge.measure.record.RecordWriteError` of a full disk). Raises
        :class:`MeasureStreamClosed` when the stream is closed."""
        inputs = list(inputs)
        fut: Future = Future()
        with self._lock:
            if self._stopping or self._failure is not None:
                raise MeasureStreamClosed(self._why_closed())
            if not inputs:
                fut.set_result([])
                return fut
            self._inbox.append((inputs, fut, on_result))
        self._wake()
        return fut

    def measure(self, inputs) -> list:
        """Measure one batch and wait for its results."""
        return self.submit(inputs).result()

    @property
    def pending(self) -> int:
        """Candidates submitted and not yet measured."""
        with self._lock:
            return sum(len(b[0]) for b in self._inbox) + sum(
                b[2] for b in self._batches.values())

    @property
    def unbuilt(self) -> int:
        """Candidates submitted whose build has not come back yet (held by the stream,
        queued for the builder or being built): when this falls below what the builder's
        workers can take, they are about to run out of work."""
        with self._lock:
            return sum(len(b[0]) for b in self._inbox) + len(self._held) + self._building

    def build_longest_first(self) -> None:
        """No more batches are expected (the last round was searched): the candidates not
        handed to the builder yet are built slowest first, whatever their batch, by the
        build times measured so far (batches submitted later join them in that order).
        Each batch's results still come back in its input order."""
        with self._lock:
            if self._longest_first:
                return
            self._longest_first = True
            self._resort = True
        self._wake()

    @property
    def measured(self) -> int:
        """Candidates whose result came back so far (failed builds included)."""
        with self._lock:
            return self._measured

    @property
    def times(self):
        """When the first candidate was added, built, handed to the runner and measured
        (a :class:`~ptxforge.measure.measure.FlowTimes`)."""
        return self._flow.times

    def close(self, close_workers: bool = False, timeout: float = 30.0) -> None:
        """Stop the thread; batches not yet measured fail with
        :class:`MeasureStreamClosed`, and their candidates still queued for a build are
        dropped from the builder. ``close_workers`` also closes the builder and the
        runner."""
        with self._lock:
            self._stopping = True
        self._wake()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        if not self._thread.is_alive():
            # nobody waits for the candidates still queued for a build: the workers stop
            # after the builds under way (a run interrupted during the warm-up's backlog
            # has a few rounds queued) instead of building them for nothing
            self._flow.cancel_queued()
        self._fail_all(MeasureStreamClosed(self._why_closed()))
        for end in (self._wake_r, self._wake_w):
            try:
                end.close()
            except OSError:
                pass
        if close_workers:
            self.builder.close()
            self.runner.close()

    def __enter__(self) -> MeasureStream:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _why_closed(self) -> str:
        if self._failure is not None:
            return (f"the measurement thread failed: {type(self._failure).__name__}: "
                    f"{self._failure}")
        return "the measure stream is closed"

    def _wake(self) -> None:
        try:
            self._wake_w.send_bytes(b"!")
        except OSError:  # closed: the thread is gone already
            pass

    # -- the thread ---------------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            while True:
                with self._lock:
                    if self._stopping:
                        return
                    new = list(self._inbox)
                    self._inbox.clear()
                    # held from the moment they leave the inbox, under the same lock, so
                    # :attr:`unbuilt` never misses them
                    for inputs, fut, on_result in new:
                        self._start(inputs, fut, on_result)
                    if self._resort:
                        self._sort_held()
                self._feed()
                done = self._flow.advance()
                with self._lock:
                    self._building = self._flow.building
                for key, res in done:
                    self._finish(key, res)
                if done:
                    continue
                self._drain_wake()
                with self._lock:
                    if self._inbox or self._stopping:
                        continue
                self._flow.wait(extra=[self._wake_r])
        except BaseException as e:  # a builder or runner failed: every open batch fails
            self._failure = e
            if isinstance(e, OSError):
                # the system's error (a full disk while a record was appended): the caller
                # sees it as it is, with its file and its message, not as a closed stream
                self._fail_all(e)
                return
            closed = MeasureStreamClosed(self._why_closed())
            closed.__cause__ = e
            self._fail_all(closed)

    def _start(self, inputs: list, fut: Future, on_result=None) -> None:
        """Hold a new batch, its slowest candidates first (called under the lock)."""
        if not fut.set_running_or_notify_cancel():
            return
        bid = next(batch_ids)
        self._batches[bid] = [fut, [None] * len(inputs), len(inputs), inputs, on_result]
        est = [self.build_times.estimate(inp) for inp in inputs]
        self._held.extend((bid, i) for i in sorted(range(len(inputs)), key=lambda i: -est[i]))
        self._resort = self._resort or self._longest_first

    def _sort_held(self) -> None:
        """Every held candidate slowest first (called under the lock); ties keep their
        order."""
        def estimate(key):
            batch = self._batches.get(key[0])
            return -self.build_times.estimate(batch[3][key[1]]) if batch else 0.0

        self._held = deque(sorted(self._held, key=estimate))
        self._resort = False

    def _feed(self) -> None:
        """Hand held candidates to the builder while it has room."""
        while True:
            with self._lock:
                if not self._held or (self._capacity is not None
                                      and self._flow.building >= self._capacity):
                    return
                bid, i = self._held.popleft()
                batch = self._batches.get(bid)
                if batch is None:
                    continue
                inp = batch[3][i]
                self._building += 1
            self._flow.add((bid, i), inp)

    def _finish(self, key, res) -> None:
        bid, i = key
        with self._lock:
            batch = self._batches.get(bid)
        if batch is None:
            return
        self.build_times.add(batch[3][i], res.all_cost)
        if batch[4] is not None:
            batch[4](batch[3][i], res)
        with self._lock:
            self._measured += 1
            batch[1][i] = res
            batch[2] -= 1
            if batch[2] or self._batches.pop(bid, None) is None:
                return
        batch[0].set_result(batch[1])

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.poll():
                self._wake_r.recv_bytes()
        except (OSError, EOFError):
            pass

    def _fail_all(self, exc: BaseException) -> None:
        with self._lock:
            batches = list(self._batches.values())
            self._batches.clear()
            self._held.clear()
            queued = [b[1] for b in self._inbox]
            self._inbox.clear()
        for fut in [b[0] for b in batches] + queued:
            if not fut.done():
                if fut.running() or fut.set_running_or_notify_cancel():
                    fut.set_exception(exc)
