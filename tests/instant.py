"""Fakes of the measure layer that finish at once: what ``submit`` makes is handed back by
the next ``collect``."""

from __future__ import annotations


class Instant:
    """``collect`` and ``pending`` of a fake builder or runner whose ``submit`` appends
    ``(key, result)`` to ``self._done`` (set in its ``__init__``). Put it first among the
    bases, before ``measure.Builder`` or ``measure.Runner``."""

    _done: list

    def collect(self, timeout: float = 0.0) -> list:
        out, self._done = self._done, []
        return out

    @property
    def pending(self) -> int:
        return len(self._done)
