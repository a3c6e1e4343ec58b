"""The tuning loop: search a round, measure it, record it, learn, repeat."""

from __future__ import annotations

import time
from dataclasses import dataclass

from .state import State, state_payload


@dataclass
class TuningSummary:
    """What a tuning run did: trials measured, the best time (seconds; inf if none
    succeeded), whether times were simulator estimates, and the seconds spent searching
    and measuring."""

    trials: int = 0
    errors: int = 0
    best_cost: float = float("inf")
    estimated: bool = False
    search_s: float = 0.0
    measure_s: float = 0.0
    rounds: int = 0


def run_tuning(task, policy, options) -> TuningSummary:
    """Measure up to ``options.num_measure_trials`` states that ``policy`` picks."""
    from ..measure import MeasureInput, measure_batch

    builder = options.make_builder()
    runner = options.make_runner()
    own = (builder is not options.builder, runner is not options.runner)
    summary = TuningSummary()
    best_at = 0
    try:
        while summary.trials < options.num_measure_trials:
            n = min(options.num_measures_per_round, options.num_measure_trials - summary.trials)
            t0 = time.perf_counter()
            rows = policy.search_one_round(n)
            t1 = time.perf_counter()
            if not len(rows):
                if options.verbose:
                    print("[autosched] no unmeasured valid states are left; stopping")
                break
            states = [State.from_row(r, task) for r in rows]
            spec = task.task_spec
            inputs = [MeasureInput(spec, s.pipeline(task), state_payload(task, s))
                      for s in states]
            results = measure_batch(inputs, builder, runner)
            t2 = time.perf_counter()
            for cb in options.measure_callbacks:
                cb(inputs, results)
            policy.add_measured(rows, results)
            summary.rounds += 1
            summary.search_s += t1 - t0
            summary.measure_s += t2 - t1
            summary.trials += len(rows)
            errors = sum(1 for r in results if int(r.error_no) != 0)
            summary.errors += errors
            for r in results:
                if int(r.error_no) == 0 and r.mean < summary.best_cost:
                    summary.best_cost = r.mean
                    summary.estimated = bool(r.estimated)
                    best_at = summary.trials
            if options.verbose:
                print(_progress(task, summary, len(rows), errors, t1 - t0, t2 - t1))
            if (options.early_stopping is not None
                    and summary.trials - best_at >= options.early_stopping):
                if options.verbose:
                    print(f"[autosched] no improvement in the last {options.early_stopping} "
                          "trials; stopping early")
                break
    finally:
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
            f"measure {measure_s:.2f} s")
