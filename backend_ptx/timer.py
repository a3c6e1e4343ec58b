"""Timing GPU work with CUDA events, in TVM's style: seconds per call, one result per repeat."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from .cuda_driver import Device, call, cuda, driver, gc_paused


@dataclass(frozen=True)
class ProfileResult:
    """``results``: mean seconds per call for each repeat; ``number``: calls in the last
    repeat (raised from the requested number until a repeat lasts ``min_repeat_ms``)."""

    results: tuple[float, ...]
    number: int = 1

    @property
    def mean(self) -> float:
        return statistics.fmean(self.results)

    @property
    def median(self) -> float:
        return statistics.median(self.results)

    @property
    def min(self) -> float:
        return min(self.results)

    @property
    def std(self) -> float:
        return statistics.pstdev(self.results) if len(self.results) > 1 else 0.0

    def __repr__(self):
        return (f"ProfileResult(mean={self.mean * 1e3:.4f} ms, median={self.median * 1e3:.4f} "
                f"ms, repeats={len(self.results)}, number={self.number})")


class EventPair:
    """A start and an end event."""

    def __init__(self, device: Device):
        device.activate()
        flags = driver().CUevent_flags.CU_EVENT_DEFAULT
        self.start = call("cuEventCreate", flags)
        self.end = call("cuEventCreate", flags)

    def elapsed_ms(self) -> float:
        call("cuEventSynchronize", self.end)
        return float(call("cuEventElapsedTime", self.start, self.end))

    def __del__(self):
        try:
            for e in (self.start, self.end):
                call("cuEventDestroy", e)
        except Exception:  # at interpreter exit the driver may be gone already
            pass


class _Graph:
    """``n`` calls of a launcher captured into one CUDA graph on a private stream."""

    def __init__(self, fn: Callable, args: tuple, n: int, stream):
        d = driver()
        with gc_paused():
            call("cuStreamBeginCapture", stream,
                 d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            try:
                for _ in range(n):
                    fn(*args, stream=stream)
            finally:
                graph = call("cuStreamEndCapture", stream)
        self.graph = graph
        self.exec = call("cuGraphInstantiate", graph, 0)

    def launch(self, stream) -> None:
        call("cuGraphLaunch", self.exec, stream)

    def __del__(self):
        try:
            call("cuGraphExecDestroy", self.exec)
            call("cuGraphDestroy", self.graph)
        except Exception:  # at interpreter exit the driver may be gone already
            pass


def time_evaluator(fn: Callable, device: Device | None = None, number: int = 10,
                   repeat: int = 1, min_repeat_ms: float = 0.0, warmup: int = 1,
                   graph: bool = False) -> Callable[..., ProfileResult]:
    """A function ``f(*args)`` that times ``fn(*args)`` on the GPU.

    Each of ``repeat`` measurements runs ``fn`` ``number`` times between two events and
    records the mean seconds per call; if a measurement takes less than ``min_repeat_ms``,
    ``number`` grows (as in TVM) and the measurement is taken again. ``warmup`` calls run
    first and are not timed.

    With ``graph=True`` the calls are captured into a CUDA graph and replayed, which
    removes the host's launch overhead from the figure (what "graph-timed" means in the
    anchors); ``fn`` must then accept a ``stream`` keyword and launch only on it. The graph
    holds ``number`` calls, or more when they run shorter than :data:`GRAPH_CHUNK_MS`, and
    a repeat replays it as many times as it needs (calls grow in whole graphs).
    """
    if number < 1 or repeat < 1:
        raise ValueError(f"number and repeat must be >= 1, got {number} and {repeat}")
    dev = device or cuda(0)

    def evaluator(*args) -> ProfileResult:
        dev.sync()  # earlier work on other streams must not leak into the first measurement
        stream = 0
        if graph:
            flags = driver().CUstream_flags.CU_STREAM_NON_BLOCKING
            stream = call("cuStreamCreate", flags)
        try:
            return _measure(fn, args, dev, number, repeat, min_repeat_ms, warmup, stream,
                            graph)
        finally:
            if graph:
                call("cuStreamSynchronize", stream)
                call("cuStreamDestroy", stream)

    return evaluator


GRAPH_CHUNK_MS = 0.5
"""With ``graph=True``, a captured graph holds enough calls to run about this long (at least
``number``), so the boundary between two replays is a negligible part of a repeat."""

MAX_GRAPH_CHUNK = 1024
"""The most calls captured into one graph (capturing costs host time per call)."""


GROWTH_MARGIN = 1.05
"""When a repeat is shorter than ``min_repeat_ms``, the number of calls is raised to last
this factor times ``min_repeat_ms`` (at least 1.618 times as many calls, as in TVM)."""


def _measure(fn, args, dev, number, repeat, min_repeat_ms, warmup, stream, graph):
    if graph:
        return _measure_graph(fn, args, dev, number, repeat, min_repeat_ms, warmup, stream)
    def calls(n: int) -> None:
        for _ in range(n):
            fn(*args)

    calls(warmup)
    return _repeat(calls, dev, number, 1, repeat, min_repeat_ms, 0)


def _measure_graph(fn, args, dev, number, repeat, min_repeat_ms, warmup, stream):
    """Capture ``chunk`` calls into one graph and replay it as often as a repeat needs:
    the number of calls grows in whole chunks, and nothing is captured again."""
    chunk = number
    g = _Graph(fn, args, chunk, stream)
    for _ in range(max(warmup, 1)):
        g.launch(stream)
    events = EventPair(dev)
    call("cuEventRecord", events.start, stream)
    g.launch(stream)
    call("cuEventRecord", events.end, stream)
    per_call = max(events.elapsed_ms() / chunk, 1e-6)
    wanted = min(max(number, math.ceil(GRAPH_CHUNK_MS / per_call)), MAX_GRAPH_CHUNK)
    if wanted > chunk:
        chunk = wanted
        g = _Graph(fn, args, chunk, stream)
        g.launch(stream)  # warm the new graph outside the timed region

    def replay(n: int) -> None:
        for _ in range(n // chunk):
            g.launch(stream)

    return _repeat(replay, dev, chunk, chunk, repeat, min_repeat_ms, stream)


def _repeat(run, dev, start: int, step: int, repeat, min_repeat_ms, stream) -> ProfileResult:
    """``repeat`` timings of ``run(n)`` between two events, each of at least
    ``min_repeat_ms``: ``n`` starts at ``start`` and grows in multiples of ``step``."""
    events = EventPair(dev)
    results = []
    n = start
    for _ in range(repeat):
        while True:
            call("cuEventRecord", events.start, stream)
            run(n)
            call("cuEventRecord", events.end, stream)
            ms = events.elapsed_ms()
            if ms >= min_repeat_ms or min_repeat_ms <= 0:
                break
            per_call = max(ms / n, 1e-6)
            # aim a little past the minimum, so noise does not force another step
            grown = max(int(math.ceil(min_repeat_ms * GROWTH_MARGIN / per_call)),
                        int(n * 1.618) + 1)
            n = -(-grown // step) * step
        results.append(ms / n / 1e3)
    return ProfileResult(tuple(results), n)
