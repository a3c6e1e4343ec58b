"""Timing one candidate in the GPU runner's worker: a short pilot first, the full timing
only for a candidate that may matter.

A tuning run measures hundreds of candidates per task, most of them clearly slower than the
task's best. Each used to be timed for the full ``min_repeat_ms`` (10 ms in a network run),
more than half of the runner's time per candidate. :class:`GraphTimer` captures the
candidate's launches into a CUDA graph once and times replays of it between two events; a
*pilot* of :data:`PILOT_MS` comes first, and a candidate whose pilot is more than
``stop_above`` seconds per run (the runner passes :data:`EARLY_STOP_FACTOR` times the task's
best checked time) keeps the pilot's figure and ends there. Every other candidate goes on to
the full repeats with the same graph: nothing is captured twice.

The graph holds enough runs to last about :data:`~ptxforge.backend_ptx.timer.GRAPH_CHUNK_MS`
(at least ``number``) and a repeat replays it as often as ``min_repeat_ms`` needs, as
:func:`ptxforge.backend_ptx.time_evaluator` does with ``graph=True``; without a graph, the
launches are timed as they are.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ..backend_ptx.cuda_driver import call, driver, gc_paused
from ..backend_ptx.timer import GRAPH_CHUNK_MS, GROWTH_MARGIN, MAX_GRAPH_CHUNK, EventPair

PILOT_MS = 1.0
"""How long the pilot measurement runs (milliseconds of GPU time)."""

EARLY_STOP_FACTOR = 1.5
"""A candidate whose pilot is this many times slower than the task's best checked time ends
with the pilot's figure: it cannot become the task's best, and a millisecond of graph
replays already places it well enough for the cost model."""


@dataclass(frozen=True)
class Timing:
    """What :meth:`GraphTimer.run` measured: seconds per run for each repeat, the runs in
    the last repeat, and whether the candidate ended after its pilot."""

    costs: tuple
    number: int
    stopped_early: bool = False


class GraphTimer:
    """Times ``launch(stream)`` (the candidate's launches on ``stream``) on ``device``.

    ``graph``: capture the launches into a CUDA graph and replay it (the host's launch
    overhead stays out of the figure); else launch them directly on the default stream."""

    def __init__(self, launch: Callable, device, number: int = 3, graph: bool = True):
        if number < 1:
            raise ValueError(f"number must be at least 1, got {number}")
        self.launch = launch
        self.device = device
        self.number = number
        self.graph = graph
        self._stream = 0
        self._exec = None
        self._graph = None
        self._chunk = number

    def run(self, repeat: int = 1, min_repeat_ms: float = 0.0,
            stop_above: float = math.inf) -> Timing:
        """``repeat`` timings of at least ``min_repeat_ms`` each; with a finite
        ``stop_above`` (seconds per run) and ``min_repeat_ms`` above :data:`PILOT_MS`, a
        pilot first, and its figure alone when it is slower than ``stop_above``."""
        if repeat < 1:
            raise ValueError(f"repeat must be at least 1, got {repeat}")
        self.device.sync()  # earlier work must not leak into the first measurement
        if self.graph:
            flags = driver().CUstream_flags.CU_STREAM_NON_BLOCKING
            self._stream = call("cuStreamCreate", flags)
        try:
            self._prepare()
            events = EventPair(self.device)
            n = self._chunk
            if math.isfinite(stop_above) and min_repeat_ms > PILOT_MS:
                ms, n = self._timed(events, n, PILOT_MS)
                if ms / n / 1e3 > stop_above:
                    return Timing((ms / n / 1e3,), n, True)
            costs = []
            for _ in range(repeat):
                ms, n = self._timed(events, n, min_repeat_ms)
                costs.append(ms / n / 1e3)
            return Timing(tuple(costs), n)
        finally:
            self._release()

    # -- internals ----------------------------------------------------------------------------
    def _prepare(self) -> None:
        """Warm up; with a graph, capture ``number`` runs, time one replay and capture
        again with enough runs to last :data:`GRAPH_CHUNK_MS`."""
        if not self.graph:
            self.launch(0)
            return
        self._capture(self.number)
        self._replay(1)  # warm-up
        events = EventPair(self.device)
        call("cuEventRecord", events.start, self._stream)
        self._replay(1)
        call("cuEventRecord", events.end, self._stream)
        per_run = max(events.elapsed_ms() / self.number, 1e-6)
        wanted = min(max(self.number, math.ceil(GRAPH_CHUNK_MS / per_run)), MAX_GRAPH_CHUNK)
        if wanted > self._chunk:
            self._capture(wanted)
            self._replay(1)  # warm the new graph outside the timed region

    def _capture(self, n: int) -> None:
        self._destroy_graph()
        d = driver()
        with gc_paused():
            call("cuStreamBeginCapture", self._stream,
                 d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            try:
                for _ in range(n):
                    self.launch(self._stream)
            finally:
                self._graph = call("cuStreamEndCapture", self._stream)
        self._exec = call("cuGraphInstantiate", self._graph, 0)
        self._chunk = n

    def _replay(self, times: int) -> None:
        if self.graph:
            for _ in range(times):
                call("cuGraphLaunch", self._exec, self._stream)
        else:
            for _ in range(times * self._chunk):
                self.launch(0)

    def _timed(self, events: EventPair, n: int, min_ms: float) -> tuple:
        """(milliseconds, runs) of one timing of at least ``min_ms``, starting from ``n``
        runs and growing in whole graphs."""
        step = self._chunk
        n = max(step, -(-n // step) * step)
        while True:
            call("cuEventRecord", events.start, self._stream)
            self._replay(n // step)
            call("cuEventRecord", events.end, self._stream)
            ms = events.elapsed_ms()
            if ms >= min_ms or min_ms <= 0:
                return ms, n
            per_run = max(ms / n, 1e-6)
            # aim a little past the minimum, so noise does not force another step
            grown = max(int(math.ceil(min_ms * GROWTH_MARGIN / per_run)), int(n * 1.618) + 1)
            n = -(-grown // step) * step

    def _destroy_graph(self) -> None:
        if self._exec is not None:
            call("cuGraphExecDestroy", self._exec)
            self._exec = None
        if self._graph is not None:
            call("cuGraphDestroy", self._graph)
            self._graph = None

    def _release(self) -> None:
        if self.graph:
            try:
                call("cuStreamSynchronize", self._stream)
            finally:
                self._destroy_graph()
                call("cuStreamDestroy", self._stream)
                self._stream = 0
