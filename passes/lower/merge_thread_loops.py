"""merge_thread_loops: a thread loop nested in a loop bound to the same hardware index
becomes that index (guarded where it is shorter), as for cooperative fetching."""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.attrs import Level
from ...ir.expr import const
from ...ir.stmt import For, If, PrimFunc, Stmt, stmt_children, substitute_stmt
from ...ir.traversal import block_names, replace_child
from ..base import Pass
from ..registry import register_pass
from .common import LoweringError


def merge_thread_loops(func: PrimFunc) -> PrimFunc:
    return func.replace(body=_go(func.body, {}))


def _go(s: Stmt, bound: dict) -> Stmt:
    if isinstance(s, For) and s.kind == "thread":
        if s.thread in bound:
            outer = bound[s.thread]
            if s.extent > outer.extent:
                raise LoweringError(
                    f"loop {s.var.name} is bound to {s.thread} with extent {s.extent}, but "
                    f"the enclosing {s.thread} loop {outer.var.name} has only {outer.extent} "
                    f"threads (stages {', '.join(block_names(s)) or '?'}); split it so the "
                    f"bound part has at most {outer.extent}",
                    axis=s.var.name, limit=f"{s.thread} extent {outer.extent}",
                )
            body = substitute_stmt(s.body, {s.var: outer.var})
            body = _go(body, bound)
            if s.extent < outer.extent:
                return If(outer.var < const(s.extent), body)
            return body
        inner = dict(bound)
        inner[s.thread] = s
        return s.replace(body=_go(s.body, inner))
    kids = stmt_children(s)
    if not kids:
        return s

    out = s
    for c in kids:
        nc = _go(c, bound)
        if nc is not c:
            out = replace_child(out, c, nc)
    return out


@register_pass
@dataclass(frozen=True)
class MergeThreadLoops(Pass):
    """Nested loops bound to the same thread index share it."""

    name = "merge_thread_loops"
    lowering = True
    levels = (Level.PRIM,)

    def apply(self, module, ctx):
        return self.map_functions(module, merge_thread_loops)
