"""The expression simplifier (:mod:`ptxforge.ir.simplify` describes what it does): the
traversal, with its memo by node and the subtree cache of an open
:func:`~ptxforge.ir.simplify_cache.simplify_cache`, and the dispatch of each node to the
rules of :mod:`~ptxforge.ir.simplify_affine` and :mod:`~ptxforge.ir.simplify_logic`."""

from __future__ import annotations

from . import dtype as dt
from . import simplify_cache as _cache
from .arith import INDEX_DTYPES, LEAF_TYPES, Analyzer, Lin, Ranges
from .expr import Bin, Call, Cast, Cmp, Expr, FloatImm, IntImm, Not, Select, Var, children, rebuild
from .simplify_affine import AffineRules, Lazy
from .simplify_fold import const_of, fits, fold_bin
from .simplify_logic import LogicRules


class Simplifier(AffineRules, LogicRules, Analyzer):
    """Simplifies expressions under one set of var ranges, memoizing by node."""

    def __init__(self, ranges: Ranges | None = None, share: Simplifier | None = None):
        super().__init__(ranges, share)
        self._memo: dict[int, tuple[Expr, Expr]] = {}
        # what each var met so far stands for: a var whose range is one value is that
        # constant, any other itself (filled as vars are met: a scope's ranges may hold
        # many vars its expressions never use)
        self._points: dict[Var, Expr] = {}
        if share is not None:
            self._splits = share._splits
            self._ksize = share._ksize
            self._cache = share._cache
        else:
            self._splits: dict[int, tuple | None] = {}
            self._ksize: dict[int, int] = {}
            self._cache = None

    def with_ranges(self, ranges: Ranges) -> Simplifier:
        """A simplifier for other ranges, sharing the range-independent tables."""
        return Simplifier(ranges, self)

    def with_range(self, var: Var, r: tuple[int, int]) -> Simplifier:
        ranges = dict(self.ranges)
        ranges[var] = r
        return Simplifier(ranges, self)

    def _point(self, v: Var) -> Expr:
        """The constant ``v`` is where its range is one value, else ``v``."""
        r = self.ranges.get(v)
        p = IntImm(r[0], v.dtype) if r is not None and r[0] == r[1] else v
        self._points[v] = p
        return p

    # ------------------------------------------------------------------ traversal
    def run(self, root: Expr) -> Expr:
        """The simplified form of ``root``."""
        memo = self._memo
        hit = memo.get(id(root))
        if hit is not None:
            return self._force(hit[1])
        points = self._points
        if type(root) in LEAF_TYPES:
            if type(root) is Var:
                p = points.get(root)
                return self._point(root) if p is None else p
            return root
        cache = self._cache
        if cache is not None:
            # inside simplify_cache(): a subtree met before (same structure, same ranges of
            # its vars) is not simplified again
            cache.name(root)  # names every node below too
            names = cache.names
            var_sets = cache.var_sets
            results = cache.results
            rget = self.ranges.get if self.ranges else None
            n = names[id(root)][1]
            vs = var_sets[n]
            key = (n, tuple(map(rget, vs))) if rget and vs else n
            hit = results.get(key)
            if hit is not None:
                r = root if hit[1] is hit[0] else hit[1]
                memo[id(root)] = (root, r)
                return self._force(r)
            # the key of each node to simplify, kept until its result is stored
            keys = {id(root): key}
        # post-order with an explicit stack: long chains must not recurse
        leaves = LEAF_TYPES
        rewrite = self._rewrite
        stack = [root]
        pop = stack.pop
        push = stack.append
        while stack:
            x = stack[-1]
            if id(x) in memo:
                pop()
                continue
            tx = type(x)
            if tx is Bin or tx is Cmp:
                # the common case, spelled out: two operands, no tuple of kids
                a = x.a
                b = x.b
                ta = type(a)
                tb = type(b)
                pushed = False
                if ta not in leaves and id(a) not in memo:
                    if cache is None:
                        push(a)
                        pushed = True
                    else:
                        n = names[id(a)][1]
                        vs = var_sets[n]
                        key = (n, tuple(map(rget, vs))) if rget and vs else n
                        hit = results.get(key)
                        if hit is None:
                            keys[id(a)] = key
                            push(a)
                            pushed = True
                        else:
                            memo[id(a)] = (a, a if hit[1] is hit[0] else hit[1])
                if tb not in leaves and id(b) not in memo:
                    if cache is None:
                        push(b)
                        pushed = True
                    else:
                        n = names[id(b)][1]
                        vs = var_sets[n]
                        key = (n, tuple(map(rget, vs))) if rget and vs else n
                        hit = results.get(key)
                        if hit is None:
                            keys[id(b)] = key
                            push(b)
                            pushed = True
                        else:
                            memo[id(b)] = (b, b if hit[1] is hit[0] else hit[1])
                if pushed:
                    continue
                pop()
                if ta is Var:
                    va = points.get(a)
                    if va is None:
                        va = self._point(a)
                elif ta in leaves:
                    va = a
                else:
                    va = memo[id(a)][1]
                if tb is Var:
                    vb = points.get(b)
                    if vb is None:
                        vb = self._point(b)
                elif tb in leaves:
                    vb = b
                else:
                    vb = memo[id(b)][1]
                if tx is Bin:
                    r = self._rewrite_bin(x, va, vb)
                else:
                    if type(va) is Lazy:
                        va = self._force(va)
                    if type(vb) is Lazy:
                        vb = self._force(vb)
                    r = self._cmp(x, va, vb)
                if r.dtype != x.dtype:
                    # never change a node's type: keep the node over its simplified children
                    r = rebuild(x, (self._force(va), self._force(vb)))
            else:
                kids = (x.cond,) if tx is Select else children(x)
                pushed = False
                for k in kids:
                    if type(k) not in leaves and id(k) not in memo:
                        if cache is not None:
                            n = names[id(k)][1]
                            vs = var_sets[n]
                            key = (n, tuple(map(rget, vs))) if rget and vs else n
                            hit = results.get(key)
                            if hit is not None:
                                memo[id(k)] = (k, k if hit[1] is hit[0] else hit[1])
                                continue
                            keys[id(k)] = key
                        push(k)
                        pushed = True
                if pushed:
                    continue
                pop()
                vals = tuple(self._point(k) if type(k) is Var else (
                    k if type(k) in leaves else memo[id(k)][1]) for k in kids)
                r = rewrite(x, vals)
                if r.dtype != x.dtype:
                    r = rebuild(x, tuple(self._force(v) for v in vals))
            memo[id(x)] = (x, r)
            if cache is not None:
                results[keys.pop(id(x))] = (x, r)
            if type(r) not in leaves and id(r) not in memo:
                memo[id(r)] = (r, r)
        r = memo[id(root)][1]
        return self._force(r) if type(r) is Lazy else r

    def _force(self, v) -> Expr:
        """The expression of a simplified value (printing a lazy sum)."""
        if not isinstance(v, Lazy):
            return v
        if v.expr is None:
            if v.canon <= v.local:
                e = self.from_lin(v.lin, v.x.dtype)
            else:
                fa, fb = self._force(v.a), self._force(v.b)
                e = rebuild(v.x, (fa, fb))
                if self._written(v, fa, fb):
                    self.set_lin(e, v.lin)
            v.expr = self._done(e)
        return v.expr

    def _written(self, v: Lazy, a: Expr, b: Expr) -> bool:
        """Whether ``v.lin`` is the affine form of ``v``'s op over ``a`` and ``b`` as they
        are written. It is not where pieces of a split value were merged
        (``floordiv(x, c)*c + floormod(x, c)``), which may have used the ranges: such a
        form is not recorded for the rebuilt node (the tables of forms outlive the ranges).
        """
        op = v.x.op
        if op == "mul":
            s = self.lin(a).scale(b.value) if type(b) is IntImm else self.lin(b).scale(a.value)
        else:
            s = self.lin(a).add(self.lin(b), 1 if op == "add" else -1)
        return s.c == v.lin.c and s.terms == v.lin.terms

    def _vlin(self, v) -> Lin:
        return v.lin if type(v) is Lazy else self.lin(v)

    def _vsize(self, v) -> int:
        return min(v.canon, v.local) if type(v) is Lazy else self.size(v)

    def _done(self, e: Expr) -> Expr:
        """Mark a node built from simplified parts as simplified."""
        if id(e) not in self._memo:
            self._memo[id(e)] = (e, e)
        return e

    def _rewrite_bin(self, x: Bin, a, b):
        """:meth:`_rewrite` of a ``Bin`` with its simplified operands ``a``, ``b``."""
        op = x.op
        if op != "and" and op != "or":
            dtype = x.dtype
            if a.dtype != dtype or b.dtype != dtype:
                return self._mixed(x, self._force(a), self._force(b))
            if dtype in INDEX_DTYPES and (op == "add" or op == "sub" or op == "mul"):
                return self._affine(x, a, b)
        if type(a) is Lazy:
            a = self._force(a)
        if type(b) is Lazy:
            b = self._force(b)
        return self._bin(x, a, b)

    def _rewrite(self, x: Expr, kids: tuple):
        if type(x) is Bin and x.op not in ("and", "or"):
            a, b = kids
            if a.dtype != x.dtype or b.dtype != x.dtype:
                return self._mixed(x, self._force(a), self._force(b))
            if x.dtype in INDEX_DTYPES and x.op in ("add", "sub", "mul"):
                return self._affine(x, a, b)
        if any(isinstance(k, Lazy) for k in kids):
            kids = tuple(self._force(k) for k in kids)
        if isinstance(x, Bin):
            return self._bin(x, kids[0], kids[1])
        if isinstance(x, Cmp):
            return self._cmp(x, kids[0], kids[1])
        if isinstance(x, Select):
            return self._select(x, kids[0])
        if isinstance(x, Not):
            return self._not(x, kids[0])
        if isinstance(x, Cast):
            return self._cast(x, kids[0])
        if isinstance(x, Call):
            return self._call(x, kids)
        if not kids:
            return x
        return rebuild(x, kids)

    # ------------------------------------------------------------------ binary ops
    def _bin(self, x: Bin, a: Expr, b: Expr) -> Expr:
        op, dtype = x.op, x.dtype
        ca = isinstance(a, (IntImm, FloatImm))
        cb = isinstance(b, (IntImm, FloatImm))
        if ca and cb:
            v = fold_bin(op, a.value, b.value, dtype)
            # an integer result beyond its dtype is left to the index widening (or to the
            # kernel's own arithmetic) rather than wrapped here
            if v is not None and (not dt.is_int(dtype) or fits(int(v), dtype)):
                return const_of(v, dtype)
        if dtype in INDEX_DTYPES:
            if op in ("floordiv", "floormod"):
                if isinstance(b, IntImm) and b.value > 0:
                    return self._divmod(op, a, b.value, dtype, rebuild(x, (a, b)))
                return self._divmod_general(x, a, b)
            if op in ("min", "max"):
                return self._minmax(x, a, b)
        if op in ("and", "or"):
            return self._logic(x, a, b)
        is_float = dt.is_float(dtype)
        if op == "add":
            if cb and b.value == 0:
                return a
            if ca and a.value == 0:
                return b
        elif op == "sub":
            if cb and b.value == 0:
                return a
        elif op == "mul":
            if cb and b.value == 1:
                return a
            if ca and a.value == 1:
                return b
            if not is_float and ((ca and a.value == 0) or (cb and b.value == 0)):
                return const_of(0, dtype)
        elif op == "div":
            if cb and b.value == 1:
                return a
        elif op == "mod":
            if not is_float and cb and b.value in (1, -1):
                return const_of(0, dtype)
        elif op == "floordiv":
            if not is_float and cb and b.value == 1:
                return a
        elif op == "floormod":
            if cb and b.value == 1:
                return const_of(0, dtype)
        elif op in ("min", "max"):
            if self.size(a) == self.size(b) and self.same(a, b):
                return a
        return rebuild(x, (a, b))

    def _mixed(self, x: Bin, a: Expr, b: Expr) -> Expr:
        """A node whose result dtype differs from its operands': fold constants only."""
        if isinstance(a, (IntImm, FloatImm)) and isinstance(b, (IntImm, FloatImm)):
            v = fold_bin(x.op, a.value, b.value, x.dtype)
            if v is not None:
                return const_of(v, x.dtype)
        return rebuild(x, (a, b))


def shared_simplifier(cache: _cache.SimplifyCache) -> Simplifier:
    """The simplifier holding the range-independent tables of ``cache``'s block."""
    root = cache.root
    if root is None:
        root = cache.root = Simplifier()
        root._cache = cache
    return root
