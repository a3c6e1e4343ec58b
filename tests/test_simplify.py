"""Tests of the expression and statement simplifier and of the bound analysis."""

from __future__ import annotations

import itertools
import math
import random
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ptxforge.ir.arith import Analyzer, affine_in, affine_terms
from ptxforge.ir.expr import (
    Bin,
    Cast,
    Cmp,
    FloatImm,
    IntImm,
    Load,
    Not,
    Select,
    Var,
    call,
    cast,
    children,
    const,
    emax,
    emin,
    floordiv,
    floormod,
    logical_and,
    logical_or,
    select,
)
from ptxforge.ir.exprprint import expr_str
from ptxforge.ir.simplify import _Simplifier, const_bounds, prove, simplify, simplify_stmt
from ptxforge.ir.stmt import Block, BlockVar, Buffer, For, If, Let, Seq, Store, walk

# ---------------------------------------------------------------------------------------
# a reference evaluator with Python semantics (ints never wrap at these sizes)


def evaluate(e, env):
    """The value of ``e`` with vars from ``env``; only the chosen select arm is evaluated."""
    if isinstance(e, Var):
        return env[e]
    if isinstance(e, (IntImm, FloatImm)):
        return bool(e.value) if e.dtype == "bool" else e.value
    if isinstance(e, Select):
        return evaluate(e.t if evaluate(e.cond, env) else e.f, env)
    if isinstance(e, Bin):
        a = evaluate(e.a, env)
        if e.op == "and":
            return bool(a) and bool(evaluate(e.b, env))
        if e.op == "or":
            return bool(a) or bool(evaluate(e.b, env))
        b = evaluate(e.b, env)
        return {
            "add": lambda: a + b,
            "sub": lambda: a - b,
            "mul": lambda: a * b,
            "div": lambda: a / b,
            "floordiv": lambda: a // b,
            "floormod": lambda: a % b,
            "min": lambda: min(a, b),
            "max": lambda: max(a, b),
        }[e.op]()
    if isinstance(e, Cmp):
        a, b = evaluate(e.a, env), evaluate(e.b, env)
        return {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a == b,
                "ne": a != b}[e.op]
    if isinstance(e, Not):
        return not evaluate(e.a, env)
    if isinstance(e, Cast):
        v = evaluate(e.value, env)
        if e.dtype == "bool":
            return v != 0
        if e.dtype.startswith("float"):
            return float(v)
        return int(v)
    raise TypeError(f"the test evaluator has no rule for {type(e).__name__}")


def node_count(e) -> int:
    n, stack = 0, [e]
    while stack:
        n += 1
        stack.extend(children(stack.pop()))
    return n


def dtypes_of(e) -> list:
    out, stack = [], [e]
    while stack:
        x = stack.pop()
        out.append(x.dtype)
        stack.extend(children(x))
    return out


# ---------------------------------------------------------------------------------------
# a table of input -> expected text

i, j, k, x, y = (Var(n) for n in "ijkxy")
o, n, fo, fi = Var("o"), Var("n"), Var("fo"), Var("fi")
tx, ax, rc, ry, rx, bx = (Var(s) for s in ("tx", "ax", "rc", "ry", "rx", "bx"))
A = Buffer("A", "float32", (64,))
IB = Buffer("IB", "int32", (64,))

R_SPLIT = {o: (0, 7), n: (0, 7)}
R_FUSE = {fo: (0, 3), fi: (0, 15)}
R_CONV = {ax: (0, 63), tx: (0, 97), rc: (0, 3), ry: (0, 2), rx: (0, 2), bx: (0, 63)}


def _conv_pad_index():
    # the pad_temp.shared load of the seed's conv2d: fused index = ax*98 + tx split into
    # (channel, row, col) = (f // 49, (f % 49) // 7, f % 7), then flattened into data
    f = ax * 98 + tx
    return ((rc * 128 + floordiv(f, 49)) * 49 + (floordiv(floormod(f, 49), 7) + ry - 1) * 7
            + floormod(f, 7) + rx - 1)


def _conv_kernel_index():
    f = o * 98 + tx
    return ((bx * 8 + floordiv(f, 128)) * 4608 + (rc * 32 + floormod(f, 128)) * 9
            + ry * 3 + rx)


TABLE = [
    # constant folding
    (lambda: const(3) + 4, None, "7"),
    (lambda: const(-7) // 2, None, "-4"),
    (lambda: const(-7) % 3, None, "2"),
    (lambda: floordiv(const(7), const(-2)), None, "-4"),
    (lambda: floormod(const(7), const(-2)), None, "-1"),
    (lambda: emin(const(3), const(-2)) + emax(const(1), const(5)), None, "3"),
    (lambda: const(1.5) * const(2.0), None, "3f"),
    (lambda: const(1.0) / const(3.0), None, "0.3333333432674408f"),
    (lambda: const(1.0, "float64") / const(3.0, "float64"), None, "0.3333333333333333f64"),
    (lambda: const(2.0) < const(3.0), None, "True"),
    (lambda: logical_and(const(True), const(False)), None, "False"),
    (lambda: logical_or(const(False), i < 3), None, "(i < 3)"),
    (lambda: select(const(True), i, j), None, "i"),
    (lambda: select(const(False), i, j), None, "j"),
    (lambda: cast("int32", const(-2.7)), None, "-2"),
    (lambda: cast("float32", const(3)), None, "3f"),
    (lambda: cast("int8", const(200)), None, "-56i8"),
    (lambda: cast("bool", const(5)), None, "True"),
    (lambda: const(2**31 - 1) + 1, None, "-2147483648"),
    (lambda: call("sqrt", const(4.0)), None, "2f"),
    (lambda: call("exp", const(0.0)), None, "1f"),
    (lambda: Not(const(True)), None, "False"),
    # identities
    (lambda: i * 1 + 0, None, "i"),
    (lambda: i * 0, None, "0"),
    (lambda: floordiv(i, 1), None, "i"),
    (lambda: floormod(i, 1), None, "0"),
    (lambda: i - i, None, "0"),
    (lambda: const(1.5) * 1.0 + 0.0, None, "1.5f"),
    # affine canonical form
    (lambda: (i + 1) * 4 + j, None, "(((i*4) + j) + 4)"),
    (lambda: ((i * 4 + j) * 8 + k) * 2, None, "(((i*64) + (j*16)) + (k*2))"),
    (lambda: i + j - i + 3 - 3, None, "j"),
    (lambda: j + i - j - i, None, "0"),
    (lambda: (i + j) - (j + i), None, "0"),
    (lambda: 0 - i + j, None, "(j - i)"),
    (lambda: 5 - i - j, None, "((5 - i) - j)"),
    (lambda: 0 - i * 3, None, "(i*-3)"),
    (lambda: (i + j + 1) * 4 - j * 4, None, "((i*4) + 4)"),
    (lambda: (i + j) * 8, None, "((i + j)*8)"),  # distributing would be bigger
    (lambda: (i * 4) * j, None, "((i*j)*4)"),
    (lambda: x * y - y * x, None, "0"),
    # floordiv / floormod by constants with bounds
    (lambda: floordiv(i, 8), {i: (0, 7)}, "0"),
    (lambda: floormod(i, 8), {i: (0, 7)}, "i"),
    (lambda: floordiv(i, 8), {i: (16, 23)}, "2"),
    (lambda: floormod(i, 8), {i: (16, 23)}, "(i - 16)"),
    (lambda: floordiv(i * 8 + j, 8), None, "(i + floordiv(j, 8))"),
    (lambda: floormod(i * 8 + j, 8), None, "floormod(j, 8)"),
    (lambda: floordiv(i * 8 + j, 8), {j: (0, 7)}, "i"),
    (lambda: floormod(i * 8 + j, 8), {j: (0, 7)}, "j"),
    (lambda: floordiv(i * 8 + j + 16, 8), {j: (0, 7)}, "(i + 2)"),
    (lambda: floordiv(i + 16, 8), None, "(floordiv(i, 8) + 2)"),
    (lambda: floordiv(i + 5, 8), None, "floordiv((i + 5), 8)"),
    (lambda: floormod(i + 13, 8), None, "floormod((i + 5), 8)"),
    (lambda: floordiv(i * 6, 3), None, "(i*2)"),
    (lambda: floordiv(i * 4 + j, 8), {j: (0, 3)}, "floordiv(i, 2)"),
    (lambda: floormod(i * 4 + j, 8), {j: (0, 3)}, "((floormod(i, 2)*4) + j)"),
    (lambda: floordiv(floordiv(x, 4), 2), None, "floordiv(x, 8)"),
    (lambda: floordiv(floordiv(x, 4) + 3, 2), None, "floordiv((x + 12), 8)"),
    (lambda: floormod(floormod(x, 16), 4), None, "floormod(x, 4)"),
    (lambda: floormod(floormod(x, 16) + 1, 4), None, "floormod((x + 1), 4)"),
    (lambda: floordiv(floormod(x, 16), 4), None, "floordiv(floormod(x, 16), 4)"),
    (lambda: floordiv(floormod(x * 4 + j, 16), 4), {j: (0, 3)}, "floormod(x, 4)"),
    (lambda: floordiv(floormod(i, 16), 4), {i: (0, 15)}, "floordiv(i, 4)"),
    (lambda: floordiv(floormod(x, 12), 4) - floormod(floordiv(x, 4), 3), None, "0"),
    (lambda: floordiv(x, i), {x: (0, 3), i: (4, 9)}, "0"),
    (lambda: floormod(x, i), {x: (0, 3), i: (4, 9)}, "x"),
    # split and fuse round trips
    (lambda: floordiv(o * 8 + n, 8), R_SPLIT, "o"),
    (lambda: floormod(o * 8 + n, 8), R_SPLIT, "n"),
    (lambda: floordiv(x, 8) * 8 + floormod(x, 8), None, "x"),
    (lambda: floormod(x, 8) + floordiv(x, 8) * 8, None, "x"),
    (lambda: (floordiv(x, 8) * 8 + floormod(x, 8)) * 3, None, "(x*3)"),
    (lambda: floordiv(x, 8) * 16 + floormod(x, 8) * 2 + 1, None, "((x*2) + 1)"),
    (lambda: x - floordiv(x, 4) * 4, None, "floormod(x, 4)"),
    (lambda: (i + j) - floordiv(i + j, 4) * 4, None, "floormod((i + j), 4)"),
    (lambda: floordiv(x, 16) * 4 + floordiv(floormod(x, 16), 4), None, "floordiv(x, 4)"),
    (lambda: floordiv(floormod(x, 64), 8) * 8 + floormod(x, 8), None, "floormod(x, 64)"),
    (lambda: floordiv(fo * 16 + fi, 8), R_FUSE, "((fo*2) + floordiv(fi, 8))"),
    (lambda: floormod(fo * 16 + fi, 8), R_FUSE, "floormod(fi, 8)"),
    (lambda: floordiv(fo * 16 + fi, 8) * 8 + floormod(fo * 16 + fi, 8), R_FUSE,
     "((fo*16) + fi)"),
    (lambda: floordiv(floordiv(i * 8 + j, 4), 2) * 8 + floormod(i * 8 + j, 8),
     {i: (0, 7), j: (0, 7)}, "((i*8) + j)"),
    # the seed's lowered conv2d indices
    (_conv_pad_index, R_CONV, "((((((rc*6272) + (ax*98)) + tx) + (ry*7)) + rx) - 8)"),
    (_conv_kernel_index, {**R_CONV, o: (0, 10)},
     "((((((bx*36864) + (floordiv(((o*98) + tx), 128)*4608)) + (rc*288))"
     " + (floormod(((o*98) + tx), 128)*9)) + (ry*3)) + rx)"),
    (lambda: floordiv(floormod(ax * 98 + tx, 49), 7), R_CONV, "floordiv(floormod(tx, 49), 7)"),
    # min / max
    (lambda: emin(i, i + 1), None, "i"),
    (lambda: emax(i * 2, i * 2 + 3), None, "((i*2) + 3)"),
    (lambda: emin(i, 16), {i: (0, 15)}, "i"),
    (lambda: emax(i, 16), {i: (0, 15)}, "16"),
    (lambda: emin(i, j), {i: (0, 3), j: (5, 9)}, "i"),
    (lambda: emin(emin(i, 8), 4), None, "min(i, 4)"),
    (lambda: emin(3, i), None, "min(i, 3)"),
    (lambda: emax(i, i), None, "i"),
    # comparisons and logic
    (lambda: i < 8, {i: (0, 6)}, "True"),
    (lambda: i >= 7, {i: (0, 6)}, "False"),
    (lambda: i + 1 < 8, None, "(i < 7)"),
    (lambda: i * 4 < 9, None, "(i < 3)"),
    (lambda: i * 4 <= 9, None, "(i <= 2)"),
    (lambda: i * 4 == 9, None, "False"),
    (lambda: i * 4 != 9, None, "True"),
    (lambda: i * 2 + 4 == j * 2, None, "(i == (j - 2))"),
    (lambda: i > 3, None, "(i > 3)"),
    (lambda: 1 <= x + ry, None, "((x + ry) >= 1)"),
    (lambda: i * 4 + j < i * 4 + 8, {j: (0, 7)}, "True"),
    (lambda: o * 98 + tx < 1024, {o: (0, 10), tx: (0, 97)}, "(((o*98) + tx) < 1024)"),
    (lambda: o * 98 + tx < 1024, {o: (0, 9), tx: (0, 97)}, "True"),
    (lambda: logical_and(i < 4, i < 8), None, "(i < 4)"),
    (lambda: logical_and(i < 8, i < 4), None, "(i < 4)"),
    (lambda: logical_or(i < 4, i < 8), None, "(i < 8)"),
    (lambda: logical_and(i < 4, i > 6), {i: (0, 9)}, "False"),
    (lambda: logical_or(i < 4, i >= 4), {i: (0, 9)}, "True"),
    (lambda: logical_and(i < j, i < j), None, "(i < j)"),
    (lambda: Not(i < j), None, "(i >= j)"),
    (lambda: Not(Not(i < j)), None, "(i < j)"),
    (lambda: logical_and(1 <= i + ry, i + ry < 8), {i: (1, 5), ry: (0, 2)}, "True"),
    (lambda: logical_and(1 <= i + ry, i + ry < 8), {i: (1, 6), ry: (0, 2)}, "((i + ry) < 8)"),
    # select
    (lambda: select(i < 4, floormod(i, 8), 0), {i: (0, 15)}, "tir.if_then_else((i < 4), i, 0)"),
    (lambda: select(i < j, k, k), None, "k"),
    (lambda: select(i < j, const(True), const(False)), None, "(i < j)"),
    (lambda: select(i < j, const(False), const(True)), None, "(i >= j)"),
    (lambda: select(i < 100, j, k), {i: (0, 9)}, "j"),
    # casts and loads
    (lambda: cast("int32", cast("int64", i)), None, "i"),
    (lambda: cast("int32", cast("int8", i)), None, "int32(int8(i))"),
    (lambda: Load(A, (floordiv(o * 8 + n, 8) * 8 + floormod(o * 8 + n, 8),)), R_SPLIT,
     "A[((o*8) + n)]"),
    (lambda: Load(IB, (i,)) * 2 - Load(IB, (i + 0,)), None, "IB[i]"),
    (lambda: cast("int64", i) + cast("int64", i), None, "(int64(i)*2i64)"),
    (lambda: const(4, "int64") * (cast("int64", i) + 1) - 4, None, "(int64(i)*4i64)"),
]


@pytest.mark.parametrize("case", range(len(TABLE)))
def test_table(case):
    build, ranges, expected = TABLE[case]
    e = build()
    got = simplify(e, ranges)
    assert expr_str(got) == expected, f"{expr_str(e)} simplified to {expr_str(got)}"
    assert got.dtype == e.dtype
    assert node_count(got) <= node_count(e)


def _assignments(ranges, free_vars, limit=300, seed=0):
    doms = []
    for v in free_vars:
        if v in ranges:
            lo, hi = ranges[v]
            doms.append(range(lo, hi + 1))
        else:
            doms.append((-23, -9, -5, -1, 0, 1, 2, 3, 7, 8, 15, 30))
    combos = list(itertools.product(*doms))
    if len(combos) > limit:
        combos = random.Random(seed).sample(combos, limit)
    return [dict(zip(free_vars, c)) for c in combos]


def _walk_expr(e):
    yield e
    for c in children(e):
        yield from _walk_expr(c)


def _free(e):
    return {x for x in _walk_expr(e) if isinstance(x, Var)}


def _checkable(e) -> bool:
    """Whether the Python evaluator gives ``e`` its IR meaning (ints that never wrap)."""
    for x in _walk_expr(e):
        if isinstance(x, Load) or x.dtype.startswith(("float", "int8")):
            return False
        if isinstance(x, IntImm) and abs(x.value) >= 2**31 - 1:
            return False
    return True


NUMERIC_CASES = [n for n, (build, _, _) in enumerate(TABLE) if _checkable(build())]


@pytest.mark.parametrize("case", NUMERIC_CASES)
def test_table_values(case):
    """The table's int entries are also checked numerically against their input."""
    build, ranges, _ = TABLE[case]
    e = build()
    got = simplify(e, ranges)
    ranges = ranges or {}
    vs = sorted(_free(e), key=lambda v: v.name)
    for env in _assignments(ranges, vs):
        if any(_divides_by_zero(x, env) for x in _walk_expr(e)):
            continue
        assert evaluate(got, env) == evaluate(e, env), env


def _divides_by_zero(x, env):
    return isinstance(x, Bin) and x.op in ("floordiv", "floormod") and evaluate(x.b, env) == 0


# ---------------------------------------------------------------------------------------
# property tests: random int expressions over vars with small ranges

PV = (Var("a"), Var("b"), Var("c"))
DIVISORS = (1, 2, 3, 4, 6, 8, 16, -3)


@st.composite
def ranges_st(draw):
    out = {}
    for v in PV:
        if draw(st.integers(0, 5)) == 0:
            continue  # unbounded
        lo = draw(st.integers(-4, 6))
        out[v] = (lo, lo + draw(st.integers(0, 7)))
    return out


def _leaf():
    return st.one_of(st.sampled_from(PV), st.integers(-9, 9).map(const))


def _extend(sub):
    d = st.sampled_from(DIVISORS)
    cmp = st.tuples(st.sampled_from(("lt", "le", "gt", "ge", "eq", "ne")), sub, sub).map(
        lambda t: Cmp(t[0], t[1], t[2]))
    return st.one_of(
        st.tuples(sub, sub).map(lambda t: t[0] + t[1]),
        st.tuples(sub, sub).map(lambda t: t[0] - t[1]),
        st.tuples(sub, st.integers(-4, 8)).map(lambda t: t[0] * t[1]),
        st.tuples(sub, sub).map(lambda t: t[0] * t[1]),
        st.tuples(sub, d).map(lambda t: floordiv(t[0], t[1])),
        st.tuples(sub, d).map(lambda t: floormod(t[0], t[1])),
        # the shapes tiling makes: pieces of one value put back together
        st.tuples(sub, st.sampled_from((2, 4, 8))).map(
            lambda t: floordiv(t[0], t[1]) * t[1] + floormod(t[0], t[1])),
        st.tuples(sub, st.sampled_from((2, 4)), st.sampled_from((2, 3))).map(
            lambda t: floordiv(floormod(t[0], t[1] * t[2]), t[1])),
        st.tuples(sub, st.sampled_from((2, 4)), st.sampled_from((2, 4))).map(
            lambda t: floordiv(t[0], t[1] * t[2]) * t[2] + floordiv(floormod(t[0], t[1] * t[2]),
                                                                       t[1])),
        # one object used in several places (sums, conditions and select arms share it)
        st.tuples(sub, sub).map(lambda t: select(t[0] < t[1], t[0], t[0] + 1) + t[0]),
        st.tuples(sub, sub).map(lambda t: emin(t[0], t[1])),
        st.tuples(sub, sub).map(lambda t: emax(t[0], t[1])),
        st.tuples(cmp, sub, sub).map(lambda t: select(t[0], t[1], t[2])),
        st.tuples(cmp, cmp, sub, sub).map(
            lambda t: select(logical_and(t[0], t[1]), t[2], t[3])),
        st.tuples(cmp, cmp, sub, sub).map(
            lambda t: select(logical_or(t[0], Not(t[1])), t[2], t[3])),
    )


INT_EXPR = st.recursive(_leaf(), _extend, max_leaves=14)


def _check_equivalent(e, ranges):
    got = simplify(e, ranges)
    assert got.dtype == e.dtype
    assert node_count(got) <= node_count(e), (expr_str(e), expr_str(got))
    b = const_bounds(e, ranges)
    bg = const_bounds(got, ranges)
    vs = sorted(_free(e) | _free(got), key=lambda v: v.name)
    for env in _assignments(ranges, vs, limit=150):
        want = evaluate(e, env)
        assert evaluate(got, env) == want, (expr_str(e), expr_str(got), env)
        if b is not None:
            assert b[0] <= want <= b[1], (expr_str(e), b, env)
        if bg is not None:
            assert bg[0] <= want <= bg[1], (expr_str(got), bg, env)
    return got


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(INT_EXPR, ranges_st())
def test_random_int_expressions(e, ranges):
    if not isinstance(e, Var) and e.dtype == "int32":
        _check_equivalent(e, ranges)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.tuples(st.sampled_from(("lt", "le", "gt", "ge", "eq", "ne")), INT_EXPR, INT_EXPR),
       st.tuples(st.sampled_from(("lt", "le", "eq")), INT_EXPR, INT_EXPR),
       st.booleans(), ranges_st())
def test_random_conditions(c1, c2, use_or, ranges):
    a = Cmp(c1[0], c1[1], c1[2])
    b = Cmp(c2[0], c2[1], c2[2])
    cond = logical_or(a, Not(b)) if use_or else logical_and(a, b)
    got = _check_equivalent(cond, ranges)
    if prove(cond, ranges):
        assert isinstance(got, IntImm) and got.value == 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(INT_EXPR, ranges_st())
def test_simplify_is_stable(e, ranges):
    """Simplifying twice gives an expression no bigger, and equal on every assignment."""
    once = simplify(e, ranges)
    twice = simplify(once, ranges)
    assert node_count(twice) <= node_count(once)
    vs = sorted(_free(once), key=lambda v: v.name)
    for env in _assignments(ranges, vs, limit=60):
        assert evaluate(twice, env) == evaluate(once, env)


@settings(max_examples=150, deadline=None)
@given(INT_EXPR)
def test_output_is_deterministic(e):
    assert expr_str(simplify(e)) == expr_str(simplify(e))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=4))
def test_split_levels_then_fuse_collapse(factors):
    """``i`` split into nested levels, then the levels fused back: ``i`` again."""
    f = Var("f")
    total = math.prod(factors) * 3
    # level k of the fused index: floormod(floordiv(f, inner), factor)
    rebuilt = const(0)
    inner = 1
    for fac in reversed([3] + factors):
        digit = floormod(floordiv(f, inner), fac) if inner > 1 else floormod(f, fac)
        rebuilt = rebuilt + digit * inner
        inner *= fac
    assert expr_str(simplify(rebuilt, {f: (0, total - 1)})) == "f"
    # without the range of f, the top digit stays a floormod of the whole
    assert expr_str(simplify(rebuilt)) == f"floormod(f, {total})"


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 9), st.integers(1, 9), st.integers(1, 9))
def test_fuse_then_split_collapse(a_ext, b_ext, factor):
    """fuse(a, b) = f, split(f, factor) = (fo, fi): ``a*B + b`` is ``fo*factor + fi``."""
    fo_, fi_ = Var("fo"), Var("fi")
    fused = fo_ * factor + fi_
    a, b = floordiv(fused, b_ext), floormod(fused, b_ext)
    r = {fo_: (0, (a_ext * b_ext + factor - 1) // factor - 1), fi_: (0, factor - 1)}
    got = expr_str(simplify(a * b_ext + b, r))
    parts = []  # a var with a one-value range is that value
    if r[fo_][1] > 0:
        parts.append("fo" if factor == 1 else f"(fo*{factor})")
    if factor > 1:
        parts.append("fi")
    want = {0: "0", 1: parts[0] if parts else "", 2: f"({' + '.join(parts)})"}[len(parts)]
    assert got == want


# ---------------------------------------------------------------------------------------
# bounds


def test_const_bounds_affine_is_tight():
    r = {i: (0, 9), j: (2, 5)}
    assert const_bounds(i - i, r) == (0, 0)
    assert const_bounds(i * 3 - j + 1, r) == (-4, 26)
    assert const_bounds((i + j) * 2 - i * 2, r) == (4, 10)
    assert const_bounds(i, {}) is None
    assert const_bounds(i + j, {i: (0, 1)}) is None


def test_const_bounds_nonaffine():
    r = {i: (0, 9), j: (2, 5), k: (-3, 4)}
    assert const_bounds(floordiv(i, 4), r) == (0, 2)
    assert const_bounds(floordiv(k, 4), r) == (-1, 1)
    assert const_bounds(floormod(i, 4), r) == (0, 3)
    assert const_bounds(floormod(i + 20, 32), r) == (20, 29)
    assert const_bounds(floormod(x, 4), r) == (0, 3)  # unbounded numerator
    assert const_bounds(emin(i, j), r) == (0, 5)
    assert const_bounds(emax(i, j), r) == (2, 9)
    assert const_bounds(select(i < 3, j, k), r) == (-3, 5)
    assert const_bounds(i * j, r) == (0, 45)
    assert const_bounds(i * k, r) == (-27, 36)
    assert const_bounds(floordiv(i, j), r) == (0, 4)
    assert const_bounds(cast("int64", i), r) == (0, 9)
    assert const_bounds(cast("int32", i < j), r) == (0, 1)
    assert const_bounds(cast("int8", i * 100), r) == (-128, 127)
    assert const_bounds(const(1.5) + 1.0, r) is None
    assert const_bounds(Load(IB, (i,)), r) is None


def test_affine_terms():
    c, terms = affine_terms(i * 4 + floordiv(j, 2) * 3 - i + 7)
    assert c == 7
    assert [(expr_str(t), v) for t, v in terms] == [("i", 3), ("floordiv(j, 2)", 3)]


def test_affine_in_is_the_one_affine_analysis():
    assert affine_in(i * 4 - i + j * 2 + 5, {i, j}) == ({i: 3, j: 2}, 5)
    assert affine_in(i * 2 + j, {i}) is None  # a var outside the set
    assert affine_in(i * 2 + j, {i}, others=True) == ({i: 2}, 0)
    assert affine_in(floordiv(i, 2) + j, {i, j}, others=True) is None  # not a plain var
    assert affine_in(i * j, {i, j}) is None
    assert affine_in(i - i + 3, {i}) == ({}, 3)  # cancelled terms are left out


def test_keys_ignore_sum_order_and_commutativity():
    an = Analyzer()
    assert an.key(floordiv(i + j, 4)) == an.key(floordiv(j + i, 4))
    assert an.key(emin(i, j)) == an.key(emin(j, i))
    assert an.key(i < j) == an.key(j > i)
    assert an.key(i - j) != an.key(j - i)
    assert an.key(floordiv(floormod(x, 12), 4)) == an.key(floormod(floordiv(x, 4), 3))
    assert an.key(floordiv(floormod(x, 12), 4)) != an.key(floormod(floordiv(x, 4), 4))


def test_lin_size_matches_printed_size():
    s = _Simplifier()
    for e in (i * 4 + j - 3, 0 - i - j, 5 - i * 2, i * -3 + 2, j * 2, 0 - i, i - 7):
        lin = s.lin(e)
        assert s.lin_size(lin) == node_count(s.from_lin(lin, "int32"))


# ---------------------------------------------------------------------------------------
# floats, dtypes, prove


def test_float_folding_rounds_to_dtype():
    got = simplify(const(0.1) + const(0.2))
    assert got.dtype == "float32"
    assert got.value == float(np.float32(0.1) + np.float32(0.2))
    h = simplify(const(1.0, "float16") / const(3.0, "float16"))
    assert h.dtype == "float16" and h.value == 0.333251953125
    b = simplify(const(1.0, "bfloat16") / const(3.0, "bfloat16"))
    assert b.dtype == "bfloat16" and b.value == 0.333984375


def test_float_ops_are_not_reassociated():
    f = Var("f", "float32")
    e = (f + 1.0) - 1.0
    assert expr_str(simplify(e)) == expr_str(e)
    assert expr_str(simplify(f * 0.0)) == expr_str(f * 0.0)  # NaN and inf stay NaN
    assert expr_str(simplify(Cmp("eq", f, f))) == "(f == f)"


def test_unfoldable_constants_stay():
    assert expr_str(simplify(floordiv(const(3), const(0)))) == "floordiv(3, 0)"
    assert expr_str(simplify(call("log", const(-1.0)))) == "tir.log(-1f)"
    assert expr_str(simplify(cast("int32", const(1e20)))) == "int32(1e+20f)"


def test_int64_keeps_dtype():
    a = Var("a", "int64")
    e = floordiv(a * 8 + 3, 8) * 8 + floormod(a * 8 + 3, 8) + const(0, "int64")
    got = simplify(e)
    assert expr_str(got) == "((a*8i64) + 3i64)"
    assert set(dtypes_of(got)) == {"int64"}


def test_mixed_dtype_node_keeps_its_type():
    e = Bin("add", i, const(0), "int64")
    got = simplify(e)
    assert got.dtype == "int64"


def test_prove():
    r = {i: (0, 6)}
    assert prove(i < 8, r)
    assert not prove(i < 6, r)
    assert not prove(i < 8)
    assert prove(floordiv(i * 8 + 7, 8) == i)
    assert prove(logical_and(i >= 0, i <= 6), r)


def test_deep_sum_does_not_recurse():
    e = i
    for t in range(3000):
        e = e + (j if t % 2 else 1)
    got = simplify(e)
    assert expr_str(got) == "((i + (j*1500)) + 1500)"
    f = Var("f", "float32")
    fe = f
    for _ in range(3000):
        fe = fe + f
    assert node_count(simplify(fe)) == node_count(fe)


# ---------------------------------------------------------------------------------------
# statements

B = Buffer("B", "float32", (64,))


def _stores(s):
    return [x for x in walk(s) if isinstance(x, Store)]


def test_stmt_loop_ranges_and_index_collapse():
    oo, nn = Var("oo"), Var("nn")
    idx = floordiv(oo * 8 + nn, 8) * 8 + floormod(oo * 8 + nn, 8)
    s = For(oo, 8, For(nn, 8, Store(B, (idx,), const(1.0))))
    got = simplify_stmt(s)
    (st_,) = _stores(got)
    assert expr_str(st_.indices[0]) == "((oo*8) + nn)"
    assert isinstance(got, For) and isinstance(got.body, For)


def test_stmt_if_decided_by_loop_bounds():
    v = Var("v")
    then = Store(B, (v,), const(1.0))
    other = Store(B, (v,), const(2.0))
    kept = simplify_stmt(For(v, 8, If(v < 8, then, other)))
    assert isinstance(kept, For) and isinstance(kept.body, Store)
    assert kept.body.value.value == 1.0
    els = simplify_stmt(For(v, 8, If(v >= 8, then, other)))
    assert isinstance(els.body, Store) and els.body.value.value == 2.0
    gone = simplify_stmt(For(v, 8, If(v >= 8, then)))
    assert isinstance(gone, Seq) and not gone.stmts
    undecided = simplify_stmt(For(v, 10, If(v < 8, then)))
    assert isinstance(undecided.body, If)


def test_stmt_if_condition_narrows_its_branches():
    v = Var("v")
    s = For(v, 16, If(v < 8, Store(B, (floormod(v, 8),), const(1.0)),
                      Store(B, (floordiv(v, 8) + 40,), const(2.0))))
    got = simplify_stmt(s)
    assert expr_str(got.body.then.indices[0]) == "v"
    assert expr_str(got.body.else_.indices[0]) == "41"


def test_stmt_unit_and_empty_loops():
    u, w = Var("u"), Var("w")
    s = Seq([For(u, 1, Store(B, (u + 3,), const(1.0))),
             For(w, 0, Store(B, (w,), const(2.0)))])
    got = simplify_stmt(s)
    assert isinstance(got, Store) and expr_str(got.indices[0]) == "3"
    kept = simplify_stmt(For(u, 1, Store(B, (u + 3,), const(1.0))), unwrap_unit_loops=False)
    assert isinstance(kept, For)
    annotated = For(u, 1, Store(B, (u,), const(1.0)), annotations={"pragma": 1})
    assert isinstance(simplify_stmt(annotated), For)


def test_stmt_thread_loops_are_never_changed():
    t = Var("threadIdx.x")
    s = For(t, 1, Store(B, (t + 0,), const(1.0)), kind="thread", thread="threadIdx.x")
    got = simplify_stmt(s)
    assert isinstance(got, For) and got.kind == "thread" and got.extent == 1
    assert got.var is t
    assert expr_str(got.body.indices[0]) == "0"  # inside, the index has one value
    z = For(t, 0, Store(B, (t,), const(1.0)), kind="thread", thread="threadIdx.x")
    assert simplify_stmt(z) is z


def test_stmt_block_iter_vars_and_predicate():
    oo, nn, vi = Var("oo"), Var("nn"), Var("vi")
    body = Store(B, (floormod(vi, 16),), const(1.0))
    blk = Block("S", [BlockVar(vi, 10, "S")], [oo * 4 + nn], body, predicate=oo * 4 + nn < 10)
    got = simplify_stmt(For(oo, 3, For(nn, 4, blk)))
    inner = got.body.body
    assert isinstance(inner, Block)
    assert expr_str(inner.body.indices[0]) == "vi"
    assert inner.predicate is not None  # not provable: oo*4 + nn reaches 11
    full = Block("S", [BlockVar(vi, 12, "S")], [oo * 4 + nn], body, predicate=oo * 4 + nn < 12)
    got2 = simplify_stmt(For(oo, 3, For(nn, 4, full)))
    assert got2.body.body.predicate is None


def test_stmt_let_bounds():
    v, t = Var("v"), Var("t")
    s = For(v, 4, Let(t, v * 2, Store(B, (floordiv(t, 8),), const(1.0))))
    got = simplify_stmt(s)
    assert expr_str(got.body.body.indices[0]) == "0"


def test_stmt_shared_subexpressions():
    # one expression object used inside another statement's expression and on its own
    v, w = Var("v"), Var("w")
    inner = v * 2 + 1
    s = For(v, 4, For(w, 2, Seq([
        If(inner * 8 + w < 100, Store(B, (inner * 8 + w,), const(1.0))),
        Store(B, (inner,), select(w < 1, Load(B, (inner,)), const(0.0))),
    ])))
    got = simplify_stmt(s)
    for x in walk(got):
        if isinstance(x, Store):
            for e in x.indices + (x.value,):
                expr_str(e)  # every node is an IR expression
                assert all(hasattr(c, "dtype") for c in _walk_expr(e))
    first, second = got.body.body.stmts
    assert isinstance(first, Store)  # v*16 + w + 8 < 100 holds for v < 4
    assert expr_str(first.indices[0]) == "(((v*16) + w) + 8)"
    assert expr_str(second.indices[0]) == "((v*2) + 1)"


def test_select_arm_shared_with_condition():
    s = i * 3 + j
    e = select(s < 5, s, s + 1) + s
    got = simplify(e)
    assert all(hasattr(c, "dtype") for c in _walk_expr(got))
    env = {i: 1, j: 1}
    assert evaluate(got, env) == evaluate(e, env)


def test_stmt_unchanged_is_shared():
    v = Var("v")
    s = For(v, 8, Store(B, (v,), const(1.0)))
    assert simplify_stmt(s) is s


def test_stmt_ranges_argument():
    v = Var("v")
    s = If(v < 100, Store(B, (v,), const(1.0)))
    got = simplify_stmt(s, {v: (0, 63)})
    assert isinstance(got, Store)


# ---------------------------------------------------------------------------------------
# speed


def test_speed_of_tiled_index_simplification():
    r = {**R_CONV, o: (0, 10)}
    exprs = [_conv_pad_index(), _conv_kernel_index()]
    simplify(exprs[0], r)  # warm up imports and caches of the interpreter
    # CPU time of this process: other processes on a loaded machine do not count
    t0 = time.process_time()
    for t in range(1000):
        simplify(exprs[t % 2], r)
    elapsed = time.process_time() - t0
    assert elapsed < 0.5, f"1000 simplifications took {elapsed:.3f} s"


def test_speed_of_statement_simplification():
    # a tiled kernel body: 6 nested loops, a handful of stores with tiled indices
    loops = [(Var(f"l{t}"), e) for t, e in enumerate((4, 3, 3, 64, 2, 32))]
    stores = []
    lv = [v for v, _ in loops]
    for t in range(40):
        idx = floordiv(lv[3] * 98 + tx, 49) * 49 + floormod(lv[3] * 98 + tx, 49) + lv[0] * t
        stores.append(Store(B, (floormod(idx, 64),), const(float(t))))
    body = Seq(stores)
    for v, e in reversed(loops):
        body = For(v, e, body)
    s = For(tx, 98, body, kind="thread", thread="threadIdx.x")
    t0 = time.process_time()
    simplify_stmt(s)
    elapsed = time.process_time() - t0
    assert elapsed < 0.05, f"a 40-store kernel took {elapsed * 1e3:.1f} ms"
    assert math.isfinite(elapsed)
