"""The simplifier's cache: inside ``simplify_cache()`` every subtree met again with the same
ranges of its vars is answered from the cache, and the answers are those the simplifier
gives without it."""

from __future__ import annotations

import random

from ptxforge.ir.expr import (
    IntImm,
    Var,
    children,
    floordiv,
    floormod,
    rebuild,
    select,
    substitute,
)
from ptxforge.ir.exprprint import expr_str
from ptxforge.ir.simplify import simplify, simplify_stmt
from ptxforge.ir.simplify_cache import current, simplify_cache
from ptxforge.ir.stmt import Buffer, For, If, Seq, Store

B = Buffer("B", "float32", (1 << 20,), "global")


def _vars():
    return [Var(n) for n in ("ax", "tx", "rc", "ry", "rx")]


def _index(ax, tx, rc, ry, rx, k: int):
    # tiled and fused indices as compute_at and split leave them
    f = ax * 98 + tx
    return ((rc * 128 + floordiv(f, 49)) * 49 + (floordiv(floormod(f, 49), 7) + ry - k) * 7
            + floormod(f, 7) + rx - 1)


def _exprs(vs, rng: random.Random) -> list:
    ax, tx, rc, ry, rx = vs
    out = []
    for k in range(4):
        e = _index(ax, tx, rc, ry, rx, k)
        out.append(e)
        out.append(floordiv(e, 8) * 8 + floormod(e, 8))
        out.append(select(e < rng.randrange(1, 500), e, e + 1))
        out.append(floormod(ax * 16 + tx, 1 << rng.randrange(1, 8)))
    return out


def _ranges(vs, rng: random.Random) -> dict:
    return {v: (0, rng.choice((0, 1, 3, 7, 63, 97))) for v in vs if rng.random() < 0.8}


def _value(e, env: dict) -> int:
    """The value of ``e`` at the point ``env`` (constant folding does the arithmetic)."""
    v = simplify(substitute(e, {x: IntImm(val) for x, val in env.items()}))
    assert isinstance(v, IntImm), expr_str(v)
    return v.value


def test_cache_answers_are_the_simplifiers():
    rng = random.Random(3)
    vs = _vars()
    questions = [(e, _ranges(vs, rng)) for _ in range(6) for e in _exprs(vs, rng)]
    plain = [simplify(e, r) for e, r in questions]
    with simplify_cache():
        got = [simplify(e, r) for e, r in questions]
        # each question again, over fresh nodes of the same structure
        again = [simplify(_copy(e), r) for e, r in questions]
    for (e, r), p, g, a in zip(questions, plain, got, again):
        # an equivalent form, as small as the plain one (a sum's terms may come in another
        # order: the atom a structure prints as is the one the cache met first)
        assert expr_str(a) == expr_str(g)
        assert _size(g) == _size(p), (expr_str(g), expr_str(p))
        for _ in range(4):
            env = {v: rng.randint(*r.get(v, (-50, 50))) for v in vs}
            assert _value(g, env) == _value(e, env), (expr_str(e), expr_str(g), env)


def _copy(e):
    """``e`` rebuilt from new nodes (the same vars)."""
    if isinstance(e, IntImm):
        return IntImm(e.value, e.dtype)
    kids = children(e)
    return rebuild(e, tuple(_copy(k) for k in kids)) if kids else e


def _size(e) -> int:
    return 1 + sum(_size(k) for k in children(e))


def test_a_subtree_met_again_comes_from_the_cache():
    vs = _vars()
    r = {v: (0, 31) for v in vs}
    with simplify_cache() as cache:
        first = simplify(_index(*vs, 1), r)
        known = len(cache.results)
        # the same structure built again: answered whole, nothing new simplified
        second = simplify(_index(*vs, 1), r)
        assert second is first
        assert len(cache.results) == known
        # inside a bigger expression only the new nodes are simplified
        simplify(_index(*vs, 1) * 2 + vs[0], r)
        assert len(cache.results) - known <= 3


def test_the_ranges_of_a_subtrees_vars_are_part_of_its_key():
    i, j = Var("i"), Var("j")
    with simplify_cache():
        assert expr_str(simplify(floormod(i, 8) + j, {i: (0, 7), j: (0, 3)})) == "(i + j)"
        # the same structure, i no longer below 8: floormod stays
        assert expr_str(simplify(floormod(i, 8) + j, {i: (0, 15), j: (0, 3)})) == \
            "(floormod(i, 8) + j)"
        # a var outside the expression does not change its key
        assert expr_str(simplify(floormod(i, 8) + j, {i: (0, 7), j: (0, 3),
                                                      Var("k"): (0, 1)})) == "(i + j)"
        # a var fixed to one value is that value
        assert expr_str(simplify(floormod(i, 8) + j, {i: (5, 5), j: (0, 3)})) == "(j + 5)"


def test_statements_simplify_alike_with_the_cache():
    i, j = Var("i"), Var("j")
    body = Seq([Store(B, (floordiv(i * 8 + j, 8) * 64 + floormod(i * 8 + j, 8),), B[i]),
                If(i * 8 + j < 1000, Store(B, (i * 8 + j,), B[j]))])
    s = For(i, 16, For(j, 8, body))
    want = str(simplify_stmt(s))
    with simplify_cache():
        assert str(simplify_stmt(s)) == want
        assert str(simplify_stmt(s)) == want


def test_blocks_nest_into_the_open_cache():
    assert current() is None
    with simplify_cache() as outer:
        with simplify_cache() as inner:
            assert inner is outer
        assert current() is outer
    assert current() is None
