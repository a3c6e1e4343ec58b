"""Alignment of memory accesses, proven from the index expression.

Codegen states on every load and store the alignment it can prove, so that LLVM's load/store
vectorizer may join neighbouring 16-bit accesses into ``ld/st.global.v2/v4`` (LLVM's own
inference gives up on the deep index sums of an epilogue: its known-bits analysis stops at a
depth of six). The proof: an access ``buf[index]`` is aligned to
``min(base, elem_bytes * 2^k)`` bytes where ``base`` is the alignment of the buffer's first
element (16 for kernel parameters, :data:`.nvptx.PARAM_ALIGN`, which the runtime checks) and
``2^k`` divides every value ``index`` can take (:func:`known_multiple`). Nothing is assumed:
an index of unknown factors (a variable, a load, an odd stride) proves the element's own
alignment only.
"""

from __future__ import annotations

from collections.abc import Mapping
from math import gcd

from ..ir import dtype as dt
from ..ir.expr import Bin, Cast, Expr, IntImm, Select, Var


def known_multiple(e: Expr, env: Mapping[Var, object] | None = None) -> int:
    """A non-negative integer ``m`` that divides every value of the integer expression ``e``
    (0: ``e`` is always 0). ``env`` maps variables to what is known of them: an ``int``
    (the variable's value, as in an unrolled loop) or an :class:`Expr` (a let-bound value);
    any other variable is only a multiple of 1."""
    env = env or {}
    memo: dict[int, int] = {}

    def go(x: Expr) -> int:
        key = id(x)
        if key not in memo:
            memo[key] = _multiple(x, env, go)
        return memo[key]

    try:
        return go(e)
    finally:
        go = None  # it calls itself: a cycle left to the collector otherwise


def _multiple(e: Expr, env: Mapping, go) -> int:
    if isinstance(e, IntImm):
        return abs(int(e.value))
    if isinstance(e, Var):
        known = env.get(e)
        if isinstance(known, int):
            return abs(known)
        if isinstance(known, Expr):
            return go(known)
        return 1
    if isinstance(e, Bin) and not dt.is_float(e.dtype) and e.dtype != "bool":
        a = go(e.a)
        if e.op in ("add", "sub", "min", "max"):
            return gcd(a, go(e.b))
        if e.op == "mul":
            return a * go(e.b)
        if e.op in ("floormod", "mod"):
            # a - b q: a multiple of what divides both a and b
            return gcd(a, go(e.b))
        if e.op in ("floordiv", "div") and isinstance(e.b, IntImm) and e.b.value != 0:
            c = abs(int(e.b.value))
            # a = c (a / c) exactly when c divides a's known factor
            return a // c if a % c == 0 else 1
        return 1
    if isinstance(e, Select):
        return gcd(go(e.t), go(e.f))
    if isinstance(e, Cast) and dt.is_int(e.dtype) and dt.is_int(e.value.dtype):
        inner = go(e.value)
        if dt.bits(e.dtype) >= dt.bits(e.value.dtype):
            return inner
        # truncation keeps the value modulo 2^bits: its power-of-two factor below that
        return gcd(inner, 1 << dt.bits(e.dtype))
    return 1


def lowest_power_of_two(n: int) -> int:
    """The largest power of two dividing ``n`` (``n`` > 0)."""
    return n & -n


def access_align(base_align: int, elem_bytes: int, multiple: int) -> int:
    """Bytes of alignment of an access to element ``i`` of a buffer whose first element is
    ``base_align``-aligned, where ``multiple`` divides ``i`` (0: ``i`` is 0)."""
    if multiple == 0:
        return max(base_align, elem_bytes)
    return max(elem_bytes, min(base_align, lowest_power_of_two(elem_bytes * multiple)))
