"""storage_align: pad a stage's buffer so one dimension's stride is ``k * factor + offset``
(typically to spread shared-memory accesses over banks)."""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.stmt import PrimFunc
from ..params import Ref, positional
from ..registry import register_pass
from .common import ScheduleError, SchedulePass, find_block, on_main
from .compute_at import output_buffer


def aligned_strides(shape, aligns) -> tuple:
    """Row-major strides with ``stride[axis] % factor == offset`` for each (axis, factor,
    offset) in ``aligns``."""
    by_axis = {int(a): (int(f), int(o)) for a, f, o in aligns}
    strides = [0] * len(shape)
    acc = 1
    for d in range(len(shape) - 1, -1, -1):
        if d in by_axis:
            f, o = by_axis[d]
            acc = acc + (o - acc % f) % f
        strides[d] = acc
        acc *= shape[d]
    return tuple(strides)


def storage_align(func: PrimFunc, stage: str, axis: int, factor: int, offset: int) -> PrimFunc:
    path = find_block(func, stage)
    buf = output_buffer(path[-1], "storage_align")
    if not 0 <= axis < buf.ndim:
        raise ScheduleError(f"storage_align {stage}: axis {axis} out of range for "
                            f"{buf.ndim}-d buffer {buf.name}")
    if factor < 1 or not 0 <= offset < factor:
        raise ScheduleError(f"storage_align {stage}: need factor >= 1 and 0 <= offset < factor, "
                            f"got factor={factor}, offset={offset}")
    if buf in func.params:
        raise ScheduleError(f"storage_align {stage}: {buf.name} is an argument of the function; "
                            "its layout is fixed by the caller")
    if buf.name in func.attrs.panels:
        raise ScheduleError(f"storage_align {stage}: {buf.name} is stored in panels "
                            "(layout_panels), which are not padded")
    aligns = dict(func.attrs.storage_align)
    entry = [x for x in aligns.get(buf.name, ()) if x[0] != axis]
    entry.append((axis, factor, offset))
    aligns[buf.name] = tuple(sorted(entry))
    return func.replace(attrs=func.attrs.replace(storage_align=aligns))


@register_pass
@dataclass(frozen=True)
class StorageAlign(SchedulePass):
    """Pad the buffer a stage writes so that the stride of dimension ``axis`` is
    ``k * factor + offset``; applied when the buffer is allocated (compact_buffers).

    Parameters:
        stage: the stage whose output buffer is aligned.
        axis: the dimension.
        factor: the alignment factor.
        offset: the offset.
    """

    name = "storage_align"
    stage: Ref = positional()
    axis: int = positional()
    factor: int = positional()
    offset: int = positional()

    def apply(self, module, ctx):
        return on_main(module, lambda f: storage_align(f, self.stage, self.axis, self.factor,
                                                       self.offset))
