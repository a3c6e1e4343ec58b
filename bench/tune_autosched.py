"""Auto-scheduler tuning experiments on one GPU: throughput (measured trials per second)
and search efficiency (best time after N trials, XGBoost model against the random model,
several seeds), on the seed layer and on a ResNet-18 3x3 layer.

    python3 bench/tune_autosched.py --layer seed --model xgb --seeds 0 --trials 1000 \
        --log-dir logs --json out.json

Each run writes its records to ``<log-dir>/<layer>_<model>_s<seed>.json``; the best time
after each checkpoint is read back from the records in measurement order. Times are the
runner's (CUDA-graph replays, CUDA events).
"""

from __future__ import annotations

import argparse
import json
import os
import time

from ptxforge import autosched, measure, ops, te


@autosched.register_workload
def conv2d_bias_relu(N, H, W, CO, CI, KH, KW, stride, padding):
    data = te.placeholder((N, CI, H, W), name="data")
    kernel = te.placeholder((CO, CI, KH, KW), name="kernel")
    bias = te.placeholder((1, CO, 1, 1), name="bias")
    conv = ops.nn.conv2d_nchw(data, kernel, stride, padding, dilation=1, out_dtype="float32")
    return [data, kernel, bias, ops.nn.relu(conv + bias)]


LAYERS = {
    # the tutorial's layer: the last 3x3 conv of ResNet-50
    "seed": (1, 7, 7, 512, 512, 3, 3, (1, 1), (1, 1)),
    # a ResNet-18 3x3 layer (layer1)
    "resnet3x3": (1, 56, 56, 64, 64, 3, 3, (1, 1), (1, 1)),
}


def best_by_checkpoint(log: str, key: str, checkpoints) -> dict:
    """Best mean cost (ms) among the first n records of ``key``, for each checkpoint n."""
    best = float("inf")
    out = {}
    n = 0
    marks = sorted(checkpoints)
    for inp, res in measure.load_records(log):
        if inp.task.workload_key != key:
            continue
        n += 1
        if res.error_no == 0 and res.costs:
            best = min(best, sum(res.costs) / len(res.costs))
        while marks and n >= marks[0]:
            out[marks.pop(0)] = best * 1e3
    for m in marks:
        out[m] = best * 1e3 if n else float("nan")
    return out


def run(layer: str, model: str, seed: int, trials: int, args) -> dict:
    task = autosched.SearchTask(func=conv2d_bias_relu, args=LAYERS[layer], target="cuda")
    log = os.path.join(args.log_dir, f"{layer}_{model}_s{seed}.json")
    if os.path.exists(log) and not args.resume:
        os.remove(log)
    if args.runner == "sim":
        ctx, runner = None, measure.SimRunner()
    else:
        ctx = autosched.LocalRPCMeasureContext(min_repeat_ms=args.min_repeat_ms,
                                               repeat=args.repeat, number=args.number,
                                               timeout=10)
        runner = ctx.runner
    builder = measure.LocalBuilder(timeout=args.build_timeout, n_parallel=args.builders)
    options = autosched.TuningOptions(
        num_measure_trials=trials, num_measures_per_round=args.per_round,
        builder=builder, runner=runner, measure_callbacks=[autosched.RecordToFile(log)],
        verbose=1, search_ahead=args.search_ahead)
    cost_model = autosched.XGBModel() if model == "xgb" else autosched.RandomModel()
    policy = autosched.SketchPolicy(task, cost_model, seed=seed)
    t0 = time.perf_counter()
    summary = task.tune(options, search_policy=policy)
    wall = time.perf_counter() - t0
    if ctx is not None:
        ctx.close()
    marks = best_by_checkpoint(log, task.workload_key, args.checkpoints)
    row = {"layer": layer, "model": model, "seed": seed, "trials": summary.trials,
           "errors": summary.errors, "wall_s": wall, "trials_per_s": summary.trials / wall,
           "search_s": summary.search_s, "measure_s": summary.measure_s,
           "best_ms": summary.best_cost * 1e3, "gflops": task.flop_ct / summary.best_cost / 1e9,
           "best_after": marks, "log": log}
    print(f"== {layer} {model} seed {seed}: {summary.trials} trials in {wall:.1f} s "
          f"({row['trials_per_s']:.2f} trials/s), best {row['best_ms']:.4f} ms "
          f"({row['gflops']:.0f} GFLOP/s), errors {summary.errors}; best after "
          + ", ".join(f"{k}: {v:.4f} ms" for k, v in marks.items()), flush=True)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layer", choices=sorted(LAYERS), action="append")
    ap.add_argument("--model", choices=("xgb", "random"), action="append")
    ap.add_argument("--seeds", default="0", help="comma-separated search seeds")
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--checkpoints", default="64,200,1000",
                    type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--per-round", type=int, default=64)
    ap.add_argument("--min-repeat-ms", type=float, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--number", type=int, default=10)
    ap.add_argument("--builders", type=int, default=None, help="builder processes")
    ap.add_argument("--build-timeout", type=float, default=20)
    ap.add_argument("--search-ahead", type=int, default=1,
                    help="rounds searched while earlier ones are measured (0: TVM's order)")
    ap.add_argument("--log-dir", default="tune_logs")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--runner", choices=("gpu", "sim"), default="gpu",
                    help="sim: estimated times on the CPU (to check the script)")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    os.makedirs(args.log_dir, exist_ok=True)
    rows = []
    for layer in args.layer or ["seed"]:
        for model in args.model or ["xgb"]:
            for seed in (int(s) for s in args.seeds.split(",")):
                rows.append(run(layer, model, seed, args.trials, args))
                if args.json:
                    with open(args.json, "w") as f:
                        json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
