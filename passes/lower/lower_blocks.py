"""lower_blocks: replace every block by its body with iteration vars substituted."""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.attrs import Level
from ...ir.stmt import Block, If, PrimFunc, map_stmt, substitute_stmt
from ..base import Pass
from ..registry import register_pass
from .common import LoweringError


def lower_blocks(func: PrimFunc) -> PrimFunc:
    def fix(x):
        if isinstance(x, Block):
            if x.init is not None:
                raise LoweringError(
                    f"block {x.name} still has a reduction init; run decompose_reduction first",
                    stage=x.name,
                )
            vmap = {iv.var: b for iv, b in zip(x.iter_vars, x.bindings)}
            body = substitute_stmt(x.body, vmap)
            if x.predicate is not None:
                body = If(x.predicate, body)
            return body
        return None

    return func.replace(body=map_stmt(func.body, fstmt=fix))


@register_pass
@dataclass(frozen=True)
class LowerBlocks(Pass):
    """Replace blocks by their bodies (iteration vars substituted, predicates as ifs)."""

    name = "lower_blocks"
    lowering = True
    levels = (Level.PRIM,)

    def apply(self, module, ctx):
        return self.map_functions(module, lower_blocks)
