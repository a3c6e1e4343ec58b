"""Tuning the graphs of a PyTorch model from an empty (or partial) log, with the command
line's progress bar: the auto-scheduler's task scheduler over the model's fused functions
(:mod:`ptxforge.autosched.network_tuning`, which ``ptxforge tune-network`` runs too)."""

from __future__ import annotations

from .graph.ir import Graph


def tune_graph(net: Graph, params: dict, trials: int, log: str, *, precision: str = "float32",
               target: str = "cuda", seed: int = 0,
               per_round: int = 64, min_repeat_ms: float = 10.0) -> int:
    """Tune the tasks of ``net`` with ``trials`` trials in all (at least one per task),
    appending to ``log`` (resumed when it exists: earlier trials of these tasks count).
    ``target`` ``"cuda"`` measures on the GPU, ``"sim"`` estimates on the simulator.
    Returns the number of trials measured now."""
    from .autosched import extract_tasks
    from .autosched.network_tuning import plan_trials, tune_network

    tasks, weights = extract_tasks(net, params, "cuda", precision=precision)
    if not tasks:
        return 0
    plan = plan_trials(tasks, log, trials)
    if not plan.todo:
        return 0
    runner = "sim" if target == "sim" else "gpu"
    run = tune_network(tasks, weights, log, plan.todo, runner=runner, resume=plan.resume,
                       seed=seed, per_round=per_round, min_repeat_ms=min_repeat_ms,
                       sim_check=runner == "sim")
    print(run.report())
    return plan.todo
