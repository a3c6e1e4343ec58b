"""What refused states cost the search, on the CPU: per network, the main process's CPU time
per pick of ``SketchPolicy.search_one_round`` and the share of its random draws and
evolved children that the kernel model refuses, with refused tile draws repaired
(``autosched/repair.py``) where valid ones are rare (the search's default), always, or
never (drawn again, as before the repair), the ways taken in turn task by task. Run it
on a checkout from before the repair for the search as it was (one way; no counters).

The tasks are a network's fp16 tasks on sm_90a sketches, as ``tune-network`` extracts them
(batch 1, NHWC); every task gets ``--rounds`` rounds of ``--per-round`` picks with the random
cost model, so the time is the search's own (sampling, evolution, the kernel model), not a
model's. CPU seconds of this process (``time.process_time``).

With ``--spread`` it also draws 1,000 states of every tile and split-K sketch of the first
``--spread-tasks`` tasks both ways and prints how many are distinct and the mean log2 of
blocks, threads, accumulators and unrolled code of each way (the distribution the search
starts from).

    PYTHONPATH=<parent of the checkout> python3 bench/search_draws.py mobilenet_v2 \\
        [resnet_v1-18 resnet_v1-50 bert] [--rounds 2] [--per-round 64]
        [--ways default,always,never] [--spread] [--spread-tasks 8]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from ptxforge import autosched
from ptxforge.autosched.evolution import random_population, unique_rows
from ptxforge.autosched.search_policy import DEFAULT_PARAMS
from ptxforge.autosched.steps import TileStep
from ptxforge.graph.zoo import get_network

TARGET = "cuda -arch=sm_90a"
COUNTS = ("drawn", "refused", "repaired", "children", "children_refused", "refills")
WAYS = {"default": None, "always": 1.0, "never": 0.0}
"""The ways to take refused tile draws: ``repair_below`` of the search (default: where
fewer than 1% pass), repaired always, or drawn again always."""


def network_tasks(name: str) -> list:
    net, params, _, _ = get_network(name, 1, "NHWC", "float32")
    return autosched.extract_tasks(net, params, TARGET, precision="float16")[0]


def search_cost(tasks: list, rounds: int, per_round: int, ways: tuple, seed: int) -> dict:
    """``{way: {seconds, sampling, picks, draw counters...}}`` of ``rounds`` rounds per task
    for each way of :data:`WAYS`, the ways taken in turn task by task (so that other work
    on the machine disturbs them alike)."""
    out = {w: {"seconds": 0.0, "sampling": 0.0, "picks": 0, "rounds": 0,
               **dict.fromkeys(COUNTS, 0)} for w in ways}
    for task in tasks:
        task.models  # noqa: B018 - the sketches and their models are made once per task
        for way in ways:
            # (a checkout from before the repair has neither the switch nor the counters)
            params = {"repair_below": WAYS[way]} if "repair_below" in DEFAULT_PARAMS and \
                WAYS[way] is not None else None
            pol = autosched.SketchPolicy(task, autosched.RandomModel(seed=seed), seed=seed,
                                         verbose=0, params=params)
            acc = out[way]
            sample = pol.sample_initial_population

            def timed(n, sample=sample, acc=acc):
                t = time.process_time()
                pop = sample(n)
                acc["sampling"] += time.process_time() - t
                return pop

            pol.sample_initial_population = timed
            for _ in range(rounds):
                t = time.process_time()
                rows = pol.search_one_round(per_round)
                pol.mark_in_flight(rows)
                acc["seconds"] += time.process_time() - t
                acc["picks"] += len(rows)
                acc["rounds"] += 1
            for k, v in getattr(pol, "draw_counts", {}).items():
                acc[k] += v
    return out


def tile_draws(task, s: int, n: int, repair: bool, rng) -> tuple:
    """``(states, draws, CPU seconds)``: ``n`` valid states of sketch ``s`` drawn uniformly,
    kept as drawn (``repair`` off: refused draws dropped until ``n`` pass) or repaired."""
    from ptxforge.autosched.repair import repair_rows

    model = task.models[s]
    width = len(model.sketch.slots)
    one = np.eye(len(task.sketches))[s]
    kept = np.zeros((0, width), dtype=np.int64)
    drawn = 0
    t = time.process_time()
    for _ in range(64):
        want = n - len(kept) if repair else 8 * (n - len(kept)) + 64
        rows = random_population(task, want, rng, one)[:, 1: 1 + width]
        drawn += len(rows)
        r = repair_rows(model, rows, rng, repair_below=1.0 if repair else 0.0)
        kept = np.concatenate([kept, r.rows[r.valid]])[:n]
        if len(kept) >= n:
            break
    return kept, drawn, time.process_time() - t


def spread(tasks: list, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    keys = ("blocks", "threads", "accum", "unrolled_code")
    for way in ("drawn again", "repaired"):
        distinct, total, drawn, spent, sums = 0, 0, 0, 0.0, dict.fromkeys(keys, 0.0)
        for task in tasks:
            for s, sk in enumerate(task.sketches):
                if not any(isinstance(st, TileStep) for st in sk.steps):
                    continue
                rows, d, t = tile_draws(task, s, n, way == "repaired", rng)
                distinct += len(unique_rows(rows))
                total += len(rows)
                drawn += d
                spent += t
                tile = next(k for _, kind, k in task.models[s].step_kernels(rows)
                            if kind == "tile")
                for key in keys:
                    sums[key] += float(np.log2(tile[key]).sum())
        means = ", ".join(f"{k} {v / max(total, 1):.2f}" for k, v in sums.items())
        print(f"  {way}: {distinct} distinct of {total} tile states from {drawn} draws, "
              f"{1e6 * spent / max(total, 1):.1f} us a state; mean log2 {means}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("networks", nargs="+", help="zoo networks: mobilenet_v2, resnet_v1-18, ...")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--per-round", type=int, default=64)
    ap.add_argument("--ways", default="default,always,never",
                    help="refused tile draws repaired where valid ones are rare (default), "
                         "always, or never (drawn again)")
    ap.add_argument("--spread", action="store_true")
    ap.add_argument("--spread-tasks", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    ways = tuple(args.ways.split(","))
    for name in args.networks:
        tasks = network_tasks(name)
        for way, c in search_cost(tasks, args.rounds, args.per_round, ways, args.seed).items():
            drawn, children = max(c["drawn"], 1), max(c["children"], 1)
            print(f"{name} ({len(tasks)} tasks, {c['picks']} picks) {way}: "
                  f"{1e3 * c['seconds'] / max(c['picks'], 1):.2f} ms a pick (CPU), sampling "
                  f"{1e3 * c['sampling'] / max(c['picks'], 1):.2f} of it; "
                  f"{c['drawn'] / c['rounds']:.0f} draws a round, {c['refused'] / drawn:.0%} "
                  f"refused as drawn, {c['repaired'] / drawn:.0%} repaired; children "
                  f"{c['children_refused'] / children:.0%} refused, {c['refills']} refills")
        if args.spread:
            spread(tasks[: args.spread_tasks], 1000, args.seed)


if __name__ == "__main__":
    main()
