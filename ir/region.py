"""Access regions: which part of a buffer a loop nest touches.

Given the index expressions of some accesses, the vars that range inside the region of
interest (``inner``, with inclusive bounds) and those that are fixed (everything else, with
optional bounds in ``outer`` for fallback), :func:`access_region` returns per dimension a
symbolic start (an expression of the fixed vars) and a constant extent. Schedule passes use
it for compute_at (how much of the producer one iteration of the consumer loop needs) and
lowering for buffer compaction (how big a cache buffer must be).
"""

from __future__ import annotations

from . import dtype as dt
from .expr import (
    Bin,
    Cast,
    Expr,
    IntImm,
    Load,
    Select,
    Var,
    children,
    emax,
    emin,
    floordiv,
)
from .simplify import const_bounds, simplify


def bound_of(e: Expr, inner: dict, outer: dict, lower: bool) -> Expr | None:
    """A lower (or upper) bound of ``e`` over the ``inner`` vars, as an expression of the
    other vars; None when no bound can be found."""
    return _Bounds(inner, outer).bound(e, lower)


class _Bounds:
    """Bounds of expressions over fixed ``inner`` and ``outer`` vars, memoized per node:
    an access region asks about the same (sub)expressions many times."""

    def __init__(self, inner: dict, outer: dict):
        self.inner = inner
        self.outer = outer
        self.ranges = _all_ranges(inner, outer)
        self._memo: dict[tuple[int, bool], tuple[Expr, Expr | None]] = {}
        self._facts: dict[int, tuple[Expr, bool, bool]] = {}

    def _facts_of(self, e: Expr) -> tuple[bool, bool]:
        """(whether ``e`` uses an inner var, whether it reads memory)."""
        hit = self._facts.get(id(e))
        if hit is not None:
            return hit[1], hit[2]
        if isinstance(e, Var):
            uses, reads = e in self.inner, False
        else:
            uses = reads = isinstance(e, Load)
            for k in children(e):
                ku, kr = self._facts_of(k)
                uses |= ku
                reads |= kr
        self._facts[id(e)] = (e, uses, reads)
        return uses, reads

    def uses(self, e: Expr) -> bool:
        return self._facts_of(e)[0]

    def bound(self, e: Expr, lower: bool) -> Expr | None:
        key = (id(e), lower)
        hit = self._memo.get(key)
        if hit is not None:
            return hit[1]
        out = self._bound(e, lower)
        self._memo[key] = (e, out)
        return out

    def _bound(self, e: Expr, lower: bool) -> Expr | None:
        uses, reads = self._facts_of(e)
        if reads:
            return self._data_bound(e, lower)
        if not uses:
            return e
        bound = self.bound
        if isinstance(e, Var):
            lo, hi = self.inner[e]
            return IntImm(lo if lower else hi)
        if isinstance(e, Bin):
            if e.op == "add":
                a = bound(e.a, lower)
                b = bound(e.b, lower)
                return None if a is None or b is None else a + b
            if e.op == "sub":
                a = bound(e.a, lower)
                b = bound(e.b, not lower)
                return None if a is None or b is None else a - b
            if e.op == "mul":
                for x, c in ((e.a, e.b), (e.b, e.a)):
                    if isinstance(c, IntImm):
                        if c.value >= 0:
                            bx = bound(x, lower)
                        else:
                            bx = bound(x, not lower)
                        return None if bx is None else bx * c
                return self._const_fallback(e, lower)
            if e.op == "floordiv" and isinstance(e.b, IntImm) and e.b.value > 0:
                a = bound(e.a, lower)
                return None if a is None else floordiv(a, e.b)
            if e.op == "floormod" and isinstance(e.b, IntImm) and e.b.value > 0:
                # exact when the dividend's inner range does not cross a multiple of the
                # divisor
                lo_a = bound(e.a, True)
                hi_a = bound(e.a, False)
                if lo_a is not None and hi_a is not None:
                    span = const_bounds(simplify(hi_a - lo_a), self.ranges)
                    if span is not None and span[1] < e.b.value:
                        start = simplify(lo_a % e.b)
                        sb = const_bounds(start, self.ranges)
                        if sb is not None and sb[1] + span[1] < e.b.value:
                            return start if lower else simplify(start + (hi_a - lo_a))
                return IntImm(0 if lower else e.b.value - 1)
            if e.op in ("min", "max"):
                a = bound(e.a, lower)
                b = bound(e.b, lower)
                if a is None or b is None:
                    return None
                return emin(a, b) if e.op == "min" else emax(a, b)
        if isinstance(e, Select):
            a = bound(e.t, lower)
            b = bound(e.f, lower)
            if a is None or b is None:
                return None
            return emin(a, b) if lower else emax(a, b)
        if isinstance(e, Cast):
            v = bound(e.value, lower)
            return None if v is None else Cast(e.dtype, v)
        return self._const_fallback(e, lower)

    def _data_bound(self, e: Expr, lower: bool) -> Expr | None:
        """A bound of an index that reads memory (``table[ids[i], j]``): the loaded value
        is unknown, so only a clamp around it bounds it (``min(max(x, 0), n - 1)``, which
        lowering puts around every data-dependent index); None where nothing does. A
        region start must never be an expression that loads: the load may read a buffer
        the region's allocation does not see."""
        if isinstance(e, Bin) and e.op in ("min", "max"):
            a = self.bound(e.a, lower)
            b = self.bound(e.b, lower)
            pick = emin if e.op == "min" else emax
            if (e.op == "min") != lower:
                # min's upper bound (max's lower bound) is either side's
                known = [x for x in (a, b) if x is not None]
                if not known:
                    return None
                return known[0] if len(known) == 1 else pick(*known)
            return None if a is None or b is None else pick(a, b)
        if isinstance(e, Cast) and not dt.is_float(e.value.dtype):
            v = self.bound(e.value, lower)
            return None if v is None else Cast(e.dtype, v)
        return None

    def _const_fallback(self, e: Expr, lower: bool) -> Expr | None:
        b = const_bounds(e, self.ranges)
        if b is None:
            return None
        return IntImm(b[0] if lower else b[1])


def _all_ranges(inner: dict, outer: dict) -> dict:
    r = dict(outer)
    r.update(inner)
    return r


def access_region(accesses, shape, inner: dict, outer: dict | None = None) -> list:
    """Per dimension ``(start_expr, extent)`` covering every access.

    ``accesses`` is a list of index tuples. The region is clamped to ``shape`` (a whole
    dimension when no better bound is found). A dimension is also bounded through its
    simplified indices, and the tighter of the two regions is kept: an index that
    recombines a fused loop's pieces (``floordiv(f, c)*c + floormod(f, c)``, as a
    convolution's row ``(n*OH + y)*OW + x`` read over fused output pixels is) is bounded
    only once those merge back into ``f``.
    """
    bounds = _Bounds(inner, outer or {})
    ranges = bounds.ranges
    out = []
    for d, size in enumerate(shape):
        idxs = [idx[d] for idx in accesses]
        region = _dim_region(idxs, size, bounds)
        if (region is None or region[1] > 1) and any(bounds.uses(e) for e in idxs):
            tight = _dim_region([simplify(e, ranges) for e in idxs], size, bounds)
            if tight is not None and (region is None or tight[1] < region[1]):
                region = tight
        out.append(region or (IntImm(0), size))
    return out


def _dim_region(idxs: list, size: int, bounds: _Bounds):
    """``(start_expr, extent)`` of one dimension's indices ``idxs``, or None when no bound
    smaller than the whole dimension (``size``) is found."""
    ranges = bounds.ranges
    los, his = [], []
    for e in idxs:
        lo = bounds.bound(e, True)
        hi = bounds.bound(e, False)
        if lo is None or hi is None:
            return None
        los.append(simplify(lo, ranges))
        his.append(simplify(hi, ranges))
    if not los:
        return None
    start = _fold_extreme(los, ranges, lower=True)
    stop = _fold_extreme(his, ranges, lower=False)
    span = simplify(stop - start, ranges)
    sb = const_bounds(span, ranges)
    if sb is None or sb[1] + 1 >= size:
        return None
    return start, max(1, sb[1] + 1)


def _fold_extreme(exprs: list, ranges: dict, lower: bool) -> Expr:
    """min (or max) of expressions, collapsing those whose differences are constants."""
    best = exprs[0]
    rest = []
    for e in exprs[1:]:
        if e is best:
            continue  # the same node again: a difference of 0
        diff = simplify(e - best, ranges)
        if isinstance(diff, IntImm):
            if (diff.value < 0) == lower and diff.value != 0:
                best = e
        else:
            rest.append(e)
    for e in rest:
        best = emin(best, e) if lower else emax(best, e)
    return simplify(best, ranges)
