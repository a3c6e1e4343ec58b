"""swizzle: XOR-permute the 16-byte chunks of a shared-memory stage's buffer so that
threads reading a column of chunks (ldmatrix, row-wise vector reads) hit distinct banks."""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.stmt import PrimFunc
from ..params import Ref, positional
from ..registry import register_pass
from .common import ScheduleError, SchedulePass, find_block, on_main
from .compute_at import output_buffer

MAX_BITS = 3
"""Eight 16-byte chunks make a 128-byte line, all 32 banks."""


def swizzle(func: PrimFunc, stage: str, bits: int) -> PrimFunc:
    if not 1 <= bits <= MAX_BITS:
        raise ScheduleError(f"swizzle {stage}: bits={bits}; use 1 to {MAX_BITS} (a group of "
                            f"2**bits 16-byte chunks, at most a 128-byte line)")
    buf = output_buffer(find_block(func, stage)[-1], "swizzle")
    if buf.scope != "shared":
        raise ScheduleError(f"swizzle {stage}: the stage writes {buf.name} in {buf.scope} "
                            "memory; swizzling spreads shared-memory banks")
    table = dict(func.attrs.swizzle)
    table[buf.name] = int(bits)
    return func.replace(attrs=func.attrs.replace(swizzle=table))


@register_pass
@dataclass(frozen=True)
class Swizzle(SchedulePass):
    """XOR swizzle of a shared stage's layout, applied to every access by lowering
    (``swizzle_layout``, after the buffer is flat).

    The flat buffer is cut into 16-byte chunks, grouped by ``2**bits``; within group ``g``
    chunk ``c`` is stored at chunk ``c XOR (g mod 2**bits)``. Elements keep their place
    inside a chunk, so 16-byte copies and vector accesses stay whole. With ``bits=3`` and
    rows of 128 bytes (64 fp16), row ``r``'s chunk ``c`` goes to ``c XOR (r mod 8)``: the
    eight rows an ldmatrix reads in one column of chunks fall on eight different bank groups.

    Parameters:
        stage: the shared-memory stage (a ``cache_read(..., "shared")``).
        bits: 1 to 3; the buffer's size in bytes must be a multiple of ``16 * 2**bits``.
    """

    name = "swizzle"
    stage: Ref = positional()
    bits: int = positional()

    def apply(self, module, ctx):
        return on_main(module, lambda f: swizzle(f, self.stage, self.bits))
