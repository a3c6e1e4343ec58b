"""Timing GPU work with CUDA events, in TVM's style: seconds per call, one result per repeat."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from .cuda_driver import Device, call, cuda, driver


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

    With ``graph=True`` the ``number`` calls are captured into a CUDA graph and replayed,
    which removes the host's launch overhead from the figure (what "graph-timed" means in
    the anchors); ``fn`` must then accept a ``stream`` keyword and launch only on it.
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


def _measure(fn, args, dev, number, repeat, min_repeat_ms, warmup, stream, graph):
    def run_plain(n: int) -> None:
        for _ in range(n):
            fn(*args)

    captured: dict = {}

    def run_graph(n: int) -> None:
        if n not in captured:
            captured.clear()
            captured[n] = _Graph(fn, args, n, stream)
        captured[n].launch(stream)

    run = run_graph if graph else run_plain
    for _ in range(warmup):
        run(number if graph else 1)
    events = EventPair(dev)
    results = []
    n = number
    for _ in range(repeat):
        while True:
            call("cuEventRecord", events.start, stream)
            run(n)
            call("cuEventRecord", events.end, stream)
            ms = events.elapsed_ms()
            if ms >= min_repeat_ms or min_repeat_ms <= 0:
                break
            per_call = max(ms / n, 1e-6)
            n = max(int(math.ceil(min_repeat_ms / per_call)), int(n * 1.618) + 1)
            if graph:
                run(n)  # capture and warm the larger graph outside the timed region
        results.append(ms / n / 1e3)
    return ProfileResult(tuple(results), n)
