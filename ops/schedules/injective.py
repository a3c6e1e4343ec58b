"""The GPU schedule of injective stages (element-wise, broadcast, layout, padding) that
are not inlined: all axes fused, one element per thread, 256 threads per block (fewer for
small tensors, so that more SMs get a block)."""

from __future__ import annotations

import numpy as np

from ...ir.te import ComputeOp
from ...passes.schedule.schedule import Schedule
from ...target import Target
from .common import bind_flat, threads_for


def schedule_injective(s: Schedule, op: ComputeOp, epilogue: ComputeOp | None = None,
                       target: Target | str | None = None) -> None:
    """Schedule the injective stage ``op`` flat over its elements (``epilogue`` must be
    None: injective stages have none)."""
    if epilogue is not None:
        raise ValueError(f"schedule_injective: stage {op.name} has no epilogue to fuse, got "
                         f"{epilogue.name}")
    if not op.axis:
        return
    n = int(np.prod([int(a.extent) for a in op.axis], dtype=np.int64))
    bind_flat(s[op], threads_for(n, target))
