"""Simplification of statement trees (:func:`simplify_stmt`): every expression under the
ranges of the vars in scope, decided conditions and empty statements removed."""

from __future__ import annotations

from . import dtype as dt
from . import simplify_cache as _cache
from .arith import Ranges
from .expr import IntImm, Not
from .simplify_expr import Simplifier, shared_simplifier
from .stmt import Alloc, AsyncCopy, Block, For, If, Let, Seq, Stmt, Store, map_async_copy


def simplify_stmt(stmt: Stmt, ranges: Ranges | None = None,
                  unwrap_unit_loops: bool = True) -> Stmt:
    """Simplify every expression of a statement tree, tracking var ranges.

    A ``For`` bounds its var by ``[0, extent - 1]`` in its body, a ``Block`` its iteration
    vars (narrowed by the bounds of their bindings), a ``Let`` its var by the bounds of its
    value; ``If`` conditions and block predicates narrow the ranges of their bodies.
    ``If`` s with a decided condition are replaced by the branch taken, blocks whose
    predicate is false and loops of extent 0 are dropped, and, with ``unwrap_unit_loops``,
    serial, unroll and vectorize loops of extent 1 without annotations are replaced by
    their body with the var set to 0 (a var whose range is one value becomes that value).
    Thread and vthread loops are never changed (their bodies are simplified). A statement
    that vanishes entirely becomes an empty ``Seq``.
    """
    cache = _cache.current()
    share = None if cache is None else shared_simplifier(cache)
    return _StmtSimplifier(unwrap_unit_loops).visit(stmt, Simplifier(dict(ranges or {}), share))


def _is_empty(s: Stmt | None) -> bool:
    return s is None or (isinstance(s, Seq) and not s.stmts)


class _StmtSimplifier:
    def __init__(self, unwrap_unit_loops: bool):
        self.unwrap = unwrap_unit_loops
        # scopes stay alive until the end: freeing each one as its loop closes makes the
        # allocator map and unmap memory over and over inside a big pass
        self.scopes: list[Simplifier] = []

    def _scope(self, sim: Simplifier) -> Simplifier:
        self.scopes.append(sim)
        return sim

    def _narrowed(self, sim: Simplifier, ranges: Ranges) -> Simplifier:
        return sim if ranges is sim.ranges else self._scope(sim.with_ranges(ranges))

    def visit(self, s: Stmt, sim: Simplifier) -> Stmt:
        if isinstance(s, Seq):
            return self._seq(s, sim)
        if isinstance(s, For):
            return self._for(s, sim)
        if isinstance(s, If):
            return self._if(s, sim)
        if isinstance(s, Block):
            return self._block(s, sim)
        if isinstance(s, Store):
            idx = tuple(sim.run(i) for i in s.indices)
            v = sim.run(s.value)
            if v is s.value and all(a is b for a, b in zip(idx, s.indices)):
                return s
            return Store(s.buffer, idx, v)
        if isinstance(s, Alloc):
            body = self.visit(s.body, sim)
            if _is_empty(body):
                return Seq(())
            return s if body is s.body else s.replace(body=body)
        if isinstance(s, Let):
            v = sim.run(s.value)
            inner = sim
            if not dt.is_float(v.dtype):
                b = sim.bounds(v)
                if b is not None:
                    inner = self._scope(sim.with_range(s.var, b))
            body = self.visit(s.body, inner)
            if _is_empty(body):
                return Seq(())
            return s if (v is s.value and body is s.body) else Let(s.var, v, body)
        if isinstance(s, AsyncCopy):
            return map_async_copy(s, sim.run)
        return s

    def _seq(self, s: Seq, sim: Simplifier) -> Stmt:
        kids = [self.visit(c, sim) for c in s.stmts]
        if len(kids) == len(s.stmts) and all(a is b for a, b in zip(kids, s.stmts)):
            return s
        kids = [k for k in kids if not _is_empty(k)]
        if len(kids) == 1:
            return kids[0]
        return Seq(kids)

    def _for(self, s: For, sim: Simplifier) -> Stmt:
        fixed = s.kind in ("thread", "vthread")
        if not fixed:
            if s.extent <= 0:
                return Seq(())
            if (s.extent == 1 and self.unwrap and not s.annotations
                    and s.kind in ("serial", "unroll", "vectorize")):
                # the var's one value replaces it in every expression of the body
                return self.visit(s.body, self._scope(sim.with_range(s.var, (0, 0))))
        inner = self._scope(sim.with_range(s.var, (0, s.extent - 1))) if s.extent > 0 else sim
        body = self.visit(s.body, inner)
        if _is_empty(body) and not fixed:
            return Seq(())
        return s if body is s.body else s.replace(body=body)

    def _if(self, s: If, sim: Simplifier) -> Stmt:
        cond = sim.run(s.cond)
        if isinstance(cond, IntImm):
            if cond.value:
                return self.visit(s.then, sim)
            return Seq(()) if s.else_ is None else self.visit(s.else_, sim)
        r_then = sim.refine(cond)
        if r_then is None:
            return Seq(()) if s.else_ is None else self.visit(s.else_, sim)
        r_else = sim.refine(cond, negate=True)
        if r_else is None:
            return self.visit(s.then, sim)
        then = self.visit(s.then, self._narrowed(sim, r_then))
        else_ = None
        if s.else_ is not None:
            else_ = self.visit(s.else_, self._narrowed(sim, r_else))
            if _is_empty(else_):
                else_ = None
        if _is_empty(then):
            if else_ is None:
                return Seq(())
            return If(sim.run(Not(cond)), else_)
        if cond is s.cond and then is s.then and else_ is s.else_:
            return s
        return If(cond, then, else_)

    def _block(self, s: Block, sim: Simplifier) -> Stmt:
        bindings = tuple(sim.run(b) for b in s.bindings)
        pred = None if s.predicate is None else sim.run(s.predicate)
        if isinstance(pred, IntImm):
            if not pred.value:
                return Seq(())
            pred = None
        ranges = dict(sim.ranges)
        for iv, bind in zip(s.iter_vars, bindings):
            if iv.extent <= 0:
                continue
            lo, hi = 0, iv.extent - 1
            bb = sim.bounds(bind) if not dt.is_float(bind.dtype) else None
            if bb is not None and max(lo, bb[0]) <= min(hi, bb[1]):
                lo, hi = max(lo, bb[0]), min(hi, bb[1])
            ranges[iv.var] = (lo, hi)
        inner = self._scope(sim.with_ranges(ranges))
        if pred is not None:
            r = inner.refine(pred)
            if r is None:
                return Seq(())
            if r is not inner.ranges:
                inner = self._scope(inner.with_ranges(r))
        init = None if s.init is None else self.visit(s.init, inner)
        if _is_empty(init):
            init = None
        body = self.visit(s.body, inner)
        if _is_empty(body) and init is None:
            return Seq(())
        same = (all(a is b for a, b in zip(bindings, s.bindings)) and pred is s.predicate
                and init is s.init and body is s.body)
        if same:
            return s
        return s.replace(bindings=bindings, predicate=pred, init=init, body=body)
