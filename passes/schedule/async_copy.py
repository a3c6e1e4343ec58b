"""async_copy: fill a shared-memory stage with cp.async (global -> shared, no registers)."""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.stmt import PrimFunc
from ..params import Ref, positional
from ..registry import register_pass
from .common import ScheduleError, SchedulePass, find_block, on_main
from .compute_at import output_buffer


def async_copy(func: PrimFunc, stage: str) -> PrimFunc:
    path = find_block(func, stage)
    buf = output_buffer(path[-1], "async_copy")
    if buf.scope != "shared":
        raise ScheduleError(
            f"async_copy {stage}: the stage writes {buf.name} in {buf.scope} memory; cp.async "
            "fills shared memory (use it on a cache_read(..., \"shared\") stage)")
    names = set(func.attrs.async_copy) | {buf.name}
    return func.replace(attrs=func.attrs.replace(async_copy=tuple(names)))


@register_pass
@dataclass(frozen=True)
class AsyncCopy(SchedulePass):
    """Copy a shared-memory stage from global memory with ``cp.async`` (sm_80 and later).

    Lowering (``inject_async_copy``) turns the stage's stores into copies of 16 bytes where
    the innermost loop of the copy, the alignment and the dtype allow (else 8 or 4 bytes),
    zero-fills where the copied value is a padding ``select``, and commits and waits for
    the copies before their first reader; ``software_pipeline`` overlaps them with the
    computation of earlier tiles instead.

    Parameters:
        stage: the shared-memory stage (from ``cache_read``) whose stores become copies.
    """

    name = "async_copy"
    stage: Ref = positional()

    def apply(self, module, ctx):
        return on_main(module, lambda f: async_copy(f, self.stage))
