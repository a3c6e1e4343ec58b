"""reorder: permute loops of one perfect loop nest."""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.stmt import For, PrimFunc
from ...ir.traversal import replace_at
from ..params import Ref, positional
from ..registry import register_pass
from .common import ScheduleError, SchedulePass, find_loop, on_main


def reorder(func: PrimFunc, loops) -> PrimFunc:
    """Put ``loops`` (``stage.loop`` refs) in the given order, in the positions they held.

    The loops must lie on one perfect chain: from the outermost of them to the innermost,
    each loop's body is exactly the next loop. Other loops of the chain keep their place.
    """
    loops = list(loops)
    if len(set(loops)) != len(loops):
        raise ScheduleError(f"reorder: a loop is listed twice in {loops}")
    if len(loops) < 2:
        return func
    paths = {ref: find_loop(func, ref)[0] for ref in loops}
    depth = {ref: len(p) for ref, p in paths.items()}
    by_depth = sorted(loops, key=lambda r: depth[r])
    outer_path = paths[by_depth[0]]
    inner_node = paths[by_depth[-1]][-1]
    chain = []
    node = outer_path[-1]
    while True:
        if not isinstance(node, For):
            raise ScheduleError(
                f"reorder: {by_depth[-1]} is not inside a perfect nest below {by_depth[0]}"
            )
        chain.append(node)
        if node is inner_node:
            break
        if not isinstance(node.body, For):
            raise ScheduleError(
                f"reorder: the body of loop {node.var.name} holds more than one loop "
                f"(another stage is computed at it, or it is not a perfect nest), so "
                f"{', '.join(loops)} cannot be reordered there; reorder before compute_at"
            )
        node = node.body
    ids = {id(paths[r][-1]) for r in loops}
    slots = [k for k, n in enumerate(chain) if id(n) in ids]
    if len(slots) != len(loops):
        raise ScheduleError(f"reorder: loops {loops} are not all on one loop chain")
    new_order = list(chain)
    for k, ref in zip(slots, loops):
        new_order[k] = paths[ref][-1]
    stmt = chain[-1].body
    for n in reversed(new_order):
        stmt = n.replace(body=stmt)
    return func.replace(body=replace_at(outer_path, stmt))


@register_pass
@dataclass(frozen=True)
class Reorder(SchedulePass):
    """Reorder loops of one perfect nest into the given order.

    Parameters:
        order: the loops, ``<stage>.<loop>`` each, in their new order.
    """

    name = "reorder"
    order: tuple[Ref, ...] = positional()

    def apply(self, module, ctx):
        return on_main(module, lambda f: reorder(f, self.order))
