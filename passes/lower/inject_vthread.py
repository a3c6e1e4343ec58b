"""inject_vthread: replace virtual-thread loops by interleaved copies of their statements.

A vthread loop is pushed down through loops and sequences to the statements that use its
var, which are replicated once per virtual thread (statements that do not use it run once).
Buffers allocated inside a vthread loop get one copy per virtual thread. This gives each
real thread several interleaved outputs, as TVM's InjectVirtualThread does.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.attrs import Level
from ...ir.expr import IntImm, Load, free_vars
from ...ir.stmt import (
    Alloc,
    Barrier,
    Buffer,
    For,
    If,
    Let,
    PrimFunc,
    Seq,
    Stmt,
    Store,
    map_stmt,
    stmt_children,
    stmt_exprs,
    substitute_stmt,
)
from ...ir.traversal import walk
from ..base import Pass
from ..registry import register_pass
from .common import fresh_copy, rewrite_loads


def inject_vthread(func: PrimFunc) -> PrimFunc:
    def fix(x):
        if isinstance(x, For) and x.kind == "vthread":
            return _inject(x)
        return None

    return func.replace(body=map_stmt(func.body, fstmt=fix))


def _inject(loop: For) -> Stmt:
    v, n = loop.var, loop.extent
    body = loop.body
    # one copy of each inner allocation per virtual thread: index [v, ...]
    for node in list(walk(body)):
        if isinstance(node, Alloc):
            body = _expand(body, node.buffer, v, n)
    return _push(body, v, n, _UsesVar(v))


class _UsesVar:
    """Whether a statement uses ``var`` anywhere, memoized per node: ``_push`` asks at every
    level of a nest, which walking each subtree again would make quadratic in its depth."""

    def __init__(self, var):
        self.var = var
        self._memo: dict[int, tuple[Stmt, bool]] = {}

    def __call__(self, s: Stmt) -> bool:
        hit = self._memo.get(id(s))
        if hit is not None:
            return hit[1]
        found = any(self.var in free_vars(e) for e in stmt_exprs(s)) or any(
            self(c) for c in stmt_children(s))
        self._memo[id(s)] = (s, found)
        return found


def _expand(s: Stmt, buf: Buffer, v, n) -> Stmt:
    new = Buffer(buf.name, buf.dtype, (n,) + buf.shape, buf.scope)

    def fe(e):
        def load(x):
            if x.buffer is buf:
                return Load(new, (v,) + x.indices)
            return None

        return rewrite_loads(e, load)

    def fs(x):
        if isinstance(x, Store) and x.buffer is buf:
            return Store(new, (v,) + x.indices, x.value)
        if isinstance(x, Alloc) and x.buffer is buf:
            return x.replace(buffer=new)
        return None

    return map_stmt(s, fstmt=fs, fexpr=fe)


def _replicate(s: Stmt, v, n) -> Stmt:
    return Seq([fresh_copy(substitute_stmt(s, {v: IntImm(k)})) for k in range(n)])


def _push(s: Stmt, v, n, uses: _UsesVar) -> Stmt:
    if not uses(s):
        return s
    if isinstance(s, Seq):
        return Seq([_push(c, v, n, uses) for c in s.stmts])
    if isinstance(s, For):
        return s.replace(body=_push(s.body, v, n, uses))
    if isinstance(s, Alloc):
        return s.replace(body=_push(s.body, v, n, uses))
    if isinstance(s, If):
        if v in free_vars(s.cond) or _has_barrier(s):
            return _replicate(s, v, n)
        return If(s.cond, _push(s.then, v, n, uses),
                  None if s.else_ is None else _push(s.else_, v, n, uses))
    if isinstance(s, Let):
        if v in free_vars(s.value):
            return _replicate(s, v, n)
        return Let(s.var, s.value, _push(s.body, v, n, uses))
    return _replicate(s, v, n)


def _has_barrier(s: Stmt) -> bool:
    return any(isinstance(x, Barrier) for x in walk(s))


@register_pass
@dataclass(frozen=True)
class InjectVthread(Pass):
    """Replace virtual-thread loops by interleaved copies of their statements."""

    name = "inject_vthread"
    lowering = True
    levels = (Level.PRIM,)

    def apply(self, module, ctx):
        return self.map_functions(module, inject_vthread)
