"""bind: a loop becomes a GPU thread index (blockIdx/threadIdx) or a virtual thread."""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.stmt import THREAD_TAGS
from ..params import Ref, positional
from ..registry import register_pass
from .annotate import set_loop
from .common import ScheduleError, SchedulePass, on_main


@register_pass
@dataclass(frozen=True)
class Bind(SchedulePass):
    """Bind a loop to a thread index.

    Parameters:
        loop: the loop, ``<stage>.<loop>``.
        thread: ``blockIdx.x/y/z``, ``threadIdx.x/y/z`` or ``vthread``.
    """

    name = "bind"
    loop: Ref = positional()
    thread: str = positional()

    def apply(self, module, ctx):
        if self.thread not in THREAD_TAGS:
            raise ScheduleError(
                f"bind {self.loop}: unknown thread tag {self.thread!r}; use one of "
                f"{', '.join(THREAD_TAGS)}"
            )
        kind = "vthread" if self.thread == "vthread" else "thread"
        return on_main(module, lambda f: set_loop(f, self.loop, kind, self.thread, what="bind"))
