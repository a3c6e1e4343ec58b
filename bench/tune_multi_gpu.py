"""Tuning throughput on one GPU against every GPU of the host: the seed layer, a fixed
number of auto-scheduler trials, first with a LocalRunner (GPU 0), then with a
MultiGPURunner (all GPUs); prints trials per second and the best time of each (the best
times should agree within noise). ``--compare-sync`` first runs one GPU with
``search_ahead=0`` (each round waits for the previous round's results), to show what
overlapping the search with measuring gains.

    python3 bench/tune_multi_gpu.py --trials 384 --per-round 64 --compare-sync --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ptxforge import autosched, measure  # noqa: E402
from tune_autosched import LAYERS, conv2d_bias_relu  # noqa: E402


def tune(kind: str, args, search_ahead: int) -> dict:
    """One tuning run with ``kind`` ``"one"`` (LocalRunner) or ``"all"`` (MultiGPURunner)."""
    task = autosched.SearchTask(func=conv2d_bias_relu, args=LAYERS[args.layer], target="cuda")
    log = os.path.join(args.log_dir, f"{args.layer}_{kind}_gpu_ahead{search_ahead}.json")
    if os.path.exists(log):
        os.remove(log)
    timing = dict(number=args.number, repeat=args.repeat, min_repeat_ms=args.min_repeat_ms,
                  timeout=10)
    runner = (measure.LocalRunner(**timing) if kind == "one"
              else measure.MultiGPURunner(**timing))
    gpus = 1 if kind == "one" else len(runner.devices)
    builder = measure.LocalBuilder(timeout=args.build_timeout, n_parallel=args.builders)
    options = autosched.TuningOptions(
        num_measure_trials=args.trials, num_measures_per_round=args.per_round,
        builder=builder, runner=runner, measure_callbacks=[autosched.RecordToFile(log)],
        verbose=1, search_ahead=search_ahead)
    policy = autosched.SketchPolicy(task, autosched.XGBModel(), seed=args.seed)
    t0 = time.perf_counter()
    summary = task.tune(options, search_policy=policy)
    wall = time.perf_counter() - t0
    per_gpu = list(getattr(runner, "measured", [summary.trials - summary.errors]))
    builds = builder.stage_summary()
    builder.close()
    runner.close()
    records = measure.load_records(log)
    devices = sorted({r.device for _, r in records if r.device})
    runs = sorted(r.all_cost for _, r in records if r.error_no == 0)
    row = {"runner": kind, "gpus": gpus, "search_ahead": search_ahead,
           "trials": summary.trials, "errors": summary.errors, "wall_s": wall,
           "trials_per_s": summary.trials / wall, "waited_s": summary.measure_s,
           "search_s": summary.search_s, "best_ms": summary.best_cost * 1e3,
           "devices": devices, "measured_per_gpu": per_gpu,
           "median_build_and_run_s": runs[len(runs) // 2] if runs else None,
           "slowest_build_and_run_s": runs[-3:],
           "builds": builds, "log": log}
    print(f"== {kind} ({gpus} GPU, search_ahead={search_ahead}): {summary.trials} trials in "
          f"{wall:.1f} s ({row['trials_per_s']:.2f} trials/s; searching {summary.search_s:.1f}"
          f" s, waiting for measurements {summary.measure_s:.1f} s), best "
          f"{row['best_ms']:.4f} ms, errors {summary.errors}, per GPU {per_gpu}", flush=True)
    print(f"   {builds}", flush=True)
    return row


def build_ceiling(log: str, args) -> dict:
    """Build every candidate of ``log`` again with a fresh builder and nothing else running:
    how many candidates per second the host's cores can build (the most any number of
    GPUs can measure)."""
    task = autosched.SearchTask(func=conv2d_bias_relu, args=LAYERS[args.layer], target="cuda")
    inputs = [measure.MeasureInput(task.task_spec, inp.pipeline_text, inp.payload)
              for inp, _ in measure.load_records(log)]
    builder = measure.LocalBuilder(timeout=args.build_timeout, n_parallel=args.builders)
    t0 = time.perf_counter()
    results = builder.build(inputs)
    wall = time.perf_counter() - t0
    summary = builder.stage_summary()
    builder.close()
    row = {"candidates": len(inputs), "wall_s": wall, "builds_per_s": len(inputs) / wall,
           "errors": sum(1 for r in results if r.error_no), "builders": builder.n_parallel,
           "stages": summary}
    print(f"== build ceiling: {len(inputs)} candidates built in {wall:.1f} s by "
          f"{builder.n_parallel} processes ({row['builds_per_s']:.2f} per s)\n   {summary}",
          flush=True)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layer", choices=sorted(LAYERS), default="seed")
    ap.add_argument("--trials", type=int, default=256)
    ap.add_argument("--per-round", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-repeat-ms", type=float, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--number", type=int, default=10)
    ap.add_argument("--builders", type=int, default=None, help="builder processes")
    ap.add_argument("--build-timeout", type=float, default=20)
    ap.add_argument("--log-dir", default="tune_logs")
    ap.add_argument("--search-ahead", type=int, default=1)
    ap.add_argument("--compare-sync", action="store_true",
                    help="also run one GPU with search_ahead=0 first")
    ap.add_argument("--build-ceiling", action="store_true",
                    help="then build the all-GPU run's candidates again, alone, to measure "
                         "how fast the host builds")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    os.makedirs(args.log_dir, exist_ok=True)
    rows = [tune("one", args, 0)] if args.compare_sync else []
    one, many = tune("one", args, args.search_ahead), tune("all", args, args.search_ahead)
    rows += [one, many]
    out = {"layer": args.layer, "runs": rows,
           "speedup": many["trials_per_s"] / one["trials_per_s"],
           "best_ratio": many["best_ms"] / one["best_ms"]}
    print(f"== speedup {out['speedup']:.2f}x with {many['gpus']} GPUs; best times "
          f"{one['best_ms']:.4f} ms (one GPU) vs {many['best_ms']:.4f} ms (all GPUs), ratio "
          f"{out['best_ratio']:.3f}", flush=True)
    if args.build_ceiling:
        out["build_ceiling"] = build_ceiling(many["log"], args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
