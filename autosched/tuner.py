"""The tuning loop: search a round, measure it, record it, learn, repeat."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

import numpy as np

from ..stages import stage
from .state import State, candidate_input


@dataclass
class TuningSummary:
    """What a tuning run did: trials measured, the best time (seconds; inf if none
    succeeded), whether times were simulator estimates, the seconds spent searching, the
    seconds the search waited for measurements (with ``search_ahead`` the rest of the
    measuring overlaps the search), the run's wall-clock seconds, and when its first
    candidate was built and measured (a :class:`~ptxforge.measure.measure.FlowTimes`), and
    whether it stopped at its time budget (``TuningOptions.time_budget_s``)."""

    trials: int = 0
    errors: int = 0
    best_cost: float = float("inf")
    estimated: bool = False
    search_s: float = 0.0
    measure_s: float = 0.0
    rounds: int = 0
    wall_s: float = 0.0
    measure_times: object = None
    stopped_by_budget: bool = False


@dataclass
class PendingRound:
    """A searched round handed to a measure stream: the states (``rows``), their measure
    inputs, the future of their results, the seconds the search took, (for the task
    scheduler) the task's index, ``defaults``: how many inputs before the states' are the
    task's default schedule made from a plan (0 or 1; a default that is a state is one of
    ``rows``, :mod:`~ptxforge.autosched.default_candidate`), and ``asked``: how many states
    the search was asked for."""

    rows: object
    inputs: list
    future: object
    search_s: float = 0.0
    task_idx: int = 0
    defaults: int = 0
    asked: int = 0

    @property
    def trials(self) -> int:
        """The candidates of the round (the default's included): the trials it spends."""
        return len(self.rows) + self.defaults

    @property
    def spent(self) -> bool:
        """Whether the search was asked for states and found none (its space is spent)."""
        return self.asked > 0 and not len(self.rows)

    def state_results(self, results: list) -> list:
        """The results of the round's states (those after its default's)."""
        return list(results[self.defaults:])

    def report_default(self, results: list) -> None:
        """Log how the round's default candidate failed, if it did (its record is written
        like any other: :func:`~ptxforge.autosched.default_candidate.report_default`)."""
        from .default_candidate import is_default_input, report_default

        for inp, res in zip(self.inputs, results):
            if is_default_input(inp):
                report_default(inp, res)


def can_search_ahead(policy) -> bool:
    """Whether ``policy`` can be told which states are being measured (without that, a
    search ahead could pick them again)."""
    return hasattr(policy, "mark_in_flight")


def candidate_inputs(task, rows) -> list:
    """The measure inputs of population ``rows`` of ``task``: each carries its state (a
    :class:`~ptxforge.autosched.state.StatePlan`) and its record payload, and no schedule;
    the builder makes the schedule and returns the pipeline text for the record."""
    return [candidate_input(task, State.from_row(r, task)) for r in rows]


def start_round(task, policy, n: int, stream, task_idx: int = 0,
                measure_callbacks=(), default: bool = False) -> PendingRound:
    """Search up to ``n`` states with ``policy``, mark them in flight and submit their
    measure inputs to ``stream`` (an empty round is done at once). With ``default``, the
    round's first candidate is the task's default schedule and ``n - 1`` states are
    searched: the default's state where a sketch holds it (:func:`~ptxforge.autosched.
    default_candidate.default_state`, a row of the round the policy and its cost model
    learn from), else a plan the builder makes it from (:func:`~ptxforge.autosched.
    default_candidate.default_input`). Those of ``measure_callbacks`` with an
    ``on_result`` (e.g. a record writer) get each result as it arrives, the default's
    too, failed or not."""
    from ..measure.record import streaming_hook
    from .default_candidate import default_input, default_state_input

    t0 = time.perf_counter()
    with stage("search"):
        first = _default_row(task, policy) if default and n >= 1 else False
        if isinstance(first, bool):  # no state holds the default: the builder makes it
            defaults, state_default = int(first), None
        else:  # the default is a state: measured (and learned from) as one
            defaults, state_default = 0, first
            policy.mark_in_flight(first.row(task.state_width)[None])
        asked = n - defaults - (state_default is not None)
        rows = policy.search_one_round(asked) if asked > 0 else _no_rows(task)
        inputs: list = [default_input(task)] if defaults else []
        if state_default is not None:
            inputs.append(default_state_input(task, state_default))
        if len(rows):
            if can_search_ahead(policy):
                policy.mark_in_flight(rows)
            inputs += candidate_inputs(task, rows)
        if state_default is not None:
            rows = np.concatenate([state_default.row(task.state_width)[None], rows])
    return PendingRound(rows, inputs, stream.submit(inputs, streaming_hook(measure_callbacks)),
                        time.perf_counter() - t0, task_idx, defaults, asked)


def _no_rows(task):
    return np.zeros((0, task.state_width), dtype=np.int64)


def _default_row(task, policy):
    """How a round measures ``task``'s default schedule: its
    :func:`~ptxforge.autosched.default_candidate.default_state` when a sketch holds it (and
    ``policy`` can be told it is in flight), False when that state was measured already,
    else True (the builder makes the default from a plan)."""
    from ..progress import logger
    from .default_candidate import default_state
    from .evolution import row_keys

    if not can_search_ahead(policy):
        return True
    try:
        state = default_state(task)
    except Exception as e:  # noqa: BLE001 - then the builder makes it, or finds there is none
        logger.debug(f"{task.desc}: the default's search state failed ({type(e).__name__}: "
                     f"{e}); the builder makes the default")
        return True
    if state is None:
        return True
    measured = getattr(policy, "measured", ())
    if row_keys(state.row(task.state_width)[None])[0] in measured:
        return False
    return state


def run_tuning(task, policy, options) -> TuningSummary:
    """Measure up to ``options.num_measure_trials`` states that ``policy`` picks.

    Rounds are measured by a :class:`~ptxforge.measure.stream.MeasureStream`; with
    ``options.search_ahead = k`` the search of a round starts while the ``k`` rounds before
    it are still being measured (it learns from the rounds before those), so the builders
    and GPUs never wait for the search. The states of rounds in flight are never picked
    again. With ``options.time_budget_s`` no round is searched once the budget would be
    overrun (:class:`~ptxforge.autosched.time_budget.TimeBudget`). With
    ``options.measure_default`` the first round also measures the task's default schedule
    (one trial of the budget; :mod:`~ptxforge.autosched.default_candidate`).
    """
    from ..measure.stream import MeasureStream
    from .time_budget import TimeBudget

    builder = options.make_builder()
    runner = options.make_runner()
    own = (builder is not options.builder, runner is not options.runner)
    summary = TuningSummary()
    best_at = 0
    planned = 0
    searching = True
    inflight: deque = deque()
    t_start = time.perf_counter()
    ahead = options.search_ahead if can_search_ahead(policy) else 0
    stream = MeasureStream(builder, runner)
    budget = TimeBudget(getattr(options, "time_budget_s", None))
    # a run resumed from a log that holds the default's record does not measure it again
    # (unless it timed out: default_candidate.default_settled)
    default = bool(getattr(options, "measure_default", False)) and not getattr(
        policy, "default_recorded", False)
    try:
        while searching or inflight:
            if not (searching and planned < options.num_measure_trials):
                # no more rounds: what still waits for a build is built slowest first
                stream.build_longest_first()
            if searching and planned < options.num_measure_trials and (
                    len(inflight) <= ahead):
                if not budget.allows_another_round(stream):
                    if options.verbose:
                        print(f"[autosched] the time budget ({budget.seconds:g} s) is spent; "
                              "stopping")
                    searching = False
                    continue
                n = min(options.num_measures_per_round, options.num_measure_trials - planned)
                rnd = start_round(task, policy, n, stream,
                                  measure_callbacks=options.measure_callbacks, default=default)
                default = False
                budget.searched(rnd.search_s)
                if rnd.trials:
                    inflight.append(rnd)
                    planned += rnd.trials
                if rnd.spent:
                    if options.verbose:
                        print("[autosched] no unmeasured valid states are left; stopping")
                    searching = False
                continue
            searching = searching and planned < options.num_measure_trials
            if not inflight:
                continue
            rnd = inflight.popleft()
            t1 = time.perf_counter()
            with stage("measure"):
                results = rnd.future.result()
            waited = time.perf_counter() - t1
            rnd.report_default(results)
            with stage("learn"):
                for cb in options.measure_callbacks:
                    cb(rnd.inputs, results)
                if len(rnd.rows):
                    policy.add_measured(rnd.rows, rnd.state_results(results))
            summary.rounds += 1
            summary.search_s += rnd.search_s
            summary.measure_s += waited
            summary.trials += rnd.trials
            errors = sum(1 for r in results if int(r.error_no) != 0)
            summary.errors += errors
            for r in results:
                if int(r.error_no) == 0 and r.mean < summary.best_cost:
                    summary.best_cost = r.mean
                    summary.estimated = bool(r.estimated)
                    best_at = summary.trials
            if options.verbose:
                print(_progress(task, summary, rnd.trials, errors, rnd.search_s, waited))
            if (searching and options.early_stopping is not None
                    and summary.trials - best_at >= options.early_stopping):
                if options.verbose:
                    print(f"[autosched] no improvement in the last {options.early_stopping} "
                          "trials; stopping early")
                searching = False
    finally:
        stream.close()
        summary.measure_times = stream.times
        summary.stopped_by_budget = budget.spent
        summary.wall_s = time.perf_counter() - t_start
        if own[0]:
            builder.close()
        if own[1]:
            runner.close()
    return summary


def _progress(task, s: TuningSummary, measured: int, errors: int, search_s: float,
              measure_s: float) -> str:
    est = " (estimated)" if s.estimated else ""
    if s.best_cost < float("inf"):
        best = (f"best {task.flop_ct / s.best_cost / 1e9:.1f} GFLOP/s{est}, "
                f"{s.best_cost * 1e3:.4f} ms{est}")
    else:
        best = "no successful measurement yet"
    return (f"[autosched] round {s.rounds}: {s.trials} trials, {best}; this round "
            f"{measured} measured, {errors} errors, search {search_s:.2f} s, "
            f"waited for measurements {measure_s:.2f} s")
