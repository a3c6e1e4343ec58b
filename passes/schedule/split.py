"""split: one loop becomes several nested loops."""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.expr import IntImm, Var, const, logical_and
from ...ir.stmt import Block, For, PrimFunc, map_stmt, substitute_stmt, walk
from ...ir.traversal import replace_at
from ..params import Ref, positional
from ..registry import register_pass
from .common import ScheduleError, SchedulePass, find_loop, loop_names_on_path, on_main
from .names import fresh_name, split_names


def split_extents(extent: int, factors=None, nparts=None) -> list:
    """Loop extents, outermost first, for splitting a loop of ``extent``.

    ``factors`` are the extents of the inner loops (innermost last); the outermost loop
    gets ``ceil(extent / prod(factors))``. ``nparts`` instead fixes the outer extent.
    """
    if (factors is None) == (nparts is None):
        raise ScheduleError("split needs exactly one of factors= or nparts=")
    if nparts is not None:
        if not isinstance(nparts, int) or nparts < 1:
            raise ScheduleError(f"split: nparts must be a positive int, got {nparts!r}")
        return [nparts, -(-extent // nparts)]
    factors = list(factors)
    if not factors:
        raise ScheduleError("split: factors is empty")
    for f in factors:
        if not isinstance(f, int) or isinstance(f, bool) or f < 1:
            raise ScheduleError(f"split: factors must be positive ints, got {factors}")
    inner = 1
    for f in factors:
        inner *= f
    return [-(-extent // inner)] + factors


def split(func: PrimFunc, loop: str, factors=None, nparts=None) -> PrimFunc:
    """Split loop ``stage.loop`` (see :func:`split_extents`); the new loops are named by
    :func:`~.names.split_names` (made fresh where a name is already on the path)."""
    path, stage = find_loop(func, loop)
    node: For = path[-1]
    if node.kind != "serial" or node.annotations:
        raise ScheduleError(
            f"split {loop}: the loop is already {node.kind}"
            + (f" with {node.annotations}" if node.annotations else "")
            + "; split before binding or annotating it"
        )
    extents = split_extents(node.extent, factors, nparts)
    taken = loop_names_on_path(path) | _loop_names_below(node)
    taken.discard(node.var.name)
    names = [fresh_name(n, taken) for n in split_names(node.var.name, len(extents))]
    new_vars = [Var(n) for n in names]
    # v = ((v0 * e1 + v1) * e2 + v2) ...
    value = new_vars[0]
    for v, e in zip(new_vars[1:], extents[1:]):
        value = value * IntImm(e) + v
    body = substitute_stmt(node.body, {node.var: value})
    covered = 1
    for e in extents:
        covered *= e
    if covered != node.extent:
        guard = value < const(node.extent)
        body = _add_predicate(body, guard)
    stmt = body
    for v, e in reversed(list(zip(new_vars, extents))):
        stmt = For(v, e, stmt)
    return func.replace(body=replace_at(path, stmt))


def _loop_names_below(s) -> set:
    return {x.var.name for x in walk(s) if isinstance(x, For)}


def _add_predicate(body, cond):
    """Guard every block under ``body`` with ``cond`` (a non-dividing split)."""

    def fix(x):
        if isinstance(x, Block):
            pred = cond if x.predicate is None else logical_and(x.predicate, cond)
            return x.replace(predicate=pred)
        return None

    return map_stmt(body, fstmt=fix)


@register_pass
@dataclass(frozen=True)
class Split(SchedulePass):
    """Split a loop into nested loops.

    Parameters:
        loop: the loop, ``<stage>.<loop>``.
        factors: extents of the inner loops (innermost last); the outermost loop gets the
            rest, rounded up (a predicate guards the overhang).
        nparts: instead of factors, the extent of the outer loop of a two-way split.
    """

    name = "split"
    loop: Ref = positional()
    factors: tuple[int, ...] | None = None
    nparts: int | None = None

    def apply(self, module, ctx):
        return on_main(module, lambda f: split(f, self.loop, self.factors, self.nparts))
