"""Row-wise normalizations (layer norm, RMS norm, softmax) as one kernel with a block per
row, each thread reading and writing short vectors of the row.

The stages come as a fused-rows DAG: an output element-wise over rows ``out[..., j]``,
reductions of one axis per row (a layer norm's mean and variance, a softmax's maximum and
sum) and element-wise stages to inline. Each row is a block; its ``cols`` elements are cut
into vectors of :func:`row_lanes` neighbours, and consecutive threads take consecutive
vectors: thread ``t`` of ``T`` reads elements ``[(o T + t) L, (o T + t) L + L)`` for
``o = 0, 1, ...``, which is ``ld.global.v4`` of 16 bytes where a scalar schedule issues four
loads of 4 bytes. The reductions run at the row's block as cross-thread reductions over the
thread loop (warp shuffles, then shared memory above a warp), with the vector loop inside
each thread's serial loop, so every pass over the row reads it the same way (LLVM keeps
the values of the first pass in registers for the later ones where they fit).

A BERT-base layer norm (4,096 rows of 768 float32 in, float16 out) reads 6 vectors of 4
floats per thread of a warp instead of 24 floats, and stores 3 vectors of 8 halves instead
of 24 halves.
"""

from __future__ import annotations

from ...ir import dtype as dt
from ...ir import te
from ...ir.te import Tensor
from ...passes.schedule.schedule import Schedule, create_schedule

VECTOR_BYTES = 16
"""The widest global access of one thread."""
MIN_VECTORS = 32
"""The fewest vectors per row: a warp's worth, so a row still keeps a warp busy."""


def row_lanes(out: Tensor) -> int:
    """Elements per vector for the rows of ``out``: the most (a power of two) whose bytes
    in ``out``'s dtype fit :data:`VECTOR_BYTES`, that divide the row (each vector aligned,
    within its row) and leave at least :data:`MIN_VECTORS` vectors per row; 1 where none
    does (no vectors)."""
    if len(out.shape) < 1:
        return 1
    cols = int(out.shape[-1])
    lanes = max(1, VECTOR_BYTES * 8 // max(8, dt.bits(out.dtype)))
    while lanes > 1 and (cols % lanes or cols // lanes < MIN_VECTORS):
        lanes //= 2
    return lanes


def schedule_rows(out: Tensor, reductions, inlined, threads: int, lanes: int,
                  unroll: bool = False) -> Schedule:
    """The te schedule of a fused-rows DAG (see the module doc): ``inlined`` stages inlined,
    ``out``'s rows on ``blockIdx.x``, vectors of ``lanes`` elements (``vectorize``) taken by
    ``threads`` threads in turn; each of ``reductions`` (consumers first) computed at the
    row's block the same way, reduced across the threads. ``unroll``: unroll each thread's
    loop over its vectors."""
    if len(out.shape) < 2:
        raise ValueError(f"schedule_rows: the output must have rows (2-D or more), got "
                         f"shape {list(out.shape)}")
    cols = int(out.shape[-1])
    if lanes < 1 or cols % lanes:
        raise ValueError(f"schedule_rows: {lanes} lanes do not divide the rows of "
                         f"{cols} elements; use row_lanes(out)")
    if threads < 32 or threads & (threads - 1):
        raise ValueError(f"schedule_rows: threads must be a power of two of whole warps "
                         f"(cross-thread reductions), got {threads}")
    s = create_schedule([out])
    for t in inlined:
        s[t].compute_inline()
    o = s[out]
    *lead, j = o.op.axis
    row = o.fuse(*lead) if len(lead) > 1 else lead[0]
    o.bind(row, te.thread_axis("blockIdx.x"))
    jr, jv = o.split(j, factor=lanes)
    jo, ji = o.split(jr, factor=threads)
    o.bind(ji, te.thread_axis("threadIdx.x"))
    if unroll:
        o.unroll(jo)
    o.vectorize(jv)
    for r in reductions:
        st = s[r]
        st.compute_at(o, row)
        (k,) = st.op.reduce_axis
        kr, kv = st.split(k, factor=lanes)
        ko, ki = st.split(kr, factor=threads)
        # the thread loop outermost (reduced across the threads), then each thread's
        # vectors in turn, the lanes of one vector innermost
        st.reorder(ki, ko, kv)
        st.bind(ki, te.thread_axis("threadIdx.x"))
        if unroll:
            st.unroll(ko)
        st.vectorize(kv)
    return s
