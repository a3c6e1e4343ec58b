"""Tests of the operator library ``ptxforge.ops`` and its numpy references.

Three layers of checking:

* the numpy references in ``ops.testing`` against slow, explicit-loop implementations
  written here;
* each operator's te compute, run by a small direct evaluator (below) that walks the
  expression trees element by element, against those references on tiny random inputs;
* the printed ComputeDAG of the seed tutorial's conv2d layer, shapes, dtypes, tags,
  flop counts and error messages.
"""

from __future__ import annotations

import itertools
import math
import operator

import numpy as np
import ptxforge
import ptxforge.ops as ops
import pytest
from ptxforge.ir import te
from ptxforge.ir.compute_dag import ComputeDAG
from ptxforge.ir.expr import (
    Bin,
    Call,
    Cast,
    Cmp,
    FloatImm,
    IntImm,
    Not,
    Reduce,
    Select,
    TensorRead,
    Var,
    reducer_identity,
)
from ptxforge.ir.te import PlaceholderOp, TEError
from ptxforge.ops import testing as ref

RNG_SEED = 20240611

# ---------------------------------------------------------------------------------------
# a direct evaluator of te computes, for tiny shapes

_BIN = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "div": operator.truediv,
    "floordiv": operator.floordiv,
    "floormod": operator.mod,
    "min": min,
    "max": max,
    "and": lambda a, b: bool(a) and bool(b),
    "or": lambda a, b: bool(a) or bool(b),
}
_CMP = {
    "eq": operator.eq, "ne": operator.ne, "lt": operator.lt,
    "le": operator.le, "gt": operator.gt, "ge": operator.ge,
}
_CALL = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda v: 1.0 / np.sqrt(v),
    "tanh": np.tanh,
    "sigmoid": lambda v: 1.0 / (1.0 + np.exp(-v)),
    "erf": lambda v: math.erf(float(v)),
    "fabs": abs,
    "abs": abs,
    "floor": np.floor,
    "ceil": np.ceil,
    "pow": lambda a, b: a**b,
}


def _compile(e, slots: dict, values: dict):
    """A closure ``env -> value`` evaluating expression ``e``; ``env`` holds var values."""
    if isinstance(e, Var):
        k = slots[e]
        return lambda env: env[k]
    if isinstance(e, IntImm):
        v = bool(e.value) if e.dtype == "bool" else e.value
        return lambda env: v
    if isinstance(e, FloatImm):
        v = np.dtype(e.dtype).type(e.value)
        return lambda env: v
    if isinstance(e, Bin):
        fa, fb, fn = _compile(e.a, slots, values), _compile(e.b, slots, values), _BIN[e.op]
        return lambda env: fn(fa(env), fb(env))
    if isinstance(e, Cmp):
        fa, fb, fn = _compile(e.a, slots, values), _compile(e.b, slots, values), _CMP[e.op]
        return lambda env: bool(fn(fa(env), fb(env)))
    if isinstance(e, Not):
        fa = _compile(e.a, slots, values)
        return lambda env: not fa(env)
    if isinstance(e, Select):
        fc, ft, ff = (_compile(x, slots, values) for x in (e.cond, e.t, e.f))
        # lazy, as the hardware's select of a guarded load: the untaken side may be out of
        # bounds (padding, concatenation)
        return lambda env: ft(env) if fc(env) else ff(env)
    if isinstance(e, Cast):
        fv = _compile(e.value, slots, values)
        if e.dtype == "bool":
            return lambda env: bool(fv(env))
        if e.dtype.startswith(("int", "uint")):
            return lambda env: int(fv(env))  # C semantics: truncation towards zero
        ftype = np.dtype(e.dtype).type
        return lambda env: ftype(fv(env))
    if isinstance(e, Call):
        fargs, fn = [_compile(a, slots, values) for a in e.args], _CALL[e.op]
        ftype = np.dtype(e.dtype).type
        return lambda env: ftype(fn(*(f(env) for f in fargs)))
    if isinstance(e, TensorRead):
        arr = values[id(e.tensor.op)]
        fidx = [_compile(i, slots, values) for i in e.indices]
        name = e.tensor.name

        def read(env):
            idx = tuple(int(f(env)) for f in fidx)
            for i, n in zip(idx, arr.shape):
                if not 0 <= i < n:
                    raise IndexError(f"read of {name}{list(idx)} outside shape {list(arr.shape)}")
            return arr[idx]

        return read
    raise TypeError(f"the evaluator cannot run {type(e).__name__}: {e}")


def _run_stage(op, values: dict) -> np.ndarray:
    slots = {iv.var: k for k, iv in enumerate(op.axis)}
    n = len(op.axis)
    out = np.empty(op.shape, dtype=np.dtype(op.dtype))
    body = op.body
    env = [0] * (n + len(op.reduce_axis))
    if not isinstance(body, Reduce):
        f = _compile(body, slots, values)
        for idx in np.ndindex(*op.shape):
            env[:n] = idx
            out[idx] = f(env)
        return out
    for k, iv in enumerate(body.axis):
        slots[iv.var] = n + k
    src = _compile(body.source, slots, values)
    where = None if body.where is None else _compile(body.where, slots, values)
    combine = {"sum": operator.add, "max": max, "min": min}[body.combiner]
    identity = reducer_identity(body.combiner, body.dtype).value
    domain = list(itertools.product(*(range(iv.extent) for iv in body.axis)))
    for idx in np.ndindex(*op.shape):
        env[:n] = idx
        acc = identity
        for r in domain:
            env[n:] = r
            if where is None or where(env):
                acc = combine(acc, src(env))
        out[idx] = acc
    return out


def evaluate(outputs, feed: dict) -> list[np.ndarray]:
    """Run every stage the ``outputs`` need, reading placeholders from ``feed``."""
    outputs = list(outputs)
    dag = ComputeDAG(list(feed) + outputs)
    values: dict = {}
    for op in dag.ops:
        if isinstance(op, PlaceholderOp):
            arr = np.asarray(feed[op.output(0)])
            assert arr.shape == op.shape, f"{op.name}: fed {arr.shape}, declared {op.shape}"
            assert arr.dtype == np.dtype(op.dtype), f"{op.name}: fed {arr.dtype}"
            values[id(op)] = arr
        else:
            values[id(op)] = _run_stage(op, values)
    return [values[id(t.op)] for t in outputs]


def run1(out, feed: dict) -> np.ndarray:
    return evaluate([out], feed)[0]


def rand(rng, shape, dtype="float32", lo=-1.0, hi=1.0):
    if np.dtype(dtype).kind in "iu":
        return rng.integers(int(lo), int(hi) + 1, size=shape).astype(dtype)
    return rng.uniform(lo, hi, size=shape).astype(dtype)


def close(actual, expected, rtol=1e-5, atol=1e-5):
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


@pytest.fixture
def rng():
    return np.random.default_rng(RNG_SEED)


# ---------------------------------------------------------------------------------------
# the seed tutorial's layer

SEED_DAG = """\
data = PLACEHOLDER [1, 512, 7, 7]
pad_temp(i0, i1, i2, i3) = tir.if_then_else(((((i2 >= 1) && (i2 < 8)) && (i3 >= 1)) && (i3 < 8)), data[i0, i1, (i2 - 1), (i3 - 1)], 0f)
kernel = PLACEHOLDER [512, 512, 3, 3]
compute(nn, ff, yy, xx) += (pad_temp[nn, rc, (yy + ry), (xx + rx)]*kernel[ff, rc, ry, rx])
bias = PLACEHOLDER [1, 512, 1, 1]
T_add(ax0, ax1, ax2, ax3) = (compute[ax0, ax1, ax2, ax3] + bias[ax0, ax1, 0, 0])
compute(i0, i1, i2, i3) = max(T_add[i0, i1, i2, i3], 0f)
"""  # noqa: E501


def seed_layer(n=1, ci=512, h=7, w=7, co=512, kh=3, kw=3, stride=(1, 1), padding=(1, 1)):
    data = te.placeholder((n, ci, h, w), name="data")
    kernel = te.placeholder((co, ci, kh, kw), name="kernel")
    bias = te.placeholder((1, co, 1, 1), name="bias")
    conv = ops.nn.conv2d_nchw(data, kernel, stride, padding, dilation=1, out_dtype="float32")
    out = ops.nn.relu(conv + bias)
    return data, kernel, bias, out


def test_seed_conv2d_layer_prints_as_tvm():
    data, kernel, bias, out = seed_layer()
    assert str(ptxforge.ComputeDAG([data, kernel, bias, out])) == SEED_DAG


def test_seed_layer_tags_and_shapes():
    data, kernel, bias, out = seed_layer()
    dag = ComputeDAG([data, kernel, bias, out])
    tags = {op.name + ":" + op.tag for op in dag.compute_ops}
    assert tags == {
        "pad_temp:injective,pad", "compute:conv2d_nchw", "T_add:broadcast", "compute:elemwise",
    }
    assert out.shape == (1, 512, 7, 7) and out.dtype == "float32"
    assert ops.tag.is_pad(dag.compute_ops[0].tag)
    assert ops.tag.is_injective(dag.compute_ops[0].tag)
    assert not ops.tag.is_injective("conv2d_nchw")


def test_seed_layer_flop_count():
    n, k, oh, ow, c, kh, kw = 1, 512, 7, 7, 512, 3, 3
    dag = ComputeDAG(list(seed_layer()))
    conv_flops = 2 * n * k * oh * ow * c * kh * kw
    flops = dag.flop_count()
    # the epilogue (padding selects, bias add, relu) is well under one percent of the conv
    assert conv_flops <= flops <= conv_flops * 1.01


def test_seed_layer_strided_prints_scaled_index():
    _, _, _, out = seed_layer(h=14, w=14, stride=2)
    text = str(ComputeDAG([out]))
    assert "pad_temp[nn, rc, ((yy*2) + ry), ((xx*2) + rx)]" in text
    assert out.shape == (1, 512, 7, 7)


def test_seed_layer_evaluates_like_numpy(rng):
    data, kernel, bias, out = seed_layer(n=1, ci=3, h=5, w=5, co=4)
    a, w, b = rand(rng, data.shape), rand(rng, kernel.shape), rand(rng, bias.shape)
    got = run1(out, {data: a, kernel: w, bias: b})
    close(got, np.maximum(ref.conv2d_nchw_python(a, w, 1, 1) + b, 0))


def test_seed_shape_reference_is_fast_and_right(rng):
    a = rand(rng, (1, 512, 7, 7))
    w = rand(rng, (512, 512, 3, 3))
    out = ref.conv2d_nchw_python(a, w, (1, 1), (1, 1))
    assert out.shape == (1, 512, 7, 7)
    padded = np.pad(a, ((0, 0), (0, 0), (1, 1), (1, 1)))
    for f, y, x in [(0, 0, 0), (511, 6, 6), (17, 3, 0), (300, 0, 5)]:
        direct = np.sum(padded[0, :, y : y + 3, x : x + 3] * w[f], dtype=np.float64)
        assert abs(out[0, f, y, x] - direct) <= 1e-3 * (1 + abs(direct))


# ---------------------------------------------------------------------------------------
# the evaluator itself


def test_evaluator_reports_out_of_bounds_reads(rng):
    x = te.placeholder((4,), name="x")
    y = te.compute((4,), lambda i: x[i + 1], name="shifted")
    with pytest.raises(IndexError, match="outside shape"):
        run1(y, {x: rand(rng, (4,))})


def test_evaluator_reduces_and_selects(rng):
    x = te.placeholder((3, 5), name="x")
    k = te.reduce_axis((0, 5), name="k")
    s = te.compute((3,), lambda i: te.sum(x[i, k], axis=k), name="s")
    m = te.compute(
        (3, 5), lambda i, j: te.if_then_else(x[i, j] > 0, x[i, j], 0.0 - x[i, j]), name="m"
    )
    a = rand(rng, x.shape)
    got_s, got_m = evaluate([s, m], {x: a})
    close(got_s, a.sum(axis=1))
    close(got_m, np.abs(a))


# ---------------------------------------------------------------------------------------
# slow references, written with explicit loops, to check ops.testing


def _pads(padding, kh, kw, dh=1, dw=1):
    return ops.nn.get_pad_tuple(padding, ((kh - 1) * dh + 1, (kw - 1) * dw + 1))


def slow_conv2d_nchw(a, w, stride, padding, dilation):
    n, c, h, wd = a.shape
    k, _, kh, kw = w.shape
    (sh, sw), (dh, dw) = stride, dilation
    top, left, bottom, right = _pads(padding, kh, kw, dh, dw)
    oh = (h + top + bottom - (kh - 1) * dh - 1) // sh + 1
    ow = (wd + left + right - (kw - 1) * dw - 1) // sw + 1
    out = np.zeros((n, k, oh, ow), dtype=np.float64)
    for b, f, y, x in itertools.product(range(n), range(k), range(oh), range(ow)):
        acc = 0.0
        for ch, ky, kx in itertools.product(range(c), range(kh), range(kw)):
            iy, ix = y * sh - top + ky * dh, x * sw - left + kx * dw
            if 0 <= iy < h and 0 <= ix < wd:
                acc += float(a[b, ch, iy, ix]) * float(w[f, ch, ky, kx])
        out[b, f, y, x] = acc
    return out


def slow_conv2d_nhwc(a, w, stride, padding, dilation):
    n, h, wd, c = a.shape
    kh, kw, _, k = w.shape
    (sh, sw), (dh, dw) = stride, dilation
    top, left, bottom, right = _pads(padding, kh, kw, dh, dw)
    oh = (h + top + bottom - (kh - 1) * dh - 1) // sh + 1
    ow = (wd + left + right - (kw - 1) * dw - 1) // sw + 1
    out = np.zeros((n, oh, ow, k), dtype=np.float64)
    for b, y, x, f in itertools.product(range(n), range(oh), range(ow), range(k)):
        for ky, kx, ch in itertools.product(range(kh), range(kw), range(c)):
            iy, ix = y * sh - top + ky * dh, x * sw - left + kx * dw
            if 0 <= iy < h and 0 <= ix < wd:
                out[b, y, x, f] += float(a[b, iy, ix, ch]) * float(w[ky, kx, ch, f])
    return out


def slow_depthwise_nchw(a, w, stride, padding, dilation):
    n, c, h, wd = a.shape
    _, m, kh, kw = w.shape
    (sh, sw), (dh, dw) = stride, dilation
    top, left, bottom, right = _pads(padding, kh, kw, dh, dw)
    oh = (h + top + bottom - (kh - 1) * dh - 1) // sh + 1
    ow = (wd + left + right - (kw - 1) * dw - 1) // sw + 1
    out = np.zeros((n, c * m, oh, ow), dtype=np.float64)
    for b, oc, y, x in itertools.product(range(n), range(c * m), range(oh), range(ow)):
        ch, mm = oc // m, oc % m
        for ky, kx in itertools.product(range(kh), range(kw)):
            iy, ix = y * sh - top + ky * dh, x * sw - left + kx * dw
            if 0 <= iy < h and 0 <= ix < wd:
                out[b, oc, y, x] += float(a[b, ch, iy, ix]) * float(w[ch, mm, ky, kx])
    return out


def slow_matmul(a, b):
    m, k = a.shape
    _, n = b.shape
    out = np.zeros((m, n))
    for i, j in itertools.product(range(m), range(n)):
        out[i, j] = sum(float(a[i, t]) * float(b[t, j]) for t in range(k))
    return out


def slow_pool_nchw(a, kernel, stride, dilation, padding, pool_type, ceil_mode, include_pad):
    n, c, h, w = a.shape
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    top, left, bottom, right = _pads(padding, kh, kw, dh, dw)
    eh, ew = (sh - 1, sw - 1) if ceil_mode else (0, 0)
    oh = (h + top + bottom + eh - (kh - 1) * dh - 1) // sh + 1
    ow = (w + left + right + ew - (kw - 1) * dw - 1) // sw + 1
    out = np.zeros((n, c, oh, ow), dtype=np.float64)
    lowest = float(np.finfo(a.dtype).min)
    for b, ch, y, x in itertools.product(range(n), range(c), range(oh), range(ow)):
        vals, count = [], 0
        for ky, kx in itertools.product(range(kh), range(kw)):
            iy, ix = y * sh - top + ky * dh, x * sw - left + kx * dw
            inside = 0 <= iy < h and 0 <= ix < w
            in_explicit_pad = -top <= iy < h + bottom and -left <= ix < w + right
            vals.append(float(a[b, ch, iy, ix]) if inside else None)
            count += inside or (include_pad and in_explicit_pad)
        if pool_type == "max":
            out[b, ch, y, x] = max(v if v is not None else lowest for v in vals)
        else:
            out[b, ch, y, x] = sum(v for v in vals if v is not None) / max(count, 1)
    return out


def slow_softmax(a, axis):
    moved = np.moveaxis(a.astype(np.float64), axis, -1)
    out = np.empty_like(moved)
    for idx in np.ndindex(*moved.shape[:-1]):
        row = [float(v) for v in moved[idx]]
        top = max(row)
        exps = [math.exp(v - top) for v in row]
        total = sum(exps)
        out[idx] = [e / total for e in exps]
    return np.moveaxis(out, -1, axis)


CONV_CASES = [
    # (N, C, H, W, K, KH, KW, stride, padding, dilation)
    (1, 3, 5, 5, 4, 3, 3, (1, 1), 1, (1, 1)),
    (2, 2, 6, 7, 3, 3, 2, (2, 1), (1, 0), (1, 1)),
    (1, 2, 7, 6, 2, 3, 3, (1, 2), (0, 1, 2, 1), (2, 1)),
    (1, 3, 6, 6, 2, 2, 2, (2, 2), "SAME", (1, 1)),
    (1, 2, 5, 5, 2, 1, 1, (1, 1), "VALID", (1, 1)),
]


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv2d_references_match_loops(rng, case):
    n, c, h, w, k, kh, kw, stride, padding, dilation = case
    a = rand(rng, (n, c, h, w))
    wt = rand(rng, (k, c, kh, kw))
    close(ref.conv2d_nchw_python(a, wt, stride, padding, dilation),
          slow_conv2d_nchw(a, wt, stride, padding, dilation))
    a_nhwc, w_hwio = a.transpose(0, 2, 3, 1).copy(), wt.transpose(2, 3, 1, 0).copy()
    close(ref.conv2d_nhwc_python(a_nhwc, w_hwio, stride, padding, dilation),
          slow_conv2d_nhwc(a_nhwc, w_hwio, stride, padding, dilation))


@pytest.mark.parametrize("mult", [1, 2])
def test_depthwise_references_match_loops(rng, mult):
    a = rand(rng, (2, 3, 6, 5))
    w = rand(rng, (3, mult, 3, 2))
    for stride, padding, dilation in [((1, 1), 1, (1, 1)), ((2, 1), (0, 1, 1, 0), (1, 2))]:
        expected = slow_depthwise_nchw(a, w, stride, padding, dilation)
        close(ref.depthwise_conv2d_nchw_python(a, w, stride, padding, dilation), expected)
        got = ref.depthwise_conv2d_nhwc_python(
            a.transpose(0, 2, 3, 1), w.transpose(2, 3, 0, 1), stride, padding, dilation
        )
        close(got, expected.transpose(0, 2, 3, 1))


def test_matrix_references_match_loops(rng):
    a, b = rand(rng, (3, 4)), rand(rng, (4, 5))
    bias = rand(rng, (5,))
    close(ref.matmul_python(a, b), slow_matmul(a, b))
    close(ref.matmul_python(a.T, b, bias, transpose_a=True), slow_matmul(a, b) + bias)
    close(ref.matmul_python(a, b.T, transpose_b=True), slow_matmul(a, b))
    close(ref.dense_python(a, b.T.copy(), bias), slow_matmul(a, b) + bias)
    x, y = rand(rng, (2, 3, 4)), rand(rng, (2, 5, 4))
    got = ref.batch_matmul_python(x, y)
    for i in range(2):
        close(got[i], slow_matmul(x[i], y[i].T))
    got = ref.batch_matmul_python(x[:1].transpose(0, 2, 1), y.transpose(0, 2, 1),
                                  transpose_a=True, transpose_b=False)
    for i in range(2):
        close(got[i], slow_matmul(x[0], y[i].T))


POOL_CASES = [
    # kernel, stride, dilation, padding, ceil_mode, count_include_pad
    ((3, 3), (2, 2), (1, 1), 1, False, True),
    ((3, 3), (2, 2), (1, 1), 1, False, False),
    ((2, 3), (2, 1), (1, 1), (0, 1, 1, 0), True, False),
    ((3, 2), (3, 2), (1, 1), (1, 0), True, True),
    ((2, 2), (2, 2), (2, 1), 0, True, False),
    ((1, 1), (3, 3), (1, 1), 0, True, False),
]


@pytest.mark.parametrize("case", POOL_CASES)
@pytest.mark.parametrize("pool_type", ["max", "avg"])
def test_pool_references_match_loops(rng, case, pool_type):
    kernel, stride, dilation, padding, ceil_mode, include = case
    a = rand(rng, (2, 2, 7, 6))
    expected = slow_pool_nchw(a, kernel, stride, dilation, padding, pool_type, ceil_mode, include)
    got = ref.pool2d_python(a, kernel, stride, dilation, padding, pool_type, ceil_mode,
                            "NCHW", include)
    close(got, expected)
    got = ref.pool2d_python(a.transpose(0, 2, 3, 1), kernel, stride, dilation, padding,
                            pool_type, ceil_mode, "NHWC", include)
    close(got, expected.transpose(0, 2, 3, 1))


def test_global_pool_references_match_loops(rng):
    a = rand(rng, (2, 3, 4, 5))
    expected_avg = np.array([[[[sum(float(v) for v in a[b, c].ravel()) / 20]] for c in range(3)]
                             for b in range(2)])
    expected_max = np.array([[[[max(float(v) for v in a[b, c].ravel())]] for c in range(3)]
                             for b in range(2)])
    close(ref.global_pool2d_python(a, "avg"), expected_avg)
    close(ref.global_pool2d_python(a, "max"), expected_max)
    close(ref.global_pool2d_python(a.transpose(0, 2, 3, 1), "avg", "NHWC"),
          expected_avg.transpose(0, 2, 3, 1))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_reference_matches_loops(rng, axis):
    a = rand(rng, (3, 4, 5), lo=-4, hi=4)
    close(ref.softmax_python(a, axis), slow_softmax(a, axis))


def test_batch_norm_reference_matches_formula(rng):
    x = rand(rng, (2, 3, 2, 2))
    g, b, m = rand(rng, (3,)), rand(rng, (3,)), rand(rng, (3,))
    v = rand(rng, (3,), lo=0.1, hi=2.0)
    expected = np.empty(x.shape)
    for idx in np.ndindex(*x.shape):
        c = idx[1]
        expected[idx] = (float(x[idx]) - m[c]) / math.sqrt(v[c] + 1e-3) * g[c] + b[c]
    close(ref.batch_norm_python(x, g, b, m, v, axis=1, epsilon=1e-3), expected)
    nhwc = ref.batch_norm_python(x.transpose(0, 2, 3, 1), g, b, m, v, axis=3, epsilon=1e-3)
    close(nhwc, expected.transpose(0, 2, 3, 1))


# ---------------------------------------------------------------------------------------
# operators run by the evaluator against the references


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv2d_nchw_compute(rng, case):
    n, c, h, w, k, kh, kw, stride, padding, dilation = case
    data = te.placeholder((n, c, h, w), name="data")
    kernel = te.placeholder((k, c, kh, kw), name="kernel")
    out = ops.nn.conv2d_nchw(data, kernel, stride, padding, dilation)
    a, wt = rand(rng, data.shape), rand(rng, kernel.shape)
    close(run1(out, {data: a, kernel: wt}), ref.conv2d_nchw_python(a, wt, stride, padding,
                                                                  dilation))


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv2d_nhwc_compute(rng, case):
    n, c, h, w, k, kh, kw, stride, padding, dilation = case
    data = te.placeholder((n, h, w, c), name="data")
    kernel = te.placeholder((kh, kw, c, k), name="kernel")
    out = ops.nn.conv2d_nhwc(data, kernel, stride, padding, dilation)
    a, wt = rand(rng, data.shape), rand(rng, kernel.shape)
    close(run1(out, {data: a, kernel: wt}), ref.conv2d_nhwc_python(a, wt, stride, padding,
                                                                  dilation))


def test_conv2d_random_configurations(rng):
    # window geometry drawn at random: strides, dilations, asymmetric pads, odd sizes
    for _ in range(12):
        kh, kw = (int(v) for v in rng.integers(1, 4, size=2))
        sh, sw, dh, dw = (int(v) for v in rng.integers(1, 3, size=4))
        pads = tuple(int(v) for v in rng.integers(0, 3, size=4))
        h = int(rng.integers((kh - 1) * dh + 1, 8))
        w = int(rng.integers((kw - 1) * dw + 1, 8))
        data = te.placeholder((1, 2, h, w), name="data")
        kernel = te.placeholder((2, 2, kh, kw), name="kernel")
        out = ops.nn.conv2d_nchw(data, kernel, (sh, sw), pads, (dh, dw))
        a, wt = rand(rng, data.shape), rand(rng, kernel.shape)
        expected = ref.conv2d_nchw_python(a, wt, (sh, sw), pads, (dh, dw))
        close(expected, slow_conv2d_nchw(a, wt, (sh, sw), pads, (dh, dw)))
        close(run1(out, {data: a, kernel: wt}), expected)


def test_pool_random_configurations(rng):
    for _ in range(12):
        kh, kw = (int(v) for v in rng.integers(1, 4, size=2))
        sh, sw, dh, dw = (int(v) for v in rng.integers(1, 3, size=4))
        pads = tuple(int(v) for v in rng.integers(0, 3, size=4))
        ceil_mode, include = bool(rng.integers(2)), bool(rng.integers(2))
        pool_type = ("max", "avg")[int(rng.integers(2))]
        h = int(rng.integers((kh - 1) * dh + 1, 8))
        w = int(rng.integers((kw - 1) * dw + 1, 8))
        x = te.placeholder((1, 2, h, w), name="x")
        args = ((kh, kw), (sh, sw), (dh, dw), pads, pool_type, ceil_mode)
        out = ops.nn.pool2d(x, *args, "NCHW", include)
        xv = rand(rng, x.shape)
        expected = ref.pool2d_python(xv, *args, "NCHW", include)
        close(expected, slow_pool_nchw(xv, *args, include))
        close(run1(out, {x: xv}), expected)


def test_conv2d_integer_inputs_accumulate_in_out_dtype(rng):
    data = te.placeholder((1, 2, 4, 4), "int8", name="data")
    kernel = te.placeholder((2, 2, 3, 3), "int8", name="kernel")
    out = ops.nn.conv2d_nchw(data, kernel, 1, 1, out_dtype="int32")
    assert out.dtype == "int32"
    assert "int32(pad_temp[" in str(ComputeDAG([out]))
    a, w = rand(rng, data.shape, "int8", -100, 100), rand(rng, kernel.shape, "int8", -100, 100)
    expected = ref.conv2d_nchw_python(a.astype(np.int32), w.astype(np.int32), 1, 1)
    np.testing.assert_array_equal(run1(out, {data: a, kernel: w}), expected)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("mult", [1, 2])
def test_depthwise_conv2d_compute(rng, layout, mult):
    c, h, w = 3, 6, 5
    if layout == "NCHW":
        data = te.placeholder((1, c, h, w), name="data")
        kernel = te.placeholder((c, mult, 3, 3), name="kernel")
        out = ops.nn.depthwise_conv2d_nchw(data, kernel, (2, 1), 1, (1, 2))
        fn = ref.depthwise_conv2d_nchw_python
    else:
        data = te.placeholder((1, h, w, c), name="data")
        kernel = te.placeholder((3, 3, c, mult), name="kernel")
        out = ops.nn.depthwise_conv2d_nhwc(data, kernel, (2, 1), 1, (1, 2))
        fn = ref.depthwise_conv2d_nhwc_python
    a, wt = rand(rng, data.shape), rand(rng, kernel.shape)
    close(run1(out, {data: a, kernel: wt}), fn(a, wt, (2, 1), 1, (1, 2)))


def test_depthwise_multiplier_one_folds_channel_index():
    data = te.placeholder((1, 4, 6, 6), name="data")
    kernel = te.placeholder((4, 1, 3, 3), name="kernel")
    text = str(ComputeDAG([ops.nn.depthwise_conv2d_nchw(data, kernel, 1, 1)]))
    assert "PaddedInput[b, c, (i + di), (j + dj)]*kernel[c, 0, di, dj]" in text


@pytest.mark.parametrize("with_bias", [False, True])
def test_dense_compute(rng, with_bias):
    data = te.placeholder((3, 4), name="data")
    weight = te.placeholder((5, 4), name="weight")
    bias = te.placeholder((5,), name="bias") if with_bias else None
    out = ops.nn.dense(data, weight, bias)
    feed = {data: rand(rng, (3, 4)), weight: rand(rng, (5, 4))}
    if with_bias:
        feed[bias] = rand(rng, (5,))
    expected = ref.dense_python(feed[data], feed[weight], feed.get(bias) if bias else None)
    close(run1(out, feed), expected)


@pytest.mark.parametrize("ta,tb", list(itertools.product([False, True], repeat=2)))
def test_matmul_compute(rng, ta, tb):
    a = te.placeholder((4, 3) if ta else (3, 4), name="a")
    b = te.placeholder((5, 4) if tb else (4, 5), name="b")
    bias = te.placeholder((5,), name="bias")
    out = ops.nn.matmul(a, b, bias, transpose_a=ta, transpose_b=tb)
    feed = {a: rand(rng, a.shape), b: rand(rng, b.shape), bias: rand(rng, (5,))}
    form = ("T" if ta else "N") + ("T" if tb else "N")
    assert f"T_matmul_{form}" in str(ComputeDAG([out]))
    expected = ref.matmul_python(feed[a], feed[b], feed[bias], ta, tb)
    close(run1(out, feed), expected)


@pytest.mark.parametrize("ta,tb", list(itertools.product([False, True], repeat=2)))
@pytest.mark.parametrize("batches", [(2, 2), (1, 3), (3, 1)])
def test_batch_matmul_compute(rng, ta, tb, batches):
    xb, yb = batches
    x = te.placeholder((xb, 4, 3) if ta else (xb, 3, 4), name="x")
    y = te.placeholder((yb, 5, 4) if tb else (yb, 4, 5), name="y")
    out = ops.nn.batch_matmul(x, y, transpose_a=ta, transpose_b=tb)
    assert out.shape == (max(xb, yb), 3, 5)
    feed = {x: rand(rng, x.shape), y: rand(rng, y.shape)}
    close(run1(out, feed), ref.batch_matmul_python(feed[x], feed[y], ta, tb))


@pytest.mark.parametrize("axis", [1, -1, 0])
def test_bias_add_compute(rng, axis):
    data = te.placeholder((2, 3, 4), name="data")
    bias = te.placeholder((data.shape[axis],), name="bias")
    out = ops.nn.bias_add(data, bias, axis)
    assert out.op.tag == "broadcast" and out.name == "T_add"
    feed = {data: rand(rng, data.shape), bias: rand(rng, bias.shape)}
    close(run1(out, feed), ref.bias_add_python(feed[data], feed[bias], axis % 3))


BINARY = [
    (ops.add, np.add, "T_add"),
    (ops.subtract, np.subtract, "T_subtract"),
    (ops.multiply, np.multiply, "T_multiply"),
    (ops.divide, np.divide, "T_divide"),
    (ops.maximum, np.maximum, "T_maximum"),
    (ops.minimum, np.minimum, "T_minimum"),
    (ops.power, np.power, "T_power"),
]


@pytest.mark.parametrize("fn,np_fn,name", BINARY)
@pytest.mark.parametrize("shapes", [((2, 3, 4), (3, 1)), ((1, 4), (3, 1)), ((2, 3), (2, 3))])
def test_broadcast_binary_compute(rng, fn, np_fn, name, shapes):
    a = te.placeholder(shapes[0], name="a")
    b = te.placeholder(shapes[1], name="b")
    out = fn(a, b)
    assert out.name == name and out.op.tag == "broadcast"
    assert out.shape == np.broadcast_shapes(*shapes)
    av = rand(rng, shapes[0], lo=0.5, hi=2.0)
    bv = rand(rng, shapes[1], lo=0.5, hi=2.0)
    close(run1(out, {a: av, b: bv}), np_fn(av, bv))


@pytest.mark.parametrize("fn,np_fn,name", BINARY[:6])
def test_broadcast_with_scalars(rng, fn, np_fn, name):
    a = te.placeholder((2, 3), name="a")
    av = rand(rng, (2, 3), lo=0.5, hi=2.0)
    right, left = fn(a, 1.5), fn(3, a)
    assert right.op.tag == "elemwise" and right.name == name
    close(run1(right, {a: av}), np_fn(av, np.float32(1.5)))
    close(run1(left, {a: av}), np_fn(np.float32(3), av))
    assert str(fn(2, 3)) in {"(2 + 3)", "(2 - 3)", "(2*3)", "floordiv(2, 3)", "max(2, 3)",
                             "min(2, 3)"}


@pytest.mark.parametrize("exponent", [1.0, 2.0, 3.0, 1.7, -2.0])
def test_a_known_small_power_is_products(rng, exponent):
    # squares and cubes need no pow routine (float64 logarithms for a float32 base);
    # other exponents keep it
    a = te.placeholder((4, 5), name="a")
    out = ops.power(a, exponent)
    body = str(out.op.body[0] if isinstance(out.op.body, (list, tuple)) else out.op.body)
    assert ("pow" in body) == (exponent not in (1.0, 2.0, 3.0)), body
    av = rand(rng, (4, 5), lo=-2.0, hi=2.0) if exponent != 1.7 else rand(rng, (4, 5), lo=0.5)
    got = run1(out, {a: av})
    np.testing.assert_allclose(got, np.power(av, np.float32(exponent)), rtol=3e-7, atol=0)


def test_integer_floor_division_and_modulo(rng):
    a = te.placeholder((3, 4), "int32", name="a")
    b = te.placeholder((4,), "int32", name="b")
    av = rand(rng, (3, 4), "int32", -20, 20)
    bv = np.array([3, -3, 7, -2], dtype="int32")
    got_div, got_mod, got_true = evaluate(
        [ops.floor_divide(a, b), ops.floor_mod(a, b), ops.divide(a, b)], {a: av, b: bv}
    )
    np.testing.assert_array_equal(got_div, av // bv)
    np.testing.assert_array_equal(got_mod, av % bv)
    np.testing.assert_array_equal(got_true, av // bv)


def test_tensor_operators_build_broadcast_stages(rng):
    a = te.placeholder((2, 3), name="a")
    b = te.placeholder((3,), name="b")
    out = (a + b) * 2.0 - a / b
    assert out.name == "T_subtract"
    text = str(ComputeDAG([out]))
    assert "T_add(ax0, ax1) = (a[ax0, ax1] + b[ax1])" in text
    assert "T_multiply(ax0, ax1) = (T_add[ax0, ax1]*2f)" in text
    av, bv = rand(rng, (2, 3)), rand(rng, (3,), lo=0.5, hi=1.5)
    close(run1(out, {a: av, b: bv}), (av + bv) * 2 - av / bv)
    r = 1 - a
    assert str(ComputeDAG([r])).endswith("T_subtract(ax0, ax1) = (1f - a[ax0, ax1])\n")


UNARY = [
    (ops.nn.relu, lambda v: np.maximum(v, 0), "compute"),
    (ops.exp, np.exp, "compute"),
    (ops.sigmoid, lambda v: 1 / (1 + np.exp(-v)), "compute"),
    (ops.tanh, np.tanh, "compute"),
    (ops.abs, np.abs, "compute"),
    (ops.negative, np.negative, "T_negative"),
    (lambda t: ops.clip(t, -0.25, 0.5), lambda v: np.clip(v, -0.25, 0.5), "compute"),
    (lambda t: ops.nn.leaky_relu(t, 0.1), lambda v: np.where(v > 0, v, v * 0.1), "compute"),
]


@pytest.mark.parametrize("fn,np_fn,name", UNARY)
def test_unary_compute(rng, fn, np_fn, name):
    x = te.placeholder((2, 3, 4), name="x")
    out = fn(x)
    assert out.name == name and out.op.tag == "elemwise" and out.shape == x.shape
    xv = rand(rng, x.shape, lo=-2, hi=2)
    close(run1(out, {x: xv}), np_fn(xv).astype("float32"))


def test_positive_domain_math(rng):
    x = te.placeholder((5,), name="x")
    xv = rand(rng, (5,), lo=0.1, hi=4)
    got = evaluate([ops.log(x), ops.sqrt(x), ops.rsqrt(x)], {x: xv})
    for g, e in zip(got, [np.log(xv), np.sqrt(xv), 1 / np.sqrt(xv)]):
        close(g, e)


def test_cast_compute(rng):
    x = te.placeholder((2, 3), name="x")
    out = ops.cast(x, "int32")
    assert out.dtype == "int32" and out.name == "T_cast"
    xv = rand(rng, x.shape, lo=-5, hi=5)
    np.testing.assert_array_equal(run1(out, {x: xv}), xv.astype("int32"))


@pytest.mark.parametrize("value", [0.0, -1.5])
def test_pad_compute(rng, value):
    x = te.placeholder((2, 3, 4), name="x")
    out = ops.nn.pad(x, [0, 1, 2], [1, 0, 3], value)
    assert out.shape == (3, 4, 9) and out.op.tag == "injective,pad" and out.name == "PadInput"
    text = str(ComputeDAG([out]))
    # only padded sides are bounds-checked; only non-zero pad_before shifts the index
    assert "(((i0 < 2) && (i1 >= 1)) && (i2 >= 2)) && (i2 < 6)" in text
    assert "x[i0, (i1 - 1), (i2 - 2)]" in text
    xv = rand(rng, x.shape)
    close(run1(out, {x: xv}), ref.pad_python(xv, [0, 1, 2], [1, 0, 3], value))


def test_pad_without_padding_is_a_copy():
    x = te.placeholder((2, 3), name="x")
    text = str(ComputeDAG([ops.nn.pad(x, [0, 0], name="pad_temp")]))
    assert "pad_temp(i0, i1) = x[i0, i1]" in text


@pytest.mark.parametrize("case", POOL_CASES)
@pytest.mark.parametrize("pool_type", ["max", "avg"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_pool2d_compute(rng, case, pool_type, layout):
    kernel, stride, dilation, padding, ceil_mode, include = case
    shape = (1, 2, 7, 6) if layout == "NCHW" else (1, 7, 6, 2)
    x = te.placeholder(shape, name="x")
    out = ops.nn.pool2d(x, kernel, stride, dilation, padding, pool_type, ceil_mode, layout,
                        include)
    xv = rand(rng, shape)
    expected = ref.pool2d_python(xv, kernel, stride, dilation, padding, pool_type, ceil_mode,
                                 layout, include)
    assert out.shape == expected.shape
    close(run1(out, {x: xv}), expected)


def test_pool_wrappers_and_stage_names():
    x = te.placeholder((1, 112, 112, 64), name="placeholder")
    out = ops.nn.max_pool2d(x, 3, 2, 1, layout="NHWC")
    text = str(ComputeDAG([out]))
    assert out.shape == (1, 56, 56, 64) and out.op.tag == "pool_max"
    assert "tensor(ax0, ax1, ax2, ax3) max= pad_temp[ax0, ((ax1*2) + rv0), ((ax2*2) + rv1), ax3]" \
        in text
    assert "pad_temp(ax0, ax1, ax2, ax3) = tir.if_then_else(((((ax1 >= 1) && (ax1 < 113))" in text
    avg = ops.nn.avg_pool2d(te.placeholder((1, 4, 8, 8), name="x"), 2, 2)
    assert "(tensor[ax0, ax1, ax2, ax3]" in str(ComputeDAG([avg])) and avg.shape == (1, 4, 4, 4)
    assert avg.op.tag == "elemwise" and avg.op.input_tensors[0].op.tag == "pool_sum"


@pytest.mark.parametrize("pool_type", ["max", "avg"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_global_pool_compute(rng, pool_type, layout):
    shape = (2, 3, 4, 5) if layout == "NCHW" else (2, 4, 5, 3)
    x = te.placeholder(shape, name="x")
    out = ops.nn.global_pool2d(x, pool_type, layout)
    xv = rand(rng, shape)
    close(run1(out, {x: xv}), ref.global_pool2d_python(xv, pool_type, layout))
    assert ops.nn.global_avg_pool2d(x, layout).shape == out.shape


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_compute(rng, axis):
    x = te.placeholder((2, 3, 4), name="x")
    out = ops.nn.softmax(x, axis)
    xv = rand(rng, x.shape, lo=-3, hi=3)
    close(run1(out, {x: xv}), ref.softmax_python(xv, axis))


def test_softmax_prints_as_tvm():
    x = te.placeholder((1, 1000), name="placeholder")
    out = ops.nn.softmax(x)
    dag = ComputeDAG([out])
    lines = str(dag).splitlines()
    assert lines[1] == "T_softmax_maxelem(i0) max= placeholder[i0, k]"
    assert lines[2] == (
        "T_softmax_exp(i0, i1) = tir.exp((placeholder[i0, i1] - T_softmax_maxelem[i0]))"
    )
    assert lines[3] == "T_softmax_expsum(i0) += T_softmax_exp[i0, k]"
    assert lines[4].startswith("T_softmax_norm(i0, i1) = (T_softmax_exp[i0, i1]")
    assert {op.tag for op in dag.compute_ops} == {"softmax_output"}
    assert out.op.attrs["axis"] == 1


@pytest.mark.parametrize("axis,center,scale", [(1, True, True), (3, False, True), (1, True, False)])
def test_batch_norm_compute(rng, axis, center, scale):
    x = te.placeholder((2, 3, 2, 3), name="x")
    c = x.shape[axis]
    params = [te.placeholder((c,), name=n) for n in ("gamma", "beta", "mean", "var")]
    out = ops.nn.batch_norm(x, *params, axis=axis, epsilon=1e-3, center=center, scale=scale)
    assert out.op.tag == "broadcast" and out.shape == x.shape
    feed = {x: rand(rng, x.shape)}
    for p in params:
        feed[p] = rand(rng, (c,), lo=0.2, hi=1.5)
    gamma, beta, mean, var = (feed[p] for p in params)
    expected = ref.batch_norm_python(feed[x], gamma, beta, mean, var, axis, 1e-3, center, scale)
    used = {t for t in params if t.op in ComputeDAG([out]).ops}
    close(run1(out, {t: v for t, v in feed.items() if t is x or t in used}), expected)


def test_reshape_flatten_transpose(rng):
    x = te.placeholder((2, 3, 4), name="x")
    xv = rand(rng, x.shape)
    outs = [
        ops.reshape(x, (4, -1)),
        ops.reshape(x, (24,)),
        ops.nn.flatten(x),
        ops.nn.batch_flatten(x),
        ops.transpose(x),
        ops.transpose(x, (1, -1, 0)),
        ops.squeeze(ops.expand_dims(x, 1, 2), (1, 2)),
        ops.expand_dims(x, -1),
    ]
    expected = [
        xv.reshape(4, -1), xv.reshape(24), xv.reshape(2, 12), xv.reshape(2, 12),
        xv.transpose(), xv.transpose(1, 2, 0), xv, xv[..., None],
    ]
    for got, exp in zip(evaluate(outs, {x: xv}), expected):
        close(got, exp)
    assert [o.name for o in outs[:2]] == ["T_reshape", "T_reshape"]
    assert all(o.op.tag == "injective" for o in outs[:6])


def test_reshape_index_folds_unit_dimensions():
    x = te.placeholder((1, 4, 7, 7), name="x")
    text = str(ComputeDAG([ops.reshape(x, (4, 49))]))
    assert "x[0, floormod(floordiv(floordiv(((ax0*49) + ax1), 7), 7), 4), " in text


def test_squeeze_all_unit_dimensions(rng):
    x = te.placeholder((1, 3, 1, 2), name="x")
    out = ops.squeeze(x)
    assert out.shape == (3, 2)
    xv = rand(rng, x.shape)
    close(run1(out, {x: xv}), xv.squeeze())


def test_concatenate(rng):
    a = te.placeholder((2, 1, 3), name="a")
    b = te.placeholder((2, 4, 3), name="b")
    c = te.placeholder((2, 2, 3), name="c")
    out = ops.concatenate([a, b, c], axis=1)
    assert out.shape == (2, 7, 3) and out.name == "T_concat"
    feed = {t: rand(rng, t.shape) for t in (a, b, c)}
    close(run1(out, feed), np.concatenate([feed[a], feed[b], feed[c]], axis=1))


@pytest.mark.parametrize("name", ["sum", "max", "min", "mean"])
@pytest.mark.parametrize("axis,keepdims", [(None, False), (1, True), ((0, 2), False), (-1, True)])
def test_reductions(rng, name, axis, keepdims):
    x = te.placeholder((2, 3, 4), name="x")
    out = getattr(ops, name)(x, axis, keepdims)
    xv = rand(rng, x.shape)
    np_axis = tuple(axis) if isinstance(axis, tuple) else axis
    expected = getattr(np, name)(xv, axis=np_axis, keepdims=keepdims)
    close(run1(out, {x: xv}), np.asarray(expected, dtype="float32"))
    red = out if name != "mean" else out.op.input_tensors[0]
    assert red.name == "x_red" and red.op.tag == "comm_reduce"


# ---------------------------------------------------------------------------------------
# shapes, dtypes, flop counts


def test_conv2d_output_shapes_and_dtypes():
    data = te.placeholder((2, 3, 224, 224), name="data")
    kernel = te.placeholder((64, 3, 7, 7), name="kernel")
    out = ops.nn.conv2d_nchw(data, kernel, 2, 3)
    assert out.shape == (2, 64, 112, 112) and out.dtype == "float32"
    assert out.op.tag == "conv2d_nchw"
    assert [a.var.name for a in out.op.reduce_axis] == ["rc", "ry", "rx"]
    same = ops.nn.conv2d_nchw(te.placeholder((1, 3, 9, 9), name="d"),
                              te.placeholder((8, 3, 3, 3), name="k"), 1, "SAME", dilation=2)
    assert same.shape == (1, 8, 9, 9)
    nhwc = ops.nn.conv2d_nhwc(te.placeholder((1, 56, 56, 64), "float16", name="d"),
                              te.placeholder((3, 3, 64, 128), "float16", name="k"), 2, 1)
    assert nhwc.shape == (1, 28, 28, 128) and nhwc.dtype == "float32"
    assert nhwc.op.tag == "conv2d_nhwc" and nhwc.name == "conv2d_nhwc"
    assert nhwc.op.attrs["layout_free_placeholders"][0].name == "k"
    assert ops.nn.conv2d(te.placeholder((1, 8, 8, 4), name="d"),
                         te.placeholder((1, 1, 4, 16), name="k"), 1, 0,
                         layout="NHWC").shape == (1, 8, 8, 16)


def test_conv2d_nhwc_prints_as_tvm_network_tutorial():
    x = te.placeholder((1, 56, 56, 64), name="placeholder")
    w = te.placeholder((1, 1, 64, 128), name="placeholder")
    text = str(ComputeDAG([ops.nn.conv2d_nhwc(x, w, (2, 2), (0, 0), (1, 1), "float32")]))
    assert text == (
        "placeholder = PLACEHOLDER [1, 56, 56, 64]\n"
        "pad_temp(i0, i1, i2, i3) = placeholder[i0, i1, i2, i3]\n"
        "placeholder = PLACEHOLDER [1, 1, 64, 128]\n"
        "conv2d_nhwc(nn, yy, xx, ff) += (pad_temp[nn, ((yy*2) + ry), ((xx*2) + rx), rc]"
        "*placeholder[ry, rx, rc, ff])\n"
    )


def test_dense_prints_as_tvm_network_tutorial():
    x = te.placeholder((1, 512), name="placeholder")
    w = te.placeholder((1000, 512), name="placeholder")
    out = ops.nn.dense(x, w)
    assert out.op.tag == "dense" and out.shape == (1, 1000)
    assert "T_matmul_NT(i, j) += (placeholder[i, k]*placeholder[j, k])" in str(ComputeDAG([out]))


@pytest.mark.parametrize("build,expected_shape,expected_dtype", [
    (lambda: ops.nn.dense(te.placeholder((8, 16), "float16"), te.placeholder((4, 16), "float16"),
                          out_dtype="float32"), (8, 4), "float32"),
    (lambda: ops.nn.batch_matmul(te.placeholder((3, 5, 7)), te.placeholder((3, 2, 7))),
     (3, 5, 2), "float32"),
    (lambda: ops.nn.depthwise_conv2d_nchw(te.placeholder((1, 32, 112, 112)),
                                          te.placeholder((32, 2, 3, 3)), 2, 1), (1, 64, 56, 56),
     "float32"),
    (lambda: ops.nn.depthwise_conv2d_nhwc(te.placeholder((1, 112, 112, 32)),
                                          te.placeholder((3, 3, 32, 1)), 1, "SAME"),
     (1, 112, 112, 32), "float32"),
    (lambda: ops.nn.max_pool2d(te.placeholder((1, 64, 112, 112)), 3, 2, 1), (1, 64, 56, 56),
     "float32"),
    (lambda: ops.nn.avg_pool2d(te.placeholder((1, 64, 8, 8)), 3, 2, 0, ceil_mode=True),
     (1, 64, 4, 4), "float32"),
    (lambda: ops.nn.max_pool2d(te.placeholder((1, 8, 8, 4), "int8"), 2, 2, layout="NHWC"),
     (1, 4, 4, 4), "int8"),
    (lambda: ops.nn.global_avg_pool2d(te.placeholder((1, 7, 7, 512)), "NHWC"), (1, 1, 1, 512),
     "float32"),
    (lambda: ops.nn.softmax(te.placeholder((4, 10), "float16")), (4, 10), "float16"),
    (lambda: ops.nn.flatten(te.placeholder((2, 512, 1, 1))), (2, 512), "float32"),
    (lambda: ops.reshape(te.placeholder((2, 3, 4), "int32"), (-1, 6)), (4, 6), "int32"),
    (lambda: ops.transpose(te.placeholder((2, 3, 4)), (2, 0, 1)), (4, 2, 3), "float32"),
    (lambda: ops.concatenate([te.placeholder((2, 3)), te.placeholder((5, 3))]), (7, 3),
     "float32"),
    (lambda: ops.expand_dims(te.placeholder((3,)), 0, 3), (1, 1, 1, 3), "float32"),
    (lambda: ops.add(te.placeholder((4, 1, 3), "int32"), te.placeholder((5, 1), "int32")),
     (4, 5, 3), "int32"),
    (lambda: ops.sum(te.placeholder((2, 3, 4)), axis=(0, 2), keepdims=True), (1, 3, 1),
     "float32"),
    (lambda: ops.cast(te.placeholder((3,)), "float16"), (3,), "float16"),
])
def test_shapes_and_dtypes(build, expected_shape, expected_dtype):
    out = build()
    assert out.shape == expected_shape
    assert out.dtype == expected_dtype


def test_dense_flop_count():
    data = te.placeholder((8, 64), name="data")
    weight = te.placeholder((32, 64), name="weight")
    bias = te.placeholder((32,), name="bias")
    flops = ComputeDAG([ops.nn.dense(data, weight, bias)]).flop_count()
    assert 2 * 8 * 32 * 64 <= flops <= 2 * 8 * 32 * 64 + 2 * 8 * 32


def test_depthwise_flop_count():
    out = ops.nn.depthwise_conv2d_nchw(te.placeholder((1, 32, 56, 56)),
                                       te.placeholder((32, 1, 3, 3)), 1, 1)
    flops = ComputeDAG([out]).flop_count()
    core = 2 * 32 * 56 * 56 * 9
    # the padding stage adds its bounds checks (four compares, three ands) per element
    assert core <= flops <= core + 8 * 32 * 58 * 58


# ---------------------------------------------------------------------------------------
# errors


def _p(shape, dtype="float32", name="t"):
    return te.placeholder(shape, dtype, name=name)


ERRORS = [
    (lambda: ops.nn.conv2d_nchw(_p((1, 64, 8, 8)), _p((16, 32, 3, 3)), 1, 1),
     "conv2d_nchw: data has 64 input channels but kernel expects 32"),
    (lambda: ops.nn.conv2d_nhwc(_p((1, 8, 8, 64)), _p((3, 3, 32, 16)), 1, 1),
     "conv2d_nhwc: data has 64 input channels but kernel expects 32"),
    (lambda: ops.nn.conv2d_nchw(_p((1, 3, 8)), _p((16, 3, 3, 3)), 1, 1),
     r"conv2d_nchw: data must be 4-D \[N, C, H, W\], got shape \[1, 3, 8\]"),
    (lambda: ops.nn.conv2d_nchw(_p((1, 3, 4, 4)), _p((8, 3, 7, 7)), 1, 0),
     "conv2d_nchw: the window height 7 .* is larger than the padded input height 4"),
    (lambda: ops.nn.conv2d_nchw(_p((1, 3, 8, 8)), _p((8, 3, 3, 3), "float16"), 1, 1),
     "conv2d_nchw: data has dtype float32 but kernel has dtype float16"),
    (lambda: ops.nn.conv2d_nchw(_p((1, 3, 8, 8)), _p((8, 3, 3, 3)), 0, 1),
     "conv2d_nchw: stride must be a positive int, got 0"),
    (lambda: ops.nn.conv2d_nchw(_p((1, 3, 8, 8)), _p((8, 3, 3, 3)), 1, (1, 2, 3)),
     "conv2d_nchw: padding must have 2 or 4 entries"),
    (lambda: ops.nn.conv2d_nchw(_p((1, 3, 8, 8)), _p((8, 3, 3, 3)), 1, -1),
     "conv2d_nchw: padding sizes must be non-negative ints"),
    (lambda: ops.nn.conv2d_nchw(_p((1, 3, 8, 8)), _p((8, 3, 3, 3)), 1, 1, out_dtype="f32"),
     "conv2d_nchw: unknown dtype 'f32'"),
    (lambda: ops.nn.conv2d(_p((1, 3, 8, 8)), _p((8, 3, 3, 3)), 1, 1, layout="CHWN"),
     "conv2d: unknown layout 'CHWN'"),
    (lambda: ops.nn.depthwise_conv2d_nchw(_p((1, 8, 8, 8)), _p((4, 1, 3, 3)), 1, 1),
     "depthwise_conv2d_nchw: data has 8 input channels but kernel expects 4"),
    (lambda: ops.nn.dense(_p((2, 16)), _p((4, 8))),
     "dense: data has 16 input features but weight expects 8"),
    (lambda: ops.nn.dense(_p((2, 16)), _p((4, 16)), _p((5,))),
     "dense: bias has 5 elements but the output has 4 columns"),
    (lambda: ops.nn.matmul(_p((2, 3)), _p((4, 5))), "matmul: inner dimensions differ"),
    (lambda: ops.nn.matmul(_p((2, 3)), _p((3, 5)), False, True),
     "matmul: bias must be a te tensor"),
    (lambda: ops.nn.batch_matmul(_p((2, 3, 4)), _p((3, 5, 4))),
     "batch_matmul: batch sizes 2 and 3 differ and neither is 1"),
    (lambda: ops.nn.batch_matmul(_p((2, 3, 4)), _p((2, 5, 3))),
     "batch_matmul: inner dimensions differ"),
    (lambda: ops.add(_p((2, 3)), _p((4, 3))),
     r"add: shapes \[2, 3\] and \[4, 3\] cannot be broadcast together"),
    (lambda: ops.add(_p((2, 3)), _p((2, 3), "float16")), "add: operand dtypes differ"),
    (lambda: _p((2, 3)) * _p((3, 2)), "multiply: shapes"),
    (lambda: ops.add(_p((2, 3)), "x"), "add: operands must be te tensors or scalars"),
    (lambda: ops.floor_mod(_p((2, 3)), 2), "floor_mod: needs integer operands"),
    (lambda: ops.exp(_p((2,), "int32")), "exp: needs a float tensor"),
    (lambda: ops.clip(_p((2,)), 1.0, 0.0), r"clip: a_min \(1.0\) is larger than a_max"),
    (lambda: ops.nn.relu([1, 2]), "relu: x must be a te tensor, got list"),
    (lambda: ops.nn.bias_add(_p((2, 3, 4)), _p((4,)), 1),
     r"bias_add: bias has 4 elements but data \[2, 3, 4\] has 3 along axis 1"),
    (lambda: ops.nn.bias_add(_p((2, 3)), _p((3,)), 2),
     "bias_add: axis 2 is out of range for a 2-D tensor"),
    (lambda: ops.nn.pad(_p((2, 3)), [1]), "pad: pad_before has 1 entries but data has 2"),
    (lambda: ops.nn.pad(_p((2, 3), "int32"), [1, 1], pad_value=0.5),
     "pad: pad_value 0.5 is not an integer"),
    (lambda: ops.nn.max_pool2d(_p((1, 3, 4, 4)), 5), "max_pool2d: the window height 5"),
    (lambda: ops.nn.avg_pool2d(_p((1, 3, 4, 4), "int32"), 2),
     "avg_pool2d: average pooling needs a float tensor"),
    (lambda: ops.nn.pool2d(_p((1, 3, 4, 4)), 2, 1, 1, 0, "sum"),
     "pool2d: pool_type must be 'max' or 'avg'"),
    (lambda: ops.nn.max_pool2d(_p((1, 3, 4, 4)), 2, layout="NCWH"),
     "max_pool2d: unknown layout 'NCWH'"),
    (lambda: ops.nn.global_avg_pool2d(_p((1, 3, 4))), "global_avg_pool2d: data must be 4-D"),
    (lambda: ops.nn.softmax(_p((2, 3)), 2), "softmax: axis 2 is out of range"),
    (lambda: ops.nn.softmax(_p((2, 3), "int32")), "softmax: x must have a float dtype"),
    (lambda: ops.nn.batch_norm(_p((1, 4, 2, 2)), _p((4,)), _p((4,)), _p((3,)), _p((4,))),
     r"batch_norm: moving_mean has 3 elements but data \[1, 4, 2, 2\] has 4 channels"),
    (lambda: ops.reshape(_p((2, 3)), (4, 2)),
     r"reshape: cannot reshape t of shape \[2, 3\] \(6 elements\) into \[4, 2\]"),
    (lambda: ops.reshape(_p((2, 3)), (-1, -1)), "reshape: newshape .* has more than one -1"),
    (lambda: ops.transpose(_p((2, 3, 4)), (0, 0, 1)), "transpose: axes .* are not a permutation"),
    (lambda: ops.concatenate([_p((2, 3)), _p((2, 4))], 0),
     "concatenate: tensors\\[1\\] has shape \\[2, 4\\] but tensors\\[0\\] has \\[2, 3\\]"),
    (lambda: ops.squeeze(_p((2, 1)), 0), "squeeze: axis 0 of t has size 2, not 1"),
    (lambda: ops.sum(_p((2, 3)), (1, 1)), "sum: axis .* names a dimension twice"),
    (lambda: ops.mean(_p((2, 3), "int32")), "mean: needs a float tensor"),
]


@pytest.mark.parametrize("build,message", ERRORS)
def test_errors(build, message):
    with pytest.raises(TEError, match=message):
        build()


def test_references_reject_bad_shapes():
    with pytest.raises(ValueError, match="channels"):
        ref.conv2d_nchw_python(np.zeros((1, 3, 4, 4)), np.zeros((2, 4, 3, 3)), 1, 1)
    with pytest.raises(ValueError, match="does not fit"):
        ref.pool2d_python(np.zeros((1, 1, 2, 2)), 3, 1, 1, 0, "max")
