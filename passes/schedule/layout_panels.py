"""layout_panels: store the last dimension of a stage's buffer in panels of ``width``
elements, the panel index outermost (a ``[..., K, N]`` buffer is laid out as
``[N / width, ..., K, width]``)."""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.stmt import PrimFunc
from ..params import Ref, positional
from ..registry import register_pass
from .common import ScheduleError, SchedulePass, find_block, on_main
from .compute_at import output_buffer


def layout_panels(func: PrimFunc, stage: str, width: int) -> PrimFunc:
    buf = output_buffer(find_block(func, stage)[-1], "layout_panels")
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ScheduleError(f"layout_panels {stage}: width must be a positive int, got "
                            f"{width!r}")
    if buf in func.params:
        raise ScheduleError(f"layout_panels {stage}: {buf.name} is an argument of the "
                            "function; its layout is fixed by the caller")
    if buf.ndim < 1:
        raise ScheduleError(f"layout_panels {stage}: {buf.name} is a scalar")
    if func.attrs.storage_align.get(buf.name):
        raise ScheduleError(f"layout_panels {stage}: {buf.name} has padded rows "
                            "(storage_align); a panel layout stores its panels unpadded")
    panels = dict(func.attrs.panels)
    panels[buf.name] = int(width)
    return func.replace(attrs=func.attrs.replace(panels=panels))


@register_pass
@dataclass(frozen=True)
class LayoutPanels(SchedulePass):
    """Store the buffer a stage writes with its last dimension cut into panels of
    ``width`` elements, the panel index outermost: element ``[i..., k, n]`` of a
    ``[..., K, N]`` buffer lives at ``[n // width, i..., k, n % width]`` of a ``[N / width,
    ..., K, width]`` one. Applied when ``compact_buffers`` places the buffer (its compacted
    last extent must be a multiple of ``width``).

    This is the canonical layout of an MN-major wgmma operand wider than one swizzle atom
    (a ``[K, N]`` B tile of 128 or 256 fp16 columns as 64-column panels of 128-byte rows,
    the descriptor's leading byte offset apart).

    Parameters:
        stage: the stage whose output buffer is laid out in panels.
        width: elements per panel row.
    """

    name = "layout_panels"
    stage: Ref = positional()
    width: int = positional()

    def apply(self, module, ctx):
        return on_main(module, lambda f: layout_panels(f, self.stage, self.width))
