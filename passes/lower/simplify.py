"""simplify: simplify every index expression and drop provably true guards."""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.attrs import Level
from ...ir.simplify import simplify_stmt
from ..base import Pass
from ..registry import register_pass


@register_pass
@dataclass(frozen=True)
class Simplify(Pass):
    """Simplify expressions (affine canonical form, floordiv/floormod with known bounds),
    remove ifs whose condition is provably true and unit loops."""

    name = "simplify"
    lowering = True
    levels = (Level.PRIM, Level.KERNEL)

    def apply(self, module, ctx):
        def fn(f):
            return f.replace(body=simplify_stmt(f.body))

        return self.map_functions(module, fn)
