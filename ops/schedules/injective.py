"""The GPU schedule of injective stages (element-wise, broadcast, layout, padding, gathers)
that are not inlined: all axes fused, 256 threads per block (fewer for small tensors, so
that more SMs get a block), and each thread computing a short vector of neighbouring
elements of the output's last axis where its extent allows (:func:`vector_lanes`): the
loads and stores of consecutive threads then touch consecutive 16-byte pieces of a row
(``ld/st.global.v4``), where one element per thread moves 4 bytes per instruction. An
embedding lookup reads each gathered row that way: the row index is one load per vector,
and the row's elements are contiguous in the table."""

from __future__ import annotations

import numpy as np

from ...ir import dtype as dt
from ...ir import te
from ...ir.te import ComputeOp
from ...passes.schedule.schedule import Schedule
from ...target import Target, as_target
from .common import bind_flat, threads_for

VECTOR_BYTES = 16
"""The widest global load or store of one thread (``ld.global.v4.b32``)."""


def vector_lanes(op: ComputeOp, target: Target | str | None = None) -> int:
    """Elements per thread of the flat schedule of ``op``: the most (a power of two) whose
    bytes in the output's dtype fit :data:`VECTOR_BYTES`, that divide the output's last
    extent (every thread's vector lies in one row at an aligned offset) and that leave a
    warp of vectors for every SM of ``target`` (a small tensor keeps its parallelism);
    1 for a tuple compute, a 0-d output or an odd last extent."""
    if op.num_outputs != 1 or not op.axis:
        return 1
    last = int(op.axis[-1].extent)
    n = int(np.prod([int(a.extent) for a in op.axis], dtype=np.int64))
    enough = 32 * as_target(target).num_sms
    lanes = max(1, VECTOR_BYTES * 8 // max(8, dt.bits(op.output(0).dtype)))
    while lanes > 1 and (last % lanes or n // lanes < enough):
        lanes //= 2
    return lanes


def schedule_injective(s: Schedule, op: ComputeOp, epilogue: ComputeOp | None = None,
                       target: Target | str | None = None) -> None:
    """Schedule the injective stage ``op`` flat over its elements, :func:`vector_lanes`
    consecutive elements per thread (``epilogue`` must be None: injective stages have
    none)."""
    if epilogue is not None:
        raise ValueError(f"schedule_injective: stage {op.name} has no epilogue to fuse, got "
                         f"{epilogue.name}")
    if not op.axis:
        return
    n = int(np.prod([int(a.extent) for a in op.axis], dtype=np.int64))
    lanes = vector_lanes(op, target)
    if lanes == 1:
        bind_flat(s[op], threads_for(n, target))
        return
    st = s[op]
    axes = list(st.op.axis)
    fused = st.fuse(*axes) if len(axes) > 1 else axes[0]
    rest, vec = st.split(fused, factor=lanes)
    outer, inner = st.split(rest, factor=threads_for(n // lanes, target))
    st.bind(outer, te.thread_axis("blockIdx.x"))
    st.bind(inner, te.thread_axis("threadIdx.x"))
    st.vectorize(vec)
