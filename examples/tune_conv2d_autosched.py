"""Auto-scheduling a convolution layer for the GPU: TVM's auto-scheduler tutorial
(``tune_conv2d_layer_cuda``) with ptxforge.

    python3 examples/tune_conv2d_autosched.py --runner gpu --trials 1000
    python3 examples/tune_conv2d_autosched.py --runner sim --trials 8     # no GPU needed

With ``--runner sim`` candidates are checked on the CPU simulator and their times are
estimates of an analytical model (printed as "estimated"). ``--small`` shrinks the layer
so that the simulator's correctness checks stay quick.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import ptxforge
from ptxforge import autosched, measure, ops, te
from ptxforge.ops.testing import conv2d_nchw_python


# Define the computation
@autosched.register_workload
def conv2d_layer(N, H, W, CO, CI, KH, KW, stride, padding):
    data = te.placeholder((N, CI, H, W), name="data")
    kernel = te.placeholder((CO, CI, KH, KW), name="kernel")
    bias = te.placeholder((1, CO, 1, 1), name="bias")
    conv = ops.nn.conv2d_nchw(data, kernel, stride, padding, dilation=1, out_dtype="float32")
    out = ops.nn.relu(conv + bias)
    return [data, kernel, bias, out]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runner", choices=("sim", "gpu"), default="sim")
    ap.add_argument("--trials", type=int, default=10,
                    help="measurement trials (1000 for the search to converge)")
    ap.add_argument("--per-round", type=int, default=64, help="trials per search round")
    ap.add_argument("--log", default="conv2d.json", help="record file")
    ap.add_argument("--small", action="store_true",
                    help="a 7x7, 32 -> 16 channel layer instead of 512 -> 512")
    ap.add_argument("--resume", type=int, default=0,
                    help="then resume the search from the log for this many more trials")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    # Create the search task: the last convolution layer of ResNet-50
    N, H, W, CO, CI, KH, KW, strides, padding = 1, 7, 7, 512, 512, 3, 3, (1, 1), (1, 1)
    if args.small:
        CO, CI = 16, 32
    task = autosched.SearchTask(func=conv2d_layer,
                                args=(N, H, W, CO, CI, KH, KW, strides, padding),
                                target="cuda")
    print("Computational DAG:")
    print(task.compute_dag)

    # Measurement: a worker process owns the GPU; or the simulator with estimated times
    if args.runner == "gpu":
        measure_ctx = autosched.LocalRPCMeasureContext(min_repeat_ms=300)
        runner = measure_ctx.runner
    else:
        measure_ctx = None
        runner = measure.SimRunner()
    tune_option = autosched.TuningOptions(
        num_measure_trials=args.trials,
        num_measures_per_round=args.per_round,
        runner=runner,
        measure_callbacks=[autosched.RecordToFile(args.log)],
        verbose=2,
    )

    # Run the search
    policy = autosched.SketchPolicy(task, autosched.XGBModel(), seed=args.seed)
    t0 = time.perf_counter()
    summary = task.tune(tune_option, search_policy=policy)
    elapsed = time.perf_counter() - t0
    print(f"{summary.trials} trials in {elapsed:.1f} s ({summary.trials / elapsed:.2f} "
          f"trials/s; search {summary.search_s:.1f} s, measurement {summary.measure_s:.1f} s),"
          f" {summary.errors} errors")
    inp, res = autosched.load_best_record(args.log, task.workload_key)
    if inp is None:
        print("no candidate was measured successfully; see the errors in", args.log)
        return 1
    est = " (estimated)" if res.estimated else ""
    print(f"best: {res.mean * 1e3:.4f} ms{est}, "
          f"{task.flop_ct / res.mean / 1e9:.1f} GFLOP/s{est}")

    # Apply the best schedule and look at the lowered IR
    sch, tensors = task.apply_best(args.log)
    print("Lowered device IR:")
    print(ptxforge.lower(sch, tensors))

    # Check correctness (and time it on a GPU)
    func = ptxforge.build(sch, tensors, target="cuda" if args.runner == "gpu" else "sim")
    rng = np.random.default_rng(0)
    data_np = rng.uniform(size=(N, CI, H, W)).astype(np.float32)
    weight_np = rng.uniform(size=(CO, CI, KH, KW)).astype(np.float32)
    bias_np = rng.uniform(size=(1, CO, 1, 1)).astype(np.float32)
    out_np = np.maximum(conv2d_nchw_python(data_np, weight_np, strides, padding) + bias_np, 0.0)
    dev = ptxforge.cuda(0) if args.runner == "gpu" else ptxforge.sim()
    arrays = [ptxforge.nd.array(x, dev) for x in (data_np, weight_np, bias_np)]
    out = ptxforge.nd.empty(out_np.shape, "float32", dev)
    func(*arrays, out)
    np.testing.assert_allclose(out_np, out.numpy(), rtol=1e-3)
    print("the best schedule matches numpy")
    if args.runner == "gpu":
        evaluator = func.time_evaluator(func.entry_name, dev, min_repeat_ms=500)
        ms = np.median(evaluator(*arrays, out).results) * 1000
        print(f"Execution time of this operator: {ms:.3f} ms")

    # Using the record file
    print("Equivalent python schedule:")
    print(task.print_best(args.log, print_mode="schedule"))
    if args.runner == "gpu":
        print("PTX:")
        print(task.print_best(args.log, print_mode="ptx"))

    # Resume the search: a cost model trained on the log, measured states preloaded
    if args.resume:
        print("Resume search:")
        cost_model = autosched.XGBModel()
        cost_model.update_from_file(args.log)
        search_policy = autosched.SketchPolicy(
            task, cost_model, init_search_callbacks=[autosched.PreloadMeasuredStates(args.log)])
        tune_option = autosched.TuningOptions(
            num_measure_trials=args.resume, num_measures_per_round=args.per_round,
            runner=runner, measure_callbacks=[autosched.RecordToFile(args.log)])
        task.tune(tune_option, search_policy=search_policy)
    if measure_ctx is not None:
        measure_ctx.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

