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
    free_vars,
)
from .simplify import const_bounds, simplify


def _uses(e: Expr, vars_: dict) -> bool:
    return bool(free_vars(e) & vars_.keys())


def bound_of(e: Expr, inner: dict, outer: dict, lower: bool) -> Expr | None:
    """A lower (or upper) bound of ``e`` over the ``inner`` vars, as an expression of the
    other vars; None when no bound can be found."""
    if _reads_memory(e):
        return _data_bound(e, inner, outer, lower)
    if not _uses(e, inner):
        return e
    if isinstance(e, Var):
        lo, hi = inner[e]
        return IntImm(lo if lower else hi)
    if isinstance(e, Bin):
        if e.op == "add":
            a = bound_of(e.a, inner, outer, lower)
            b = bound_of(e.b, inner, outer, lower)
            return None if a is None or b is None else a + b
        if e.op == "sub":
            a = bound_of(e.a, inner, outer, lower)
            b = bound_of(e.b, inner, outer, not lower)
            return None if a is None or b is None else a - b
        if e.op == "mul":
            for x, c in ((e.a, e.b), (e.b, e.a)):
                if isinstance(c, IntImm):
                    if c.value >= 0:
                        bx = bound_of(x, inner, outer, lower)
                    else:
                        bx = bound_of(x, inner, outer, not lower)
                    return None if bx is None else bx * c
            return _const_fallback(e, inner, outer, lower)
        if e.op == "floordiv" and isinstance(e.b, IntImm) and e.b.value > 0:
            a = bound_of(e.a, inner, outer, lower)
            return None if a is None else floordiv(a, e.b)
        if e.op == "floormod" and isinstance(e.b, IntImm) and e.b.value > 0:
            # exact when the dividend's inner range does not cross a multiple of the divisor
            lo_a = bound_of(e.a, inner, outer, True)
            hi_a = bound_of(e.a, inner, outer, False)
            if lo_a is not None and hi_a is not None:
                span = const_bounds(simplify(hi_a - lo_a), _all_ranges(inner, outer))
                if span is not None and span[1] < e.b.value:
                    start = simplify(lo_a % e.b)
                    sb = const_bounds(start, _all_ranges(inner, outer))
                    if sb is not None and sb[1] + span[1] < e.b.value:
                        return start if lower else simplify(start + (hi_a - lo_a))
            return IntImm(0 if lower else e.b.value - 1)
        if e.op in ("min", "max"):
            a = bound_of(e.a, inner, outer, lower)
            b = bound_of(e.b, inner, outer, lower)
            if a is None or b is None:
                return None
            return emin(a, b) if e.op == "min" else emax(a, b)
    if isinstance(e, Select):
        a = bound_of(e.t, inner, outer, lower)
        b = bound_of(e.f, inner, outer, lower)
        if a is None or b is None:
            return None
        return emin(a, b) if lower else emax(a, b)
    if isinstance(e, Cast):
        v = bound_of(e.value, inner, outer, lower)
        return None if v is None else Cast(e.dtype, v)
    return _const_fallback(e, inner, outer, lower)


def _reads_memory(e: Expr) -> bool:
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, Load):
            return True
        stack.extend(children(x))
    return False


def _data_bound(e: Expr, inner: dict, outer: dict, lower: bool) -> Expr | None:
    """A bound of an index that reads memory (``table[ids[i], j]``): the loaded value is
    unknown, so only a clamp around it bounds it (``min(max(x, 0), n - 1)``, which lowering
    puts around every data-dependent index); None where nothing does. A region start must
    never be an expression that loads: the load may read a buffer the region's
    allocation does not see."""
    if isinstance(e, Bin) and e.op in ("min", "max"):
        a = bound_of(e.a, inner, outer, lower)
        b = bound_of(e.b, inner, outer, lower)
        pick = emin if e.op == "min" else emax
        if (e.op == "min") != lower:
            # min's upper bound (max's lower bound) is either side's
            known = [x for x in (a, b) if x is not None]
            if not known:
                return None
            return known[0] if len(known) == 1 else pick(*known)
        return None if a is None or b is None else pick(a, b)
    if isinstance(e, Cast) and not dt.is_float(e.value.dtype):
        v = bound_of(e.value, inner, outer, lower)
        return None if v is None else Cast(e.dtype, v)
    return None


def _all_ranges(inner: dict, outer: dict) -> dict:
    r = dict(outer)
    r.update(inner)
    return r


def _const_fallback(e, inner, outer, lower):
    b = const_bounds(e, _all_ranges(inner, outer))
    if b is None:
        return None
    return IntImm(b[0] if lower else b[1])


def access_region(accesses, shape, inner: dict, outer: dict | None = None) -> list:
    """Per dimension ``(start_expr, extent)`` covering every access.

    ``accesses`` is a list of index tuples. The region is clamped to ``shape`` (a whole
    dimension when no better bound is found). A dimension is also bounded through its
    simplified indices, and the tighter of the two regions is kept: an index that
    recombines a fused loop's pieces (``floordiv(f, c)*c + floormod(f, c)``, as a
    convolution's row ``(n*OH + y)*OW + x`` read over fused output pixels is) is bounded
    only once those merge back into ``f``.
    """
    outer = outer or {}
    ranges = _all_ranges(inner, outer)
    out = []
    for d, size in enumerate(shape):
        idxs = [idx[d] for idx in accesses]
        region = _dim_region(idxs, size, inner, outer, ranges)
        if (region is None or region[1] > 1) and any(_uses(e, inner) for e in idxs):
            tight = _dim_region([simplify(e, ranges) for e in idxs], size, inner, outer,
                                ranges)
            if tight is not None and (region is None or tight[1] < region[1]):
                region = tight
        out.append(region or (IntImm(0), size))
    return out


def _dim_region(idxs: list, size: int, inner: dict, outer: dict, ranges: dict):
    """``(start_expr, extent)`` of one dimension's indices ``idxs``, or None when no bound
    smaller than the whole dimension (``size``) is found."""
    los, his = [], []
    for e in idxs:
        lo = bound_of(e, inner, outer, True)
        hi = bound_of(e, inner, outer, False)
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
        diff = simplify(e - best, ranges)
        if isinstance(diff, IntImm):
            if (diff.value < 0) == lower and diff.value != 0:
                best = e
        else:
            rest.append(e)
    for e in rest:
        best = emin(best, e) if lower else emax(best, e)
    return simplify(best, ranges)
