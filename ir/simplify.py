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

This module is the entry point; the work is split by job: :mod:`~ptxforge.ir.simplify_expr`
(the traversal of an expression, memo and cache), :mod:`~ptxforge.ir.simplify_affine` (sums,
products, floordiv / floormod), :mod:`~ptxforge.ir.simplify_logic` (comparisons, logic,
min / max, selects, casts; conditions narrowing ranges), :mod:`~ptxforge.ir.simplify_fold`
(constant folding), :mod:`~ptxforge.ir.simplify_stmt` (statement trees) and
:mod:`~ptxforge.ir.simplify_cache` (results kept over a lowering run).
"""

from __future__ import annotations

from . import simplify_cache as _cache
from .arith import Ranges, const_bounds
from .expr import Expr, IntImm
from .simplify_expr import Simplifier as _Simplifier
from .simplify_expr import shared_simplifier
from .simplify_fold import trunc_div_int
from .simplify_stmt import simplify_stmt

__all__ = ["Ranges", "const_bounds", "simplify", "prove", "simplify_stmt", "trunc_div_int"]


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
    return _Simplifier(ranges, shared_simplifier(cache)).run(e)


def prove(cond: Expr, ranges: Ranges | None = None) -> bool:
    """True only if ``cond`` is provably true under ``ranges`` (False means unknown)."""
    r = simplify(cond, ranges)
    return isinstance(r, IntImm) and r.value != 0
