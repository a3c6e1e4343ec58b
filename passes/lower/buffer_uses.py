"""Which buffers a statement tree accesses, memoized per node.

A pass that places or checks buffers one at a time asks "does this subtree access ``buf``?"
for every buffer at every node; walking the tree for each question makes it quadratic.
:class:`BufferUses` answers from sets computed once per node (a rebuilt tree shares its
unchanged subtrees, whose answers stay valid) and holds every node it has seen, so the ids
its tables are keyed by stay unique while it lives: make one per function and pass run.
"""

from __future__ import annotations

from collections.abc import Callable

from ...ir.expr import Bin, Cmp, Expr, FloatImm, IntImm, Load, Var, children
from ...ir.stmt import (
    AsyncCopy,
    Stmt,
    Store,
    map_stmt,
    stmt_children,
    stmt_exprs,
)

_EMPTY: frozenset = frozenset()


class BufferUses:
    """Buffers loaded by expressions, and loaded or stored by statements and subtrees."""

    __slots__ = ("_loads", "_own", "_tree")

    def __init__(self):
        self._loads: dict[int, tuple[Expr, frozenset]] = {}
        self._own: dict[int, tuple[Stmt, frozenset]] = {}
        self._tree: dict[int, tuple[Stmt, frozenset]] = {}

    def loads(self, e: Expr) -> frozenset:
        """The buffers ``e`` loads from (anywhere in it)."""
        hit = self._loads.get(id(e))
        if hit is not None:
            return hit[1]
        found = set()
        stack = [e]
        pop, push = stack.pop, stack.append
        while stack:
            x = pop()
            t = type(x)
            if t is Bin or t is Cmp:  # the common nodes, without a tuple of kids
                push(x.a)
                push(x.b)
            elif t is Var or t is IntImm or t is FloatImm:
                continue
            else:
                if t is Load:
                    found.add(x.buffer)
                stack.extend(children(x))
        out = frozenset(found) if found else _EMPTY
        self._loads[id(e)] = (e, out)
        return out

    def own(self, s: Stmt) -> frozenset:
        """The buffers ``s`` itself (not its sub-statements) loads or stores."""
        hit = self._own.get(id(s))
        if hit is not None:
            return hit[1]
        exprs = stmt_exprs(s)
        found: set = set()
        for e in exprs:
            found |= self.loads(e)
        if isinstance(s, Store):
            found.add(s.buffer)
        elif isinstance(s, AsyncCopy):
            found.update((s.dst, s.src))
        out = frozenset(found) if found else _EMPTY
        self._own[id(s)] = (s, out)
        return out

    def tree(self, s: Stmt) -> frozenset:
        """The buffers loaded or stored anywhere in ``s``."""
        hit = self._tree.get(id(s))
        if hit is not None:
            return hit[1]
        out = self.own(s)
        kids = stmt_children(s)
        if kids:
            found = set(out)
            for c in kids:
                found |= self.tree(c)
            out = frozenset(found)
        self._tree[id(s)] = (s, out)
        return out

    def accesses(self, s: Stmt, buf) -> bool:
        """Whether ``s`` loads or stores ``buf`` anywhere."""
        return buf in self.tree(s)

    def owns(self, s: Stmt, buf) -> bool:
        """Whether ``s`` itself (not a sub-statement) loads or stores ``buf``."""
        return buf in self.own(s)


def map_stmt_where(s: Stmt, visit: Callable[[Stmt], bool],
                   fstmt: Callable | None = None, fexpr: Callable | None = None) -> Stmt:
    """:func:`~ptxforge.ir.stmt.map_stmt` over only the subtrees for which ``visit`` is
    true; the others are kept as they are. The same result as ``map_stmt`` where ``fstmt``
    and ``fexpr`` change nothing in the subtrees skipped (a rewrite of one buffer's
    accesses skips the subtrees that do not access it)."""
    return map_stmt(s, fstmt, fexpr, visit=visit)
