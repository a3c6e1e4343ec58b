"""Tree utilities shared by the schedule passes: finding blocks and loops by name,
replacing a subtree, and the loops that belong to one stage.

Loops are referred to as ``<stage>.<loop>`` (see :mod:`.names`): the block named
``<stage>`` and, among the loops enclosing it, the one whose var is named ``<loop>``. Passes
keep loop names unique along every path from the root to a block, so the reference is exact.
"""

from __future__ import annotations

from ...ir.attrs import Level
from ...ir.expr import IRError, Var, free_vars
from ...ir.stmt import Alloc, Block, For, If, Let, PrimFunc, Seq, Stmt, stmt_children
from .names import resolve_ref


class ScheduleError(IRError):
    """A schedule primitive that cannot be applied (names the stage, loop and reason)."""


def block_paths(root: Stmt) -> dict:
    """``{block name: [root, ..., block]}`` for every block under ``root``."""
    out: dict = {}
    stack = [(root, [root])]
    while stack:
        node, path = stack.pop()
        if isinstance(node, Block):
            if node.name in out:
                raise ScheduleError(f"two blocks are named {node.name}")
            out[node.name] = path
        for c in reversed(stmt_children(node)):
            stack.append((c, path + [c]))
    return out


def block_names(root: Stmt) -> list:
    """Block names in program order."""
    names = []
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, Block):
            names.append(node.name)
        stack.extend(reversed(stmt_children(node)))
    return names


def find_block(func: PrimFunc, name: str) -> list:
    paths = block_paths(func.body)
    if name not in paths:
        raise ScheduleError(
            f"no stage named {name!r}; stages are: {', '.join(block_names(func.body))}"
        )
    return paths[name]


def enclosing_loops(path: list) -> list:
    return [n for n in path[:-1] if isinstance(n, For)]


def split_ref(func: PrimFunc, ref: str) -> tuple:
    """Split ``stage.loop`` at the longest stage-name prefix that names a block."""
    paths = block_paths(func.body)
    got = resolve_ref(ref, paths)
    if got is not None:
        return got[0], got[1], paths[got[0]]
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


def replace_child(parent: Stmt, old: Stmt, new: Stmt | None) -> Stmt:
    """``parent`` with its child ``old`` (by identity) replaced by ``new`` (None removes)."""
    if isinstance(parent, Seq):
        stmts = []
        for s in parent.stmts:
            if s is old:
                if new is not None:
                    stmts.append(new)
            else:
                stmts.append(s)
        if not stmts:
            return Seq(())
        return Seq(stmts) if len(stmts) != 1 else stmts[0]
    if new is None:
        new = Seq(())
    if isinstance(parent, For):
        return parent.replace(body=new)
    if isinstance(parent, If):
        if parent.then is old:
            return If(parent.cond, new, parent.else_)
        return If(parent.cond, parent.then, new)
    if isinstance(parent, Block):
        if parent.init is old:
            return parent.replace(init=new)
        return parent.replace(body=new)
    if isinstance(parent, Alloc):
        return parent.replace(body=new)
    if isinstance(parent, Let):
        return Let(parent.var, parent.value, new)
    raise ScheduleError(f"cannot replace a child of {type(parent).__name__}")


def replace_at(path: list, new: Stmt | None) -> Stmt:
    """Rebuild the root of ``path`` with ``path[-1]`` replaced by ``new``."""
    cur = new
    for k in range(len(path) - 1, 0, -1):
        cur = replace_child(path[k - 1], path[k], cur)
    if cur is None:
        return Seq(())
    return cur


def follow_path(root: Stmt, old_path: list, upto: int) -> list:
    """The path in ``root`` (a rebuilt copy of ``old_path[0]`` with the same shape) that
    takes the same child positions as ``old_path`` down to index ``upto``."""
    out = [root]
    cur = root
    for k in range(1, upto + 1):
        kids = stmt_children(old_path[k - 1])
        i = next(j for j, c in enumerate(kids) if c is old_path[k])
        cur = stmt_children(cur)[i]
        out.append(cur)
    return out


def with_body(func: PrimFunc, body: Stmt) -> PrimFunc:
    return func.replace(body=body)


def blocks_under(s: Stmt) -> list:
    out = []
    stack = [s]
    while stack:
        n = stack.pop()
        if isinstance(n, Block):
            out.append(n)
        stack.extend(stmt_children(n))
    return out


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
