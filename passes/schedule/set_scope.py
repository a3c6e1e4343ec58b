"""set_scope: the memory scope of an intermediate stage's buffer (TVM's ``s[B].set_scope``).

Lowering places an intermediate (``global``) buffer by where it is used: a stage computed
under a thread loop gets a per-thread (``local``) buffer, one under a block loop only a
per-block (``shared``) one. ``set_scope`` says it explicitly: ``shared`` for a stage that the
threads of a block compute together and read from each other (``compute_at`` a block loop,
its own loops bound to threads), ``local`` for one each thread computes for itself. The
lowering's checks still hold: a ``local`` buffer read by a thread that did not write it,
or a ``shared`` one used outside one block, is refused when the kernel is lowered.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.stmt import Buffer, PrimFunc, replace_buffers
from ..params import Ref, positional
from ..registry import register_pass
from .common import ScheduleError, SchedulePass, find_block, on_main
from .compute_at import output_buffer

SET_SCOPES = ("shared", "local")


def set_scope(func: PrimFunc, stage: str, scope: str) -> PrimFunc:
    if scope not in SET_SCOPES:
        hint = (" (an intermediate computed at the root is in global memory already)"
                if scope == "global" else " (matrix fragments come from cache_read / "
                "cache_write to 'warp')")
        raise ScheduleError(f"set_scope {stage}: scope must be 'shared' or 'local', got "
                            f"{scope!r}{hint}")
    path = find_block(func, stage)
    buf = output_buffer(path[-1], "set_scope")
    if buf in func.params:
        raise ScheduleError(f"set_scope {stage}: {buf.name} is an argument of the function "
                            "(an input or output), which lives in global memory; set the "
                            "scope of an intermediate stage, or stage this one through "
                            "s.cache_write(tensor, scope)")
    if buf.scope == scope:
        return func
    new = Buffer(buf.name, buf.dtype, buf.shape, scope, buf.strides)
    return func.replace(body=replace_buffers(func.body, {buf: new}))


@register_pass
@dataclass(frozen=True)
class SetScope(SchedulePass):
    """Put the buffer a stage writes in memory ``scope`` (shared or local) instead of the
    scope lowering would infer from where the stage is computed.

    Parameters:
        stage: the (intermediate) stage.
        scope: ``"shared"`` or ``"local"``.
    """

    name = "set_scope"
    stage: Ref = positional()
    scope: str = positional()

    def apply(self, module, ctx):
        return on_main(module, lambda f: set_scope(f, self.stage, self.scope))
