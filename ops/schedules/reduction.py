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
from ...target import Target, as_target
from .. import tag as _tag
from .common import bind_flat, output_stage, threads_for

UNROLL_TAPS = 64
_WINDOW_POOLS = (_tag.POOL_MAX, _tag.POOL_SUM)
POOL_THREADS = 512
"""Threads a block of a windowed pooling (max or average over a window) may take, where
the other flat reductions take 256: a block of one output a thread is short, and the GPU
starts only about 820 of them a microsecond (an H200: ResNet-18 b16's 3 x 3 max pool,
3.2 M outputs, measured 121.8, 61.1, 30.8 and 15.6 us at 32, 64, 128 and 256 threads a
block, 9.7 at 512, 12.5 at 1,024); at batch 1, one wave of 784 blocks of 256, 256 and
512 tie (1.50 us)."""


def _cap(op: ComputeOp, n: int, target) -> int:
    """The most threads a block of the flat reduction ``op`` of ``n`` outputs takes: 256,
    or :data:`POOL_THREADS` for a windowed pooling whose 256-thread blocks would not all be
    resident at once (more than one wave: the rate blocks start at then bounds it)."""
    if op.tag.split(",")[0] not in _WINDOW_POOLS:
        return 256
    t = as_target(target)
    resident = t.num_sms * (t.max_threads_per_sm // 256)
    return POOL_THREADS if -(-n // 256) > resident else 256


def schedule_reduce(s: Schedule, op: ComputeOp, epilogue: ComputeOp | None = None,
                    target: Target | str | None = None) -> None:
    """Schedule reduction ``op`` one output per thread (its ``epilogue`` fused)."""
    if not op.axis:
        # a reduction to a scalar: one thread does it all, which is valid on any GPU
        return
    out, acc = output_stage(s, op, epilogue)
    n = int(np.prod([int(a.extent) for a in op.axis], dtype=np.int64))
    thread_loop = bind_flat(out, threads_for(n, target, _cap(op, n, target)))
    acc.compute_at(out, thread_loop)
    taps = int(np.prod([int(a.extent) for a in op.reduce_axis], dtype=np.int64))
    if taps <= UNROLL_TAPS:
        acc.pragma(acc.op.reduce_axis[0], "auto_unroll_max_step", UNROLL_TAPS)
