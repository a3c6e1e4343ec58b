"""The schedule whose results the runners trust when they check a candidate.

The unscheduled module would run every stage in one GPU thread, far too slow for real
layers. The default reference instead gives every stage its own kernel with one thread per
output element (the spatial loops fused, split by the block size and bound to
``blockIdx.x`` / ``threadIdx.x``) and keeps the reductions as plain serial loops: simple
enough to trust, fast enough to run once per task.
"""

from __future__ import annotations

from ..passes.pipeline import Pipeline
from .result import TaskSpec

THREADS = 256


def default_reference_pipeline(module, threads: int = THREADS) -> Pipeline:
    """The one-thread-per-output schedule of an unscheduled module."""
    from ..ir.traversal import block_paths, enclosing_loops
    from ..passes.schedule import Bind, Fuse, Split
    from ..passes.schedule.names import fused_name, loop_ref, split_inner, split_outer

    out = []
    for name, path in block_paths(module.main.body).items():
        block = path[-1]
        loops = enclosing_loops(path)
        n_spatial = sum(1 for iv in block.iter_vars if iv.kind == "S")
        spatial = [lp.var.name for lp in loops[:n_spatial]]
        if not spatial:
            raise ValueError(
                f"stage {name} has no spatial loop to spread over threads; give the task a "
                "reference_pipeline_text for correctness checks")
        extent = 1
        for loop in loops[:n_spatial]:
            extent *= loop.extent
        if len(spatial) > 1:
            out.append(Fuse(tuple(loop_ref(name, x) for x in spatial)))
        fused = fused_name(spatial)
        out.append(Split(loop_ref(name, fused), factors=(min(threads, extent),)))
        out.append(Bind(loop_ref(name, split_outer(fused)), "blockIdx.x"))
        out.append(Bind(loop_ref(name, split_inner(fused)), "threadIdx.x"))
    return Pipeline(out)


def reference_pipeline(task: TaskSpec) -> Pipeline:
    """The task's own reference schedule (``reference_pipeline_text``), or the default one."""
    if task.reference_pipeline_text.strip():
        return Pipeline.parse(task.reference_pipeline_text)
    return default_reference_pipeline(task.module())
