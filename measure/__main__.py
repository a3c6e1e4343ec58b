"""``python -m ptxforge.measure``: work with record files.

``distill IN OUT`` keeps the best record per workload; ``show IN`` prints the records.
"""

from __future__ import annotations

import argparse
import sys

from .record import distill, iter_records
from .result import MeasureErrorNo


def _distill(args) -> int:
    n = distill(args.input, args.output)
    print(f"wrote the best record of {n} workload(s) to {args.output}")
    return 0


def _show(args) -> int:
    for inp, res in iter_records(args.input):
        name = inp.task.name or inp.task.workload_key
        if res.error_no:
            what = MeasureErrorNo(res.error_no).name if res.error_no in set(
                MeasureErrorNo) else str(res.error_no)
        else:
            what = f"{res.mean * 1e3:.4f} ms" + (" (estimated)" if res.estimated else "")
            if inp.task.flop:
                what += f", {inp.task.flop / res.mean / 1e9:.2f} GFLOPS"
        print(f"{name}: {what}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ptxforge.measure", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("distill", help="keep the best record per workload")
    d.add_argument("input", help="record file to read")
    d.add_argument("output", help="record file to write (replaced)")
    d.set_defaults(fn=_distill)
    s = sub.add_parser("show", help="print one line per record")
    s.add_argument("input", help="record file to read")
    s.set_defaults(fn=_show)
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback of an error instead of one line")
    args = parser.parse_args(argv)
    from ..cli.main import run_command

    return run_command(f"{parser.prog} {args.cmd}", args.fn, args, args.debug)


if __name__ == "__main__":
    sys.exit(main())
