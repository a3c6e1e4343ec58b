"""Integer and bool tensors through te, the simulator and the NVPTX code generator.

Every computation runs three ways and is compared with numpy bit for bit: the simulator
with the unscheduled and the default schedule, and the LLVM IR of the NVPTX code generator,
as generated and after the O3 pipeline, executed on the host CPU (``tests/llvm_host.py``:
same instructions, another target). PTX is
generated for sm_80 and assembled where ptxas is installed. The semantics are ONNX's and
numpy's: integer arithmetic wraps, ``trunc_divide`` truncates toward zero, ``fmod`` keeps
the dividend's sign, float -> int conversion truncates toward zero.
"""

from __future__ import annotations

import zlib

import numpy as np
import ptxforge
import ptxforge.ops as ops
import pytest
from ptxforge import te
from ptxforge.backend_ptx import compile_kernel, find_ptxas
from ptxforge.ir import dtype as dt
from ptxforge.ir.expr import IRError
from ptxforge.ops.schedules import default_schedule

from .llvm_host import run_on_host

INTS = ("int8", "uint8", "int32", "int64")
SIGNED = ("int8", "int32", "int64")
N = 64


def rng_for(*parts) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(parts).encode()))


def full_range(rng, d: str, n: int = N) -> np.ndarray:
    """Values over the whole range of ``d``, its ends and small numbers included."""
    lo, hi = dt.int_range(d)
    x = rng.integers(lo, hi, n, dtype=d, endpoint=True)
    x[:8] = np.array([lo, hi, 0, 1, lo + 1, hi - 1, 2, 3]).astype(d)
    if lo < 0:
        x[8:12] = np.array([-1, -2, -3, -7]).astype(d)
    return x


def divisors(rng, d: str, a: np.ndarray) -> np.ndarray:
    """Non-zero divisors, small and large, never ``MIN / -1`` (undefined in C, a trap on
    x86; ONNX leaves it undefined too)."""
    lo, hi = dt.int_range(d)
    b = np.where(rng.random(a.size) < 0.7, rng.integers(1, 9, a.size),
                 rng.integers(1, hi, a.size, endpoint=True))
    if lo < 0:
        b = np.where(rng.random(a.size) < 0.5, -b, b)
    b = b.astype(d)
    if lo < 0:
        b[(a == lo) & (b == -1)] = 3
    return b


def run_sim(tensors, arrays, schedule=None) -> np.ndarray:
    f = (ptxforge.build(schedule, tensors, target="sim") if schedule is not None
         else ptxforge.build(tensors, target="sim"))
    dev = ptxforge.sim()
    out = ptxforge.nd.empty(tensors[-1].shape, tensors[-1].dtype, dev)
    f(*[ptxforge.nd.array(a, dev) for a in arrays], out)
    return out.numpy()


def run_llvm_on_host(tensors, arrays, stage: str = "llvm_opt") -> np.ndarray:
    """The unscheduled kernel's NVPTX-bound LLVM IR (by default after the O3 pipeline the
    GPU code goes through), executed on the host."""
    module = ptxforge.lower(tensors)
    (kernel,) = module.kernels()
    compiled = compile_kernel(kernel, "sm_80", cache=False, stop_after=stage)
    out = np.zeros(tensors[-1].shape, dt.to_numpy(tensors[-1].dtype))
    by_name = {t.name: a for t, a in zip(tensors, [*arrays, out])}
    args = [np.ascontiguousarray(by_name[p.name]) for p in kernel.params]
    run_on_host(compiled.get_source(stage), kernel.name, args)
    return args[[p.name for p in kernel.params].index(tensors[-1].name)]


def ptx_of(tensors) -> str:
    """PTX of the default schedule for sm_80 (assembled when ptxas is installed)."""
    module = ptxforge.lower(default_schedule([tensors[-1]]), tensors)
    texts = []
    for k in module.kernels():
        c = compile_kernel(k, "sm_80", cache=False)
        if find_ptxas() is not None:
            assert c.cubin, f"ptxas produced no cubin for {k.name}"
        texts.append(c.get_source("ptx"))
    return "\n".join(texts)


def check(tensors, arrays, want: np.ndarray) -> str:
    """Every path agrees with ``want`` exactly; returns the PTX."""
    want = np.asarray(want)
    for label, got in (
        ("simulator, unscheduled", run_sim(tensors, arrays)),
        ("simulator, default schedule",
         run_sim(tensors, arrays, default_schedule([tensors[-1]]))),
        ("NVPTX LLVM IR on the host", run_llvm_on_host(tensors, arrays, "llvm_ir")),
        ("optimized NVPTX LLVM IR on the host", run_llvm_on_host(tensors, arrays)),
    ):
        assert got.dtype == want.dtype, f"{label}: dtype {got.dtype}, want {want.dtype}"
        np.testing.assert_array_equal(got, want, err_msg=label)
    return ptx_of(tensors)


def pair(d: str):
    a = te.placeholder((N,), d, name="a")
    b = te.placeholder((N,), d, name="b")
    return a, b


# ---------------------------------------------------------------------------------------
# arithmetic


@pytest.mark.parametrize("d", INTS)
@pytest.mark.parametrize("op,npfn", [(ops.add, np.add), (ops.subtract, np.subtract),
                                     (ops.multiply, np.multiply),
                                     (ops.maximum, np.maximum), (ops.minimum, np.minimum)])
def test_wrapping_arithmetic_matches_numpy(d, op, npfn):
    rng = rng_for(d, op.__name__)
    a, b = pair(d)
    x, y = full_range(rng, d), full_range(rng, d)[::-1].copy()
    with np.errstate(over="ignore"):
        want = npfn(x, y)
    check([a, b, op(a, b)], [x, y], want)


def _trunc_div(x, y):
    q = np.floor_divide(x, y)
    return q + ((np.remainder(x, y) != 0) & ((x < 0) != (y < 0))).astype(q.dtype)


@pytest.mark.parametrize("d", INTS)
def test_divide_truncates_toward_zero(d):
    rng = rng_for(d, "divide")
    a, b = pair(d)
    x = full_range(rng, d)
    y = divisors(rng, d, x)
    if d in SIGNED:
        x[:4], y[:4] = np.array([-3, 3, -7, 7]).astype(d), np.array([2, -2, 2, -2]).astype(d)
    want = _trunc_div(x, y)
    if d in SIGNED:
        assert list(want[:4]) == [-1, -1, -3, -3]  # ONNX Div, C: toward zero
    ptx = check([a, b, ops.broadcast.trunc_divide(a, b)], [x, y], want)
    bits = dt.bits(d) if dt.bits(d) >= 16 else 16
    assert f"div.{'u' if d == 'uint8' else 's'}{bits}" in ptx or \
        f"div.{'u' if d == 'uint8' else 's'}32" in ptx


@pytest.mark.parametrize("d", INTS)
def test_fmod_keeps_the_sign_of_the_dividend(d):
    rng = rng_for(d, "fmod")
    a, b = pair(d)
    x = full_range(rng, d)
    y = divisors(rng, d, x)
    check([a, b, ops.broadcast.fmod(a, b)], [x, y], np.fmod(x, y))


@pytest.mark.parametrize("d", INTS)
@pytest.mark.parametrize("op,npfn", [(ops.floor_divide, np.floor_divide),
                                     (ops.floor_mod, np.remainder)])
def test_floor_division_rounds_toward_minus_infinity(d, op, npfn):
    rng = rng_for(d, op.__name__)
    a, b = pair(d)
    x = full_range(rng, d)
    y = divisors(rng, d, x)
    check([a, b, op(a, b)], [x, y], npfn(x, y))


def test_te_truncdiv_and_truncmod_on_constants_fold_like_c():
    from ptxforge.ir.simplify import simplify

    for x, y in ((-7, 2), (7, -2), (-7, -2), (7, 2), (-2**31, 7)):
        q = simplify(te.truncdiv(te.const(x), te.const(y)))
        r = simplify(te.truncmod(te.const(x), te.const(y)))
        assert (q.value, r.value) == (int(np.fix(x / y)), int(np.fmod(x, y))), (x, y)
    # INT_MIN / -1 does not fit: left to the kernel, not folded to a wrong constant
    e = simplify(te.truncdiv(te.const(-2**31), te.const(-1)))
    assert not isinstance(e, type(te.const(0)))


def test_float_fmod():
    a, b = pair("float32")
    x = np.array([5.5, -5.5, 5.5, -5.5] * 16, "float32")
    y = np.array([2.0, 2.0, -2.0, -2.0] * 16, "float32")
    check([a, b, ops.broadcast.fmod(a, b)], [x, y], np.fmod(x, y))


@pytest.mark.parametrize("d", SIGNED)
def test_abs_and_negative_wrap_at_the_minimum(d):
    rng = rng_for(d, "abs")
    x = full_range(rng, d)
    a = te.placeholder((N,), d, name="a")
    with np.errstate(over="ignore"):
        check([a, ops.abs(a)], [x], np.abs(x))
        check([a, ops.negative(a)], [x], np.negative(x))


@pytest.mark.parametrize("d", INTS)
def test_clip_with_the_dtype_bounds_keeps_every_value(d):
    rng = rng_for(d, "clip")
    x = full_range(rng, d)
    lo, hi = dt.int_range(d)
    a = te.placeholder((N,), d, name="a")
    # exact bounds, bounds given as floats (int64's max rounds up to 2**63 in float), and
    # float32's range (an importer's default for a missing bound)
    f32 = float(np.finfo(np.float32).max)
    for a_min, a_max in ((lo, hi), (float(lo), float(hi)), (-f32, f32),
                         (float("-inf"), float("inf"))):
        check([a, ops.clip(a, a_min, a_max)], [x], x)
    check([a, ops.clip(a, 0, 7)], [x], np.clip(x, 0, 7).astype(d))


def test_clip_rejects_a_fractional_bound_on_integers():
    a = te.placeholder((N,), "int8", name="a")
    with pytest.raises(Exception, match="not an integer"):
        ops.clip(a, 0.5, 7)


def test_integer_constants_out_of_range_are_refused():
    with pytest.raises(IRError, match="does not fit int8"):
        te.const(200, "int8")
    with pytest.raises(IRError, match="does not fit uint8"):
        te.const(-1, "uint8")
    # int32 is the index dtype: lowering widens index arithmetic beyond it to int64
    assert te.const(2**31 + 8, "int32").value == 2**31 + 8
    with pytest.raises(IRError, match="does not fit int64"):
        te.const(2**63, "int32")
    with pytest.raises(IRError, match="not an integer"):
        te.const(2.5, "int32")
    with pytest.raises(IRError, match="not an integer"):
        te.const(float("inf"), "int64")


# ---------------------------------------------------------------------------------------
# comparisons, logic, select


def _elementwise(fn, a, b):
    return lambda i: fn(a[i], b[i])


@pytest.mark.parametrize("d", (*INTS, "float32"))
def test_comparisons_produce_bool(d):
    rng = rng_for(d, "cmp")
    a, b = pair(d)
    if d == "float32":
        x = rng.integers(-3, 3, N).astype(d)
        y = rng.integers(-3, 3, N).astype(d)
    else:
        x, y = full_range(rng, d), full_range(rng, d)
        y[::3] = x[::3]
    for name, fn in (("lt", lambda u, v: u < v), ("le", lambda u, v: u <= v),
                     ("gt", lambda u, v: u > v), ("ge", lambda u, v: u >= v),
                     ("eq", lambda u, v: u == v), ("ne", lambda u, v: u != v)):
        c = te.compute((N,), _elementwise(fn, a, b), name=f"c_{name}")
        assert c.dtype == "bool"
        check([a, b, c], [x, y], fn(x, y))


def test_logic_and_select_with_a_bool_condition():
    rng = rng_for("logic")
    p = te.placeholder((N,), "bool", name="p")
    q = te.placeholder((N,), "bool", name="q")
    x = te.placeholder((N,), "int64", name="x")
    y = te.placeholder((N,), "int64", name="y")
    P, Q = rng.random(N) < 0.5, rng.random(N) < 0.5
    X, Y = full_range(rng, "int64"), full_range(rng, "int64")
    c = te.compute((N,), lambda i: te.all(p[i], ~q[i]) | (p[i] == q[i]), name="c")
    check([p, q, c], [P, Q], (P & ~Q) | (P == Q))
    w = te.compute((N,), lambda i: te.if_then_else(p[i], x[i], y[i]), name="w")
    check([p, x, y, w], [P, X, Y], np.where(P, X, Y))
    z = te.compute((N,), lambda i: te.if_then_else(p[i] != q[i], x[i], -1), name="z")
    check([p, q, x, z], [P, Q, X], np.where(P != Q, X, -1))


# ---------------------------------------------------------------------------------------
# casts


@pytest.mark.parametrize("d", INTS)
def test_float_to_int_truncates_toward_zero(d):
    lo, hi = dt.int_range(d)
    vals = [-2.5, -1.7, -0.5, -0.0, 0.3, 0.9, 1.5, 2.5, 99.99, 126.6, -127.9]
    if d == "uint8":
        vals = [v for v in vals if v > -1.0] + [254.9, 255.0]
    if d in ("int32", "int64"):
        vals += [123456.75, -2**31 + 512.5, 2**31 - 256.5]
    x = np.resize(np.array(vals, "float32"), N)
    assert x.min() > lo - 1 and x.max() < hi + 1
    a = te.placeholder((N,), "float32", name="a")
    check([a, ops.cast(a, d)], [x], x.astype(d))  # numpy's astype truncates, as C


@pytest.mark.parametrize("src", INTS)
@pytest.mark.parametrize("dst", (*INTS, "float32", "bool"))
def test_int_casts_wrap_like_numpy(src, dst):
    if src == dst:
        return
    rng = rng_for(src, dst, "cast")
    x = full_range(rng, src)
    a = te.placeholder((N,), src, name="a")
    check([a, ops.cast(a, dst)], [x], x.astype(dt.to_numpy(dst)))


@pytest.mark.parametrize("dst", (*INTS, "float32"))
def test_bool_casts(dst):
    x = rng_for("bool", dst).random(N) < 0.5
    a = te.placeholder((N,), "bool", name="a")
    check([a, ops.cast(a, dst)], [x], x.astype(dt.to_numpy(dst)))


def test_float_to_bool_is_nonzero():
    x = np.resize(np.array([0.0, -0.0, 0.5, -3.0, np.inf], "float32"), N)
    a = te.placeholder((N,), "float32", name="a")
    check([a, ops.cast(a, "bool")], [x], x != 0)


def test_ptx_names_the_integer_instructions():
    a, b = pair("int64")
    ptx = ptx_of([a, b, ops.broadcast.trunc_divide(a, b)])
    assert "div.s64" in ptx
    ptx = ptx_of([a, b, ops.broadcast.fmod(a, b)])
    assert "rem.s64" in ptx
    u = te.placeholder((N,), "uint8", name="u")
    ptx = ptx_of([u, ops.cast(u, "float32")])
    assert "cvt.rn.f32.u16" in ptx or "cvt.rn.f32.u8" in ptx or "cvt.rn.f32.u32" in ptx


@pytest.mark.parametrize("d", INTS)
@pytest.mark.parametrize("red,npfn", [("sum", np.sum), ("max", np.max), ("min", np.min)])
def test_integer_reductions_wrap_like_numpy(d, red, npfn):
    """Row reductions (the default schedule reduces across threads) over the whole range."""
    rng = rng_for(d, red)
    lo, hi = dt.int_range(d)
    x = rng.integers(lo, hi, (3, 1000), dtype=d, endpoint=True)
    a = te.placeholder(x.shape, d, name="a")
    out = getattr(ops, red)(a, axis=1)
    with np.errstate(over="ignore"):
        # numpy sums small integers in int64; modulo 2**bits that is the wrapped sum
        want = npfn(x, axis=1).astype(d)
    for schedule in (None, default_schedule([out])):
        np.testing.assert_array_equal(run_sim([a, out], [x], schedule), want)
    ptx_of([a, out])


def _by_zero(fn, a):
    return lambda i: fn(a[i], 0)


def test_a_constant_zero_divisor_is_refused_at_lowering():
    a = te.placeholder((N,), "int32", name="a")
    for fn, op in ((te.truncdiv, "div"), (te.truncmod, "mod"), (te.floordiv, "floordiv"),
                   (te.floormod, "floormod")):
        out = te.compute((N,), _by_zero(fn, a), name="out")
        with pytest.raises(IRError, match=f"integer {op} by zero"):
            ptxforge.lower([a, out])
