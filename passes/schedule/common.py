"""What the schedule passes share: finding blocks and loops by name and the loops that
belong to one stage. Walking and rewriting trees (paths, ``replace_at``, ...) is
:mod:`ptxforge.ir.traversal`'s: import those from there.

Loops are referred to as ``<stage>.<loop>`` (see :mod:`.names`): the block named
``<stage>`` and, among the loops enclosing it, the one whose var is named ``<loop>``. Passes
keep loop names unique along every path from the root to a block, so the reference is exact.
"""

from __future__ import annotations

from ...ir.attrs import Level
from ...ir.expr import IRError, Var, free_vars
from ...ir.stmt import Block, For, PrimFunc, Stmt
from ...ir.traversal import (
    block_names,
    block_paths,
    blocks_under,
    enclosing_loops,
)
from ..base import Pass
from .names import resolve_ref


class ScheduleError(IRError):
    """A schedule primitive that cannot be applied (names the stage, loop and reason)."""


class SchedulePass(Pass):
    """Base of the schedule primitives: they work on tensor (and scheduled) IR only."""

    levels = (Level.PRIM,)


_recent_paths: list = []  # [(root, its block paths)], the most recently asked last
_RECENT = 4


def paths_of(root) -> dict:
    """:func:`block_paths` of ``root``, remembered for the last few roots asked: a
    primitive resolves several references in one function (and in the loop it works on),
    and a te schedule asks again about the function it just made (IR is immutable, so the
    same root has the same paths). Callers must not change the answer."""
    global _recent_paths
    recent = _recent_paths  # read once, replaced whole: safe across threads
    for k in range(len(recent) - 1, -1, -1):
        if recent[k][0] is root:
            return recent[k][1]
    paths = block_paths(root)
    _recent_paths = recent[1 - _RECENT:] + [(root, paths)]
    return paths


def find_block(func: PrimFunc, name: str) -> list:
    paths = paths_of(func.body)
    if name not in paths:
        raise ScheduleError(
            f"no stage named {name!r}; stages are: {', '.join(block_names(func.body))}"
        )
    return list(paths[name])


def split_ref(func: PrimFunc, ref: str) -> tuple:
    """Split ``stage.loop`` at the longest stage-name prefix that names a block."""
    paths = paths_of(func.body)
    got = resolve_ref(ref, paths)
    if got is not None:
        return got[0], got[1], list(paths[got[0]])
    raise ScheduleError(
        f"loop reference {ref!r} does not start with a stage name; stages are: "
        f"{', '.join(block_names(func.body))}"
    )


def find_loop(func: PrimFunc, ref: str) -> tuple:
    """``(path to the loop, stage name)`` for a ``stage.loop`` reference."""
    stage, loop, path = split_ref(func, ref)
    loops = [(i, n) for i, n in enumerate(path[:-1]) if isinstance(n, For) and
             n.var.name == loop]
    if not loops:
        names = [n.var.name for n in enclosing_loops(path)]
        raise ScheduleError(
            f"stage {stage} has no loop {loop!r}; its loops are: {', '.join(names) or 'none'}"
        )
    i, _ = loops[-1]
    return path[: i + 1], stage


def with_body(func: PrimFunc, body: Stmt) -> PrimFunc:
    return func.replace(body=body)


def own_loop_top(path: list) -> int:
    """Index in ``path`` of the outermost loop that encloses the block and no other block.

    Returns the block's own index when no loop belongs to it alone.
    """
    top = len(path) - 1
    for k in range(len(path) - 2, -1, -1):
        n = path[k]
        if not isinstance(n, For):
            break
        if len(blocks_under(n)) != 1:
            break
        top = k
    return top


def loop_names_on_path(path: list) -> set:
    return {n.var.name for n in path if isinstance(n, For)}


def block_vars_used(block: Block) -> set:
    used = set()
    for b in block.bindings:
        free_vars(b, used)
    return used


def is_var(e, v: Var) -> bool:
    return e is v


def on_main(module, fn):
    """Apply ``fn(func) -> func`` to the module's tensor-IR function (``main``)."""
    func = module.main
    if func.level is not Level.PRIM:
        raise ScheduleError(
            f"schedule passes work on tensor IR; function {func.name} is already lowered "
            f"({func.level.describe()})"
        )
    return module.with_function(fn(func))
