"""The simplifier for scalar expressions and statement trees.

After tiling, index expressions are nests of floordiv, floormod, mul and add (a split
gives ``i = o*f + n``, a fuse ``a = floordiv(f, n)``, ``b = floormod(f, n)``); this module
collapses them back to the flat affine forms a GPU kernel wants. What it does:

* constant folding of every op and dtype (ints wrap to their width, floats round to theirs);
* an affine canonical form for int32/int64 sums, ``c0 + sum(ci * term_i)``, with terms in
  order of first appearance, positive terms first and the constant last;
* floordiv / floormod by positive constants using the bounds of the operands: divisible
  terms move out, nested divisions merge, ``floordiv(x, c)*c + floormod(x, c)`` becomes
  ``x`` and ``x - floordiv(x, c)*c`` becomes ``floormod(x, c)``;
* min / max, comparisons and selects decided by bounds; ``and`` / ``or`` / ``select`` arms
  simplified under the knowledge their condition gives.

The result is never bigger (in nodes) than the input. Index arithmetic is treated as exact
(no overflow), as in TVM. A ``select`` arm is simplified assuming its condition holds, so
backends must evaluate only the chosen arm (``if_then_else`` semantics), as padding needs
anyway.
"""

from __future__ import annotations

import math
from fractions import Fraction
from math import gcd

import numpy as np

from . import dtype as dt
from . import simplify_cache as _cache
from .arith import INDEX_DTYPES, LEAF_TYPES, Analyzer, Lin, Ranges, const_bounds, int_range
from .expr import (
    Bin,
    Call,
    Cast,
    Cmp,
    Expr,
    FloatImm,
    IntImm,
    Not,
    Select,
    Var,
    children,
    rebuild,
)
from .stmt import Alloc, AsyncCopy, Block, For, If, Let, Seq, Stmt, Store, map_async_copy

__all__ = ["Ranges", "const_bounds", "simplify", "prove", "simplify_stmt"]

_NEG_CMP = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt", "eq": "ne", "ne": "eq"}
_FLIP_CMP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}
_MANTISSA = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}


# ---------------------------------------------------------------------------------------
# constant folding


def _wrap(v: int, dtype: str) -> int:
    """``v`` reduced to the values of an int dtype (two's complement)."""
    if dtype == "bool":
        return int(bool(v))
    b = dt.bits(dtype)
    if dt.is_uint(dtype):
        return v % (1 << b)
    half = 1 << (b - 1)
    return (v + half) % (1 << b) - half


def _round_float(v: float, dtype: str) -> float:
    """``v`` rounded to the nearest value of a float dtype."""
    v = float(v)
    if dtype == "float64" or math.isnan(v):
        return v
    return float(dt.round_to(np.float64(v), dtype))


def _const(v, dtype: str) -> Expr:
    if dtype == "int32" and -(2**31) <= v < 2**31 and type(v) is int:
        return IntImm(v, dtype)
    if dt.is_float(dtype):
        return FloatImm(_round_float(v, dtype), dtype)
    return IntImm(_wrap(int(v), dtype), dtype)


def _fits(v: int, dtype: str) -> bool:
    info = np.iinfo(dt.to_numpy(dtype))
    return int(info.min) <= v <= int(info.max)


def _true() -> IntImm:
    return IntImm(1, "bool")


def _false() -> IntImm:
    return IntImm(0, "bool")


def _fold_bin(op: str, x, y, dtype: str):
    """The value of ``x op y`` for constants, or None where it is not defined."""
    if dt.is_float(dtype):
        # a literal stands for the nearest value of its dtype, which the GPU computes with
        x, y = _round_float(x, dtype), _round_float(y, dtype)
        if op == "add":
            return x + y
        if op == "sub":
            return x - y
        if op == "mul":
            return x * y
        if op in ("div", "floordiv"):
            if y == 0:
                return None
            q = x / y
            if op == "div":
                return q
            return float(math.floor(q)) if math.isfinite(q) else None
        if op in ("min", "max"):
            if math.isnan(x) or math.isnan(y):
                return None
            return min(x, y) if op == "min" else max(x, y)
        if op == "mod":
            return math.fmod(x, y) if y != 0 and math.isfinite(x) else None
        return None
    x, y = int(x), int(y)
    if op == "add":
        return x + y
    if op == "sub":
        return x - y
    if op == "mul":
        return x * y
    if op == "floordiv":
        return None if y == 0 else x // y
    if op == "floormod":
        return None if y == 0 else x % y
    if op == "div":
        return None if y == 0 else trunc_div_int(x, y)
    if op == "mod":
        return None if y == 0 else x - trunc_div_int(x, y) * y
    if op == "min":
        return min(x, y)
    if op == "max":
        return max(x, y)
    if op == "and":
        return int(bool(x) and bool(y))
    if op == "or":
        return int(bool(x) or bool(y))
    return None


def trunc_div_int(x: int, y: int) -> int:
    """C's integer ``x / y`` (rounds toward zero), exact for any size; ``y`` is not 0."""
    q = abs(x) // abs(y)
    return q if (x < 0) == (y < 0) else -q


def _fold_cmp(op: str, x, y) -> bool:
    if op == "lt":
        return x < y
    if op == "le":
        return x <= y
    if op == "gt":
        return x > y
    if op == "ge":
        return x >= y
    if op == "eq":
        return x == y
    return x != y


def _fold_cast(v, dst: str):
    if dst == "bool":
        return int(v != 0)
    if dt.is_float(dst):
        return _round_float(float(v), dst)
    if isinstance(v, float):
        if not math.isfinite(v):
            return None
        t = math.trunc(v)
        lo, hi = int_range(dst)
        # out-of-range float to int conversion is undefined: leave it to the target
        return t if lo <= t <= hi else None
    return _wrap(v, dst)


def _sigmoid(v: float) -> float:
    if v >= 0:
        return 1.0 / (1.0 + math.exp(-v))
    z = math.exp(v)
    return z / (1.0 + z)


_FLOAT_FN = {
    "exp": math.exp,
    "log": math.log,
    "sqrt": math.sqrt,
    "rsqrt": lambda v: 1.0 / math.sqrt(v),
    "tanh": math.tanh,
    "sigmoid": _sigmoid,
    "erf": math.erf,
    "fabs": math.fabs,
    "abs": math.fabs,
    "floor": lambda v: float(math.floor(v)),
    "ceil": lambda v: float(math.ceil(v)),
    "sin": math.sin,
    "cos": math.cos,
    "pow": math.pow,
    # exact product and sum, rounded once
    "fma": lambda a, b, c: float(Fraction(a) * Fraction(b) + Fraction(c)),
    "round_tf32": lambda v: float(dt.round_to(np.float32(v), "tf32")),
}
# "round" is left alone: targets differ on halfway cases.


def _fold_call(op: str, vals: list, dtype: str):
    if dt.is_float(dtype):
        fn = _FLOAT_FN.get(op)
        if fn is None or not all(math.isfinite(v) for v in vals):
            return None
        vals = [_round_float(v, dtype) for v in vals]
        try:
            return fn(*vals)
        except (ValueError, OverflowError, ZeroDivisionError):
            return None
    if op in ("abs", "fabs"):
        return abs(vals[0])
    if op in ("floor", "ceil", "round"):
        return vals[0]
    if op == "fma":
        return vals[0] * vals[1] + vals[2]
    return None


def _lossless(src: str, mid: str) -> bool:
    """Whether casting ``src`` to ``mid`` and back gives the original value."""
    if src == "bool":
        return True
    if dt.is_float(src):
        return dt.is_float(mid) and (
            mid == src or mid == "float64" or (mid == "float32" and src != "float64"))
    if dt.is_float(mid):
        need = dt.bits(src) if dt.is_uint(src) else dt.bits(src) - 1
        return need <= _MANTISSA[mid]
    return mid != "bool" and dt.bits(mid) >= dt.bits(src)


def _splice(lin: Lin, drop: set, add: Lin) -> Lin:
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


def _is_empty(s: Stmt | None) -> bool:
    return s is None or (isinstance(s, Seq) and not s.stmts)


# ---------------------------------------------------------------------------------------
# the expression simplifier


class _Lazy:
    """An affine sum not yet printed back: parents that are sums use ``lin`` directly.

    Printing every partial sum of a long chain would cost quadratic time; only sums used
    by a non-affine parent (or returned) become expressions. ``canon`` and ``local`` are
    the sizes of the canonical form and of the rebuilt original node. ``merged``: ``lin``
    joined pieces of a split value (``floordiv(x, c)*c + floormod(x, c)``), which may have
    used the ranges; such a form is not recorded as the affine form of a rebuilt node,
    whose structure does not show it (the tables of forms outlive the ranges).
    """

    __slots__ = ("x", "lin", "a", "b", "canon", "local", "expr", "dtype", "merged")

    def __init__(self, x: Bin, lin: Lin, a, b, canon: int, local: int, merged: bool):
        self.x = x
        self.lin = lin
        self.a = a
        self.b = b
        self.canon = canon
        self.local = local
        self.expr: Expr | None = None
        self.dtype = x.dtype
        self.merged = merged


class _Simplifier(Analyzer):
    """Simplifies expressions under one set of var ranges, memoizing by node."""

    def __init__(self, ranges: Ranges | None = None, share: _Simplifier | None = None):
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

    def with_ranges(self, ranges: Ranges) -> _Simplifier:
        """A simplifier for other ranges, sharing the range-independent tables."""
        return _Simplifier(ranges, self)

    def with_range(self, var: Var, r: tuple[int, int]) -> _Simplifier:
        ranges = dict(self.ranges)
        ranges[var] = r
        return _Simplifier(ranges, self)

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
            hit = results.get((n, tuple(map(rget, vs))) if rget and vs else n)
            if hit is not None:
                r = root if hit[1] is hit[0] else hit[1]
                memo[id(root)] = (root, r)
                return self._force(r)
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
                        hit = results.get((n, tuple(map(rget, vs))) if rget and vs else n)
                        if hit is None:
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
                        hit = results.get((n, tuple(map(rget, vs))) if rget and vs else n)
                        if hit is None:
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
                    if type(va) is _Lazy:
                        va = self._force(va)
                    if type(vb) is _Lazy:
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
                            hit = results.get((n, tuple(map(rget, vs))) if rget and vs else n)
                            if hit is not None:
                                memo[id(k)] = (k, k if hit[1] is hit[0] else hit[1])
                                continue
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
                n = names[id(x)][1]
                vs = var_sets[n]
                results[(n, tuple(map(rget, vs))) if rget and vs else n] = (x, r)
            if type(r) not in leaves and id(r) not in memo:
                memo[id(r)] = (r, r)
        r = memo[id(root)][1]
        return self._force(r) if type(r) is _Lazy else r

    def _force(self, v) -> Expr:
        """The expression of a simplified value (printing a lazy sum)."""
        if not isinstance(v, _Lazy):
            return v
        if v.expr is None:
            if v.canon <= v.local:
                e = self.from_lin(v.lin, v.x.dtype)
            else:
                e = rebuild(v.x, (self._force(v.a), self._force(v.b)))
                if not v.merged:
                    self.set_lin(e, v.lin)
            v.expr = self._done(e)
        return v.expr

    def _vlin(self, v) -> Lin:
        return v.lin if type(v) is _Lazy else self.lin(v)

    def _vsize(self, v) -> int:
        return min(v.canon, v.local) if type(v) is _Lazy else self.size(v)

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
        if type(a) is _Lazy:
            a = self._force(a)
        if type(b) is _Lazy:
            b = self._force(b)
        return self._bin(x, a, b)

    def _rewrite(self, x: Expr, kids: tuple):
        if type(x) is Bin and x.op not in ("and", "or"):
            a, b = kids
            if a.dtype != x.dtype or b.dtype != x.dtype:
                return self._mixed(x, self._force(a), self._force(b))
            if x.dtype in INDEX_DTYPES and x.op in ("add", "sub", "mul"):
                return self._affine(x, a, b)
        if any(isinstance(k, _Lazy) for k in kids):
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
        head = next((i for i, (_, v) in enumerate(terms) if v > 0), None)
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

    # ------------------------------------------------------------------ binary ops
    def _bin(self, x: Bin, a: Expr, b: Expr) -> Expr:
        op, dtype = x.op, x.dtype
        ca = isinstance(a, (IntImm, FloatImm))
        cb = isinstance(b, (IntImm, FloatImm))
        if ca and cb:
            v = _fold_bin(op, a.value, b.value, dtype)
            # an integer result beyond its dtype is left to the index widening (or to the
            # kernel's own arithmetic) rather than wrapped here
            if v is not None and (not dt.is_int(dtype) or _fits(int(v), dtype)):
                return _const(v, dtype)
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
                return _const(0, dtype)
        elif op == "div":
            if cb and b.value == 1:
                return a
        elif op == "mod":
            if not is_float and cb and b.value in (1, -1):
                return _const(0, dtype)
        elif op == "floordiv":
            if not is_float and cb and b.value == 1:
                return a
        elif op == "floormod":
            if cb and b.value == 1:
                return _const(0, dtype)
        elif op in ("min", "max"):
            if self.size(a) == self.size(b) and self.same(a, b):
                return a
        return rebuild(x, (a, b))

    def _mixed(self, x: Bin, a: Expr, b: Expr) -> Expr:
        """A node whose result dtype differs from its operands': fold constants only."""
        if isinstance(a, (IntImm, FloatImm)) and isinstance(b, (IntImm, FloatImm)):
            v = _fold_bin(x.op, a.value, b.value, x.dtype)
            if v is not None:
                return _const(v, x.dtype)
        return rebuild(x, (a, b))

    def _affine(self, x: Bin, a, b):
        """add, sub, mul of index dtype: the affine form, printed lazily."""
        op, dtype = x.op, x.dtype
        # _vlin and _vsize spelled out: this runs for every index add, sub and multiply
        ta, tb = type(a), type(b)
        merged = (ta is _Lazy and a.merged) or (tb is _Lazy and b.merged)
        if op == "mul":
            if tb is IntImm:
                lin = (a.lin if ta is _Lazy else self.lin(a)).scale(b.value)
            elif ta is IntImm:
                lin = (b.lin if tb is _Lazy else self.lin(b)).scale(a.value)
            else:
                return self._product(x, self._force(a), self._force(b))
        else:
            lin = (a.lin if ta is _Lazy else self.lin(a)).add(
                b.lin if tb is _Lazy else self.lin(b), 1 if op == "add" else -1)
            if len(lin.terms) > 1:
                m = self._merge_splits(lin, dtype)
                if m is not lin:
                    lin = m
                    merged = True
        if not lin.terms:
            return _const(lin.c, dtype)
        canon = self.lin_size(lin)
        local = (1 + (min(a.canon, a.local) if ta is _Lazy else self.size(a))
                 + (min(b.canon, b.local) if tb is _Lazy else self.size(b)))
        if lin.c == 0 and len(lin.terms) == 1 and canon <= local:
            ((k, v),) = lin.terms.items()
            if v == 1:
                return self.atoms[k]
        return _Lazy(x, lin, a, b, canon, local, merged)

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
                    return _splice(lin.shift(-s * xl.c), set(xl.terms) | {kb},
                                   self.lin(term).scale(s))
        return None

    def _replace(self, lin: Lin, keys, x: Expr, lo: int, up: int | None, s: int,
                 dtype: str) -> Lin:
        term = self._split_expr(x, lo, up, dtype)
        return _splice(lin, set(keys), self.lin(term).scale(s))

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
            return IntImm(int(_fold_cmp(x.op, a.value, b.value)), "bool")
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
                return _true()
            if no:
                return _false()
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
                return _true() if op == "ne" else _false()
            else:
                d = t.shift(c // g)
        dtype = a.dtype
        pos = {k: v for k, v in d.terms.items() if v > 0}
        neg = {k: -v for k, v in d.terms.items() if v < 0}
        if pos:
            canon = Cmp(op, self.from_lin(Lin(0, pos), dtype), self.from_lin(Lin(-d.c, neg), dtype))
        else:
            canon = Cmp(_FLIP_CMP[op], self.from_lin(Lin(0, neg), dtype), IntImm(d.c, dtype))
        return self._pick(canon, rebuild(x, (a, b)))

    def _not(self, x: Not, a: Expr) -> Expr:
        if isinstance(a, IntImm):
            return IntImm(int(not a.value), "bool")
        if isinstance(a, Not):
            return a.a
        if isinstance(a, Cmp) and not dt.is_float(a.a.dtype):
            return self.run(Cmp(_NEG_CMP[a.op], a.a, a.b))
        return rebuild(x, (a,))

    def _logic(self, x: Bin, a: Expr, b: Expr) -> Expr:
        is_and = x.op == "and"
        for p, q in ((a, b), (b, a)):
            if isinstance(p, IntImm):
                if is_and:
                    return q if p.value else _false()
                return _true() if p.value else q
        if self.same(a, b):
            return a
        # a && b == a && (b knowing a); a || b == a || (b knowing !a)
        b2 = self.under(a, b, negate=not is_and)
        if b2 is None:
            return _false() if is_and else _true()
        if isinstance(b2, IntImm):
            if is_and:
                return a if b2.value else _false()
            return _true() if b2.value else a
        a2 = self.under(b2, a, negate=not is_and)
        if a2 is None:
            return _false() if is_and else _true()
        if isinstance(a2, IntImm):
            if is_and:
                return b2 if a2.value else _false()
            return _true() if a2.value else b2
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
            r = _fold_cast(v.value, x.dtype)
            if r is not None:
                return _const(r, x.dtype)
        if v.dtype == x.dtype:
            return v
        if isinstance(v, Cast) and v.value.dtype == x.dtype and _lossless(x.dtype, v.dtype):
            return v.value
        return rebuild(x, (v,))

    def _call(self, x: Call, args: tuple) -> Expr:
        if all(isinstance(a, (IntImm, FloatImm)) for a in args):
            r = _fold_call(x.op, [a.value for a in args], x.dtype)
            if r is not None:
                return _const(r, x.dtype)
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
            op = _NEG_CMP[cond.op] if negate else cond.op
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


# ---------------------------------------------------------------------------------------
# public API


def simplify(e: Expr, ranges: Ranges | None = None) -> Expr:
    """An equivalent, never bigger, simplified form of ``e``.

    ``ranges`` gives inclusive bounds of vars (loop vars: ``(0, extent - 1)``). Every node
    keeps its dtype. Inside :func:`~ptxforge.ir.simplify_cache.simplify_cache` (the
    lowering pipeline opens one) a subtree simplified before under the same ranges of its
    vars is answered from the cache.
    """
    cache = _cache.current()
    if cache is None:
        return _Simplifier(ranges).run(e)
    return _Simplifier(ranges, _shared(cache)).run(e)


def _shared(cache: _cache.SimplifyCache) -> _Simplifier:
    """The simplifier holding the range-independent tables of ``cache``'s block."""
    root = cache.root
    if root is None:
        root = cache.root = _Simplifier()
        root._cache = cache
    return root


def prove(cond: Expr, ranges: Ranges | None = None) -> bool:
    """True only if ``cond`` is provably true under ``ranges`` (False means unknown)."""
    r = simplify(cond, ranges)
    return isinstance(r, IntImm) and r.value != 0


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
    share = None if cache is None else _shared(cache)
    return _StmtSimplifier(unwrap_unit_loops).visit(stmt, _Simplifier(dict(ranges or {}), share))


class _StmtSimplifier:
    def __init__(self, unwrap_unit_loops: bool):
        self.unwrap = unwrap_unit_loops
        # scopes stay alive until the end: freeing each one as its loop closes makes the
        # allocator map and unmap memory over and over inside a big pass
        self.scopes: list[_Simplifier] = []

    def _scope(self, sim: _Simplifier) -> _Simplifier:
        self.scopes.append(sim)
        return sim

    def _narrowed(self, sim: _Simplifier, ranges: Ranges) -> _Simplifier:
        return sim if ranges is sim.ranges else self._scope(sim.with_ranges(ranges))

    def visit(self, s: Stmt, sim: _Simplifier) -> Stmt:
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

    def _seq(self, s: Seq, sim: _Simplifier) -> Stmt:
        kids = [self.visit(c, sim) for c in s.stmts]
        if len(kids) == len(s.stmts) and all(a is b for a, b in zip(kids, s.stmts)):
            return s
        kids = [k for k in kids if not _is_empty(k)]
        if len(kids) == 1:
            return kids[0]
        return Seq(kids)

    def _for(self, s: For, sim: _Simplifier) -> Stmt:
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

    def _if(self, s: If, sim: _Simplifier) -> Stmt:
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

    def _block(self, s: Block, sim: _Simplifier) -> Stmt:
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
