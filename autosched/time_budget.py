"""A wall-clock budget for a tuning run: no round is searched once the budget is spent, or
once the candidates already handed over would take the rest of it to measure at the rate
measured so far, so the run ends close to the budget with every record on disk (a round
searched is always measured and recorded; nothing is cut off halfway)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field


def check_time_budget(seconds) -> float | None:
    """``seconds`` as a float, or None for no budget; a ``ValueError`` for anything but a
    positive finite number."""
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not (
            math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"time_budget_s must be a positive number of seconds, got {seconds!r}")
    return float(seconds)


# candidates measured before the rate so far is trusted to project the ones in flight
MIN_RATE_SAMPLES = 64


@dataclass
class TimeBudget:
    """The budget of one run (``seconds`` None: unlimited), counted from its creation.

    :meth:`allows_another_round` says whether another round may be searched (the first
    always may: a run shorter than its own start-up still measures a round); the caller
    reports each round's search time with :meth:`searched`, since a search, once begun,
    runs to its end. ``spent`` says whether the last answer was no (the run stopped there)."""

    seconds: float | None
    started: float = field(default_factory=time.monotonic)
    spent: bool = False
    granted: int = 0  # rounds allowed so far
    search_s: float = 0.0  # seconds the rounds' searches took
    searches: int = 0

    def searched(self, seconds: float) -> None:
        """A round's search took ``seconds``."""
        self.search_s += max(0.0, float(seconds))
        self.searches += 1

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def rate(self, stream) -> float | None:
        """Candidates measured per second so far, once :data:`MIN_RATE_SAMPLES` are (None
        before: the first results measure the workers' start-up, not the rate)."""
        done = stream.measured
        if done < MIN_RATE_SAMPLES:
            return None
        return done / max(self.elapsed, 1e-9)

    def affordable(self, stream) -> float | None:
        """How many more candidates may still be handed over, at the rate measured so
        far, for the run to end within the budget: the seconds left (less a mean search)
        times the rate, less the candidates in flight. None while there is no budget or
        no rate yet; never below 0."""
        rate = self.rate(stream) if self.seconds is not None else None
        if rate is None:
            return None
        search = self.search_s / self.searches if self.searches else 0.0
        left = self.seconds - self.elapsed - search
        return max(0.0, left * rate - stream.pending)

    def allows_warm_up_round(self) -> bool:
        """Whether the first round of a task not measured yet may still be searched, which
        the caller sizes to what the budget affords (:meth:`affordable`): until the
        budget's seconds are over, whatever is in flight, since a task left without a
        measurement keeps its default schedule however well the others are tuned.
        (Ask :meth:`allows_another_round` first; this answer counts as the last one.)"""
        ok = self.seconds is None or self.elapsed < self.seconds
        if ok:
            self.granted += 1
        self.spent = not ok
        return ok

    def allows_another_round(self, stream) -> bool:
        """False once the budget is spent, or once another search (as long as the mean
        one so far) and the candidates submitted to ``stream`` (a
        :class:`~ptxforge.measure.stream.MeasureStream`) and not yet measured, at the rate
        the run has measured so far, would take the rest of it."""
        elapsed = self.elapsed
        ok = self.seconds is None or not self.granted
        if not ok:
            done, pending = stream.measured, stream.pending
            # the rate so far includes the start-up (workers spawning, the first builds):
            # projected from a handful of results it makes the candidates in flight look
            # many times slower than they are, and a warm-up cut there leaves tasks untuned
            drain = pending * elapsed / done if done >= MIN_RATE_SAMPLES else 0.0
            search = self.search_s / self.searches if self.searches else 0.0
            ok = elapsed < self.seconds and elapsed + search + drain < self.seconds
        if ok:
            self.granted += 1
        # the last answer counts: a refusal the run outlived (the rate recovered) is not
        # where it stopped
        self.spent = not ok
        return ok


MIN_BUDGET_ROUND = 8
"""The fewest candidates a warm-up round measures when a time budget shrinks the rounds so
that every task gets one (:func:`warm_up_round_size`)."""


def budget_is_short(budget: TimeBudget, stream, untuned: int, full: int) -> bool:
    """Whether ``budget`` can no longer afford a round of ``full`` candidates for each of
    the ``untuned`` tasks waiting for their first."""
    affordable = budget.affordable(stream)
    return affordable is not None and affordable < untuned * full


def warm_up_round_size(budget: TimeBudget, stream, untuned: int, full: int) -> int | None:
    """The candidates of the next warm-up round, ``untuned`` tasks (this one included)
    still waiting for their first: None for a full round of ``full``, or under a budget
    too short for full rounds, the candidates it can still afford shared among them (at
    least :data:`MIN_BUDGET_ROUND`), so that every task is measured before the budget runs
    out instead of the first tasks taking it all and the last ones keeping their default
    schedules."""
    if not budget_is_short(budget, stream, untuned, full):
        return None
    share = int(budget.affordable(stream) // max(untuned, 1))
    return max(min(full, share), min(full, MIN_BUDGET_ROUND))


__all__ = ["MIN_BUDGET_ROUND", "TimeBudget", "budget_is_short", "check_time_budget",
           "warm_up_round_size"]
