"""A GPU schedule for reductions with few outputs and long rows (the statistics of group and
instance normalization: a handful of (sample, group) sums over tens of thousands of
elements), where one output per thread (:func:`~.reduction.schedule_reduce`) would leave
the GPU nearly idle: one block per output element, its threads striding over the row
(coalesced), their partial sums combined across the block by ``cross_thread_reduction``
(warp shuffles, then one value per warp through shared memory).

Used for rows of at least :data:`MIN_ROW` elements; shorter rows, and a reduction with a
fused element-wise epilogue, keep the one-output-per-thread schedule.
"""

from __future__ import annotations

from ...ir import te
from ...ir.te import ComputeOp
from ...passes.schedule.schedule import Schedule
from ...target import Target
from .reduction import schedule_reduce

MIN_ROW = 256
"""The shortest row that gets a block of its own."""
MAX_THREADS = 256


def block_threads(row: int) -> int:
    """Threads per block for a row of ``row`` elements: a power of two (warp shuffles),
    whole warps, at most :data:`MAX_THREADS`."""
    n = 32
    while n < MAX_THREADS and n < row:
        n *= 2
    return n


def schedule_block_reduce(s: Schedule, op: ComputeOp, epilogue: ComputeOp | None = None,
                          target: Target | str | None = None) -> None:
    """One block per output element of reduction ``op``, its threads sharing the row."""
    row = 1
    for a in op.reduce_axis:
        row *= int(a.extent)
    if epilogue is not None or not op.axis or row < MIN_ROW:
        return schedule_reduce(s, op, epilogue, target=target)
    st = s[op]
    axes = list(st.op.axis)
    reduce = list(st.op.reduce_axis)
    outer = st.fuse(*axes) if len(axes) > 1 else axes[0]
    flat = st.fuse(*reduce) if len(reduce) > 1 else reduce[0]
    steps, lanes = st.split(flat, factor=block_threads(row))
    # the thread loop outside the serial one: each thread strides over the row, and
    # consecutive threads read consecutive elements
    st.reorder(outer, lanes, steps)
    st.bind(outer, te.thread_axis("blockIdx.x"))
    st.bind(lanes, te.thread_axis("threadIdx.x"))
