"""Search tasks of a whole network: ``extract_tasks``, as TVM's
``auto_scheduler.extract_tasks`` does for a Relay module.

The network is optimized and fused exactly as :func:`ptxforge.graph.build` will compile it
(same ``layout``, ``winograd``, ``precision`` and ``pad_channels`` options), and every
distinct fused function becomes one :class:`~ptxforge.autosched.search_task.SearchTask`,
weighted by how often the network calls it. The functions are registered in the workload
registry under their DAG hash, so ``SearchTask(workload_key=...)`` rebuilds a task from its
key alone (as record files and the cost model's ``update_from_file`` do), and records
written under these keys are the ones :class:`~ptxforge.autosched.dispatch.ApplyHistoryBest`
finds when the network is built.

The graph layer stands above the tuners, so this module does not import it: it reads the
network through :func:`ptxforge.network_reader.read_network`, which the graph package fills
when imported.
"""

from __future__ import annotations

from ..network_reader import read_network
from ..target import Target
from .hardware import HardwareParams
from .search_task import SearchTask


def extract_tasks(net, params: dict | None = None, target: Target | str = "cuda",
                  layout: str | None = None,
                  winograd: bool = False, hardware_params: HardwareParams | None = None,
                  include_simple_tasks: bool = True, precision: str | None = None,
                  pad_channels: int | None = None) -> tuple[list[SearchTask], list[int]]:
    """The search tasks of a network and their weights.

    Args:
        net: the network (a :class:`ptxforge.graph.Graph`).
        params: its weights by parameter name.
        target: a string (``"cuda"``, ``"cuda -arch=sm_80"``, ``"sim"``) or a
            :class:`~ptxforge.target.Target`; records are written for ``cuda`` for the
            simulator too.
        layout: ``"NHWC"`` converts NCHW convolutions first (None: as
            :func:`ptxforge.graph.build` decides for the precision); give
            :func:`ptxforge.graph.build` the same value.
        winograd: Winograd convolutions; give :func:`ptxforge.graph.build` the same value.
        hardware_params: the GPU the search models (default: the target's figures,
            :meth:`HardwareParams.from_target`).
        include_simple_tasks: also make tasks of functions without any reduction (purely
            element-wise or injective, such as a lone ``multiply + add + relu``). TVM leaves
            them out by default; here they are kept, because at batch 1 their memory
            traffic is a visible share of the network's time and their search spaces are
            small.
        precision: ``"float32"``, ``"tf32"``, ``"float16"`` or ``"bfloat16"``; give
            :func:`ptxforge.graph.build` the same value. The dtypes (and the TF32
            rounding) are part of each task's workload key, so the records of one
            precision are never applied to another.
        pad_channels: the channel multiple of the tensor-core convolutions' inputs (a
            3-channel stem padded to 4 or 8); give :func:`ptxforge.graph.build` the same
            value (None: its default, 4).

    Returns:
        ``(tasks, task_weights)``: one task per distinct fused function, in the order of
        the network's first call of it, described by the function's name
        (``task.desc``); the weight of a task is the number of calls, so the network's
        latency is about ``sum(latency[t] * weight[t])``.
    """
    tasks: list[SearchTask] = []
    weights: list[int] = []
    for func in read_network(net, params, layout=layout, winograd=winograd,
                             precision=precision, pad_channels=pad_channels):
        if not include_simple_tasks and not _has_reduction(func):
            continue
        key = func.register_workload()
        tasks.append(SearchTask(workload_key=key, target=target,
                                hardware_params=hardware_params, desc=func.name))
        weights.append(func.count)
    return tasks, weights


def _has_reduction(func) -> bool:
    return any(getattr(op, "reduce_axis", None) for op in func.compute_dag.ops)


__all__ = ["extract_tasks"]
