"""Wall-clock time per compilation stage, collected where a caller asks for it.

The compiler's stages (lowering, LLVM IR, O3, PTX emission, ptxas, ...) wrap their work in
``with stage("ptxas"):``. A caller that wants the breakdown (a builder, the tuning CLI's
``--profile``) opens ``with collect() as times:`` and reads ``times`` afterwards: a dict of
stage name to seconds, summed over every stage entered in that block, in this thread or
task. Without an open ``collect()`` a stage costs one context-variable lookup.

Nested stages are counted in both: ``lower`` around ``simplify`` gives both their totals;
readers decide which names add up (``TOP_LEVEL`` lists the ones that do not overlap).
"""
from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator

#: The stages that do not overlap one another; their sum is the time of one build.
TOP_LEVEL = ("schedule", "lower", "llvm_ir", "opt", "ptx", "ptxas")

_current: contextvars.ContextVar[dict[str, float] | None] = contextvars.ContextVar(
    "ptxforge_stage_times", default=None)


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Add the time spent in this block to ``name`` of the innermost open ``collect()``."""
    times = _current.get()
    if times is None:
        yield
        return
    t0 = time.perf_counter()
    try:
        yield
    finally:
        times[name] = times.get(name, 0.0) + time.perf_counter() - t0


@contextlib.contextmanager
def collect() -> Iterator[dict[str, float]]:
    """Collect the stage times of the enclosed work into a fresh dict (yielded at once and
    filled as stages finish). Collections nest: an inner one does not feed the outer."""
    times: dict[str, float] = {}
    token = _current.set(times)
    try:
        yield times
    finally:
        _current.reset(token)


def merge(into: dict[str, float], times: dict[str, float]) -> dict[str, float]:
    """Add ``times`` to ``into`` (in place) and return it: sums over many builds."""
    for name, seconds in times.items():
        into[name] = into.get(name, 0.0) + seconds
    return into
