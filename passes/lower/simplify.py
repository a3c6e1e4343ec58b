"""simplify: simplify every index expression and drop provably true guards."""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.simplify import simplify_stmt
from ..base import Pass
from ..registry import register_pass
from .common import on_kernels, on_prim


@register_pass
@dataclass(frozen=True)
class Simplify(Pass):
    """Simplify expressions (affine canonical form, floordiv/floormod with known bounds),
    remove ifs whose condition is provably true and unit loops."""

    name = "simplify"

    def apply(self, module, ctx):
        def fn(f):
            return f.replace(body=simplify_stmt(f.body))

        return on_kernels(on_prim(module, fn), fn)
