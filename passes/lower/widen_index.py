"""widen_index: 64-bit index arithmetic for kernels whose offsets may not fit 32 bits.

Index arithmetic is int32 by default: it is faster on the GPU (one register, 32-bit
multiply-add) and every kernel of ordinary size is safe with it. A kernel is widened when a
bound says a 32-bit offset could overflow: a buffer it accesses with 2^31 or more elements,
a loop with that many iterations, or a launch with that many threads. Its loop and let vars
become int64 and every index computation on them is done in int64 (so ``i*65537 + j`` or a
guard ``x < 2147483656`` keep their values); loaded int32 data joins the arithmetic
sign-extended, and what is stored into an int32 buffer or passed to an int32 intrinsic is
narrowed back, which changes nothing where int32 arithmetic did not overflow.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.attrs import Level
from ...ir.expr import Bin, Cast, Cmp, Expr, IntImm, Load, Select, Var, children, rebuild
from ...ir.stmt import Alloc, For, Let, PrimFunc, Store, map_stmt, walk
from ..base import Pass
from ..registry import register_pass

INT32_MAX = 2**31 - 1


def needs_64bit(kernel: PrimFunc) -> bool:
    """Whether a 32-bit offset could overflow in ``kernel`` (see the module docstring)."""
    buffers = list(kernel.params)
    threads = 1
    for x in walk(kernel.body):
        if isinstance(x, Alloc):
            buffers.append(x.buffer)
        elif isinstance(x, For) and x.extent > INT32_MAX:
            return True
    launch = kernel.attrs.launch
    for tag_extents in (launch.grid, launch.block):
        for e in tag_extents:
            threads *= int(e)
    return threads > INT32_MAX or any(b.size > INT32_MAX for b in buffers)


def _unify(a: Expr, b: Expr) -> tuple:
    if a.dtype == b.dtype or not (a.dtype == "int64" or b.dtype == "int64"):
        return a, b
    if a.dtype == "int32":
        a = _to64(a)
    if b.dtype == "int32":
        b = _to64(b)
    return a, b


def _to64(e: Expr) -> Expr:
    return IntImm(e.value, "int64") if isinstance(e, IntImm) else Cast("int64", e)


def _narrow(e: Expr, dtype: str) -> Expr:
    return e if e.dtype == dtype else Cast(dtype, e)


class _Widen:
    def __init__(self, vmap: dict):
        self.vmap = vmap
        self.memo: dict = {}

    def __call__(self, e: Expr) -> Expr:
        got = self.memo.get(id(e))
        if got is not None and got[0] is e:
            return got[1]
        out = self._go(e)
        self.memo[id(e)] = (e, out)
        return out

    def _go(self, e: Expr) -> Expr:
        if isinstance(e, Var):
            return self.vmap.get(e, e)
        if isinstance(e, IntImm):
            # a constant beyond int32 can only come from an extent or offset of this kernel
            if e.dtype == "int32" and not -INT32_MAX - 1 <= e.value <= INT32_MAX:
                return IntImm(e.value, "int64")
            return e
        kids = tuple(self(k) for k in children(e))
        if isinstance(e, Bin) and e.op not in ("and", "or"):
            a, b = _unify(*kids)
            return Bin(e.op, a, b, a.dtype) if (a is not e.a or b is not e.b) else e
        if isinstance(e, Cmp):
            a, b = _unify(*kids)
            return rebuild(e, (a, b))
        if isinstance(e, Select):
            t, f = _unify(kids[1], kids[2])
            return rebuild(e, (kids[0], t, f))
        if isinstance(e, Load):
            return rebuild(e, kids)  # indices may be int64; the value keeps its dtype
        if isinstance(e, Cast):
            return kids[0] if kids[0].dtype == e.dtype else rebuild(e, kids)
        # anything else (casts, calls, not) takes its operands in their original dtypes
        old = children(e)
        return rebuild(e, tuple(_narrow(k, o.dtype) for k, o in zip(kids, old)))


def widen_index(func: PrimFunc) -> PrimFunc:
    if func.level is not Level.KERNEL or not needs_64bit(func):
        return func
    vmap = {}
    for x in walk(func.body):
        if isinstance(x, (For, Let)) and x.var.dtype == "int32":
            vmap[x.var] = Var(x.var.name, "int64")
    widen = _Widen(vmap)

    def lets(s):
        # first the let vars (a let's value must have its var's dtype when rebuilt)
        if isinstance(s, Let) and s.var in vmap:
            return Let(vmap[s.var], _to64(s.value), s.body)
        return None

    def fstmt(s):
        if isinstance(s, For) and s.var in vmap:
            return For(vmap[s.var], s.extent, s.body, s.kind, s.thread, s.annotations)
        if isinstance(s, Store) and s.value.dtype != s.buffer.dtype:
            return Store(s.buffer, s.indices, _narrow(s.value, s.buffer.dtype))
        return None

    body = map_stmt(map_stmt(func.body, fstmt=lets), fstmt=fstmt, fexpr=widen)
    return func.replace(body=body)


@register_pass
@dataclass(frozen=True)
class WidenIndex(Pass):
    """Do the index arithmetic of kernels that could overflow 32-bit offsets in int64."""

    name = "widen_index"
    lowering = True
    levels = (Level.KERNEL,)

    def apply(self, module, ctx):
        return self.map_functions(module, widen_index)
