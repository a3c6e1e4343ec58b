"""inject_async_copy: the stores of ``async_copy`` stages become cp.async copies, committed
and waited for before their first reader.

A vectorized (or unrolled) innermost copy loop whose store and load are contiguous in the
loop var becomes copies of 16 bytes where the extent, the alignment of both addresses and
the dtype allow, else 8 or 4; any other store is one copy per element (4 or 8 bytes). A
tail guard of the loop (``base + v < limit``) sets each copy's src-size to the bytes in
bounds (the rest are zero-filled), and a copied value ``select(c, src[i], 0)`` (padding)
reads nothing where ``c`` fails. Alignment must be provable from the index expressions;
where it is not, the copy is narrower.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd

from ...ir import dtype as dt
from ...ir.arith import affine_terms, const_bounds
from ...ir.attrs import Level
from ...ir.expr import (
    Bin,
    Cast,
    Cmp,
    Expr,
    FloatImm,
    IntImm,
    Load,
    Select,
    Var,
    conjuncts,
    emax,
    emin,
    logical_and,
    substitute,
    uses_var,
)
from ...ir.simplify import simplify
from ...ir.stmt import (
    ASYNC_COPY_BYTES,
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    For,
    If,
    PrimFunc,
    Seq,
    Stmt,
    Store,
    stmt_children,
    stmt_exprs,
)
from ...ir.traversal import reads_buffer, replace_child, walk
from ..base import Pass
from ..registry import register_pass
from .common import LoweringError


def known_divisor(e: Expr) -> int:
    """A positive integer that provably divides every value of the int expression ``e``
    (0 when ``e`` is the constant 0)."""
    if isinstance(e, IntImm):
        return abs(e.value)
    if isinstance(e, Bin) and e.op == "mul":
        return known_divisor(e.a) * known_divisor(e.b)
    if isinstance(e, Bin) and e.op in ("mod", "floormod"):
        return gcd(known_divisor(e.a), known_divisor(e.b))
    if isinstance(e, Select):
        return gcd(known_divisor(e.t), known_divisor(e.f))
    if isinstance(e, Bin) and e.op in ("add", "sub"):
        c0, terms = affine_terms(e)
        g = abs(c0)
        for t, coef in terms:
            if isinstance(t, Bin) and t.op in ("add", "sub"):
                return 1  # not split further: stay safe
            g = gcd(g, abs(coef) * known_divisor(t))
        return g
    return 1


def _copy_source(value: Expr) -> tuple[Load, Expr | None] | None:
    """``(global load, zero-fill condition or None)`` of a copyable value, else None.
    Nested padding selects (an implicit GEMM's padded tile of a padded input) fill zeros
    where any of their conditions fails."""
    if isinstance(value, Load) and value.buffer.scope == "global":
        return value, None
    if isinstance(value, Select) and isinstance(value.f, (IntImm, FloatImm)) \
            and value.f.value == 0:
        inner = _copy_source(value.t)
        if inner is None:
            return None
        load, cond = inner
        return load, value.cond if cond is None else logical_and(value.cond, cond)
    return None


def _fill(valid: Expr | None, nbytes: Expr) -> Expr | None:
    """The src-size of a copy: ``nbytes``, or 0 where the padding condition fails."""
    if valid is None:
        return None if isinstance(nbytes, IntImm) else nbytes
    return Select(valid, nbytes, IntImm(0, "int32"))


def _tail_bound(cond: Expr, v: Var) -> tuple[Expr, Expr] | None:
    """``(base, limit)`` if ``cond`` is ``base + v < limit`` (or ``<=``, or mirrored) with
    ``base`` and ``limit`` free of ``v``."""
    if not isinstance(cond, Cmp):
        return None
    a, b, op = cond.a, cond.b, cond.op
    if op in ("gt", "ge"):
        a, b, op = b, a, {"gt": "lt", "ge": "le"}[op]
    if op not in ("lt", "le") or uses_var(b, v):
        return None
    base = _stride_one(a, v)
    if base is None:
        return None
    return base, (b if op == "lt" else b + IntImm(1, b.dtype))


def _stride_one(index: Expr, v: Var) -> Expr | None:
    """``index`` at ``v = 0`` if ``index`` is ``base + v`` with ``base`` free of ``v``."""
    base = simplify(substitute(index, {v: IntImm(0, v.dtype)}))
    if uses_var(base, v):
        return None
    diff = simplify(index - base)
    return base if diff is v else None


class _Injector:
    def __init__(self, func: PrimFunc, names: set):
        self.func = func
        self.names = names

    def is_target(self, s: Stmt) -> bool:
        return isinstance(s, Store) and s.buffer.name in self.names \
            and s.buffer.scope == "shared"

    def fail(self, store: Store, why: str):
        raise LoweringError(
            f"async_copy {store.buffer.name} in kernel {self.func.name}: {why}",
            stage=store.buffer.name)

    def source(self, store: Store) -> tuple[Load, Expr | None]:
        src = _copy_source(store.value)
        if src is None:
            self.fail(store, f"the stored value {store.value} is not a load from global "
                             "memory (or a padding select of one); cp.async only copies")
        return src

    def element(self, store: Store) -> Stmt:
        """One copy per element."""
        load, valid = self.source(store)
        esize = dt.nbytes(store.buffer.dtype)
        if esize not in ASYNC_COPY_BYTES:
            self.fail(store, f"an element of {store.buffer.dtype} is {esize} bytes, and "
                             "cp.async copies 4, 8 or 16; vectorize the copy's innermost loop "
                             "(contiguous, aligned) so elements are copied in groups")
        return AsyncCopy(store.buffer, store.indices[0], load.buffer, load.indices[0], esize,
                         _fill(valid, IntImm(esize, "int32")))

    def vector(self, loop: For, ranges: dict) -> Stmt | None:
        """The copies replacing a contiguous copy loop, or None if it is not one.

        Guards free of the loop var stay around the copies. A guard ``base + v < limit``
        (a tail) guards each copy by its first element and becomes its src-size, so the
        copy reads the elements in bounds and zero-fills the rest; that needs every copy
        to stay inside the destination buffer (the zero-filled elements are the tile's
        own, past the edge of the matrix), else the loop is copied element by element."""
        v = loop.var
        guards, bounds, body = [], [], loop.body
        while isinstance(body, If) and body.else_ is None:
            for c in conjuncts(body.cond):
                if not uses_var(c, v):
                    guards.append(c)
                    continue
                bound = _tail_bound(c, v)
                if bound is None:
                    return None
                bounds.append(bound)
            body = body.then
        if not self.is_target(body):
            return None
        store = body
        load, valid = self.source(store)
        if valid is not None and uses_var(valid, loop.var):
            return None
        dbase = _stride_one(store.indices[0], v)
        sbase = _stride_one(load.indices[0], v)
        if dbase is None or sbase is None:
            return None
        esize = dt.nbytes(store.buffer.dtype)
        total = esize * loop.extent
        align = min(known_divisor(dbase) or 1 << 30, known_divisor(sbase) or 1 << 30)
        for width in sorted(ASYNC_COPY_BYTES, reverse=True):
            per = width // esize
            if width % esize or total % width or (align * esize) % width:
                continue
            n = total // width
            w = Var(v.name, v.dtype)
            off = w * IntImm(per, v.dtype) if n > 1 else IntImm(0, v.dtype)
            if bounds:
                inner = dict(ranges)
                inner[w] = (0, n - 1)
                hi = const_bounds(simplify(dbase + off), inner)
                if hi is None or hi[1] + per > store.buffer.size:
                    return None  # a zero-filled tail would spill past the buffer
            count = None
            firsts = []
            for base, limit in bounds:
                firsts.append(simplify(base + off < limit))
                left = emax(emin(limit - (base + off), IntImm(per, v.dtype)), IntImm(0, v.dtype))
                count = left if count is None else emin(count, left)
            nbytes = None
            if count is not None:
                nbytes = count * IntImm(esize, v.dtype)
                if nbytes.dtype != "int32":
                    nbytes = Cast("int32", nbytes)
                nbytes = simplify(nbytes)
            copy = AsyncCopy(store.buffer, simplify(dbase + off), load.buffer,
                             simplify(sbase + off), width,
                             _fill(valid, IntImm(width, "int32") if nbytes is None else nbytes))
            body_: Stmt = copy
            for g in reversed(firsts):
                body_ = If(g, body_)
            out: Stmt = body_ if n == 1 else For(w, n, body_, kind="unroll")
            for g in reversed(guards):
                out = If(g, out)
            return out
        return None

    def rewrite(self, s: Stmt) -> Stmt:
        def f(x: Stmt, ranges: dict):
            if isinstance(x, For) and x.kind in ("vectorize", "unroll", "serial"):
                return self.vector(x, ranges)
            if self.is_target(x):
                return self.element(x)
            return None

        # bottom-up: an inner store becomes an element copy before its loop is seen, so
        # vector() looks at the original loops first
        return _top_down(s, f, {})


def _top_down(s: Stmt, f, ranges: dict) -> Stmt:
    """Rebuild ``s``, replacing the first (outermost) statements where ``f(stmt, ranges)``
    answers; ``ranges`` bounds the vars of the enclosing loops."""
    r = f(s, ranges)
    if r is not None:
        return r
    if isinstance(s, For):
        ranges = dict(ranges)
        ranges[s.var] = (0, max(s.extent - 1, 0))
    return map_stmt_children(s, lambda c: _top_down(c, f, ranges))


def map_stmt_children(s: Stmt, g) -> Stmt:
    """``s`` with ``g`` applied to each direct sub-statement."""
    if isinstance(s, Seq):
        kids = [g(c) for c in s.stmts]
        return s if all(a is b for a, b in zip(kids, s.stmts)) else Seq(kids)
    out = s
    for c in stmt_children(s):
        nc = g(c)
        if nc is not c:
            out = replace_child(out, c, nc)
    return out


def place_waits(s: Stmt, dsts: set) -> Stmt:
    """Commit the copies and wait for them before the first statement that reads their
    destinations, at the innermost level holding both."""
    out, pending = _place(s, dsts)
    if pending:
        out = Seq([out, AsyncCommit(), AsyncWait(0)])
    return out


def _reads(s: Stmt, dsts: set) -> bool:
    return any(reads_buffer(e, b) for x in walk(s) for e in stmt_exprs(x) for b in dsts)


def _place(s: Stmt, dsts: set) -> tuple[Stmt, bool]:
    if isinstance(s, AsyncCopy):
        return s, True
    if isinstance(s, Seq):
        out, pending = [], False
        for c in s.stmts:
            nc, p = _place(c, dsts)
            if pending and _reads(nc, dsts):
                out += [AsyncCommit(), AsyncWait(0)]
                pending = False
            out.append(nc)
            pending = pending or p
        return Seq(out), pending
    if isinstance(s, For):
        body, p = _place(s.body, dsts)
        if p and _reads(body, dsts):
            body, p = Seq([body, AsyncCommit(), AsyncWait(0)]), False
        return (s if body is s.body else s.replace(body=body)), p
    pending = [False]

    def sub(c):
        nc, p = _place(c, dsts)
        pending[0] = pending[0] or p
        return nc

    return map_stmt_children(s, sub), pending[0]


def inject_async_copy(func: PrimFunc) -> PrimFunc:
    names = set(func.attrs.async_copy)
    if not names:
        return func
    body = _Injector(func, names).rewrite(func.body)
    dsts = {x.dst for x in walk(body) if isinstance(x, AsyncCopy)}
    if not dsts:
        return func
    return func.replace(body=place_waits(body, dsts))


@register_pass
@dataclass(frozen=True)
class InjectAsyncCopy(Pass):
    """Turn the stores of ``async_copy`` stages into cp.async copies (4, 8 or 16 bytes),
    committed and waited for before the first read of what they copy."""

    name = "inject_async_copy"
    lowering = True
    levels = (Level.KERNEL,)

    def apply(self, module, ctx):
        return self.map_functions(module, inject_async_copy)


__all__ = ["InjectAsyncCopy", "inject_async_copy", "known_divisor", "map_stmt_children"]
