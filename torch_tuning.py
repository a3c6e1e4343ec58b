"""Tuning the graphs of a PyTorch model from an empty (or partial) log, with the command
line's progress bar: the auto-scheduler's task scheduler over the model's fused functions
(:mod:`ptxforge.autosched.network_tuning`, which ``ptxforge tune-network`` runs too)."""

from __future__ import annotations

from .graph.ir import Graph


def tune_graph(net: Graph, params: dict, trials: int, log: str, *, precision: str = "float32",
               target: str = "cuda", seed: int = 0,
               per_round: int = 64, min_repeat_ms: float = 10.0,
               fused_attention: bool | None = None) -> int:
    """Tune the tasks of ``net`` with ``trials`` trials in all (at least one per task),
    appending to ``log`` (resumed when it exists: earlier trials of these tasks count).
    ``target`` ``"cuda"`` measures on the GPU, ``"sim"`` estimates on the simulator.
    ``fused_attention``: the tasks of a build with that option (True: each attention the
    fused kernel can run is one task, searched over the kernel's configurations).
    Returns the number of trials measured now."""
    from .autosched.network_tuning import plan_trials, tune_network

    tasks, weights = _extract(net, params, precision, fused_attention)
    if not tasks:
        return 0
    plan = plan_trials(tasks, log, trials)
    if not plan.todo:
        return 0
    runner = "sim" if str(target).split()[0] == "sim" else "gpu"
    run = tune_network(tasks, weights, log, plan.todo, runner=runner, resume=plan.resume,
                       seed=seed, per_round=per_round, min_repeat_ms=min_repeat_ms,
                       sim_check=runner == "sim")
    print(run.report())
    return plan.todo


def _extract(net: Graph, params: dict, precision: str, fused_attention: bool | None):
    """The search tasks of ``net`` as ``graph.build`` compiles it with ``fused_attention``
    (the graph pass config key of :mod:`ptxforge.graph.opdefs.attention`, for this call;
    None: the build's default)."""
    from .autosched import extract_tasks

    if fused_attention is None:
        return extract_tasks(net, params, "cuda", precision=precision)
    from .graph.opdefs.attention import FUSED_OPTION
    from .graph.passes.base import GraphPassContext

    outer = GraphPassContext.current()
    config = {**outer.config, FUSED_OPTION: bool(fused_attention)}
    if not outer.active:
        # no context entered: current() would make a new one per call, so enter one
        with GraphPassContext(config=config):
            return extract_tasks(net, params, "cuda", precision=precision)
    before = outer.config
    outer.config = config
    try:
        return extract_tasks(net, params, "cuda", precision=precision)
    finally:
        outer.config = before
