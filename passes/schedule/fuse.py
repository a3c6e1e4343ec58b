"""fuse: consecutive perfectly nested loops become one loop."""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.expr import IntImm, Var, floordiv, floormod
from ...ir.stmt import For, PrimFunc, substitute_stmt
from ...ir.traversal import replace_at
from ..params import Ref, positional
from ..registry import register_pass
from .common import ScheduleError, SchedulePass, find_loop, loop_names_on_path, on_main
from .names import fresh_name, fused_name


def fuse(func: PrimFunc, loops) -> PrimFunc:
    """Fuse ``loops`` (``stage.loop`` refs, outermost first, each the only statement in the
    body of the previous) into one loop named by :func:`~.names.fused_name`."""
    loops = list(loops)
    if not loops:
        raise ScheduleError("fuse needs at least one loop")
    paths = [find_loop(func, ref)[0] for ref in loops]
    if len(loops) == 1:
        return func
    outer_path = paths[0]
    nodes = [p[-1] for p in paths]
    for k in range(1, len(nodes)):
        if nodes[k - 1].body is not nodes[k]:
            raise ScheduleError(
                f"fuse: {loops[k]} is not the only statement directly inside {loops[k - 1]}; "
                "fuse takes adjacent, perfectly nested loops, outermost first"
            )
    for ref, n in zip(loops, nodes):
        if n.kind != "serial" or n.annotations:
            raise ScheduleError(f"fuse: {ref} is already {n.kind}; fuse before binding it")
    taken = loop_names_on_path(paths[-1])
    for n in nodes:
        taken.discard(n.var.name)
    name = fresh_name(fused_name([n.var.name for n in nodes]), taken)
    fused = Var(name)
    vmap = {}
    stride = 1
    for n in reversed(nodes):
        idx = fused if stride == 1 else floordiv(fused, IntImm(stride))
        if n is not nodes[0]:
            idx = floormod(idx, IntImm(n.extent))
        vmap[n.var] = idx
        stride *= n.extent
    body = substitute_stmt(nodes[-1].body, vmap)
    return func.replace(body=replace_at(outer_path, For(fused, stride, body)))


@register_pass
@dataclass(frozen=True)
class Fuse(SchedulePass):
    """Fuse adjacent, perfectly nested loops (outermost first) into one.

    Parameters:
        loops: the loops, ``<stage>.<loop>`` each.
    """

    name = "fuse"
    loops: tuple[Ref, ...] = positional()

    def apply(self, module, ctx):
        return on_main(module, lambda f: fuse(f, self.loops))
