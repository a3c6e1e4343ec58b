"""launch_bounds: ask that ``min_blocks_per_sm`` blocks of a kernel fit on one SM at once
(the PTX directive ``.minnctapersm``; ``split_host_device`` puts it in the kernel's
:class:`~ptxforge.ir.attrs.KernelAttrs`), so the register allocator keeps each thread
within ``registers_per_sm / (min_blocks_per_sm x threads)``."""

from __future__ import annotations

from dataclasses import dataclass

from ..params import Ref, positional
from ..registry import register_pass
from .annotate import set_loop
from .common import ScheduleError, SchedulePass, on_main

ANNOTATION = "min_blocks_per_sm"
"""The annotation on any loop of a kernel that sets its launch bound."""


@register_pass
@dataclass(frozen=True)
class LaunchBounds(SchedulePass):
    """Set the launch bound of the kernel holding a loop.

    Parameters:
        loop: a loop of the kernel, ``<stage>.<loop>`` (its block loop, by convention).
        min_blocks_per_sm: blocks that must fit on one SM at once (at least 1).
    """

    name = "launch_bounds"
    loop: Ref = positional()
    min_blocks_per_sm: int = positional()

    def apply(self, module, ctx):
        n = self.min_blocks_per_sm
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ScheduleError(f"launch_bounds {self.loop}: min_blocks_per_sm is a positive "
                                f"int, got {n!r}")
        return on_main(module, lambda f: set_loop(f, self.loop, None,
                                                  annotations={ANNOTATION: n}))


__all__ = ["ANNOTATION", "LaunchBounds"]
