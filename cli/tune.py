"""``ptxforge tune-op`` and ``ptxforge tune-network``: auto-scheduler searches from the command
line, resuming from their record file, with a progress bar on a terminal and one log message
per round."""

from __future__ import annotations

import argparse
import os
import time

from .. import autosched, ops, te
from ..autosched.network_tuning import (
    Measurement,
    default_table,
    plan_trials,
    tune_network,
)
from ..stages import collect
from .model_options import add_model_arguments, check_model_file, save_model
from .profile import format_profile
from .progress import ProgressBar, logger

# -- built-in workloads -----------------------------------------------------------------------


@autosched.register_workload(override=True)
def conv2d_bias_relu(N, H, W, CO, CI, KH, KW, stride, padding):
    """conv2d (NCHW) + per-channel bias + relu; the name and arguments match the records of
    ``bench/tune_autosched.py``."""
    data = te.placeholder((N, CI, H, W), name="data")
    kernel = te.placeholder((CO, CI, KH, KW), name="kernel")
    bias = te.placeholder((1, CO, 1, 1), name="bias")
    conv = ops.nn.conv2d_nchw(data, kernel, stride, padding, dilation=1, out_dtype="float32")
    return [data, kernel, bias, ops.nn.relu(conv + bias)]


@autosched.register_workload(override=True)
def dense_bias(B, N, K):
    """A fully connected layer: data [B, K] times weight [N, K] transposed, plus bias [N]."""
    data = te.placeholder((B, K), name="data")
    weight = te.placeholder((N, K), name="weight")
    bias = te.placeholder((N,), name="bias")
    return [data, weight, bias, ops.nn.dense(data, weight, bias)]


BUILTIN_WORKLOADS = {
    # the tutorial's layer: the last 3x3 convolution of ResNet-50
    "seed": (conv2d_bias_relu, (1, 7, 7, 512, 512, 3, 3, (1, 1), (1, 1))),
    # a ResNet-18 3x3 layer (layer1)
    "resnet3x3": (conv2d_bias_relu, (1, 56, 56, 64, 64, 3, 3, (1, 1), (1, 1))),
    # ResNet's classifier
    "dense": (dense_bias, (1, 1000, 512)),
}
WORKLOAD_HELP = ("a built-in workload (seed: conv2d 7x7 512->512 3x3 pad 1 + bias + relu; "
                 "resnet3x3: 56x56 64->64 3x3; dense: 1x512 by 1000x512 + bias) or "
                 "conv2d:N,H,W,CO,CI,KH,KW,stride,pad")


def parse_workload(text: str) -> tuple:
    """``(workload function, args)`` of a built-in name or ``conv2d:N,H,W,CO,CI,KH,KW,stride,
    pad``; raises ``ValueError`` with the accepted forms otherwise."""
    if text in BUILTIN_WORKLOADS:
        return BUILTIN_WORKLOADS[text]
    if text.startswith("conv2d:"):
        fields = text[len("conv2d:"):].split(",")
        try:
            values = [int(v) for v in fields]
        except ValueError:
            values = []
        if len(values) != 9 or min(values[:8]) < 1 or values[8] < 0:
            raise ValueError(f"bad workload {text!r}: conv2d: takes nine integers "
                             "N,H,W,CO,CI,KH,KW,stride,pad (pad >= 0, the others >= 1)")
        n, h, w, co, ci, kh, kw, stride, pad = values
        return conv2d_bias_relu, (n, h, w, co, ci, kh, kw, (stride, stride), (pad, pad))
    raise ValueError(f"unknown workload {text!r}; use {', '.join(BUILTIN_WORKLOADS)} or "
                     "conv2d:N,H,W,CO,CI,KH,KW,stride,pad")


# -- measurement ------------------------------------------------------------------------------


def gpu_present() -> bool:
    """Whether a CUDA GPU answers (without creating a context in this process)."""
    try:
        from cuda.bindings import driver

        (err,) = driver.cuInit(0)
        if int(err) != 0:
            return False
        err, count = driver.cuDeviceGetCount()
        return int(err) == 0 and count > 0
    except Exception:  # noqa: BLE001 - no driver, no bindings: no GPU
        return False


def resolve_runner(choice: str | None) -> str:
    """``"gpu"`` or ``"sim"``: the choice, or the GPU where one is present."""
    if choice is None:
        return "gpu" if gpu_present() else "sim"
    if choice == "gpu" and not gpu_present():
        raise SystemExit("--runner gpu: no CUDA GPU answers here (cuInit / cuDeviceGetCount); "
                         "use --runner sim to tune with the simulator's estimates")
    return choice


def _ms(cost: float, estimated: bool) -> str:
    return f"{cost * 1e3:.4f} ms{' (estimated)' if estimated else ''}"


# -- tune-op ----------------------------------------------------------------------------------


class _OpProgress:
    """A measure callback: after every round, the bar and a log message."""

    def __init__(self, task, bar: ProgressBar, best: float, estimated: bool):
        self.task = task
        self.bar = bar
        self.trials = self.rounds = self.errors = 0
        self.best, self.estimated = best, estimated

    def __call__(self, inputs, results) -> None:
        self.rounds += 1
        self.trials += len(results)
        for r in results:
            if int(r.error_no) != 0:
                self.errors += 1
            elif r.mean < self.best:
                self.best, self.estimated = r.mean, bool(r.estimated)
        best = (_ms(self.best, self.estimated) if self.best < float("inf")
                else "no successful candidate yet")
        self.bar.update(self.trials, f"round {self.rounds}  best {best}")
        logger.info(f"round {self.rounds}: {self.trials}/{self.bar.total} trials, "
                    f"{self.errors} errors, best {best}")


def tune_op_command(args) -> int:
    """Tune one operator; print the best time and the throughput of the search."""
    try:
        func, wl_args = parse_workload(args.workload)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    if args.trials < 1 or args.per_round < 1:
        raise SystemExit("--trials and --per-round must be at least 1")
    check_time_budget_argument(args)
    runner = resolve_runner(args.runner)
    task = autosched.SearchTask(func=func, args=wl_args, target=args.target)
    logger.info(f"workload {task.workload_key}, {task.flop_ct / 1e6:.1f} MFLOP; runner "
                f"{runner}, log {args.log}")
    logger.debug(str(task.compute_dag))

    resume = os.path.exists(args.log)
    earlier = len(autosched.load_records(args.log, task.workload_key)) if resume else 0
    check_model_file(args.load_model)
    if args.model == "xgb":
        model = autosched.XGBModel(seed=args.seed)
        if args.load_model:
            model.load(args.load_model)
        if resume:
            model.update_from_file(args.log)
    else:
        model = autosched.RandomModel(seed=args.seed)
    callbacks = [autosched.PreloadMeasuredStates(args.log)] if resume else None
    policy = autosched.SketchPolicy(task, model, seed=args.seed, verbose=0,
                                    init_search_callbacks=callbacks)
    if resume:
        logger.info(f"resuming from {args.log}: {earlier} earlier trials of this workload are "
                    "not measured again")
    _, best_res = (autosched.load_best_record(args.log, task.workload_key) if resume
                   else (None, None))
    todo = args.trials - earlier
    if todo <= 0:
        print(f"{args.log} already holds {earlier} trials of this workload (--trials "
              f"{args.trials}); nothing to measure")
        return _report_best(task, args.log)
    measurement = Measurement(runner, args.min_repeat_ms, args.sim_check, args.early_stop)
    bar = ProgressBar(todo, "trials")
    progress = _OpProgress(task, bar, best_res.mean if best_res else float("inf"),
                           bool(best_res.estimated) if best_res else False)
    options = autosched.TuningOptions(
        num_measure_trials=todo, num_measures_per_round=args.per_round,
        builder=measurement.builder, runner=measurement.runner, verbose=0,
        measure_callbacks=[autosched.RecordToFile(args.log), progress],
        time_budget_s=args.time_budget,
        # a resumed log that holds the default's record does not measure it again: the
        # policy's PreloadMeasuredStates sees it (SketchPolicy.default_recorded)
        measure_default=(runner == "gpu" if args.measure_default is None
                         else args.measure_default))
    t0 = time.perf_counter()
    try:
        with collect() as main_stages:
            summary = task.tune(options, search_policy=policy)
    finally:
        bar.close()
        measurement.close()
    save_model(model, args.save_model)
    elapsed = time.perf_counter() - t0
    print(f"{summary.trials} trials in {elapsed:.1f} s ({summary.trials / max(elapsed, 1e-9):.2f}"
          f" trials/s; search {summary.search_s:.1f} s, measurement {summary.measure_s:.1f} s), "
          f"{summary.errors} errors{f'; resumed after {earlier} trials' if resume else ''}")
    if summary.stopped_by_budget:
        print(f"stopped at the time budget of {args.time_budget:g} s; every measured candidate "
              f"is recorded in {args.log} (run again to go on)")
    if args.profile:
        print(format_profile(main_stages, measurement.builder, summary.trials, elapsed,
                             measurement.runner, summary.measure_times))
    return _report_best(task, args.log)


def _report_best(task, log: str) -> int:
    """Print the best record of ``task`` in ``log``; 1 when there is none."""
    inp, res = autosched.load_best_record(log, task.workload_key)
    if inp is None:
        print(f"no candidate ran successfully; see the errors in {log}")
        return 1
    est = " (estimated)" if res.estimated else ""
    print(f"best: {_ms(res.mean, res.estimated)}, {task.flop_ct / res.mean / 1e9:.1f} "
          f"GFLOP/s{est}")
    if res.estimated:
        print("times are estimates of the simulator's analytical model, not GPU measurements")
    print(f"records: {log}")
    return 0


def add_early_stop_argument(p) -> None:
    """``--early-stop`` / ``--no-early-stop``: the GPU runner's pilot timing."""
    p.add_argument("--early-stop", action=argparse.BooleanOptionalAction, default=True,
                   help="GPU runner: end the timing of a candidate after a 1 ms pilot when "
                        "it is more than 1.5 times slower than its task's best")


def add_measure_default_argument(p) -> None:
    """``--measure-default`` / ``--no-measure-default``: measure each task's default
    schedule as a candidate (``TuningOptions.measure_default``)."""
    p.add_argument("--measure-default", action=argparse.BooleanOptionalAction, default=None,
                   help="measure each task's default schedule (what the build runs without "
                        "records) as one candidate of its first round, so tuning never "
                        "picks a slower schedule than the default (default: on with the GPU "
                        "runner, off with the simulator's)")


def add_tune_op_parser(sub) -> None:
    """The ``tune-op`` subcommand's arguments."""
    p = sub.add_parser("tune-op", help="auto-schedule one operator (resumes from --log)")
    p.add_argument("workload", help=WORKLOAD_HELP)
    p.add_argument("--trials", type=int, required=True,
                   help="trials of this workload in the log in all: a resumed run measures "
                        "only those missing")
    p.add_argument("--log", required=True, help="record file (JSON lines), resumed if present")
    p.add_argument("--model", choices=("xgb", "random"), default="xgb", help="cost model")
    p.add_argument("--runner", choices=("sim", "gpu"), default=None,
                   help="measure on the GPU (default where one is present) or estimate on the "
                        "simulator")
    p.add_argument("--per-round", type=int, default=64, help="trials per search round")
    p.add_argument("--min-repeat-ms", type=float, default=5.0,
                   help="GPU runner: least duration of one timing repeat")
    p.add_argument("--sim-check", action=argparse.BooleanOptionalAction, default=True,
                   help="simulator runner: also run candidates on the simulator and compare "
                        "them with a reference")
    add_early_stop_argument(p)
    add_time_budget_argument(p)
    add_measure_default_argument(p)
    p.add_argument("--seed", type=int, default=0, help="search seed")
    p.add_argument("--target", default="cuda",
                   help="the target the sketches are made for (\"cuda\", \"cuda "
                        "-arch=sm_90a\", ...); records name it")
    add_profile_argument(p)
    add_model_arguments(p)
    p.set_defaults(fn=tune_op_command)


def check_time_budget_argument(args) -> None:
    """Refuse a ``--time-budget`` that is not a positive finite number of seconds."""
    import math

    budget = args.time_budget
    if budget is not None and not (math.isfinite(budget) and budget > 0):
        raise SystemExit(f"--time-budget must be a positive number of seconds, got {budget:g}")


def add_time_budget_argument(p) -> None:
    """``--time-budget SECONDS``: stop tuning at a wall-clock budget."""
    p.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                   help="stop tuning after about this many seconds (counted from the start "
                        "of the search) or at --trials, whichever comes first: no round is "
                        "searched that would overrun it, and every measured candidate is "
                        "recorded")


def add_profile_argument(p) -> None:
    """``--profile``: where the run's time went, in the final summary."""
    p.add_argument("--profile", action="store_true",
                   help="print where the time went: search, build by stage (worker "
                        "seconds), measurement, trials/s")


# -- tune-network -----------------------------------------------------------------------------


def _tune_network(args, tasks, weights, runner: str, todo: int, resume: bool,
                  table: str) -> None:
    """Run the task scheduler for ``todo`` trials and print its table."""
    check_model_file(args.load_model)
    run = tune_network(tasks, weights, args.log, todo, runner=runner, resume=resume,
                       table=table, seed=args.seed, per_round=args.per_round,
                       min_repeat_ms=args.min_repeat_ms, sim_check=args.sim_check,
                       load_model=args.load_model, search_ahead=args.search_ahead,
                       early_stop=args.early_stop, time_budget_s=args.time_budget,
                       keep_builders_busy=args.keep_builders_busy,
                       measure_default=args.measure_default)
    if run.scheduler.search_policies:
        save_model(run.scheduler.search_policies[0].cost_model, args.save_model)
    print(run.report())
    if args.profile:
        print(format_profile(run.stages, run.builder, run.trials, run.elapsed_s, run.runner,
                             run.scheduler.measure_times))


NETWORK_TOLERANCE = {"float32": 1e-4, "tf32": 5e-3, "float16": 1e-2, "bfloat16": 4e-2}
"""The largest difference from the float32 reference executor, as a share of the largest
output, that ``tune-network`` accepts for a network built in each precision."""


def tune_network_command(args) -> int:
    """Extract a network's tasks, tune them, build with the best records, check the result
    against the numpy reference executor and, on a GPU, benchmark it."""

    from .. import graph
    from .network_source import is_model_file, load_network, relative_error

    check_time_budget_argument(args)
    try:
        loaded = load_network(args.network, args.input, batch_size=args.batch_size,
                              layout=args.layout, image_size=args.image_size)
    except (ValueError, graph.GraphError) as e:
        raise SystemExit(str(e)) from None
    # an ONNX model imports as it was written (NCHW): --layout converts it in the build
    layout = args.layout if is_model_file(args.network) else None
    runner = resolve_runner(args.runner)
    table = args.table or default_table(args.log)
    logger.info(f"network {loaded.label}, batch {args.batch_size}, {args.layout}, "
                f"{args.dtype}, runner {runner}, log {args.log}")
    net, params = loaded.net, loaded.params
    tasks, weights = autosched.extract_tasks(net, params, args.target, layout=layout,
                                             precision=args.dtype,
                                             pad_channels=args.pad_channels)
    logger.info(f"{len(tasks)} tasks")
    for idx, task in enumerate(tasks):
        logger.debug(f"task {idx} ({task.workload_key}):\n{task.compute_dag}")
    if args.trials < len(tasks):
        raise SystemExit(f"--trials must be at least the number of tasks ({len(tasks)})")

    plan = plan_trials(tasks, args.log, args.trials)
    resume, earlier, todo = plan.resume, plan.earlier, plan.todo
    if resume:
        logger.info(f"resuming from {args.log}: {earlier} earlier trials of this network's "
                    "tasks are not measured again")
    if todo:
        _tune_network(args, tasks, weights, runner, todo, resume, table)
    else:
        print(f"{args.log} already holds {earlier} trials of this network's tasks (--trials "
              f"{args.trials}); nothing to measure")

    if args.target != "cuda" and runner != "gpu":
        # records for another GPU: the simulator's build cannot apply them (a wgmma kernel
        # needs sm_90a), so the run ends with the tuning
        print(f"the network is not built: the records are for {args.target}, not for the "
              "simulator (tune with the default --target to build and check it)")
        return 0
    target = "cuda" if runner == "gpu" else "sim"
    t0 = time.perf_counter()
    with autosched.ApplyHistoryBest(args.log):
        lib = graph.build(net, target=target, params=params, precision=args.dtype,
                          pad_channels=args.pad_channels, layout=layout)
    tuned = sum(1 for f in lib.functions.values() if f.tuned)
    print(f"compiled in {time.perf_counter() - t0:.1f} s: {tuned} of {len(lib.functions)} "
          "functions from the records")

    import ptxforge

    dev = ptxforge.cuda(0) if runner == "gpu" else ptxforge.sim()
    module = graph.GraphModule(lib, dev)
    feeds = loaded.random_inputs(args.seed)
    module.set_input(**{k: v for k, v in feeds.items() if k in lib.plan.inputs})
    module.run()
    refs = graph.run_graph(net, feeds, params)
    err = max(relative_error(module.get_output(k).numpy(), ref) for k, ref in enumerate(refs))
    if err > NETWORK_TOLERANCE[args.dtype]:
        print(f"the compiled network DIFFERS from the numpy reference executor (largest "
              f"difference {err:.2e} of the largest output)")
        return 1
    print(f"the compiled network matches the numpy reference executor ({err:.1e})")
    if runner != "gpu":
        print("no GPU timing: the simulator runs the kernels on the CPU (the latencies above "
              "are estimates)")
        return 0
    result = module.benchmark(dev, repeat=3, min_repeat_ms=500)
    print(f"inference time (CUDA graph): {result}")
    return 0


def add_pad_channels_argument(p) -> None:
    """``--pad-channels``: the channel multiple of the graph pass ``pad_conv_channels``."""
    p.add_argument("--pad-channels", type=int, default=None, metavar="N",
                   help="pad the input channels of tensor-core convolutions (the 3-channel "
                        "stem) with zeros to a multiple of N: 4 (the default: 8-byte copies "
                        "in 16 bits), 8 (16-byte copies) or 1 (no padding); the padded "
                        "convolutions have their own records, so tune and bench with the "
                        "same value")


def add_input_argument(p) -> None:
    """``--input NAME:SHAPE[:DTYPE[:LOW..HIGH]]`` (repeatable), for ONNX models."""
    p.add_argument("--input", action="append", default=[], metavar="NAME:SHAPE[:DTYPE[:LO..HI]]",
                   help="an ONNX model's input: its shape where the model leaves dimensions "
                        "dynamic, the dtype it must have, and the range of random integer "
                        "values (e.g. input_ids:1x128:int64:0..30522); repeat per input")


def add_tune_network_parser(sub) -> None:
    """The ``tune-network`` subcommand's arguments."""
    from .. import graph

    p = sub.add_parser("tune-network",
                       help="auto-schedule a network's tasks (a zoo network or an ONNX "
                            "file), build and check it")
    p.add_argument("network", help="an ONNX file (model.onnx) or a zoo network: "
                                   f"{', '.join(graph.list_networks())}")
    add_input_argument(p)
    p.add_argument("--trials", type=int, required=True,
                   help="trials of the network's tasks in the log in all (at least one per "
                        "task); a resumed run measures only those missing")
    p.add_argument("--log", required=True, help="record file (JSON lines), resumed if present")
    p.add_argument("--layout", choices=("NHWC", "NCHW"), default="NHWC")
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--image-size", type=int, default=None,
                   help="input height and width (default: the network's; 16 for a quick "
                        "simulator run)")
    p.add_argument("--dtype", choices=graph.PRECISIONS, default="float32",
                   help="the precision the network runs in: float16/bfloat16 (mixed "
                        "precision: matrix products and convolutions in 16 bits, softmax, "
                        "norms and reductions in float32) or tf32 (float32 network, TF32 "
                        "matrix products); inputs and outputs stay float32")
    add_pad_channels_argument(p)
    p.add_argument("--runner", choices=("sim", "gpu"), default=None,
                   help="measure on the GPU (default where one is present) or estimate on the "
                        "simulator")
    p.add_argument("--per-round", type=int, default=64, help="trials per task per round")
    p.add_argument("--min-repeat-ms", type=float, default=10.0,
                   help="GPU runner: least duration of one timing repeat")
    p.add_argument("--sim-check", action=argparse.BooleanOptionalAction, default=True,
                   help="simulator runner: also run candidates on the simulator and compare "
                        "them with a reference")
    p.add_argument("--table", help="where the task table is kept (default: the log's name "
                                   "with .tasks.txt)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--search-ahead", type=int, default=2, metavar="K",
                   help="rounds still being built and measured while the next is searched "
                        "(default 2: candidates of three tasks in flight keep the builders "
                        "busy; 0 waits for each round's results, as TVM does)")
    p.add_argument("--keep-builders-busy", action=argparse.BooleanOptionalAction,
                   default=None,
                   help="after the warm-up, search the next round whenever the builders run "
                        "low instead of waiting for the oldest round in flight (default: on "
                        "with the GPU runner; the rounds then depend on timing, so a seeded "
                        "run repeats itself only with --no-keep-builders-busy)")
    add_early_stop_argument(p)
    add_time_budget_argument(p)
    add_measure_default_argument(p)
    p.add_argument("--target", default="cuda",
                   help="the target the tasks' sketches are made for (\"cuda\": the GPU "
                        "present, else sm_90; \"cuda -arch=sm_90a\" profiles the H100's "
                        "wgmma sketches on a machine without one, with --runner sim)")
    add_profile_argument(p)
    add_model_arguments(p)
    p.set_defaults(fn=tune_network_command)
