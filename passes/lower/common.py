"""Helpers shared by the lowering passes."""

from __future__ import annotations

from ...ir.expr import Bin, Cmp, FloatImm, IntImm, IRError, Load, Var, children, rebuild, transform
from ...ir.intrin import ANNOTATION
from ...ir.intrin.wgmma import is_wgmma_loop as _is_wgmma_nest
from ...ir.stmt import (
    Alloc,
    AsyncCopy,
    Block,
    BlockVar,
    Buffer,
    For,
    If,
    Let,
    Seq,
    Stmt,
    Store,
)
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


def rewrite_loads(e, fn):
    """``e`` with every load ``x`` replaced by ``fn(x)`` (None keeps it), its indices
    rewritten first: :func:`ptxforge.ir.traversal.rewrite_loads`, without a call per node
    that is no load (the lowering passes rewrite the loads of every expression)."""
    t = type(e)
    if t is Bin or t is Cmp:
        a, b = e.a, e.b
        ta, tb = type(a), type(b)
        na = a if ta is Var or ta is IntImm or ta is FloatImm else rewrite_loads(a, fn)
        nb = b if tb is Var or tb is IntImm or tb is FloatImm else rewrite_loads(b, fn)
        if na is a and nb is b:
            return e
        return Bin(e.op, na, nb, e.dtype) if t is Bin else Cmp(e.op, na, nb)
    if t is Var or t is IntImm or t is FloatImm:
        return e
    kids = children(e)
    if kids:
        e = rebuild(e, tuple([rewrite_loads(k, fn) for k in kids]))
    if isinstance(e, Load):
        r = fn(e)
        return e if r is None else r
    return e


def fresh_copy(s: Stmt) -> Stmt:
    """A copy of ``s`` whose loop, let and block vars and allocated buffers are new values
    (SSA: a replicated statement must not define the same value twice)."""
    vmap: dict = {}
    bmap: dict = {}

    def renamed(x):
        if isinstance(x, Var):
            return vmap.get(x)
        if isinstance(x, Load) and x.buffer in bmap:
            return Load(bmap[x.buffer], x.indices)
        return None

    def fe(e):
        return transform(e, renamed)

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
        if isinstance(x, Seq):
            return Seq([go(c) for c in x.stmts])
        if isinstance(x, AsyncCopy):
            return x.replace(dst=bmap.get(x.dst, x.dst), dst_index=fe(x.dst_index),
                             src_index=fe(x.src_index),
                             src_bytes=None if x.src_bytes is None else fe(x.src_bytes))
        return x

    try:
        return go(s)
    finally:
        go = None  # it calls itself: a cycle left to the collector otherwise


def lowering_target(ctx) -> Target:
    """The target lowering checks against: the context's (:attr:`PassContext.target`), or
    the current target without a context."""
    return ctx.target if ctx is not None else as_target(None)


def is_wgmma_loop(s: Stmt) -> bool:
    """Whether ``s`` is a loop tensorized as a wgmma (its nest runs as one). A statement
    that is no tensorized loop is refused before the intrinsic is looked up: the passes
    ask this of every statement they walk."""
    return isinstance(s, For) and ANNOTATION in s.annotations and _is_wgmma_nest(s)
