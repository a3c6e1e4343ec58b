"""Builders, runners and :func:`measure_batch`, which drives both at once.

A builder and a runner each take work with ``submit(key, ...)`` and hand back finished items
from ``collect(timeout)``; both expose what they wait on (``waitables``) and their next
deadline. :func:`measure_batch` uses that to overlap the two: a candidate goes to the runner
as soon as its build is done, while the other candidates are still being built.
"""

from __future__ import annotations

import abc
import itertools
import time
from dataclasses import dataclass
from multiprocessing.connection import wait as wait_any

from .result import ERROR_COST, BuildResult, MeasureInput, MeasureResult


class Builder(abc.ABC):
    """Turns :class:`MeasureInput` s into :class:`BuildResult` s."""

    timeout: float = 10.0

    @abc.abstractmethod
    def submit(self, key, inp: MeasureInput) -> None:
        """Queue one candidate under ``key``."""

    @abc.abstractmethod
    def collect(self, timeout: float | None = 0.0) -> list:
        """Finished ``(key, BuildResult)`` pairs; waits up to ``timeout`` seconds for one
        (``None``: until one is done or nothing is pending)."""

    @property
    @abc.abstractmethod
    def pending(self) -> int:
        """Candidates queued or being built."""

    def waitables(self) -> list:
        """Objects :func:`multiprocessing.connection.wait` can wait on (none: work happens
        inside :meth:`collect`)."""
        return []

    def next_deadline(self) -> float | None:
        """The ``time.monotonic()`` of the next timeout, if any."""
        return None

    def close(self) -> None:
        """Release worker processes."""
        return None

    def cancel_queued(self) -> list:
        """Drop the candidates not yet handed to a build (the builds under way go on);
        their keys. A builder that queues nothing has nothing to drop."""
        return []

    def build(self, inputs) -> list[BuildResult]:
        """Build ``inputs`` and return their results in order."""
        inputs = list(inputs)
        for i, inp in enumerate(inputs):
            self.submit(i, inp)
        out: dict = {}
        while len(out) < len(inputs):
            for key, res in self.collect(None):
                _learn(inputs[key], res)
                out[key] = res
        return [out[i] for i in range(len(inputs))]


class Runner(abc.ABC):
    """Turns built candidates into :class:`MeasureResult` s."""

    timeout: float = 10.0

    @abc.abstractmethod
    def submit(self, key, inp: MeasureInput, build: BuildResult) -> None:
        """Queue one successfully built candidate under ``key``."""

    @abc.abstractmethod
    def collect(self, timeout: float | None = 0.0) -> list:
        """Finished ``(key, MeasureResult)`` pairs (see :meth:`Builder.collect`)."""

    @property
    @abc.abstractmethod
    def pending(self) -> int:
        """Candidates queued or running."""

    def waitables(self) -> list:
        return []

    def next_deadline(self) -> float | None:
        return None

    def close(self) -> None:
        """Release worker processes."""
        return None

    def prepare(self, inp: MeasureInput) -> None:
        """A candidate of ``inp``'s task has gone to the builders: start what measuring it
        will need (a runner that checks correctness builds the task's reference), so it
        is ready when the build is. Nothing by default."""
        return None

    def run(self, inputs, builds) -> list[MeasureResult]:
        """Measure ``inputs`` given their successful ``builds``; results in order."""
        inputs, builds = list(inputs), list(builds)
        for i, (inp, b) in enumerate(zip(inputs, builds)):
            self.submit(i, inp, b)
        out: dict = {}
        while len(out) < len(inputs):
            for key, res in self.collect(None):
                out[key] = res
        return [out[i] for i in range(len(inputs))]


class PooledRunner(Runner):
    """A runner whose work runs in a :class:`~ptxforge.measure.pool.WorkerPool`
    (``self._pool``, started on first use): waiting and closing go to the pool. Results
    known without running (``self._ready``) come back first; each finished job becomes a
    result through :meth:`_result`."""

    _pool = None
    _ready: list
    _refs = None  # ReferenceBuilds, made on first use
    _held: dict | None = None  # reference key -> candidates waiting for that reference

    @property
    def pending(self) -> int:
        held = sum(len(v) for v in self._held.values()) if self._held else 0
        return len(self._ready) + (self._pool.pending if self._pool else 0) + held

    def collect(self, timeout: float | None = 0.0) -> list:
        self._release()
        if self._ready:
            out, self._ready = self._ready, []
            return out
        if self._held and not (self._pool and self._pool.pending) and timeout != 0.0:
            # only candidates waiting for their reference: wait for it
            self._refs.poll(timeout)
            self._release()
            out, self._ready = self._ready, []
            if out or self._pool is None or not self._pool.pending:
                return out
            timeout = 0.0
        if self._pool is None:
            return []
        out = [(o.key, self._result(o)) for o in self._pool.poll(timeout)]
        # None: the job was submitted again (a worker that lacked what it needed)
        return [(key, r) for key, r in out if r is not None] + self._take_ready()

    def _take_ready(self) -> list:
        out, self._ready = self._ready, []
        return out

    # -- task references, built in the background ------------------------------------------
    def _reference_builds(self):
        if self._refs is None:
            import multiprocessing

            from .reference_builds import ReferenceBuilds

            # a daemonic process (a dask worker's) may not start children: build here
            self._refs = ReferenceBuilds(name=f"{type(self).__name__}-reference",
                                         in_process=multiprocessing.current_process().daemon)
            self._held = {}
        return self._refs

    def _background_reference(self, ref_key, task, options):
        """The reference under ``ref_key`` (an artifact or ``"skipped: ..."``), built from
        ``task`` with ``options`` in the background; ``PENDING`` while it is built."""
        refs = self._reference_builds()
        refs.request(ref_key, task, options)
        return refs.get(ref_key)

    def _wait_reference(self, ref_key, task, options):
        """The reference under ``ref_key``, waiting for its build."""
        from .reference_builds import PENDING

        ref = self._background_reference(ref_key, task, options)
        while ref is PENDING:
            self._refs.poll(None)
            ref = self._refs.get(ref_key)
        return ref

    def _hold(self, ref_key, key, inp, build) -> None:
        """Keep a candidate until its reference is built; it is submitted again then."""
        self._held.setdefault(ref_key, []).append((key, inp, build))

    def _release(self) -> None:
        if self._refs is None or not self._held:
            return
        from .reference_builds import PENDING

        self._refs.poll(0.0)
        for ref_key in [k for k in self._held if self._refs.get(k) is not PENDING]:
            for key, inp, build in self._held.pop(ref_key):
                self.submit(key, inp, build)

    @abc.abstractmethod
    def _result(self, outcome) -> MeasureResult | None:
        """The :class:`MeasureResult` of a finished pool job
        (a :class:`~ptxforge.measure.pool.JobOutcome`), or None when the candidate was
        submitted again instead."""

    def waitables(self) -> list:
        refs = self._refs.waitables() if self._refs is not None else []
        return (self._pool.waitables() if self._pool else []) + refs

    def next_deadline(self) -> float | None:
        ds = [d for d in ((self._pool.next_deadline() if self._pool else None),
                          (self._refs.next_deadline() if self._refs is not None else None))
              if d is not None]
        return min(ds) if ds else None

    _old_stats = None

    @property
    def pool_stats(self):
        """Where the measuring workers' time went (a
        :class:`~ptxforge.measure.pool.PoolStats` summed over the pools this runner had), or
        None before the first measurement."""
        now = self._pool.stats() if self._pool is not None else None
        if now is None or self._old_stats is None:
            return now or self._old_stats
        return self._old_stats.merged(now)

    def close(self) -> None:
        if self._pool is not None:
            self._old_stats = self.pool_stats
            self._pool.close()
            self._pool = None
        if self._refs is not None:
            self._refs.close()  # candidates held for a reference are dropped, as queued
            self._held.clear()  # ones are


def _learn(inp, build: BuildResult) -> None:
    """Hand a candidate sent as a plan the pipeline text its build made (inputs of other
    kinds, which some callers measure with builders of their own, have nothing to learn)."""
    learn = getattr(inp, "learn_pipeline", None)
    if learn is not None:
        learn(getattr(build, "pipeline_text", ""), bool(build.error_no))


def result_of_failed_build(build: BuildResult) -> MeasureResult:
    """The measure result of a candidate whose build failed."""
    return MeasureResult((ERROR_COST,), int(build.error_no), build.error_msg, build.time_cost,
                         time.time())


_MISSING = object()


@dataclass
class FlowTimes:
    """When a :class:`Flow`'s first candidate reached each point (``time.monotonic()``;
    None until it did): ``added`` handed to the builder, ``built`` its build back,
    ``run`` handed to the runner, ``result`` the runner's first result back. Where a run
    waits at its start (the builders' start, a reference build, the runner's worker
    coming up) shows between them."""

    opened: float
    added: float | None = None
    built: float | None = None
    run: float | None = None
    result: float | None = None

    def line(self) -> str:
        """``first candidate (...): added 0.12 s, built 0.50 s, ...``."""
        labels = (("added", "added"), ("built", "built"), ("run", "to the runner"),
                  ("result", "runner's first result"))
        parts = [f"{label} {t - self.opened:.2f} s" for name, label in labels
                 if (t := getattr(self, name)) is not None]
        return ("first candidate (s after the measurement opened): "
                + (", ".join(parts) if parts else "none added"))


batch_ids = itertools.count()
"""Numbers batches across every flow of the process, so that keys never repeat: a result
left in a builder or runner by an interrupted batch cannot pass for a later one's."""


class Flow:
    """Candidates on their way through a builder and then a runner, under caller-chosen
    keys: :meth:`add` submits one to the builder, :meth:`advance` moves finished builds
    on to the runner and returns the candidates that are done, :meth:`wait` sleeps until
    either side has news. A failed build is done at once (its result says why)."""

    def __init__(self, builder: Builder, runner: Runner):
        self.builder = builder
        self.runner = runner
        self._inputs: dict = {}
        self._building: set = set()  # keys whose build has not come back
        self.times = FlowTimes(time.monotonic())

    @property
    def pending(self) -> int:
        """Candidates added and not yet done."""
        return len(self._inputs)

    @property
    def building(self) -> int:
        """Candidates added whose build has not come back (queued or being built)."""
        return len(self._building)

    def add(self, key, inp: MeasureInput) -> None:
        if self.times.added is None:
            self.times.added = time.monotonic()
        self._inputs[key] = inp
        self._building.add(key)
        self.runner.prepare(inp)
        self.builder.submit(key, inp)

    def cancel_queued(self) -> list:
        """Drop the candidates still queued for a build (they will have no result); their
        keys."""
        keys = self.builder.cancel_queued()
        for key in keys:
            self._inputs.pop(key, None)
            self._building.discard(key)
        return keys

    def advance(self) -> list:
        """Finished ``(key, MeasureResult)`` pairs; never waits. Results under keys this
        flow never added (left in a builder or runner by an earlier, abandoned batch) are
        dropped."""
        done = []
        for key, b in self.builder.collect(0.0):
            if key not in self._inputs:
                continue
            self._building.discard(key)
            if self.times.built is None:
                self.times.built = time.monotonic()
            # a candidate sent as a plan learns its pipeline text from its build (the text
            # its record will hold), whether or not the build succeeded
            _learn(self._inputs[key], b)
            if b.error_no:
                del self._inputs[key]
                done.append((key, result_of_failed_build(b)))
            else:
                if self.times.run is None:
                    self.times.run = time.monotonic()
                self.runner.submit(key, self._inputs[key], b)
        for key, r in self.runner.collect(0.0):
            if self._inputs.pop(key, _MISSING) is not _MISSING:
                if self.times.result is None:
                    self.times.result = time.monotonic()
                done.append((key, r))
        return done

    def wait(self, extra: list = (), limit: float | None = None) -> None:
        """Wait until the builder, the runner or one of ``extra`` (objects
        :func:`multiprocessing.connection.wait` accepts) may have news, a deadline of
        either side passes, or ``limit`` seconds pass."""
        handles = list(extra)
        blind = False  # a side with work in progress that offers nothing to wait on
        for side in (self.builder, self.runner):
            mine = side.waitables()
            handles += mine
            blind |= bool(side.pending) and not mine
        now = time.monotonic()
        waits = [d - now for d in (self.builder.next_deadline(), self.runner.next_deadline())
                 if d]
        if limit is not None:
            waits.append(limit)
        if not handles:  # all the work happens inside collect(): look again soon
            time.sleep(max(0.0, min(waits + [0.01])) if waits else 0.001)
            return
        if blind:
            waits.append(0.01)
        wait_any(handles, max(0.0, min(waits)) if waits else None)


def measure_batch(inputs, builder: Builder, runner: Runner,
                  on_result=None) -> list[MeasureResult]:
    """Build and run ``inputs`` (a list, or any iterable: it is consumed lazily, so a tuner
    may still be producing candidates while the first ones build); results in input
    order. Builds and runs overlap: a candidate is run as soon as it is built.
    ``on_result(index, result)``, when given, is called as each result arrives (how
    records reach the disk before the batch is done)."""
    flow = Flow(builder, runner)
    source = iter(inputs)
    results: dict = {}
    batch = next(batch_ids)
    n = 0
    exhausted = False
    while True:
        if not exhausted:
            try:
                inp = next(source)
            except StopIteration:
                exhausted = True
            else:
                flow.add((batch, n), inp)
                n += 1
        done = flow.advance()
        results.update(done)
        if on_result is not None:
            for (_, i), res in done:
                on_result(i, res)
        if exhausted and not flow.pending:
            return [results[batch, i] for i in range(n)]
        if done or not exhausted:
            continue
        flow.wait()
