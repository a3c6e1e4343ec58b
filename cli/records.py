"""``ptxforge records``: list, show, best and distill a record file."""

from __future__ import annotations

import math
import re
import sys

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with control characters (terminal escapes, carriage returns, bidirectional
    overrides) written as Python escapes, so a task name from a record file cannot move the
    cursor, recolour or rewrite the terminal."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def _gflops(inp, res) -> float:
    if res.error_no != 0 or not res.costs:
        return 0.0
    t = sum(res.costs) / len(res.costs)
    return inp.task.flop / t / 1e9 if t > 0 and inp.task.flop else 0.0


def _outcome(inp, res) -> str:
    """A record's outcome in words: the error's name, or the time and the rate."""
    from ..measure import MeasureErrorNo

    if res.error_no:
        known = res.error_no in set(MeasureErrorNo)
        return MeasureErrorNo(res.error_no).name if known else f"error {res.error_no}"
    what = f"{res.mean * 1e3:.4f} ms" + (" (estimated)" if res.estimated else "")
    if inp.task.flop and res.mean > 0:
        what += f", {inp.task.flop / res.mean / 1e9:.2f} GFLOPS"
    return what


def records_command(args) -> int:
    from ..measure import best_records, distill, load_records

    if args.action == "train-model":
        from .model_options import train_model_command

        return train_model_command(args)
    if args.action == "distill":
        if not args.output:
            raise SystemExit("records distill needs --output PATH")
        n = distill(args.log, args.output)
        print(f"kept the best record of each of {n} workloads in {printable(args.output)}")
        return 0
    recs = load_records(args.log)
    if not recs:
        # Say so rather than print an empty table: a log whose every line was skipped (not
        # JSON, another file given by mistake) reads as a log with no records.
        print(f"{printable(args.log)} holds no records", file=sys.stderr)
    if args.action == "show":
        for inp, res in recs:
            print(f"{printable(inp.task.name or inp.task.workload_key)}: {_outcome(inp, res)}")
        return 0
    if args.action == "list":
        print(f"{'#':>5}  {'task':<40} {'error':>5} {'time (ms)':>12} {'GFLOP/s':>10}")
        for k, (inp, res) in enumerate(recs):
            t = (sum(res.costs) / len(res.costs) * 1e3) if res.error_no == 0 and res.costs \
                else math.inf
            est = " est." if res.estimated else ""
            name = printable(inp.task.name or inp.task.workload_key)[:40]
            print(f"{k:>5}  {name:<40} {res.error_no:>5} {t:>12.4f} "
                  f"{_gflops(inp, res):>10.1f}{est}")
        return 0
    best = best_records(recs)
    if not best:
        if recs:
            print(f"{printable(args.log)} holds no successful record ({len(recs)} failed)",
                  file=sys.stderr)
        return 1
    for key, (inp, res) in best.items():
        t = sum(res.costs) / len(res.costs) * 1e3
        est = " (estimated)" if res.estimated else ""
        name = printable(inp.task.name or str(key))
        print(f"{name}: {t:.4f} ms, {_gflops(inp, res):.1f} GFLOP/s{est}")
        print(f"  workload {printable(str(key))}")
        print(f"  pipeline {printable(inp.pipeline_text)}")
    return 0
