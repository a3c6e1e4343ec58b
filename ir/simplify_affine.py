"""Affine forms for the simplifier (:mod:`ptxforge.ir.simplify`): sums printed back from
their canonical form (lazily: a chain of partial sums is printed once, at its top), products
with constant factors pulled out, pieces of one split value merged
(``floordiv(x, c)*c + floormod(x, c)`` is ``x``), floordiv / floormod by constants using the
bounds of the dividend."""

from __future__ import annotations

from math import gcd

from .arith import LEAF_TYPES, Lin
from .expr import Bin, Expr, IntImm, Var, rebuild
from .simplify_fold import const_of


def splice(lin: Lin, drop: set, add: Lin) -> Lin:
    """``lin`` without the terms ``drop``, plus ``add`` where the first dropped term was.

    Keeping the merged term in place keeps the printed order of a sum stable.
    """
    out: dict[int, int] = {}
    pending = True
    for k, v in lin.terms.items():
        if k in drop:
            if pending:
                for k2, v2 in add.terms.items():
                    out[k2] = out.get(k2, 0) + v2
                pending = False
            continue
        out[k] = out.get(k, 0) + v
    return Lin(lin.c + add.c, {k: v for k, v in out.items() if v})


class Lazy:
    """An affine sum not yet printed back: parents that are sums use ``lin`` directly.

    Printing every partial sum of a long chain would cost quadratic time; only sums used
    by a non-affine parent (or returned) become expressions. ``canon`` and ``local`` are
    the sizes of the canonical form and of the rebuilt original node.
    """

    __slots__ = ("x", "lin", "a", "b", "canon", "local", "expr", "dtype")

    def __init__(self, x: Bin, lin: Lin, a, b, canon: int, local: int):
        self.x = x
        self.lin = lin
        self.a = a
        self.b = b
        self.canon = canon
        self.local = local
        self.expr: Expr | None = None
        self.dtype = x.dtype


class AffineRules:
    """The simplifier's rules for index sums, products, floordiv and floormod: a part of
    :class:`~ptxforge.ir.simplify_expr.Simplifier`, which gives it ``run``, ``_force``,
    ``_done`` and the analyzer's tables (``lin``, ``size``, ``atoms``, bounds)."""

    def _pick(self, canon: Expr, local: Expr) -> Expr:
        """The canonical form unless it is bigger than the plain rebuild."""
        return canon if self.size(canon) <= self.size(local) else local

    # ------------------------------------------------------------------ building
    def lin_size(self, lin: Lin) -> int:
        """The size of ``from_lin(lin)`` without building it."""
        terms = lin.terms
        if not terms:
            return 1
        c = lin.c
        n = len(terms) - 1
        has_pos = False
        ksize = self._ksize
        for k, v in terms.items():
            sz = ksize.get(k)
            if sz is None:
                sz = ksize[k] = self.size(self.atoms[k])
            n += sz
            if v != 1 and v != -1:
                n += 2
            if v > 0:
                has_pos = True
        if not has_pos:
            if c > 0:
                return n + 2
            if next(iter(terms.values())) == -1:
                n += 2
        return n + 2 if c else n

    def from_lin(self, lin: Lin, dtype: str) -> Expr:
        """Print an affine form back: positive terms first, the constant last."""
        c = lin.c
        if not lin.terms:
            return IntImm(c, dtype)
        atoms = self.atoms
        ksize = self._ksize
        terms = list(lin.terms.items())
        head = None
        i = 0
        for _, v in terms:  # the first positive term leads
            if v > 0:
                head = i
                break
            i += 1
        if head:
            terms.insert(0, terms.pop(head))
        e = None
        n = 0
        if head is None and c > 0:
            e = IntImm(c, dtype)
            c = 0
            n = 1
        for k, v in terms:
            atom = atoms[k]
            sz = ksize.get(k)
            if sz is None:
                sz = ksize[k] = self.size(atom)
            if v != 1 and v != -1:
                atom = Bin("mul", atom, IntImm(abs(v) if e is not None else v, dtype), dtype)
                sz += 2
            if e is None:
                if v == -1:
                    e = Bin("sub", IntImm(0, dtype), atom, dtype)
                    n = sz + 2
                else:
                    e = atom
                    n = sz
            else:
                e = Bin("add" if v > 0 else "sub", e, atom, dtype)
                n += sz + 1
        if c:
            e = Bin("add", e, IntImm(c, dtype), dtype) if c > 0 else Bin(
                "sub", e, IntImm(-c, dtype), dtype)
            n += 2
        self.set_lin(e, lin)
        if id(e) not in self._sizes and type(e) not in LEAF_TYPES:
            self._sizes[id(e)] = (e, n)
        return e

    def _atom(self, op: str, a: Expr, c: int, dtype: str) -> Expr:
        return self._done(Bin(op, a, IntImm(c, dtype), dtype))

    def _affine(self, x: Bin, a, b):
        """add, sub, mul of index dtype: the affine form, printed lazily."""
        op, dtype = x.op, x.dtype
        # _vlin and _vsize spelled out: this runs for every index add, sub and multiply
        ta, tb = type(a), type(b)
        if op == "mul":
            if tb is IntImm:
                lin = (a.lin if ta is Lazy else self.lin(a)).scale(b.value)
            elif ta is IntImm:
                lin = (b.lin if tb is Lazy else self.lin(b)).scale(a.value)
            else:
                return self._product(x, self._force(a), self._force(b))
        else:
            lin = (a.lin if ta is Lazy else self.lin(a)).add(
                b.lin if tb is Lazy else self.lin(b), 1 if op == "add" else -1)
            if len(lin.terms) > 1:
                lin = self._merge_splits(lin, dtype)
        if not lin.terms:
            return const_of(lin.c, dtype)
        canon = self.lin_size(lin)
        local = (1 + (min(a.canon, a.local) if ta is Lazy else self.size(a))
                 + (min(b.canon, b.local) if tb is Lazy else self.size(b)))
        if lin.c == 0 and len(lin.terms) == 1 and canon <= local:
            ((k, v),) = lin.terms.items()
            if v == 1:
                return self.atoms[k]
        return Lazy(x, lin, a, b, canon, local)

    def _single(self, e: Expr) -> tuple[int, Expr]:
        """``e`` as ``g * atom`` when it is one scaled term, else ``(1, e)``."""
        lin = self.lin(e)
        if lin.c == 0 and len(lin.terms) == 1:
            ((k, v),) = lin.terms.items()
            return v, self.atoms[k]
        return 1, e

    def _product(self, x: Bin, a: Expr, b: Expr) -> Expr:
        """A product of two non-constants: pull constant factors out (``(i*4)*j``)."""
        ga, ta = self._single(a)
        gb, tb = self._single(b)
        local = rebuild(x, (a, b))
        if ga == 1 and gb == 1:
            return local
        atom = self._done(Bin("mul", ta, tb, x.dtype))
        return self._pick(self.from_lin(self.lin(atom).scale(ga * gb), x.dtype), local)

    # ------------------------------------------------------------------ split merging
    def _merge_splits(self, lin: Lin, dtype: str) -> Lin:
        """Merge terms that are pieces of one value: ``floordiv(x, c)*c + floormod(x, c)``.

        Every term ``floordiv(floormod(x, u), l) * s`` is a split ``(x, l, u, s)``; two
        adjacent pieces of the same ``x`` combine into one.
        """
        if len(lin.terms) < 2:
            return lin
        splits = self._splits
        for _ in range(len(lin.terms)):
            groups: dict[int, list] = {}
            for k in lin.terms:
                sp = splits.get(k, False)
                if sp is False:
                    sp = self._split_key(k)
                if sp is not None:
                    groups.setdefault(sp[0], []).append((k, sp))
            if not groups:
                return lin
            merged = None
            for xkey, members in groups.items():
                merged = self._merge_group(lin, xkey, members, dtype)
                if merged is not None:
                    break
            if merged is None:
                return lin
            lin = merged
        return lin

    def _split_key(self, k: int):
        hit = self._splits.get(k, False)
        if hit is not False:
            return hit
        atom = self.atoms[k]
        out = None
        if isinstance(atom, Bin) and atom.op in ("floordiv", "floormod"):
            sp = self.split_of(atom)
            if sp is not None:
                x, lo, up = sp
                out = (self.key(x), x, lo, up)
        self._splits[k] = out
        return out

    def _merge_group(self, lin: Lin, xkey: int, members: list, dtype: str) -> Lin | None:
        x = members[0][1][1]
        if len(members) == 1 and xkey not in lin.terms and isinstance(x, Var):
            return None
        cand = [(k, lo, up, lin.terms[k]) for k, (_, _, lo, up) in members]
        if xkey in lin.terms:
            cand.append((xkey, 1, None, lin.terms[xkey]))
        for ka, la, ua, sa in cand:
            for kb, lb, ub, sb in cand:
                if ka == kb:
                    continue
                # A holds the digits above B: ((x%ua)//la)*sa + ((x%la)//lb)*sb
                if ub is not None and ub == la and la % lb == 0 and sa * lb == sb * la:
                    return self._replace(lin, (ka, kb), x, lb, ua, sb, dtype)
                # x//l - (x//m)*(m/l) == (x%m)//l, within the same upper bound
                if ua == ub and lb > la and lb % la == 0 and sb == -sa * (lb // la):
                    return self._replace(lin, (ka, kb), x, la, lb, sa, dtype)
        # x a sum spread over the terms: s*x - floordiv(x, m)*s*m == s*floormod(x, m)
        xl = self.lin(x)
        if len(xl.terms) > 1 or (xl.terms and xl.c):
            for kb, lb, ub, sb in cand:
                if ub is not None or lb == 1 or sb % lb:
                    continue
                s = -sb // lb
                if all(lin.terms.get(k) == s * v for k, v in xl.terms.items()):
                    term = self._split_expr(x, 1, lb, dtype)
                    return splice(lin.shift(-s * xl.c), set(xl.terms) | {kb},
                                   self.lin(term).scale(s))
        return None

    def _replace(self, lin: Lin, keys, x: Expr, lo: int, up: int | None, s: int,
                 dtype: str) -> Lin:
        term = self._split_expr(x, lo, up, dtype)
        return splice(lin, set(keys), self.lin(term).scale(s))

    def _split_expr(self, x: Expr, lo: int, up: int | None, dtype: str) -> Expr:
        if up is None:
            e = x if lo == 1 else Bin("floordiv", x, IntImm(lo, dtype), dtype)
        elif lo == 1:
            e = Bin("floormod", x, IntImm(up, dtype), dtype)
        else:
            e = Bin("floordiv", Bin("floormod", x, IntImm(up, dtype), dtype),
                    IntImm(lo, dtype), dtype)
        return self.run(e)

    # ------------------------------------------------------------------ floordiv / floormod
    def _divmod(self, op: str, a: Expr, c: int, dtype: str, local: Expr) -> Expr:
        if c == 1:
            return a if op == "floordiv" else IntImm(0, dtype)
        lin = self.lin(a)
        if op == "floormod":
            lin = self._strip_mods(lin, c)
        elif len(lin.terms) == 1:
            # floordiv(floordiv(y, c1) + k, c) == floordiv(y + k*c1, c1*c)
            ((k, v),) = lin.terms.items()
            atom = self.atoms[k]
            if (v == 1 and isinstance(atom, Bin) and atom.op == "floordiv"
                    and isinstance(atom.b, IntImm) and atom.b.value > 0):
                c1 = atom.b.value
                inner = self.lin(atom.a).shift(lin.c * c1)
                return self._pick(self._divmod_lin("floordiv", inner, c1 * c, dtype), local)
        return self._pick(self._divmod_lin(op, lin, c, dtype), local)

    def _strip_mods(self, lin: Lin, c: int) -> Lin:
        """Inside ``floormod(., c)``, ``floormod(y, m)`` with ``c | m`` may be ``y``."""
        out = lin
        for k, v in lin.terms.items():
            atom = self.atoms[k]
            if (isinstance(atom, Bin) and atom.op == "floormod" and isinstance(atom.b, IntImm)
                    and atom.b.value > 0 and atom.b.value % c == 0):
                out = out.add(Lin(0, {k: v}), -1).add(self.lin(atom.a), v)
        return out

    def _divmod_lin(self, op: str, lin: Lin, c: int, dtype: str) -> Expr:
        """``floordiv`` / ``floormod`` of an affine form by ``c > 1``."""
        q_terms: dict[int, int] = {}
        r_terms: dict[int, int] = {}
        for k, v in lin.terms.items():
            if v % c == 0:
                q_terms[k] = v // c
            else:
                r_terms[k] = v
        qc, rc = divmod(lin.c, c)
        rest = Lin(rc, r_terms)
        b = self.lin_bounds(rest)
        if b is not None and b[0] // c == b[1] // c:
            m = b[0] // c
            if op == "floordiv":
                return self.from_lin(Lin(qc + m, q_terms), dtype)
            return self.from_lin(rest.shift(-m * c), dtype)
        if r_terms:
            res = self._factor(op, Lin(qc, q_terms), rest, c, dtype)
            if res is not None:
                return res
        if op == "floormod":
            return self._atom("floormod", self.from_lin(rest, dtype), c, dtype)
        # keep a constant inside unless it divides out
        if rc == 0:
            num, quot = Lin(0, r_terms), Lin(qc, q_terms)
        else:
            num, quot = Lin(lin.c, r_terms), Lin(0, q_terms)
        atom = self._atom("floordiv", self.from_lin(num, dtype), c, dtype)
        if not quot.terms and not quot.c:
            alt = self._div_of_mod(atom, dtype)
            if alt is not None:
                return alt
        return self.from_lin(quot.add(self.lin(atom)), dtype)

    def _div_of_mod(self, atom: Bin, dtype: str) -> Expr | None:
        """``floordiv(floormod(y, a*b), a)`` as ``floormod(floordiv(y, a), b)`` if smaller."""
        num, c = atom.a, atom.b.value
        if not (isinstance(num, Bin) and num.op == "floormod" and isinstance(num.b, IntImm)
                and num.b.value > 0 and num.b.value % c == 0):
            return None
        ylin = self.lin(num.a)
        if not ylin.c and all(gcd(v, c) == 1 for v in ylin.terms.values()):
            return None  # floordiv(y, a) cannot get simpler than the atom
        inner = self.run(Bin("floordiv", num.a, IntImm(c, dtype), dtype))
        alt = self.run(Bin("floormod", inner, IntImm(num.b.value // c, dtype), dtype))
        return alt if self.size(alt) < self.size(atom) else None

    def _factor(self, op: str, quot: Lin, rest: Lin, c: int, dtype: str) -> Expr | None:
        """``rest = g*y + z`` with ``0 <= z < g`` and ``g | c``: divide ``y`` by ``c/g``."""
        gs = sorted({gcd(abs(v), c) for v in rest.terms.values()} - {1}, reverse=True)
        for g in gs:
            big = {k: v // g for k, v in rest.terms.items() if v % g == 0}
            small = {k: v for k, v in rest.terms.items() if v % g}
            kk, rr = divmod(rest.c, g)
            z = Lin(rr, small)
            bz = self.lin_bounds(z)
            if bz is None or bz[0] < 0 or bz[1] >= g:
                continue
            y = Lin(kk, big)
            inner = self._divmod_lin(op, y, c // g, dtype)
            if op == "floordiv":
                return self.from_lin(quot.add(self.lin(inner)), dtype)
            return self.from_lin(self.lin(inner).scale(g).add(z), dtype)
        return None

    def _divmod_general(self, x: Bin, a: Expr, b: Expr) -> Expr:
        """floordiv / floormod by a non-constant (or negative) divisor."""
        bb = self.bounds(b)
        if bb is not None and bb[0] > 0:
            ba = self.bounds(a)
            if ba is not None and ba[0] >= 0 and ba[1] < bb[0]:
                return a if x.op == "floormod" else IntImm(0, x.dtype)
        return rebuild(x, (a, b))
