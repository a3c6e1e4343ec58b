"""The command line's entry point and the demo and inspect commands (tune-op, tune-network
and bench live in :mod:`.tune` and :mod:`.bench`)."""

from __future__ import annotations

import argparse
import sys
import time

from .bench import add_bench_parser
from .opt import add_opt_parser
from .progress import setup_logging
from .tune import add_tune_network_parser, add_tune_op_parser


def _demo(args) -> int:
    import os
    import tempfile

    import numpy as np
    import ptxforge
    from ptxforge import autosched, workloads

    from .tune import Measurement, conv2d_bias_relu, gpu_present

    print("ptxforge demo: the seed conv2d layer (7x7, 512->512, 3x3, pad 1) + bias + relu, "
          "auto-scheduled")
    use_gpu = not args.sim and gpu_present()
    if not use_gpu:
        print("No GPU in use: the search runs on the CPU simulator, and every time it "
              "reports is an ESTIMATE of an analytical model, not a measurement.")
    task = autosched.SearchTask(func=conv2d_bias_relu, args=workloads.SEED_ARGS, target="cuda")
    print("\nComputational DAG:")
    print(task.compute_dag)
    trials = args.trials or (200 if use_gpu else 64)
    log = args.log or os.path.join(tempfile.mkdtemp(prefix="ptxforge-demo-"), "seed.json")
    m = Measurement("gpu" if use_gpu else "sim", min_repeat_ms=5, sim_check=False)
    try:
        options = autosched.TuningOptions(
            num_measure_trials=trials, num_measures_per_round=min(trials, 64 if use_gpu else 8),
            builder=m.builder, runner=m.runner,
            measure_callbacks=[autosched.RecordToFile(log)], verbose=1)
        t0 = time.perf_counter()
        summary = task.tune(options, search_policy=autosched.SketchPolicy(
            task, autosched.XGBModel(), seed=0))
        t_tune = time.perf_counter() - t0
    finally:
        m.close()
    label = "" if use_gpu else " (estimated)"
    print(f"\nSearched {summary.trials} candidates in {t_tune:.1f} s; best "
          f"{summary.best_cost * 1e3:.4f} ms{label}; records in {log}")
    sch, tensors = task.apply_best(log)
    mod = ptxforge.lower(sch, tensors)
    for k in mod.kernels():
        print(f"kernel {k.name}: grid {k.launch.grid}, block {k.launch.block}, shared "
              f"memory {k.shared_bytes} bytes")
    if args.print_ir:
        print(mod)
    dev = ptxforge.cuda(0) if use_gpu else ptxforge.sim()
    f = ptxforge.build(sch, tensors, target="cuda" if use_gpu else "sim")
    rng = np.random.default_rng(0)
    shapes = [tuple(t.shape) for t in tensors]
    host = [rng.uniform(size=sh).astype("float32") for sh in shapes[:3]]
    arrays = [ptxforge.nd.array(h, dev) for h in host] + [
        ptxforge.nd.empty(shapes[3], "float32", dev)]
    t0 = time.perf_counter()
    f(*arrays)
    t_run = time.perf_counter() - t0
    np.testing.assert_allclose(arrays[3].numpy(), workloads.reference(*host), rtol=1e-4,
                               atol=1e-4)
    where = "GPU" if use_gpu else "simulator"
    print(f"The best schedule ran on the {where} in {t_run:.2f} s and matches numpy "
          "(rtol 1e-4).")
    if use_gpu:
        ev = f.time_evaluator(f.entry_name, dev, number=50, repeat=5, min_repeat_ms=100)
        print(f"Execution time on the GPU: {np.median(ev(*arrays).results) * 1e3:.4f} ms "
              "(compare with cuDNN: ptxforge bench op --log " + log + ")")
    try:
        fc = f if use_gpu else ptxforge.build(sch, tensors, target="cuda")
        ptx = fc.get_source("ptx")
        print(f"\nPTX for sm_90: {len(ptx.splitlines())} lines (first lines below)")
        print("\n".join(ptx.splitlines()[:12]))
    except Exception as e:  # noqa: BLE001 - PTX is shown when LLVM's NVPTX target works
        print(f"\nPTX generation unavailable: {type(e).__name__}: {e}")
    return 0


EXAMPLES = ("seed", "seed-default", "autotvm-best")


def _example_schedule(name: str):
    from ptxforge import workloads

    if name == "seed":
        s, tensors, _ = workloads.seed_schedule()
        return s, tensors
    if name == "seed-default":
        from ptxforge.ops.schedules import default_schedule

        tensors = workloads.conv2d_layer(*workloads.SEED_ARGS)
        return default_schedule(tensors[-1]), tensors
    if name == "autotvm-best":
        return workloads.conv2d_no_batching_schedule()
    raise SystemExit(f"unknown example {name!r}; choose one of {', '.join(EXAMPLES)}")


def _inspect(args) -> int:
    if args.model is not None:
        from .inspect_network import inspect_network_command

        return inspect_network_command(args)
    import ptxforge
    from ptxforge.ir.to_ir import to_ir
    from ptxforge.passes import PassContext, PipelineParseError, SchedulePipeline

    s, tensors = _example_schedule(args.example)
    if args.pipeline:
        try:
            with open(args.pipeline, encoding="utf-8") as f:
                text = f.read()
        except UnicodeDecodeError as e:
            raise ValueError(f"{args.pipeline}: not UTF-8 text ({e})") from None
        try:
            # A schedule pipeline, as records hold: a lowering pass in it (which would run
            # out of its place and can build a wrong kernel) is refused, not compiled.
            schedule = SchedulePipeline.parse(text)
        except PipelineParseError as e:
            raise ValueError(f"{args.pipeline}: line {e.line}, column {e.column}: "
                             f"{e.reason}") from e
    else:
        schedule = s.pipeline
    module = to_ir(s.dag)
    print_after = None
    if args.print_after:
        print_after = "all" if args.print_after == "all" else args.print_after.split(",")
    elif not args.print_after_change and not args.dump_dir:
        print_after = "all"
    ctx = PassContext(print_after=print_after, print_after_change=args.print_after_change,
                      dump_dir=args.dump_dir, time_passes=args.time)
    with ctx:
        scheduled = schedule(module)
        lowered = ptxforge.lower(scheduled)
    if args.dump_dir:
        print(f"wrote the IR after every pass to {args.dump_dir}/")
    if args.target in ("llvm", "ptx"):
        mod = ptxforge.driver.BuiltModule(lowered, "cuda")
        print(mod.get_source(args.target))
    return 0


def _records(args) -> int:
    from .records import records_command

    return records_command(args)


def _plot(args) -> int:
    from .plot import plot_command

    return plot_command(args)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="ptxforge", description="ptxforge: a tensor compiler and auto-tuner for NVIDIA GPUs")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="also debugging messages on stderr (e.g. the tasks' DAGs)")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="only warnings and errors on stderr")
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback of an error instead of one line")
    sub = parser.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="auto-schedule, check and compile the seed conv layer")
    d.add_argument("--sim", action="store_true", help="use the simulator even with a GPU")
    d.add_argument("--trials", type=int, default=None,
                   help="search trials (default: 200 on a GPU, 64 on the simulator)")
    d.add_argument("--log", help="record file (default: a temporary folder)")
    d.add_argument("--print-ir", action="store_true", help="print the device IR")
    d.set_defaults(fn=_demo)
    i = sub.add_parser(
        "inspect", help="print the IR after every schedule and lowering pass of an example, "
                        "or what a network (an ONNX file or a zoo name) compiles to")
    i.add_argument("model", nargs="?", default=None,
                   help="an ONNX file or a zoo network: print its inputs, operators and fused "
                        "functions instead of an example's passes")
    i.add_argument("--input", action="append", default=[],
                   metavar="NAME:SHAPE[:DTYPE[:LO..HI]]",
                   help="with MODEL: an ONNX input's shape (dynamic dimensions), as "
                        "tune-network --input")
    i.add_argument("--graph", action="store_true", help="with MODEL: print the graph too")
    i.add_argument("--layout", choices=("NCHW", "NHWC"), default=None,
                   help="with MODEL: the layout the build converts convolutions to")
    i.add_argument("--dtype", default="float32",
                   help="with MODEL: the precision (float32, tf32, float16, bfloat16)")
    i.add_argument("--example", default="seed", choices=EXAMPLES,
                   help="the built-in schedule to show (default: the tutorial's seed schedule)")
    i.add_argument("--pipeline", help="a file with pipeline text to apply instead")
    i.add_argument("--print-after", help="'all' or comma-separated pass names")
    i.add_argument("--print-after-change", action="store_true",
                   help="print only after passes that changed the IR")
    i.add_argument("--dump-dir", help="write the IR after every pass into this folder")
    i.add_argument("--time", action="store_true", help="time every pass")
    i.add_argument("--target", choices=("ir", "llvm", "ptx"), default="ir",
                   help="also print the LLVM IR or PTX of the result")
    i.set_defaults(fn=_inspect)
    add_opt_parser(sub)
    r = sub.add_parser("records", help="list, show, show the best of, or distill a record "
                                       "file, or train a cost model on it")
    r.add_argument("action", choices=("list", "show", "best", "distill", "train-model"),
                   help="list: a table of every record; show: one line per record (the "
                        "error's name or the time); best: the best record per workload; "
                        "distill: write the best record per workload to --output; "
                        "train-model: fit a cost model on the records, saved to --output")
    r.add_argument("log", help="a record file (JSON lines)")
    r.add_argument("--output", "-o", help="where distill (train-model) writes")
    r.add_argument("--network", help="train-model: the zoo network whose log it is")
    r.add_argument("--dtype", default="float32", help="train-model: --network's precision")
    r.add_argument("--layout", default="NHWC", help="train-model: --network's layout")
    r.add_argument("--batch-size", type=int, default=1, help="train-model: --network's batch")
    r.add_argument("--image-size", type=int, default=None,
                   help="train-model: --network's image size (as tune-network was given)")
    r.set_defaults(fn=_records)
    p = sub.add_parser("plot", help="plot tuning curves of a record file as a PNG")
    p.add_argument("log", help="a record file (JSON lines)")
    p.add_argument("--output", "-o", default="tuning.png")
    p.add_argument("--title")
    p.set_defaults(fn=_plot)
    add_tune_op_parser(sub)
    add_tune_network_parser(sub)
    add_bench_parser(sub)
    args = parser.parse_args(argv)
    setup_logging(-1 if args.quiet else args.verbose)
    unblock_stop_signals()
    return run_command(f"ptxforge {args.cmd}", args.fn, args, args.debug)


def unblock_stop_signals() -> None:
    """Unblock SIGINT and SIGTERM in this thread. A blocked signal mask survives ``exec``:
    a command started by a process that had them blocked (some test runners and libraries
    block them around their own work) would never see Ctrl-C and would tune on. Signals
    that the parent *ignores* (``nohup``, a background job) stay ignored."""
    import signal

    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    except (AttributeError, OSError, ValueError):  # no signal masks on this platform
        pass


def run_command(name: str, fn, args, debug: bool = False) -> int:
    """Run a command: an error is one line on stderr (``debug``: the traceback), exit
    status 1; Ctrl-C says how many records were saved where, exit status 130."""
    try:
        return fn(args)
    except KeyboardInterrupt:
        _report_saved()
        if debug:
            raise
        return 130
    except Exception as e:
        if debug:
            raise
        print(f"{name}: {error_line(e)} (--debug shows the traceback)", file=sys.stderr)
        return 1


def error_line(e: BaseException) -> str:
    """One line saying what went wrong: the message of a user error (a missing or busy
    file, a bad value, a model that does not import), else the exception's type too."""
    from ptxforge.graph.frontend_onnx import OnnxImportError
    from ptxforge.measure.record import RecordFileBusy

    if isinstance(e, OSError) and e.filename is not None:
        msg = f"{e.filename}: {e.strerror or e}"
    else:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if isinstance(e, (OSError, ValueError, RecordFileBusy, OnnxImportError)):
        return f"error: {msg}"
    return f"internal error: {type(e).__name__}: {msg}"


def _report_saved() -> None:
    from ptxforge.measure.record import records_written

    written = records_written()
    if not written:
        print("\ninterrupted; no records were written", file=sys.stderr)
    for path, n in written.items():
        print(f"\ninterrupted: {n} records of this run are saved in {path} (run the same "
              "command again to resume)", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
