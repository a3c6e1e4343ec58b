"""The schedule whose results the runners trust when they check a candidate.

The unscheduled module would run every stage in one GPU thread, far too slow for real
layers. The default reference instead gives every stage its own kernel with one thread per
output element (the spatial loops fused, split by the block size and bound to
``blockIdx.x`` / ``threadIdx.x``) and keeps the reductions as plain serial loops: simple
enough to trust, fast enough to run once per task.
"""

from __future__ import annotations

from .result import TaskSpec

THREADS = 256


def default_reference_pipeline(module, threads: int = THREADS) -> str:
    """Pass text of the one-thread-per-output schedule of an unscheduled module."""
    from ..passes.schedule.common import block_paths, enclosing_loops

    out = []
    for name, path in block_paths(module.main.body).items():
        block = path[-1]
        loops = enclosing_loops(path)
        n_spatial = sum(1 for iv in block.iter_vars if iv.kind == "S")
        spatial = loops[:n_spatial]
        if not spatial:
            raise ValueError(
                f"stage {name} has no spatial loop to spread over threads; give the task a "
                "reference_pipeline for correctness checks")
        extent = 1
        for loop in spatial:
            extent *= loop.extent
        if len(spatial) > 1:
            out.append(f"fuse([{', '.join(f'{name}.{lp.var.name}' for lp in spatial)}])")
            fused = ".".join(lp.var.name for lp in spatial) + ".fused"
        else:
            fused = spatial[0].var.name
        out.append(f"split({name}.{fused}, factors=[{min(threads, extent)}])")
        out.append(f'bind({name}.{fused}.outer, "blockIdx.x")')
        out.append(f'bind({name}.{fused}.inner, "threadIdx.x")')
    return ", ".join(out)


def reference_pipeline(task: TaskSpec) -> str:
    """The task's own reference schedule, or the default one."""
    if task.reference_pipeline.strip():
        return task.reference_pipeline
    return default_reference_pipeline(task.module())
