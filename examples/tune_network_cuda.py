"""Auto-scheduling a neural network for NVIDIA GPU: TVM's auto-scheduler tutorial
(``tune_network_cuda``) with ptxforge.

The network is partitioned into fused functions; each distinct one is a search task, and a
task scheduler spends the measurement trials where they shrink the network's estimated
latency the most. The records then compile the whole network, which runs as one CUDA
graph::

    python3 examples/tune_network_cuda.py --network resnet-18 --trials 1000
    python3 examples/tune_network_cuda.py --network resnet-18 --trials 1000   # resumes
    python3 examples/tune_network_cuda.py --no-tune          # build from the log, benchmark
    python3 examples/tune_network_cuda.py --network resnet_v1-18 --trials 1000  # vs PyTorch
    python3 examples/tune_network_cuda.py --network resnet_v1-18 --dtype float16 --trials 1000

Every run with the same ``--log`` continues the search where the last one stopped (measured
candidates are never measured again). On a GPU the tuned network is benchmarked with
``GraphModule.benchmark``; for ``resnet_v1-*`` (torchvision's ResNet, the zoo's version of
what PyTorch users run) the same weights also run in PyTorch, eager and captured in a CUDA
graph (TF32 off, ``cudnn.benchmark`` on), and the times are compared in the same process.
Other networks have no PyTorch twin here: use ``--network resnet_v1-18`` to compare.
``--dtype float16`` (or ``bfloat16``) builds the network in mixed precision (graph pass
``to_mixed_precision``) and compares with PyTorch in the same dtype; ``--dtype tf32`` keeps
float32 and computes the matrix products with TF32 inputs (PyTorch with TF32 allowed). The
tasks of each precision have their own workload keys, so one log may hold all of them.

Without a GPU (``--runner sim``) candidates are checked on the CPU simulator and every time
is an *estimate* of an analytical model, labelled as such; ``--image-size 16`` makes the
network small enough for that::

    python3 examples/tune_network_cuda.py --runner sim --image-size 16 --trials 56
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import ptxforge
from ptxforge import autosched, graph, measure
from ptxforge.cli.tune import NETWORK_TOLERANCE

# the PyTorch twin and its timer live in the package; the tutorial's names stay importable
from ptxforge.graph.torch_reference import (  # noqa: F401
    compare_with_torch,
    time_cuda,
    torch_resnet_v1,
)


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


def parse_args(argv=None) -> argparse.Namespace:
    """The command line, with the defaults resolved (runner, log and table files)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--network", default="resnet-18",
                    help=f"a zoo network: {', '.join(graph.list_networks())}")
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--layout", choices=("NHWC", "NCHW"), default="NHWC",
                    help="NHWC is what the auto-scheduler's sketches are best at")
    ap.add_argument("--image-size", type=int, default=None,
                    help="input height and width (default 224; 16 for a quick simulator run)")
    ap.add_argument("--dtype", choices=graph.PRECISIONS, default="float32",
                    help="float16/bfloat16: mixed precision; tf32: float32 with TF32 matrix "
                         "products (inputs and outputs stay float32)")
    ap.add_argument("--winograd", action="store_true",
                    help="compute 3x3 stride-1 convolutions with Winograd's algorithm")
    ap.add_argument("--pad-channels", type=int, default=None,
                    help="pad the 3-channel stem's input to a multiple of this many channels "
                         "(graph.build's pad_channels: 4 by default, 8, or 1 for none)")
    ap.add_argument("--trials", type=int, default=1000,
                    help="measurement trials of this run, all tasks together (about 900 per "
                         "task to converge)")
    ap.add_argument("--per-round", type=int, default=64, help="trials per task per round")
    ap.add_argument("--log", default=None,
                    help="record file, reused to resume (default: "
                         "<network>-<layout>-B<batch>-cuda.json)")
    ap.add_argument("--table", default=None,
                    help="file that holds the task scheduler's latest table "
                         "(default: the log's name with .tasks.txt)")
    ap.add_argument("--runner", choices=("sim", "gpu"), default=None,
                    help="measure on the GPU (default where one is present) or estimate on "
                         "the simulator")
    ap.add_argument("--tune", action=argparse.BooleanOptionalAction, default=True,
                    help="--no-tune only builds from the records of --log")
    ap.add_argument("--min-repeat-ms", type=float, default=10.0,
                    help="GPU runner: least duration of one timing repeat")
    ap.add_argument("--sim-check", action=argparse.BooleanOptionalAction, default=True,
                    help="simulator runner: also run candidates on the simulator and compare "
                         "them with a reference")
    ap.add_argument("--per-task-early-stopping", type=int, default=None,
                    help="trials without improvement after which a task gets no more rounds")
    ap.add_argument("--compare-torch", action=argparse.BooleanOptionalAction, default=True,
                    help="on a GPU, time PyTorch on the same network (resnet_v1-* only)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.runner is None:
        args.runner = "gpu" if gpu_present() else "sim"
    if args.log is None:
        dtype = "" if args.dtype == "float32" else f"-{args.dtype}"
        args.log = f"{args.network}-{args.layout}-B{args.batch_size}{dtype}-cuda.json"
    if args.table is None:
        stem = args.log[:-5] if args.log.endswith(".json") else args.log
        args.table = stem + ".tasks.txt"
    return args


# -- Define a network -------------------------------------------------------------------------
def get_network(name: str, batch_size: int, layout: str = "NHWC", dtype: str = "float32",
                image_size: int | None = None):
    """The symbol definition and random weights of a network (the tutorial's helper, over
    ptxforge's model zoo)."""
    return graph.get_network(name, batch_size, layout, dtype, image_size=image_size)


# -- Begin tuning -----------------------------------------------------------------------------
def run_tuning(args, tasks, task_weights) -> None:
    """Tune the tasks for ``args.trials`` trials, resuming from ``args.log`` if it exists."""
    print("Begin tuning...")
    if args.runner == "gpu":
        measure_ctx = autosched.LocalRPCMeasureContext(repeat=1, min_repeat_ms=args.min_repeat_ms,
                                                       timeout=10)
        runner, builder = measure_ctx.runner, measure.LocalBuilder()
    else:
        measure_ctx = None
        runner = measure.SimRunner(check_correctness=args.sim_check)
        builder = measure.LocalBuilder(compile_to="ir")
    resume = os.path.exists(args.log)
    stem = args.table[:-len(".tasks.txt")] if args.table.endswith(".tasks.txt") else args.table
    tuner = autosched.TaskScheduler(
        tasks, task_weights, load_log_file=args.log if resume else None, seed=args.seed,
        callbacks=[autosched.PrintTableInfo(args.table),
                   autosched.LogEstimatedLatency(stem + ".latency.tsv")])
    tune_option = autosched.TuningOptions(
        num_measure_trials=args.trials,
        num_measures_per_round=args.per_round,
        builder=builder,
        runner=runner,
        measure_callbacks=[autosched.RecordToFile(args.log)],
    )
    t0 = time.perf_counter()
    try:
        tuner.tune(tune_option, per_task_early_stopping=args.per_task_early_stopping)
    finally:
        builder.close()
        if measure_ctx is not None:
            measure_ctx.close()
        else:
            runner.close()
    elapsed = time.perf_counter() - t0
    print(f"Tuning: {tuner.ct} trials in {elapsed:.1f} s ({tuner.ct / max(elapsed, 1e-9):.2f} "
          f"trials/s){' resumed from ' + args.log if resume else ''}; the table is in "
          f"{args.table}")


# -- The tutorial's flow ----------------------------------------------------------------------
def main(argv=None) -> int:
    """Extract tasks, tune, compile with the history best, check, benchmark."""
    args = parse_args(argv)
    print(f"Network {args.network}, batch {args.batch_size}, {args.layout}, {args.dtype}, "
          f"runner {args.runner}, log {args.log}")

    # Extract tasks from the network
    print("Extract tasks...")
    net, params, input_shape, output_shape = get_network(
        args.network, args.batch_size, args.layout, image_size=args.image_size)
    tasks, task_weights = autosched.extract_tasks(net, params, "cuda", winograd=args.winograd,
                                                  precision=args.dtype,
                                                  pad_channels=args.pad_channels)
    for idx, task in enumerate(tasks):
        print(f"========== Task {idx}  (workload key: {task.workload_key}) ==========")
        print(task.compute_dag)

    if args.tune:
        if args.trials < len(tasks):
            print(f"--trials must be at least the number of tasks ({len(tasks)})")
            return 2
        run_tuning(args, tasks, task_weights)
    elif not os.path.exists(args.log):
        print(f"--no-tune needs the records of an earlier run in {args.log}")
        return 2

    # Compile with the history best
    print("Compile...")
    target = "cuda" if args.runner == "gpu" else "sim"
    t0 = time.perf_counter()
    with autosched.ApplyHistoryBest(args.log) as best:
        lib = graph.build(net, target=target, params=params, winograd=args.winograd,
                          precision=args.dtype, pad_channels=args.pad_channels)
    print(f"compiled in {time.perf_counter() - t0:.1f} s; {lib.summary()}")
    costs = [best.query(t.workload_key) for t in tasks]
    if all(c is not None for c in costs):
        est = any(res.estimated for _, res in costs)
        total = sum(w * res.mean for w, (_, res) in zip(task_weights, costs))
        print(f"Estimated total latency from the records: {total * 1e3:.3f} ms"
              f"{' (estimated by the simulator runner, not measured)' if est else ''}")

    # Create the graph executor and check it against the numpy reference executor
    dev = ptxforge.cuda(0) if args.runner == "gpu" else ptxforge.sim()
    module = graph.GraphModule(lib, dev)
    x = np.random.default_rng(args.seed).uniform(size=input_shape).astype("float32")
    module.set_input("data", x)
    module.run()
    out = module.get_output(0).numpy()
    ref = graph.evaluate(net, {"data": x}, params)
    err = float(np.abs(out - ref).max() / max(float(np.abs(ref).max()), 1e-30))
    if err > NETWORK_TOLERANCE[args.dtype]:
        raise AssertionError(f"the compiled network differs from the numpy reference executor "
                             f"by {err:.2e} of the largest output ({args.dtype})")
    print(f"the compiled network matches the numpy reference executor ({err:.1e} of the "
          f"largest output, {args.dtype})")

    # Evaluate
    if args.runner != "gpu":
        print("No GPU timing: the simulator runs the kernels on the CPU (estimated times "
              "above)")
        return 0
    print("Evaluate inference time cost...")
    result = module.benchmark(dev, repeat=3, min_repeat_ms=500)
    print(result)
    if args.compare_torch:
        if args.network.startswith("resnet_v1-"):
            compare_with_torch(args, params, x, out, result.median)
        else:
            print(f"PyTorch comparison: {args.network} has no PyTorch twin here; run "
                  "--network resnet_v1-18 (torchvision's ResNet-18) to compare")
    return 0


if __name__ == "__main__":
    sys.exit(main())
