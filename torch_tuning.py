"""Tuning the graphs of a PyTorch model from an empty (or partial) log, with the CLI's
progress bar: the auto-scheduler's task scheduler over the model's fused functions, as
``python -m ptxforge tune-network`` does for a zoo network."""

from __future__ import annotations

import argparse
import os

from .graph.ir import Graph


def tune_graph(net: Graph, params: dict, trials: int, log: str, *, precision: str = "float32",
               target: str = "cuda", seed: int = 0,
               per_round: int = 64, min_repeat_ms: float = 10.0) -> int:
    """Tune the tasks of ``net`` with ``trials`` trials in all (at least one per task),
    appending to ``log`` (resumed when it exists: earlier trials of these tasks count).
    ``target`` ``"cuda"`` measures on the GPU, ``"sim"`` estimates on the simulator.
    Returns the number of trials measured now."""
    from . import autosched
    from .cli.tune import _tune_network

    tasks, weights = autosched.extract_tasks(net, params, "cuda", precision=precision)
    if not tasks:
        return 0
    if trials < len(tasks):
        raise ValueError(f"trials must be at least the number of tasks ({len(tasks)}), got "
                         f"{trials}")
    resume = os.path.exists(log)
    keys = {t.workload_key for t in tasks}
    earlier = (sum(1 for inp, _ in autosched.load_records(log)
                   if inp.task.workload_key in keys) if resume else 0)
    todo = max(trials - earlier, len(tasks)) if trials > earlier else 0
    if not todo:
        return 0
    runner = "sim" if target == "sim" else "gpu"
    args = argparse.Namespace(log=log, seed=seed, per_round=per_round,
                              min_repeat_ms=min_repeat_ms, sim_check=runner == "sim")
    table = (log[:-5] if log.endswith(".json") else log) + ".tasks.txt"
    _tune_network(args, tasks, weights, runner, todo, resume, table)
    return todo
