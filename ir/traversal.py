"""Walking and rewriting IR trees: the helpers every pass level uses.

Statements and expressions are immutable; a rewrite builds a new tree and shares the
unchanged subtrees. What is here:

* walking: :func:`walk` (statements, pre-order), :func:`walk_exprs`, :func:`stmt_children`,
  :func:`stmt_exprs`, :func:`blocks_under`;
* rewriting: :func:`map_stmt` (statements bottom-up, with a function on their expressions),
  :func:`transform` (an expression bottom-up), :func:`rewrite_loads` (every load of an
  expression), :func:`map_loads` (every load of a statement), :func:`substitute_stmt`,
  :func:`replace_buffers`;
* paths (``[root, ..., node]``): :func:`block_paths`, :func:`enclosing_loops`,
  :func:`replace_child`, :func:`replace_at`, :func:`follow_path`;
* queries: :func:`reads_buffer`, :func:`accesses_buffer`, :func:`uses_var`,
  :func:`collect_accesses`, :func:`block_names`.
"""

from __future__ import annotations

from collections.abc import Callable

from .expr import Expr, IRError, Load, Var, free_vars, transform
from .stmt import (
    Alloc,
    Block,
    For,
    If,
    Let,
    Seq,
    Stmt,
    Store,
    map_stmt,
    replace_buffers,
    stmt_children,
    stmt_exprs,
    substitute_stmt,
    walk,
    walk_exprs,
)

# -- rewriting ----------------------------------------------------------------------------


def rewrite_loads(e: Expr, fn: Callable[[Load], Expr | None]) -> Expr:
    """``e`` with every load ``x`` replaced by ``fn(x)`` (None keeps it); the load's
    indices are rewritten first."""
    return transform(e, lambda x: fn(x) if isinstance(x, Load) else None)


def map_loads(s: Stmt, fn: Callable[[Load], Expr | None],
              fstmt: Callable[[Stmt], Stmt | None] | None = None) -> Stmt:
    """``s`` with every load in every expression rewritten by ``fn`` (see
    :func:`rewrite_loads`) and, optionally, every statement by ``fstmt`` (as in
    :func:`map_stmt`)."""
    return map_stmt(s, fstmt=fstmt, fexpr=lambda e: rewrite_loads(e, fn))


# -- queries ------------------------------------------------------------------------------


def reads_buffer(e: Expr, buf) -> bool:
    """Whether expression ``e`` loads from ``buf``."""
    return any(isinstance(x, Load) and x.buffer is buf for x in walk_exprs(e))


def accesses_buffer(s: Stmt, buf) -> bool:
    """Whether ``s`` loads or stores ``buf`` anywhere."""
    for node in walk(s):
        if isinstance(node, Store) and node.buffer is buf:
            return True
        if any(reads_buffer(e, buf) for e in stmt_exprs(node)):
            return True
    return False


def uses_var(s: Stmt, var: Var) -> bool:
    """Whether any expression in ``s`` uses ``var``."""
    return any(var in free_vars(e) for node in walk(s) for e in stmt_exprs(node))


def collect_accesses(s: Stmt, buf, loops=(), reads_only: bool = False) -> list:
    """``[(index tuple, enclosing loops below s)]`` for every load and store of ``buf``
    (every load only, with ``reads_only``)."""
    out = []

    def visit(x, loops):
        if isinstance(x, Store) and x.buffer is buf and not reads_only:
            out.append((x.indices, loops))
        for e in stmt_exprs(x):
            out.extend((y.indices, loops) for y in walk_exprs(e)
                       if isinstance(y, Load) and y.buffer is buf)
        if isinstance(x, For):
            visit(x.body, loops + (x,))
        else:
            for c in stmt_children(x):
                visit(c, loops)

    visit(s, tuple(loops))
    return out


def blocks_under(s: Stmt) -> list:
    """The blocks in ``s``."""
    return [n for n in walk(s) if isinstance(n, Block)]


def block_names(root: Stmt) -> list:
    """Block names in program order."""
    return [n.name for n in walk(root) if isinstance(n, Block)]


# -- paths --------------------------------------------------------------------------------


def block_paths(root: Stmt) -> dict:
    """``{block name: [root, ..., block]}`` for every block under ``root``."""
    out: dict = {}
    # one path list shared by the walk, copied only where a block is met (pre-order, as
    # the blocks appear in the program); stores, the leaves, are not visited
    path: list = []
    stack = [(root, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        node, depth = pop()
        del path[depth:]
        path.append(node)
        depth += 1
        t = type(node)
        if t is For or t is Alloc or t is Let:
            body = node.body
            if type(body) is not Store:
                push((body, depth))
            continue
        if t is Seq:
            for c in reversed(node.stmts):
                if type(c) is not Store:
                    push((c, depth))
            continue
        if isinstance(node, Block):
            if node.name in out:
                raise IRError(f"two blocks are named {node.name}")
            out[node.name] = path.copy()
        for c in reversed(stmt_children(node)):
            push((c, depth))
    return out


def enclosing_loops(path: list) -> list:
    """The loops on a path, outermost first (the last node excluded)."""
    return [n for n in path[:-1] if isinstance(n, For)]


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
    if isinstance(parent, (For, Alloc)):
        return parent.replace(body=new)
    if isinstance(parent, If):
        if parent.then is old:
            return If(parent.cond, new, parent.else_)
        return If(parent.cond, parent.then, new)
    if isinstance(parent, Block):
        if parent.init is old:
            return parent.replace(init=new)
        return parent.replace(body=new)
    if isinstance(parent, Let):
        return Let(parent.var, parent.value, new)
    raise IRError(f"cannot replace a child of {type(parent).__name__}")


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


__all__ = [
    "accesses_buffer", "block_names", "block_paths", "blocks_under", "collect_accesses",
    "enclosing_loops", "follow_path", "map_loads", "map_stmt", "reads_buffer",
    "replace_at", "replace_buffers", "replace_child", "rewrite_loads", "stmt_children",
    "stmt_exprs", "substitute_stmt", "transform", "uses_var", "walk", "walk_exprs",
]
