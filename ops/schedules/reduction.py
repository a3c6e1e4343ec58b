"""The GPU schedule of plain reductions: pooling, global pooling, ``sum`` / ``max`` /
``min`` / ``mean`` and softmax's max and sum stages.

These reductions have no reuse between output elements worth staging in shared memory,
so they run one output element per thread: the output stage (the element-wise epilogue
when there is one, such as average pooling's division, else the copy stage of a local
``cache_write``) has its axes fused, split by the block size and bound to blockIdx.x /
threadIdx.x; the reduction accumulates in a register at the thread loop. Small windows
(up to 64 taps) are unrolled.
"""

from __future__ import annotations

import numpy as np

from ...ir.te import ComputeOp
from ...passes.schedule.schedule import Schedule
from ...target import Target
from .common import bind_flat, output_stage, threads_for

UNROLL_TAPS = 64


def schedule_reduce(s: Schedule, op: ComputeOp, epilogue: ComputeOp | None = None,
                    target: Target | str | None = None) -> None:
    """Schedule reduction ``op`` one output per thread (its ``epilogue`` fused)."""
    if not op.axis:
        # a reduction to a scalar: one thread does it all, which is valid on any GPU
        return
    out, acc = output_stage(s, op, epilogue)
    n = int(np.prod([int(a.extent) for a in op.axis], dtype=np.int64))
    thread_loop = bind_flat(out, threads_for(n, target))
    acc.compute_at(out, thread_loop)
    taps = int(np.prod([int(a.extent) for a in op.reduce_axis], dtype=np.int64))
    if taps <= UNROLL_TAPS:
        acc.pragma(acc.op.reduce_axis[0], "auto_unroll_max_step", UNROLL_TAPS)
