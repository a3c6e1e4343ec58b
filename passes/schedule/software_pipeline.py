"""software_pipeline: overlap the loads of the shared-memory stages of a loop's next
iterations with this iteration's computation (multi-buffered shared memory)."""

from __future__ import annotations

from dataclasses import dataclass

from ..params import Ref, positional
from ..registry import register_pass
from .annotate import set_loop
from .common import ScheduleError, SchedulePass, find_loop, on_main

ANNOTATION = "software_pipeline"
"""Loop annotation: the number of pipeline stages (shared-memory buffers per stage)."""

MIN_STAGES, MAX_STAGES = 2, 5


def software_pipeline(func, loop: str, stages: int):
    if not MIN_STAGES <= stages <= MAX_STAGES:
        raise ScheduleError(f"software_pipeline {loop}: stages={stages}; use "
                            f"{MIN_STAGES} to {MAX_STAGES}")
    path, _ = find_loop(func, loop)
    node = path[-1]
    if node.kind not in ("serial", "unroll"):
        raise ScheduleError(f"software_pipeline {loop}: the loop is {node.kind}; only a "
                            "sequential loop (the reduction loop the shared stages are "
                            "loaded in) can be pipelined")
    func = set_loop(func, loop, None, annotations={ANNOTATION: int(stages)})
    # a function attribute too, so lowering looks for pipelined loops only where there are
    return func.replace(attrs=func.attrs.replace(software_pipeline=True))


@register_pass
@dataclass(frozen=True)
class SoftwarePipeline(SchedulePass):
    """Pipeline a loop whose body loads shared-memory stages, then computes from them.

    Lowering (``inject_software_pipeline``) gives each stage loaded in the loop ``stages``
    buffers, issues the loads of the first ``stages - 1`` iterations before the loop, and
    in iteration ``i`` waits for iteration ``i``'s loads (``async_wait(stages - 2)`` for
    cp.async copies), synchronizes the block once, issues the loads of iteration
    ``i + stages - 1`` (guarded at the tail) and computes iteration ``i``. With
    ``async_copy`` stages the copies run while the block computes; with plain shared
    stages the loads still leave the critical path less than a barrier pair per iteration.

    Parameters:
        loop: the loop, ``<stage>.<loop>`` (typically the outer reduction loop that the
            shared stages were ``compute_at``'ed into).
        stages: buffers per shared stage, 2 to 5.
    """

    name = "software_pipeline"
    loop: Ref = positional()
    stages: int = positional()

    def apply(self, module, ctx):
        return on_main(module, lambda f: software_pipeline(f, self.loop, self.stages))


__all__ = ["ANNOTATION", "SoftwarePipeline", "software_pipeline", "find_loop"]
