"""unroll_loops: honour ``auto_unroll_max_step`` pragmas by marking small loops unrolled.

Under a loop annotated with ``auto_unroll_max_step = N``, every serial loop whose total
number of executed leaf statements (its extent times its body's) is at most N becomes an
``unroll`` loop; codegen asks LLVM to unroll those fully.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.attrs import Level
from ...ir.intrin import ANNOTATION
from ...ir.stmt import For, PrimFunc, Stmt, stmt_children
from ...ir.traversal import replace_child
from ..base import Pass
from ..registry import register_pass


def unroll_loops(func: PrimFunc) -> PrimFunc:
    return func.replace(body=_go(func.body, 0))


def steps(s: Stmt) -> int:
    if isinstance(s, For) and ANNOTATION in s.annotations:
        return 1  # one tensor intrinsic
    if isinstance(s, For):
        return s.extent * steps(s.body)
    kids = stmt_children(s)
    if not kids:
        return 1
    return sum(steps(c) for c in kids)


def _go(s: Stmt, max_step: int) -> Stmt:
    if isinstance(s, For):
        ms = s.annotations.get("auto_unroll_max_step", max_step)
        ms = int(ms) if ms else 0
        if ANNOTATION in s.annotations:
            return s  # the nest is one tensor intrinsic; its loops are not unrolled
        body = _go(s.body, ms)
        if s.kind == "serial" and ms > 0 and steps(s) <= ms:
            return s.replace(kind="unroll", body=body)
        return s if body is s.body else s.replace(body=body)
    kids = stmt_children(s)
    out = s
    for c in kids:
        nc = _go(c, max_step)
        if nc is not c:
            out = replace_child(out, c, nc)
    return out



@register_pass
@dataclass(frozen=True)
class UnrollLoops(Pass):
    """Mark loops unrolled per auto_unroll_max_step pragmas."""

    name = "unroll_loops"
    lowering = True
    levels = (Level.PRIM,)

    def apply(self, module, ctx):
        return self.map_functions(module, unroll_loops)
