"""persistent: run a kernel's output tiles in persistent blocks, ``blocks_per_sm`` blocks
an SM, each looping over tiles ``t = blockIdx.x, blockIdx.x + gridDim.x, ...`` (lowered by
:mod:`ptxforge.passes.lower.persistent_tiles` in ``split_host_device``)."""

from __future__ import annotations

from dataclasses import dataclass

from ..params import Ref, positional
from ..registry import register_pass
from .annotate import set_loop
from .common import ScheduleError, SchedulePass, on_main

ANNOTATION = "persistent"
"""The annotation on a block loop: blocks per SM of the persistent grid."""

MAX_BLOCKS_PER_SM = 4
"""The most persistent blocks an SM may be asked to hold."""


@register_pass
@dataclass(frozen=True)
class Persistent(SchedulePass):
    """Make the kernel of a stage persistent: its grid becomes ``min(tiles, SMs x
    blocks_per_sm)`` blocks, each running the tiles of the original grid (every block
    loop, x fastest, as the hardware orders them) one after another, with the launch bound
    ``.minnctapersm blocks_per_sm``.

    Parameters:
        loop: one of the stage's loops bound to ``blockIdx.x/y/z`` (``<stage>.<loop>``).
        blocks_per_sm: persistent blocks an SM holds at once (1 to 4).
    """

    name = "persistent"
    loop: Ref = positional()
    blocks_per_sm: int = positional()

    def apply(self, module, ctx):
        n = self.blocks_per_sm
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_BLOCKS_PER_SM:
            raise ScheduleError(f"persistent {self.loop}: blocks_per_sm is an int from 1 to "
                                f"{MAX_BLOCKS_PER_SM}, got {n!r}")
        return on_main(module, lambda f: set_loop(f, self.loop, None,
                                                  annotations={ANNOTATION: n}))


__all__ = ["ANNOTATION", "MAX_BLOCKS_PER_SM", "Persistent"]
