"""The tuner's main process per trial, on the CPU: the search of a round (evolution, the
cost model's features and predictions, its training), the measure inputs and taking the
results in, for the sm_90a sketches of a network's fp16 tasks, without a GPU or a build.

The tasks are searched in turn (as the warm-up does, then again) with the network tuner's
cost model (:class:`~ptxforge.autosched.XGBModel`, trained from the rounds as it goes); a
round's "results" are each state's analytical estimate times a factor drawn per state, so
the model has something to learn. CPU seconds of this process (``time.process_time``:
other work on the machine does not count, a library's spinning threads do).

    PYTHONPATH=<parent of the checkout> python3 bench/search_cost.py resnet_v1-50 \\
        [--rounds 40] [--per-round 64] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import numpy as np
from ptxforge import autosched
from ptxforge.autosched.task_scheduler import make_search_policies
from ptxforge.autosched.tuner import candidate_inputs
from ptxforge.graph.zoo import get_network
from ptxforge.measure import MeasureResult


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("network", help="a zoo network: resnet_v1-50, resnet_v1-18, bert, ...")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--per-round", type=int, default=64)
    ap.add_argument("--target", default="cuda -arch=sm_90a")
    ap.add_argument("--profile", action="store_true", help="print cProfile's top functions")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    net, params, _, _ = get_network(args.network, 1, "NHWC", "float32")
    tasks, _ = autosched.extract_tasks(net, params, args.target, precision="float16")
    policies = make_search_policies("default", None, tasks, args.per_round, 0, seed=args.seed)
    rng = np.random.default_rng(args.seed)
    prof = cProfile.Profile() if args.profile else None
    spent = {"search": 0.0, "inputs": 0.0, "learn": 0.0}
    trials = 0
    for rnd in range(args.rounds):
        k = rnd % len(tasks)
        task, policy = tasks[k], policies[k]
        if prof:
            prof.enable()
        t0 = time.process_time()
        rows = policy.search_one_round(args.per_round)
        policy.mark_in_flight(rows)
        t1 = time.process_time()
        candidate_inputs(task, rows)
        t2 = time.process_time()
        _, _, est = task.features(rows)
        results = [MeasureResult((float(e) * rng.uniform(0.8, 1.5),), 0, "", 0.3, 0.0)
                   for e in est]
        policy.add_measured(rows, results)
        t3 = time.process_time()
        if prof:
            prof.disable()
        spent["search"] += t1 - t0
        spent["inputs"] += t2 - t1
        spent["learn"] += t3 - t2
        trials += len(rows)
    per = ", ".join(f"{k} {1e3 * v / max(trials, 1):.2f}" for k, v in spent.items())
    print(f"{args.network}: {len(tasks)} tasks, {args.rounds} rounds, {trials} trials; CPU ms "
          f"per trial: {per}; in all {1e3 * sum(spent.values()) / max(trials, 1):.2f}")
    if prof:
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
