"""Comparisons, logic, min / max, selects and casts for the simplifier
(:mod:`ptxforge.ir.simplify`), and what a condition tells about the ranges of vars."""

from __future__ import annotations

from math import gcd

from . import dtype as dt
from .arith import INDEX_DTYPES, Lin, Ranges, int_range
from .expr import Bin, Call, Cast, Cmp, Expr, FloatImm, IntImm, Not, Select, Var, rebuild
from .simplify_fold import const_of, false_imm, fold_call, fold_cast, fold_cmp, lossless, true_imm

NEG_CMP = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt", "eq": "ne", "ne": "eq"}
FLIP_CMP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}


class LogicRules:
    """The simplifier's rules for min / max, comparisons, ``and`` / ``or`` / ``not``,
    selects, casts and calls, and the narrowing of ranges under a condition: a part of
    :class:`~ptxforge.ir.simplify_expr.Simplifier`."""

    # ------------------------------------------------------------------ min / max
    def _minmax(self, x: Bin, a: Expr, b: Expr) -> Expr:
        is_min = x.op == "min"
        if isinstance(a, IntImm) and not isinstance(b, IntImm):
            a, b = b, a
        if self.same(a, b):
            return a
        d = self.lin(a).add(self.lin(b), -1)
        bd = self.lin_bounds(d)
        if bd is not None:
            if bd[1] <= 0:
                return a if is_min else b
            if bd[0] >= 0:
                return b if is_min else a
        if (isinstance(b, IntImm) and isinstance(a, Bin) and a.op == x.op
                and isinstance(a.b, IntImm)):
            c = min(a.b.value, b.value) if is_min else max(a.b.value, b.value)
            return self.run(Bin(x.op, a.a, IntImm(c, x.dtype), x.dtype))
        return rebuild(x, (a, b))

    # ------------------------------------------------------------------ logic
    def _cmp(self, x: Cmp, a: Expr, b: Expr) -> Expr:
        if isinstance(a, (IntImm, FloatImm)) and isinstance(b, (IntImm, FloatImm)):
            return IntImm(int(fold_cmp(x.op, a.value, b.value)), "bool")
        if a.dtype in INDEX_DTYPES and b.dtype == a.dtype:
            return self._cmp_index(x, a, b)
        if not dt.is_float(a.dtype) and self.size(a) == self.size(b) and self.same(a, b):
            return IntImm(int(x.op in ("eq", "le", "ge")), "bool")
        return rebuild(x, (a, b))

    def _cmp_index(self, x: Cmp, a: Expr, b: Expr) -> Expr:
        """``a op b`` as ``d op 0`` with ``d = a - b``, decided by bounds or normalized."""
        op = x.op
        d = self.lin(a).add(self.lin(b), -1)
        bd = self.lin_bounds(d)
        if bd is not None:
            lo, hi = bd
            yes, no = {
                "lt": (hi < 0, lo >= 0),
                "le": (hi <= 0, lo > 0),
                "gt": (lo > 0, hi <= 0),
                "ge": (lo >= 0, hi < 0),
                "eq": (lo == hi == 0, lo > 0 or hi < 0),
                "ne": (lo > 0 or hi < 0, lo == hi == 0),
            }[op]
            if yes:
                return true_imm()
            if no:
                return false_imm()
        g = 0
        for v in d.terms.values():
            g = gcd(g, abs(v))
        if g > 1:
            # g*t + c op 0  <=>  t op' -c/g, rounded the right way for integers
            t = Lin(0, {k: v // g for k, v in d.terms.items()})
            c = d.c
            if op in ("lt", "ge"):
                d = t.shift(c // g)
            elif op in ("le", "gt"):
                d = t.shift(-((-c) // g))
            elif c % g:
                return true_imm() if op == "ne" else false_imm()
            else:
                d = t.shift(c // g)
        dtype = a.dtype
        pos = {k: v for k, v in d.terms.items() if v > 0}
        neg = {k: -v for k, v in d.terms.items() if v < 0}
        if pos:
            canon = Cmp(op, self.from_lin(Lin(0, pos), dtype), self.from_lin(Lin(-d.c, neg), dtype))
        else:
            canon = Cmp(FLIP_CMP[op], self.from_lin(Lin(0, neg), dtype), IntImm(d.c, dtype))
        return self._pick(canon, rebuild(x, (a, b)))

    def _not(self, x: Not, a: Expr) -> Expr:
        if isinstance(a, IntImm):
            return IntImm(int(not a.value), "bool")
        if isinstance(a, Not):
            return a.a
        if isinstance(a, Cmp) and not dt.is_float(a.a.dtype):
            return self.run(Cmp(NEG_CMP[a.op], a.a, a.b))
        return rebuild(x, (a,))

    def _logic(self, x: Bin, a: Expr, b: Expr) -> Expr:
        is_and = x.op == "and"
        for p, q in ((a, b), (b, a)):
            if isinstance(p, IntImm):
                if is_and:
                    return q if p.value else false_imm()
                return true_imm() if p.value else q
        if self.same(a, b):
            return a
        # a && b == a && (b knowing a); a || b == a || (b knowing !a)
        b2 = self.under(a, b, negate=not is_and)
        if b2 is None:
            return false_imm() if is_and else true_imm()
        if isinstance(b2, IntImm):
            if is_and:
                return a if b2.value else false_imm()
            return true_imm() if b2.value else a
        a2 = self.under(b2, a, negate=not is_and)
        if a2 is None:
            return false_imm() if is_and else true_imm()
        if isinstance(a2, IntImm):
            if is_and:
                return b2 if a2.value else false_imm()
            return true_imm() if a2.value else b2
        return rebuild(x, (a, b2))

    def _select(self, x: Select, cond: Expr) -> Expr:
        if isinstance(cond, IntImm):
            return self.run(x.t if cond.value else x.f)
        t = self.under(cond, x.t)
        if t is None:
            return self.run(x.f)
        f = self.under(cond, x.f, negate=True)
        if f is None:
            return t
        if self.size(t) == self.size(f) and self.same(t, f):
            return t
        if x.dtype == "bool" and isinstance(t, IntImm) and isinstance(f, IntImm):
            return cond if t.value else self.run(Not(cond))
        if cond is x.cond and t is x.t and f is x.f:
            return x
        return Select(cond, t, f)

    def _cast(self, x: Cast, v: Expr) -> Expr:
        if isinstance(v, (IntImm, FloatImm)):
            r = fold_cast(v.value, x.dtype)
            if r is not None:
                return const_of(r, x.dtype)
        if v.dtype == x.dtype:
            return v
        if isinstance(v, Cast) and v.value.dtype == x.dtype and lossless(x.dtype, v.dtype):
            return v.value
        return rebuild(x, (v,))

    def _call(self, x: Call, args: tuple) -> Expr:
        if all(isinstance(a, (IntImm, FloatImm)) for a in args):
            r = fold_call(x.op, [a.value for a in args], x.dtype)
            if r is not None:
                return const_of(r, x.dtype)
        return rebuild(x, args)

    # ------------------------------------------------------------------ conditions
    def under(self, cond: Expr, e: Expr, negate: bool = False) -> Expr | None:
        """Simplify ``e`` where ``cond`` (or ``not cond``) holds; None if it never does."""
        r = self.refine(cond, negate)
        if r is None:
            return None
        if r is self.ranges:
            return self.run(e)
        return self.with_ranges(r).run(e)

    def refine(self, cond: Expr, negate: bool = False) -> Ranges | None:
        """The ranges narrowed by ``cond`` (or its negation) holding.

        Returns ``self.ranges`` itself when nothing narrows, None when the condition is
        unsatisfiable within the ranges. Vars narrow from their range (or, without one,
        from the values of their dtype); facts about non-var terms are not kept.
        """
        facts: list[Lin] = []
        self._facts(cond, negate, facts)
        if not facts:
            return self.ranges
        new: dict | None = None
        for d in facts:  # each fact: d <= 0
            items = list(d.terms.items())
            contrib = []  # the lowest value of each term, None where unknown
            for k, v in items:
                b = self.key_bounds(k)
                contrib.append(None if b is None else (v * b[0] if v > 0 else v * b[1]))
            unknown = sum(1 for t in contrib if t is None)
            known_lo = d.c + sum(t for t in contrib if t is not None)
            for (k, v), lo_k in zip(items, contrib):
                var = self.atoms[k]
                if not isinstance(var, Var) or unknown > (1 if lo_k is None else 0):
                    continue
                rest_lo = known_lo - (lo_k or 0)
                bound = -rest_lo  # v*var <= bound
                b = self.key_bounds(k) or int_range(var.dtype)
                cur = new.get(var, b) if new is not None else b
                if v > 0:
                    nb = (cur[0], min(cur[1], bound // v))
                else:
                    nb = (max(cur[0], -(bound // -v)), cur[1])
                if nb != cur:
                    if nb[0] > nb[1]:
                        return None
                    if new is None:
                        new = dict(self.ranges)
                    new[var] = nb
        return self.ranges if new is None else new

    def _facts(self, cond: Expr, negate: bool, out: list) -> None:
        """Collect ``d <= 0`` facts (affine ``d``) implied by ``cond`` (or its negation)."""
        if isinstance(cond, Bin) and cond.op == ("or" if negate else "and"):
            self._facts(cond.a, negate, out)
            self._facts(cond.b, negate, out)
        elif isinstance(cond, Not):
            self._facts(cond.a, not negate, out)
        elif isinstance(cond, Cmp) and cond.a.dtype in INDEX_DTYPES:
            op = NEG_CMP[cond.op] if negate else cond.op
            la, lb = self.lin(cond.a), self.lin(cond.b)
            if op == "lt":
                out.append(la.add(lb, -1).shift(1))
            elif op == "le":
                out.append(la.add(lb, -1))
            elif op == "gt":
                out.append(lb.add(la, -1).shift(1))
            elif op == "ge":
                out.append(lb.add(la, -1))
            elif op == "eq":
                d = la.add(lb, -1)
                out.append(d)
                out.append(d.scale(-1))
