"""Collect cost-model training data without a GPU: candidates of a network's tasks, their
times estimated by the simulator runner's analytical model of the lowered kernels
(``measure/estimate.py``), written as ordinary auto-scheduler records.

    python3 bench/cost_model_data.py resnet_v1-18 --tasks 6 --trials 160 \
        -o bench/results/costmodel_resnet_v1-18_sim.json

The candidates are drawn by the search with a random cost model (evolved, then picked at
random), so a record file covers good and bad states of every sketch. The estimate of a
lowered kernel is not the search's own analytical estimate (that one works from the slot
values alone), so a cost model has something to learn: see ``bench/cost_model_rank.py``.
"""

from __future__ import annotations

import argparse
import time

from ptxforge import autosched, graph, measure


def network_tasks(name: str, dtype: str, layout: str = "NHWC", batch: int = 1) -> tuple:
    """``(tasks, weights)`` of a zoo network (registers its workloads in this process)."""
    net, params, _, _ = graph.get_network(name, batch, layout)
    return autosched.extract_tasks(net, params, "cuda", precision=dtype)


def heaviest(tasks, weights, k: int) -> list:
    """Indices of the ``k`` tasks with the most flop (times weight) that have a choice of
    more than one sketch or a tile sketch (a search matters there)."""
    order = sorted(range(len(tasks)), key=lambda i: -tasks[i].flop_ct * weights[i])
    return [i for i in order if tasks[i].flop_ct > 1e6][:k]


def collect(name: str, dtype: str, n_tasks: int, trials: int, out: str, seed: int) -> None:
    tasks, weights = network_tasks(name, dtype)
    picked = heaviest(tasks, weights, n_tasks)
    builder = measure.LocalBuilder(n_parallel=1, compile_to="ir")
    runner = measure.SimRunner(check_correctness=False)
    try:
        for i in picked:
            task = tasks[i]
            t0 = time.perf_counter()
            policy = autosched.SketchPolicy(
                task, autosched.RandomModel(seed=seed + i), seed=seed + i, verbose=0,
                params={"evolutionary_search_population": 256,
                        "evolutionary_search_num_iters": 1})
            opts = autosched.TuningOptions(
                num_measure_trials=trials, num_measures_per_round=32, builder=builder,
                runner=runner, verbose=0, measure_callbacks=[autosched.RecordToFile(out)])
            summary = task.tune(opts, search_policy=policy)
            print(f"{name} task {i} ({task.desc}, {[s.name for s in task.sketches]}): "
                  f"{summary.trials} trials, {summary.errors} errors, "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
    finally:
        builder.close()
        runner.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("network")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--tasks", type=int, default=6)
    ap.add_argument("--trials", type=int, default=160)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()
    collect(a.network, a.dtype, a.tasks, a.trials, a.output, a.seed)


if __name__ == "__main__":
    main()
