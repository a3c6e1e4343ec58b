"""pragma: annotate a loop (``auto_unroll_max_step``, ``unroll_explicit``,
``wgmma_in_flight``)."""

from __future__ import annotations

from dataclasses import dataclass

from ..params import Ref, positional
from ..registry import register_pass
from .annotate import set_loop
from .common import ScheduleError, SchedulePass, on_main

KNOWN = ("auto_unroll_max_step", "unroll_explicit", "wgmma_in_flight")


@register_pass
@dataclass(frozen=True)
class Pragma(SchedulePass):
    """Annotate a loop with a pragma.

    Parameters:
        loop: the loop, ``<stage>.<loop>``.
        key: ``auto_unroll_max_step`` (unroll every loop below whose total step count is at
            most the value) or ``unroll_explicit`` (accepted for TVM compatibility; unrolling
            is always explicit here).
        value: the pragma's value.
    """

    name = "pragma"
    loop: Ref = positional()
    key: str = positional()
    value: int | bool = positional()

    def apply(self, module, ctx):
        if self.key not in KNOWN:
            raise ScheduleError(f"pragma {self.loop}: unknown key {self.key!r}; known: {KNOWN}")
        return on_main(module, lambda f: set_loop(f, self.loop, None,
                                                  annotations={self.key: self.value}))
