"""``ptxforge opt``: run a pass pipeline over IR text, as LLVM's ``opt`` does.

    python -m ptxforge opt FILE.ir -p "split(B.i, factors=[4]), bind(B.i.outer, ...)"

reads the module in ``FILE.ir`` (``-`` for stdin), runs the pipeline under a
:class:`~ptxforge.passes.PassContext` with the usual instruments (``--print-after-all``,
``--print-after=NAME``, ``--print-before-all``, ``--print-after-change``, ``--time-passes``;
their output goes to stderr), and prints the result on stdout (or into ``-o FILE``). The
verifier runs after every pass unless ``--no-verify``; ``--target`` sets the target the
lowering passes and the verifier check against. An error is one line on stderr and exit
status 1, so pass tests can be IR text files with their expected output
(``tests/ir_tests/``).
"""

from __future__ import annotations

import argparse
import sys

from ..ir.expr import IRError


def run_opt(text: str, pipeline: str, *, target: str | None = None, verify: bool = True,
            print_after=None, print_before=None, print_after_change: bool = False,
            time_passes: bool = False, stream=None) -> str:
    """The printed module after running ``pipeline`` over the IR ``text``."""
    from ..ir.parser import parse_module
    from ..passes import PassContext, Pipeline

    module = parse_module(text)
    passes = Pipeline.parse(pipeline)
    config = {"target": target} if target else {}
    ctx = PassContext(verify=verify, config=config, print_after=print_after,
                      print_before=print_before, print_after_change=print_after_change,
                      time_passes=time_passes, stream=stream)
    with ctx:
        if verify:
            from ..ir.verify import verify as verify_ir

            verify_ir(module, None, ctx.target)
        out = passes(module, ctx)
    return str(out) + "\n"


def one_line(e: BaseException) -> str:
    """An error as one line: the reason of a pipeline parse error with its column, the first
    line of anything else (the verifier's IR context follows its first line)."""
    from ..passes.errors import PipelineParseError

    if isinstance(e, PipelineParseError):
        return f"pipeline, column {e.column}: {e.reason}"
    lines = str(e).strip().splitlines() or [type(e).__name__]
    return lines[0]


MAX_IR_BYTES = 256 << 20
"""The largest IR text ``opt`` reads (a device file such as ``/dev/zero`` never ends)."""


def read_ir(path: str) -> str:
    """The IR text of ``path`` (``-``: stdin), at most :data:`MAX_IR_BYTES`; ValueError for
    a longer input or one that is not UTF-8."""
    if path == "-":
        data = sys.stdin.buffer.read(MAX_IR_BYTES + 1)
    else:
        with open(path, "rb") as f:
            data = f.read(MAX_IR_BYTES + 1)
    if len(data) > MAX_IR_BYTES:
        raise ValueError(f"more than {MAX_IR_BYTES} bytes of IR text; not an IR file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 text ({e})") from None


def opt_command(args) -> int:
    try:
        text = read_ir(args.file)
    except OSError as e:
        print(f"ptxforge opt: error: cannot read {args.file}: {e.strerror}", file=sys.stderr)
        return 1
    except ValueError as e:
        print(f"ptxforge opt: error: {args.file}: {e}", file=sys.stderr)
        return 1
    print_after = None
    if args.print_after_all:
        print_after = "all"
    elif args.print_after:
        print_after = [n.strip() for n in args.print_after.split(",") if n.strip()]
    try:
        out = run_opt(text, args.passes, target=args.target, verify=not args.no_verify,
                      print_after=print_after,
                      print_before="all" if args.print_before_all else None,
                      print_after_change=args.print_after_change,
                      time_passes=args.time_passes, stream=sys.stderr)
    except (IRError, ValueError, TypeError) as e:
        where = "" if args.file == "-" else f"{args.file}: "
        print(f"ptxforge opt: error: {where}{one_line(e)}", file=sys.stderr)
        return 1
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(out)
    else:
        sys.stdout.write(out)
    return 0


def add_opt_parser(sub) -> None:
    o = sub.add_parser("opt", help="run a pass pipeline over an IR text file and print the "
                                   "result", description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    o.add_argument("file", help="the IR text (a module as the printer writes it); - for stdin")
    o.add_argument("-p", "--passes", required=True,
                   help="the pipeline text, e.g. 'simplify(), flatten_buffers()'")
    o.add_argument("-o", "--output", help="write the result here instead of stdout")
    o.add_argument("--target", help="the target to check against (default: the current "
                                     "GPU's, or 'cuda -arch=sm_90')")
    o.add_argument("--print-after-all", action="store_true",
                   help="print the IR after every pass (stderr)")
    o.add_argument("--print-after", metavar="NAME[,NAME]",
                   help="print the IR after the passes of these names (stderr)")
    o.add_argument("--print-before-all", action="store_true",
                   help="print the IR before every pass (stderr)")
    o.add_argument("--print-after-change", action="store_true",
                   help="print only after passes that changed the IR")
    o.add_argument("--time-passes", action="store_true",
                   help="time every pass and print a summary (stderr)")
    o.add_argument("--no-verify", action="store_true",
                   help="do not run the verifier after every pass")
    o.set_defaults(fn=opt_command)
