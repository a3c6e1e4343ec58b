"""Helpers shared by the lowering passes."""

from __future__ import annotations

from ...ir.expr import IRError, Load, Var, children, free_vars
from ...ir.stmt import Block, For, If, Let, Stmt, Store, stmt_children, stmt_exprs
from ...target import Target, as_target


class LoweringError(IRError):
    """A schedule that cannot be lowered, or a kernel over a GPU limit.

    ``stage``, ``axis`` and ``limit`` name what broke, when known; the tuners record such a
    candidate as invalid.
    """

    def __init__(self, message: str, stage: str = "", axis: str = "", limit: str = ""):
        super().__init__(message)
        self.stage = stage
        self.axis = axis
        self.limit = limit


def buffer_accesses(s: Stmt, buf) -> bool:
    """Whether ``s`` loads or stores ``buf`` anywhere."""
    for node in walk_all(s):
        if isinstance(node, Store) and node.buffer is buf:
            return True
        for e in stmt_exprs(node):
            if expr_reads(e, buf):
                return True
    return False


def expr_reads(e, buf) -> bool:
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, Load) and x.buffer is buf:
            return True
        stack.extend(children(x))
    return False


def walk_all(s: Stmt):
    stack = [s]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(stmt_children(x))


def stmt_uses_var(s: Stmt, var: Var) -> bool:
    for node in walk_all(s):
        for e in stmt_exprs(node):
            if var in free_vars(e):
                return True
    return False


def collect_accesses(s: Stmt, buf, loops=(), reads_only: bool = False) -> list:
    """``[(index tuple, enclosing loops below s)]`` for every load and store of ``buf``
    (every load only, with ``reads_only``)."""
    out = []

    def visit(x, loops):
        if isinstance(x, Store) and x.buffer is buf and not reads_only:
            out.append((x.indices, loops))
        for e in stmt_exprs(x):
            stack = [e]
            while stack:
                y = stack.pop()
                if isinstance(y, Load) and y.buffer is buf:
                    out.append((y.indices, loops))
                stack.extend(children(y))
        if isinstance(x, For):
            visit(x.body, loops + (x,))
        else:
            for c in stmt_children(x):
                visit(c, loops)

    visit(s, tuple(loops))
    return out


def block_names_in(s: Stmt) -> list:
    return [n.name for n in walk_all(s) if isinstance(n, Block)]




def fresh_copy(s: Stmt) -> Stmt:
    """A copy of ``s`` whose loop, let and block vars and allocated buffers are new values
    (SSA: a replicated statement must not define the same value twice)."""
    from ...ir.expr import Load, rebuild
    from ...ir.stmt import Alloc, Block, BlockVar, Buffer

    vmap: dict = {}
    bmap: dict = {}

    def fe(e):
        def go(x):
            if isinstance(x, Var):
                return vmap.get(x, x)
            kids = children(x)
            if kids:
                x = rebuild(x, tuple(go(k) for k in kids))
            if isinstance(x, Load) and x.buffer in bmap:
                return Load(bmap[x.buffer], x.indices)
            return x

        return go(e)

    def go(x: Stmt) -> Stmt:
        if isinstance(x, For):
            v = Var(x.var.name, x.var.dtype)
            vmap[x.var] = v
            return x.replace(var=v, body=go(x.body))
        if isinstance(x, Let):
            v = Var(x.var.name, x.var.dtype)
            val = fe(x.value)
            vmap[x.var] = v
            return Let(v, val, go(x.body))
        if isinstance(x, Alloc):
            b = x.buffer
            nb = Buffer(b.name, b.dtype, b.shape, b.scope, b.strides)
            bmap[b] = nb
            return x.replace(buffer=nb, body=go(x.body))
        if isinstance(x, Block):
            ivs = []
            bind = [fe(b) for b in x.bindings]
            for iv in x.iter_vars:
                v = Var(iv.var.name, iv.var.dtype)
                vmap[iv.var] = v
                ivs.append(BlockVar(v, iv.extent, iv.kind))
            return Block(x.name, ivs, bind, go(x.body),
                         None if x.init is None else go(x.init),
                         None if x.predicate is None else fe(x.predicate), x.annotations)
        if isinstance(x, Store):
            return Store(bmap.get(x.buffer, x.buffer), tuple(fe(i) for i in x.indices),
                         fe(x.value))
        if isinstance(x, If):
            return If(fe(x.cond), go(x.then), None if x.else_ is None else go(x.else_))
        from ...ir.stmt import Seq

        if isinstance(x, Seq):
            return Seq([go(c) for c in x.stmts])
        from ...ir.stmt import AsyncCopy

        if isinstance(x, AsyncCopy):
            return x.replace(dst_index=fe(x.dst_index), src_index=fe(x.src_index),
                             src_bytes=None if x.src_bytes is None else fe(x.src_bytes))
        return x

    return go(s)


def lowering_target(ctx) -> Target:
    """The target lowering checks against: the context's (:attr:`PassContext.target`), or
    the current target without a context."""
    return ctx.target if ctx is not None else as_target(None)
