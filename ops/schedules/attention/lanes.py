"""Warp-level reductions of the fused attention's softmax, by shuffles: over the 4 lanes
of a quad (a row of the accumulator layout) and over the whole warp (its vote)."""

from __future__ import annotations

from ....ir.expr import Expr, Var, emax, shfl_xor
from ....ir.stmt import Let, Stmt, substitute_stmt

F32 = "float32"


def quad_reduce(value: Expr, op, out: Var, body: Stmt) -> Stmt:
    """``body`` with ``out`` bound to ``op`` over the 4 lanes of the quad (lanes ``4k ..
    4k + 3``: the threads sharing a row of the accumulator layout), by two shuffles."""
    half = Var(out.name, F32)
    return Let(half, op(value, shfl_xor(value, 1)), Let(out, op(half, shfl_xor(half, 2)),
                                                        body))


def warp_any(flag: Var, body: Stmt) -> Stmt:
    """``body`` with ``flag`` (0.0 or 1.0 in each lane) rebound to its maximum over the
    warp: a butterfly of shuffles, every lane ends with the same value."""
    for mask in (16, 8, 4, 2, 1):
        nxt = Var("vote", F32)
        body = Let(nxt, emax(flag, shfl_xor(flag, mask)), substitute_stmt(body, {flag: nxt}))
    return body
