"""Buffers that share bytes of dynamic shared memory (placed by plan_dynamic_shared where
their live ranges are disjoint), as the simulator runs them.

Such a kernel runs a block at a time with its dynamic shared memory as one byte array
(:meth:`~.runtime.Chunk.dynamic_shared`), so a buffer written over another one still read
gives wrong results, as on the GPU. A barrier missing between the two (which the lock-step
simulator would otherwise hide) is caught here: every block-level step
(:mod:`ptxforge.ir.shared_lifetimes`) records the barrier interval it ends in for each
buffer it touches, and a step that starts or ends in the interval where another buffer
placed in the same bytes was touched is a race.
"""

from __future__ import annotations

from ..ir import dtype as dt
from ..ir.shared_lifetimes import shared_lifetimes, step_buffers
from ..ir.stmt import Alloc, PrimFunc, walk
from .errors import SimRaceError


def _spans(func: PrimFunc) -> list:
    return [(s.dyn_offset, s.dyn_offset + s.buffer.size * dt.nbytes(s.buffer.dtype), s.buffer)
            for s in walk(func.body) if isinstance(s, Alloc) and s.dyn_offset is not None]


def shares_bytes(func: PrimFunc) -> bool:
    """Whether two of ``func``'s buffers sit in overlapping bytes of dynamic shared
    memory."""
    end = -1
    for lo, hi, _ in sorted(_spans(func), key=lambda x: (x[0], x[1])):
        if lo < end:
            return True
        end = max(end, hi)
    return False


class SharedBytesPlan:
    """What the generated kernel checks: the buffers each step touches (by statement id)
    and, per buffer, the names of those sharing its bytes."""

    def __init__(self, func: PrimFunc):
        spans = _spans(func)
        self.overlaps: dict[str, tuple] = {}
        for lo, hi, b in spans:
            others = tuple(sorted({o.name for l2, h2, o in spans
                                   if o is not b and lo < h2 and l2 < hi}))
            if others:
                self.overlaps[b.name] = others
        life = shared_lifetimes(func)
        # a step touches the buffers its statement accesses
        self.steps: dict[int, tuple] = {}
        for s in life.steps:
            names = tuple(sorted(b.name for b in step_buffers(s) if b.name in self.overlaps))
            if names:
                self.steps[id(s)] = names


class SharedBytesTracker:
    """The barrier interval each byte-sharing buffer was last touched in, per chunk (one
    block)."""

    def __init__(self, kernel: str, overlaps: dict):
        self.kernel = kernel
        self.overlaps = overlaps
        self.interval = 0
        self.last: dict[str, int] = {}

    def barrier(self) -> None:
        self.interval += 1

    def check(self, names: tuple) -> None:
        """Before and after a block-level step touching buffers ``names``: none shares bytes
        with a buffer touched in the current barrier interval (or in the same step)."""
        for x in names:
            for y in self.overlaps.get(x, ()):
                if y in names or self.last.get(y) == self.interval:
                    raise SimRaceError(
                        f"missing barrier: kernel {self.kernel} touches {x}, placed in bytes "
                        f"of dynamic shared memory {y} shares, in the barrier interval where "
                        f"{y} is touched; a block barrier (with every cp.async and wgmma "
                        f"waited for) must separate them")

    def step(self, names: tuple) -> None:
        """After a block-level step touching ``names``: check, then note the interval."""
        self.check(names)
        for x in names:
            self.last[x] = self.interval
