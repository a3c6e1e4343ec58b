"""Integer analysis of index expressions: affine forms, structural keys and bounds.

An :class:`Analyzer` answers three questions about int expressions under known var ranges:

* ``lin(e)``: the affine form ``c0 + sum(ci * term_i)`` of ``e``, where terms are vars or
  non-affine atoms (floordiv, floormod, min, max, loads, products of two non-constants, ...);
* ``key(e)``: a small int naming ``e`` up to structure, equal for expressions that differ only
  by the order of a sum or of a commutative op (``i + j`` and ``j + i``), or that are the
  two spellings of one digit (``floordiv(floormod(x, 12), 4)``, ``floormod(floordiv(x, 4), 3)``);
* ``bounds(e)``: inclusive integer bounds by interval arithmetic, tight for affine forms
  because coefficients are gathered first (``i - i`` is ``[0, 0]``).

Everything is memoized per analyzer; an analyzer holds one set of ranges, so make a new one
when the ranges change. The simplifier (:mod:`ptxforge.ir.simplify`) builds on this.

Index arithmetic (int32, int64) is treated as arithmetic on mathematical integers, as in
TVM: index expressions of a valid program do not overflow.
"""

from __future__ import annotations

from . import dtype as dt
from .expr import (
    Bin,
    Call,
    Cast,
    Cmp,
    Expr,
    FloatImm,
    IntImm,
    Load,
    Not,
    Select,
    TensorRead,
    Var,
    children,
)

Ranges = dict[Var, tuple[int, int]]
"""Inclusive integer bounds ``(lo, hi)`` of vars."""

INDEX_DTYPES = frozenset(("int32", "int64"))
"""Int dtypes whose arithmetic the analysis treats as exact (no overflow)."""

LEAF_TYPES = frozenset((IntImm, FloatImm, Var))
"""Node types without children (compare with ``type(e) in LEAF_TYPES``)."""
_COMMUTATIVE = frozenset(("add", "mul", "min", "max", "and", "or"))
_CMP_SWAP = {"gt": "lt", "ge": "le"}


class Lin:
    """An affine form ``c + sum(terms[k] * atom_k)``.

    ``terms`` maps an analyzer key to a nonzero coefficient, in order of first appearance;
    the analyzer's ``atoms`` maps each key back to an expression.
    """

    __slots__ = ("c", "terms")

    def __init__(self, c: int = 0, terms: dict | None = None):
        self.c = c
        self.terms = {} if terms is None else terms

    def add(self, other: Lin, scale: int = 1) -> Lin:
        """``self + scale * other``."""
        terms = dict(self.terms)
        for k, v in other.terms.items():
            n = terms.get(k, 0) + scale * v
            if n:
                terms[k] = n
            else:
                terms.pop(k, None)
        return Lin(self.c + scale * other.c, terms)

    def scale(self, f: int) -> Lin:
        if f == 0:
            return Lin(0, {})
        return Lin(self.c * f, {k: v * f for k, v in self.terms.items()})

    def shift(self, c: int) -> Lin:
        return Lin(self.c + c, self.terms)

    def __repr__(self):
        return f"Lin({self.c}, {self.terms})"


def is_affine_node(e: Expr) -> bool:
    """Whether ``e`` is an add, sub or multiply-by-constant node of index dtype."""
    if not isinstance(e, Bin) or e.dtype not in INDEX_DTYPES:
        return False
    if e.a.dtype != e.dtype or e.b.dtype != e.dtype:
        return False  # a mixed-dtype node (explicit result dtype) is an opaque atom
    op = e.op
    if op == "add" or op == "sub":
        return True
    return op == "mul" and (isinstance(e.a, IntImm) or isinstance(e.b, IntImm))


def int_range(dtype: str) -> tuple[int, int]:
    """The values an int (or bool) dtype can hold."""
    if dtype == "bool":
        return (0, 1)
    b = dt.bits(dtype)
    if dt.is_uint(dtype):
        return (0, 2**b - 1)
    return (-(2 ** (b - 1)), 2 ** (b - 1) - 1)


def _clip(b: tuple[int, int] | None, dtype: str) -> tuple[int, int] | None:
    """Bounds of a non-index int op: exact if they fit the dtype, else the whole dtype."""
    full = int_range(dtype)
    if b is None or b[0] < full[0] or b[1] > full[1]:
        return full
    return b


def _mul_bounds(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    p = (a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])
    return (min(p), max(p))


class Analyzer:
    """Affine forms, structural keys and bounds of expressions under fixed var ranges.

    ``share``: another analyzer whose range-independent tables (keys, affine forms,
    sizes) this one reuses.
    """

    def __init__(self, ranges: Ranges | None = None, share: Analyzer | None = None):
        self.ranges: Ranges = ranges if ranges is not None else {}
        self._bnd: dict[int, tuple[int, int] | None] = {}
        if share is not None:
            # keys, forms and sizes do not depend on the ranges: share them
            self._keys = share._keys
            self._lins = share._lins
            self._sizes = share._sizes
            self._intern = share._intern
            self.atoms = share.atoms
            return
        # memo tables keyed by id(expr) hold the expr too, so the id stays valid
        self._keys: dict[int, tuple[Expr, int]] = {}
        self._lins: dict[int, tuple[Expr, Lin]] = {}
        self._sizes: dict[int, tuple[Expr, int]] = {}
        self._intern: dict[tuple, int] = {}
        self.atoms: dict[int, Expr] = {}

    # ------------------------------------------------------------------ keys and forms
    def key(self, e: Expr) -> int:
        """A small int equal for structurally equal expressions (modulo commutativity)."""
        hit = self._keys.get(id(e))
        if hit is not None:
            return hit[1]
        if isinstance(e, Var):
            sig = ("v", id(e))
        elif isinstance(e, IntImm):
            sig = ("i", e.value, e.dtype)
        elif isinstance(e, FloatImm):
            sig = ("f", e.value.hex(), e.dtype)
        elif is_affine_node(e):
            sig = self._lin_sig(self.lin(e), e.dtype)
        elif isinstance(e, Bin) and (sp := self._nested_split(e)) is not None:
            # floordiv(floormod(x, l*m), l) and floormod(floordiv(x, l), m) are one value
            sig = ("split", e.dtype, self.key(sp[0]), sp[1], sp[2])
        elif isinstance(e, Bin):
            ka, kb = self.key(e.a), self.key(e.b)
            if e.op in _COMMUTATIVE and ka > kb:
                ka, kb = kb, ka
            sig = (e.op, e.dtype, ka, kb)
        elif isinstance(e, Cmp):
            ka, kb = self.key(e.a), self.key(e.b)
            op = e.op
            if op in ("gt", "ge"):
                op, ka, kb = _CMP_SWAP[op], kb, ka
            elif op in ("eq", "ne") and ka > kb:
                ka, kb = kb, ka
            sig = (op, ka, kb)
        elif isinstance(e, Not):
            sig = ("not", self.key(e.a))
        elif isinstance(e, Select):
            sig = ("sel", self.key(e.cond), self.key(e.t), self.key(e.f))
        elif isinstance(e, Cast):
            sig = ("cast", e.dtype, self.key(e.value))
        elif isinstance(e, Call):
            sig = ("call", e.op, e.dtype) + tuple(self.key(a) for a in e.args)
        elif isinstance(e, Load):
            sig = ("load", id(e.buffer)) + tuple(self.key(i) for i in e.indices)
        elif isinstance(e, TensorRead):
            sig = ("read", id(e.tensor)) + tuple(self.key(i) for i in e.indices)
        else:  # Reduce and anything opaque: only equal to itself
            sig = ("opaque", id(e))
        if isinstance(sig, int):
            k = sig
        else:
            k = self._intern.get(sig)
            if k is None:
                k = len(self._intern)
                self._intern[sig] = k
        self._keys[id(e)] = (e, k)
        return k

    def _nested_split(self, e: Bin):
        a = e.a
        if e.op not in ("floordiv", "floormod") or not isinstance(a, Bin):
            return None
        if a.op not in ("floordiv", "floormod") or a.op == e.op:
            return None
        return self.split_of(e)

    def _lin_sig(self, lin: Lin, dtype: str):
        if not lin.terms:
            return ("i", lin.c, dtype)
        if lin.c == 0 and len(lin.terms) == 1:
            ((k, v),) = lin.terms.items()
            if v == 1:
                return k
        return ("lin", dtype, lin.c, frozenset(lin.terms.items()))

    def lin(self, e: Expr) -> Lin:
        """The affine form of an int expression (an atom is ``1 * atom``)."""
        hit = self._lins.get(id(e))
        if hit is not None:
            return hit[1]
        if type(e) is Var:  # an atom of its own, without the walk below
            k = self.key(e)
            if k not in self.atoms:
                self.atoms[k] = e
            out = Lin(0, {k: 1})
            self._lins[id(e)] = (e, out)
            return out
        c = 0
        terms: dict[int, int] = {}
        # walk the affine spine with an explicit stack: long sums must not recurse
        stack: list[tuple[Expr, int]] = [(e, 1)]
        while stack:
            x, s = stack.pop()
            if isinstance(x, IntImm):
                c += s * x.value
                continue
            if x is not e:
                h = self._lins.get(id(x))
                if h is not None:
                    sub = h[1]
                    c += s * sub.c
                    for k, v in sub.terms.items():
                        terms[k] = terms.get(k, 0) + s * v
                    continue
            if is_affine_node(x):
                op = x.op
                if op == "add":
                    stack.append((x.b, s))
                    stack.append((x.a, s))
                elif op == "sub":
                    stack.append((x.b, -s))
                    stack.append((x.a, s))
                elif isinstance(x.b, IntImm):
                    stack.append((x.a, s * x.b.value))
                else:
                    stack.append((x.b, s * x.a.value))
                continue
            k = self.key(x)
            if k not in self.atoms:
                self.atoms[k] = x
            terms[k] = terms.get(k, 0) + s
        out = Lin(c, {k: v for k, v in terms.items() if v})
        self._lins[id(e)] = (e, out)
        return out

    def set_lin(self, e: Expr, lin: Lin) -> None:
        """Record the affine form of an expression built from it."""
        self._lins[id(e)] = (e, lin)

    def size(self, e: Expr) -> int:
        """Number of nodes of ``e`` (shared subtrees counted once per use)."""
        if type(e) in LEAF_TYPES:
            return 1
        sizes = self._sizes
        hit = sizes.get(id(e))
        if hit is not None:
            return hit[1]
        if type(e) is Bin:  # the common case: both operands known
            a, b = e.a, e.b
            sa = 1 if type(a) in LEAF_TYPES else sizes.get(id(a), (None, None))[1]
            sb = 1 if type(b) in LEAF_TYPES else sizes.get(id(b), (None, None))[1]
            if sa is not None and sb is not None:
                sizes[id(e)] = (e, 1 + sa + sb)
                return 1 + sa + sb
        stack = [e]
        while stack:
            x = stack[-1]
            if id(x) in self._sizes:
                stack.pop()
                continue
            kids = children(x)
            todo = [k for k in kids if id(k) not in self._sizes]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            self._sizes[id(x)] = (x, 1 + sum(self._sizes[id(k)][1] for k in kids))
        return self._sizes[id(e)][1]

    def same(self, a: Expr, b: Expr) -> bool:
        """Structural equality (modulo commutativity)."""
        return a is b or (a.dtype == b.dtype and self.key(a) == self.key(b))

    # ------------------------------------------------------------------ bounds
    def bounds(self, e: Expr) -> tuple[int, int] | None:
        """Inclusive integer bounds of an int or bool expression, or None if unknown."""
        if isinstance(e, IntImm):
            return (e.value, e.value)
        if is_affine_node(e):
            return self.lin_bounds(self.lin(e))
        k = self.key(e)
        if k not in self.atoms:
            self.atoms[k] = e
        return self.key_bounds(k)

    def key_bounds(self, k: int) -> tuple[int, int] | None:
        if k in self._bnd:
            return self._bnd[k]
        b = self._atom_bounds(self.atoms[k])
        self._bnd[k] = b
        return b

    def lin_bounds(self, lin: Lin) -> tuple[int, int] | None:
        lo = hi = lin.c
        for k, v in lin.terms.items():
            b = self.key_bounds(k)
            if b is None:
                return None
            if v > 0:
                lo += v * b[0]
                hi += v * b[1]
            else:
                lo += v * b[1]
                hi += v * b[0]
        return (lo, hi)

    def _atom_bounds(self, e: Expr) -> tuple[int, int] | None:
        dtype = e.dtype
        if dt.is_float(dtype):
            return None
        if isinstance(e, Var):
            r = self.ranges.get(e)
            if r is not None:
                return (int(r[0]), int(r[1]))
            return None if dtype in INDEX_DTYPES else int_range(dtype)
        if isinstance(e, IntImm):
            return (e.value, e.value)
        if dtype == "bool":
            return (0, 1)
        index = dtype in INDEX_DTYPES
        if isinstance(e, Bin):
            b = self._bin_bounds(e)
            return b if index else _clip(b, dtype)
        if isinstance(e, Select):
            bt, bf = self.bounds(e.t), self.bounds(e.f)
            if bt is None or bf is None:
                return None if index else int_range(dtype)
            return (min(bt[0], bf[0]), max(bt[1], bf[1]))
        if isinstance(e, Cast):
            src = e.value.dtype
            if dt.is_float(src):
                return None if index else int_range(dtype)
            b = self.bounds(e.value)
            if b is None:
                return None if index else int_range(dtype)
            full = int_range(dtype)
            if b[0] < full[0] or b[1] > full[1]:
                return full
            return b
        if isinstance(e, Call) and e.op in ("abs", "fabs"):
            b = self.bounds(e.args[0])
            if b is None:
                return None if index else int_range(dtype)
            if b[0] >= 0:
                return b
            if b[1] <= 0:
                return (-b[1], -b[0])
            return (0, max(-b[0], b[1]))
        return None if index else int_range(dtype)

    def _bin_bounds(self, e: Bin) -> tuple[int, int] | None:
        op = e.op
        ba = self.bounds(e.a)
        bb = self.bounds(e.b)
        if op in ("floordiv", "floormod"):
            if bb is None or bb[0] <= 0 <= bb[1]:
                return None
            if op == "floordiv":
                if ba is None:
                    return None
                q = [ba[0] // bb[0], ba[0] // bb[1], ba[1] // bb[0], ba[1] // bb[1]]
                return (min(q), max(q))
            if bb[0] > 0:
                if ba is not None:
                    if bb[0] == bb[1]:
                        c = bb[0]
                        if ba[0] // c == ba[1] // c:
                            m = ba[0] // c * c
                            return (ba[0] - m, ba[1] - m)
                    if ba[0] >= 0:
                        return (0, min(ba[1], bb[1] - 1))
                return (0, bb[1] - 1)
            return (bb[0] + 1, 0)
        if ba is None or bb is None:
            return None
        if op == "add":
            return (ba[0] + bb[0], ba[1] + bb[1])
        if op == "sub":
            return (ba[0] - bb[1], ba[1] - bb[0])
        if op == "mul":
            return _mul_bounds(ba, bb)
        if op == "min":
            return (min(ba[0], bb[0]), min(ba[1], bb[1]))
        if op == "max":
            return (max(ba[0], bb[0]), max(ba[1], bb[1]))
        return None

    # ------------------------------------------------------------------ splits
    def split_of(self, e: Expr) -> tuple[Expr, int, int | None] | None:
        """``e`` as ``floordiv(floormod(x, upper), lower)``: ``(x, lower, upper)``.

        ``upper`` is None where there is no floormod. Plain ``floordiv(x, l)`` is
        ``(x, l, None)``, ``floormod(x, u)`` is ``(x, 1, u)`` and
        ``floormod(floordiv(x, l), m)`` is ``(x, l, l * m)``.
        """
        if not isinstance(e, Bin) or not isinstance(e.b, IntImm) or e.b.value <= 0:
            return None
        if e.op == "floordiv":
            a = e.a
            if (isinstance(a, Bin) and a.op == "floormod" and isinstance(a.b, IntImm)
                    and a.b.value > 0 and a.b.value % e.b.value == 0):
                return (a.a, e.b.value, a.b.value)
            return (a, e.b.value, None)
        if e.op == "floormod":
            a = e.a
            if (isinstance(a, Bin) and a.op == "floordiv" and isinstance(a.b, IntImm)
                    and a.b.value > 0):
                return (a.a, a.b.value, a.b.value * e.b.value)
            return (a, 1, e.b.value)
        return None


def const_bounds(e: Expr, ranges: Ranges | None = None) -> tuple[int, int] | None:
    """Inclusive integer bounds of an int expression by interval arithmetic.

    Coefficients of affine forms are gathered first, so ``i - i`` is ``(0, 0)``. Handles
    floordiv / floormod (by constants and by intervals that exclude zero), min, max,
    select (the union of both arms), products, casts of ints and bools. Returns None when
    the bounds are unknown: an int32/int64 var without a range, a float, a load.
    """
    if dt.is_float(e.dtype):
        return None
    return Analyzer(ranges).bounds(e)


def affine_terms(e: Expr) -> tuple[int, list[tuple[Expr, int]]]:
    """``e`` as ``c0 + sum(ci * term_i)``: returns ``(c0, [(term_i, ci), ...])``.

    Terms are vars or non-affine sub-expressions, in order of first appearance, with equal
    terms merged. Useful to read the stride of a loop var in an index.
    """
    an = Analyzer()
    lin = an.lin(e)
    return lin.c, [(an.atoms[k], v) for k, v in lin.terms.items()]


def affine_in(e: Expr, variables, others: bool = False) -> tuple[dict, int] | None:
    """``e`` as ``c0 + sum(ci * v_i)`` over the vars of ``variables``: ``({v_i: ci}, c0)``,
    or None when it is not affine in them. The one affine analysis of index expressions
    that the default schedules, the auto-scheduler's DAG analysis and ``compute_at`` share.

    A term that is not a plain var (a floordiv, a product of two non-constants, a load, ...)
    makes ``e`` non-affine. A var outside ``variables`` is an additive term when ``others``
    is true (it is left out of the result), and makes ``e`` non-affine otherwise.
    Terms that cancel are left out.
    """
    c0, terms = affine_terms(e)
    coeffs: dict = {}
    for term, c in terms:
        if not isinstance(term, Var):
            return None
        if term in variables:
            coeffs[term] = coeffs.get(term, 0) + c
        elif not others:
            return None
    return coeffs, c0


__all__ = ["Ranges", "Analyzer", "Lin", "const_bounds", "affine_terms", "affine_in",
           "INDEX_DTYPES", "int_range", "is_affine_node", "LEAF_TYPES"]
