"""unroll: mark a loop to be unrolld by code generation."""

from __future__ import annotations

from dataclasses import dataclass

from ..params import Ref, positional
from ..registry import register_pass
from .annotate import set_loop
from .common import SchedulePass, on_main


@register_pass
@dataclass(frozen=True)
class Unroll(SchedulePass):
    """Mark a loop unroll.

    Parameters:
        loop: the loop, ``<stage>.<loop>``.
    """

    name = "unroll"
    loop: Ref = positional()

    def apply(self, module, ctx):
        return on_main(module, lambda f: set_loop(f, self.loop, "unroll", what="unroll"))
