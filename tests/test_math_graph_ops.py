"""The element-wise math, logic, activation and reduction graph operators: each against its
numpy reference on the reference executor, and compiled for the simulator against the same
reference; bad dtypes and attributes are rejected with a message naming the operator."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import graph
from ptxforge.graph.ir import Call, GraphError
from ptxforge.ir import dtype as dt

RNG = np.random.default_rng(11)
F = RNG.standard_normal((3, 4)).astype(np.float32)
G = RNG.standard_normal((4,)).astype(np.float32)
U = RNG.uniform(-0.98, 0.98, (3, 4)).astype(np.float32)
I32 = np.array([7, -7, 7, -7, 0, 5, -12, 9], np.int32)
J32 = np.array([2, 2, -2, -2, 3, -3, 5, -4], np.int32)


def dtype_name(a: np.ndarray) -> str:
    return dt.from_numpy(a.dtype)


def run_both(op: str, arrays, attrs=None):
    """The reference executor's and the simulator build's result of ``op`` on ``arrays``."""
    vs = [graph.var(f"x{k}", a.shape, dtype_name(a)) for k, a in enumerate(arrays)]
    net = graph.function([Call(op, vs, attrs or {})])
    feeds = {f"x{k}": a for k, a in enumerate(arrays)}
    ref = graph.evaluate(net, feeds, {})
    lib = graph.build(net, "sim", {})
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**feeds)
    m.run()
    return ref, m.get_output(0).numpy()


def check(op, arrays, expected, attrs=None, rtol=1e-5, atol=1e-6):
    ref, got = run_both(op, arrays, attrs)
    for value in (ref, got):
        assert value.dtype == np.asarray(expected).dtype, (op, value.dtype)
        assert value.shape == np.shape(expected)
        if value.dtype == np.bool_ or value.dtype.kind in "iu":
            np.testing.assert_array_equal(value, expected)
        else:
            np.testing.assert_allclose(np.asarray(value, np.float64),
                                       np.asarray(expected, np.float64), rtol=rtol,
                                       atol=atol, equal_nan=True)


@pytest.mark.parametrize("op,fn", [("equal", np.equal), ("less", np.less),
                                   ("less_equal", np.less_equal), ("greater", np.greater),
                                   ("greater_equal", np.greater_equal),
                                   ("not_equal", np.not_equal)])
@pytest.mark.parametrize("dtype", ["float32", "int64", "int8", "float16"])
def test_comparisons(op, fn, dtype):
    a, b = (F * 2).astype(dtype), (G * 2).astype(dtype)
    a[0, :2] = b[:2]  # some equal elements
    check(op, [a, b], fn(a, b))


def test_logic_and_where():
    a, b = F > 0, G > 0
    check("logical_and", [a, b], a & b)
    check("logical_or", [a, b], a | b)
    check("logical_xor", [a, b], a ^ b)
    check("logical_not", [a], ~a)
    check("equal", [a, b], a == b)
    check("where", [a, F, G], np.where(a, F, G))
    check("where", [b, I32[:4].astype(np.int64), np.int64(3) + np.zeros((3, 1), np.int64)],
          np.where(b, I32[:4].astype(np.int64), np.full((3, 1), 3, np.int64)))


def test_nan_inf():
    x = F.copy()
    x[0, 0], x[1, 1], x[2, 2] = np.nan, np.inf, -np.inf
    check("isnan", [x], np.isnan(x))
    check("isinf", [x], np.isinf(x))
    check("isinf", [x], np.isposinf(x), {"detect_negative": False})
    check("isinf", [x], np.isneginf(x), {"detect_positive": False})


@pytest.mark.parametrize("op,fn,scale", [
    ("floor", np.floor, 3), ("ceil", np.ceil, 3), ("reciprocal", np.reciprocal, 3),
    ("sin", np.sin, 3), ("cos", np.cos, 3), ("tan", np.tan, 1), ("atan", np.arctan, 5),
    ("asin", np.arcsin, 1), ("acos", np.arccos, 1), ("sinh", np.sinh, 3),
    ("cosh", np.cosh, 3), ("asinh", np.arcsinh, 5), ("atanh", np.arctanh, 1),
    ("abs", np.abs, 3), ("sign", np.sign, 3)])
def test_float_unary(op, fn, scale):
    x = U * scale
    x[0, :3] = [0.01, -0.003, 0.12]  # near zero, where closed forms cancel
    check(op, [x], fn(x.astype(np.float64)).astype(np.float32), rtol=2e-6, atol=1e-7)


def test_unary_edges():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4, -2.6, 1e9 + 0.5, 0.0], np.float32)
    check("round", [x], np.rint(x))
    check("acosh", [np.abs(F) + 1], np.arccosh(np.abs(F) + 1))
    big = np.array([1e20, -1e20, 1e30, 89.0, -89.0], np.float32)
    check("asinh", [big], np.arcsinh(big.astype(np.float64)).astype(np.float32))
    check("sinh", [big[3:]], np.sinh(big[3:].astype(np.float64)).astype(np.float32),
          rtol=1e-5)
    check("sign", [np.array([np.nan, -0.0, 2.0], np.float32)],
          np.array([np.nan, 0.0, 1.0], np.float32))
    check("atan", [np.array([np.inf, -np.inf, 0.0], np.float32)],
          np.array([np.pi / 2, -np.pi / 2, 0.0], np.float32))


def test_float64_keeps_double_precision():
    x = np.concatenate([RNG.uniform(-0.99, 0.99, 24), [1e-3, -4e-3, 0.011, 0.3, 0.7]])
    for op, fn in (("atan", np.arctan), ("asin", np.arcsin), ("acos", np.arccos),
                   ("sinh", np.sinh), ("asinh", np.arcsinh), ("atanh", np.arctanh)):
        check(op, [x], fn(x), rtol=5e-14, atol=0)
    big = np.array([5.0, -40.0, 1e10], np.float64)
    check("atan", [big], np.arctan(big), rtol=5e-15, atol=0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_unary_low_precision(dtype):
    x = dt.to_bfloat16(U * 3) if dtype == "bfloat16" else (U * 3).astype(dtype)
    wide = dt.from_bfloat16(x) if dtype == "bfloat16" else x.astype(np.float32)
    for op, fn in (("sin", np.sin), ("floor", np.floor), ("atan", np.arctan)):
        ref, got = run_both(op, [x])
        tol = 1e-2 if dtype == "bfloat16" else 1e-3
        for value in (ref, got):
            assert dtype_name(value) == dtype
            w = dt.from_bfloat16(value) if dtype == "bfloat16" else value.astype(np.float32)
            np.testing.assert_allclose(w, fn(wide), rtol=tol, atol=tol)


def test_integer_unary():
    check("abs", [I32], np.abs(I32))
    check("sign", [I32.astype(np.int8)], np.sign(I32).astype(np.int8))
    check("sign", [np.array([0, 3], np.uint8)], np.array([0, 1], np.uint8))


def test_integer_division_and_remainders():
    check("trunc_divide", [I32, J32], np.trunc(I32 / J32).astype(np.int32))
    check("floor_mod", [I32, J32], np.mod(I32, J32))
    check("fmod", [I32, J32], np.fmod(I32, J32))
    check("trunc_divide", [I32.astype(np.int64), np.int64(3) + np.zeros(1, np.int64)],
          np.trunc(I32 / 3).astype(np.int64))
    x = np.array([5.5, -5.5, 7.0, -7.25, 1e6 + 0.5, 3.0], np.float32)
    y = np.array([2.0, 2.0, -3.0, -2.0, 3.0, 0.1], np.float32)
    check("fmod", [x, y], np.fmod(x, y), rtol=1e-5)


def test_integer_power():
    base = np.array([2, -3, 5, 0, 7, -2], np.int32)
    exp = np.array([3, 3, 0, 4, 2, 5], np.int32)
    check("int_power", [base, exp], np.power(base, exp))
    check("int_power", [base.astype(np.int64), exp.astype(np.float32)],
          np.power(base, exp).astype(np.int64))
    square = np.array([4, 9, 10, 0], np.int32)
    check("int_power", [square, np.array([0.5], np.float32)], np.array([2, 3, 3, 0], np.int32))


@pytest.mark.parametrize("dtype", ["int32", "uint8", "int64", "int8"])
def test_bitwise(dtype):
    a = np.array([1, 2, 127, 16, 0, 100], dtype)
    b = np.array([1, 3, 2, 24, 5, 77], dtype)
    if dtype.startswith("int"):
        a[2], b[4] = -a[2], -b[4]
    check("bitwise_and", [a, b], a & b)
    check("bitwise_or", [a, b], a | b)
    check("bitwise_xor", [a, b], a ^ b)
    check("bitwise_not", [a], ~a)


def test_bit_shift():
    x = np.array([1, 2, 255, 16, 7], np.uint8)
    s = np.array([1, 3, 2, 8, 0], np.uint8)
    check("bit_shift", [x, s], np.array([2, 16, 252, 0, 7], np.uint8), {"direction": "left"})
    check("bit_shift", [x, s], np.array([0, 0, 63, 0, 7], np.uint8), {"direction": "right"})
    x64 = np.array([1, 1 << 40], np.uint64)
    check("bit_shift", [x64, np.array([63, 3], np.uint64)],
          np.array([1 << 63, 1 << 43], np.uint64), {"direction": "left"})


def test_signed_bit_shift():
    x = np.array([1, -8, 64, -1, 5, -128, 3], np.int8)
    s = np.array([1, 2, 1, 7, 8, 1, -1], np.int8)
    check("bit_shift", [x, s], np.array([2, -32, -128, -128, 0, 0, 0], np.int8),
          {"direction": "left"})
    check("bit_shift", [x, s], np.array([0, -2, 32, -1, 0, -64, 0], np.int8),
          {"direction": "right"})


def test_float_floor_mod():
    x = np.array([5.5, -5.5, 5.5, -5.5, 0.0, 3.0, -3.0], np.float32)
    y = np.array([2.0, 2.0, -2.0, -2.0, 3.0, np.inf, np.inf], np.float32)
    check("floor_mod", [x, y], np.mod(x, y))
    check("fmod", [x, y], np.fmod(x, y))


def _softplus(x):
    return np.logaddexp(0, x)


@pytest.mark.parametrize("op,attrs,fn", [
    ("nn.hard_sigmoid", {"alpha": 0.3, "beta": 0.4}, lambda x: np.clip(0.3 * x + 0.4, 0, 1)),
    ("nn.hard_swish", {}, lambda x: x * np.clip(x / 6 + 0.5, 0, 1)),
    ("nn.mish", {}, lambda x: x * np.tanh(_softplus(x))),
    ("nn.softplus", {}, _softplus),
    ("nn.softsign", {}, lambda x: x / (1 + np.abs(x))),
    ("nn.elu", {"alpha": 0.7}, lambda x: np.where(x > 0, x, 0.7 * np.expm1(x))),
    ("nn.selu", {}, lambda x: 1.0507009873554805 * np.where(
        x > 0, x, 1.6732632423543772 * np.expm1(x))),
    ("nn.celu", {"alpha": 2.0}, lambda x: np.maximum(0, x) + np.minimum(
        0, 2 * np.expm1(x / 2))),
    ("nn.thresholded_relu", {"alpha": 0.5}, lambda x: np.where(x > 0.5, x, 0)),
    ("nn.swish", {"alpha": 1.5}, lambda x: x / (1 + np.exp(-1.5 * x))),
    ("nn.gelu", {}, lambda x: 0.5 * x * (1 + np.vectorize(__import__("math").erf)(
        x / np.sqrt(2)))),
    ("nn.gelu", {"approximate": "tanh"}, lambda x: 0.5 * x * (1 + np.tanh(
        np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))),
])
def test_activations(op, attrs, fn):
    x = F * 3
    x[0, 0] = 100.0  # softplus and mish must not overflow
    check(op, [x], fn(x.astype(np.float64)).astype(np.float32), attrs, rtol=1e-5, atol=1e-6)


def test_gelu_tanh_differs_from_erf():
    x = np.array([1.5, -2.0, 0.7], np.float32)
    erf_form, _ = run_both("nn.gelu", [x])
    tanh_form, _ = run_both("nn.gelu", [x], {"approximate": "tanh"})
    assert np.abs(erf_form - tanh_form).max() > 1e-4


def test_prelu_broadcasts_slope():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    slope = np.array([0.1, 0.2, 0.3], np.float32).reshape(3, 1)
    check("nn.prelu", [x, slope], np.where(x < 0, x * slope, x))
    xi = np.array([-4, 3, -2], np.int32)
    check("nn.prelu", [xi, np.array([2], np.int32)], np.array([-8, 3, -4], np.int32))


@pytest.mark.parametrize("op,fn", [
    ("reduce.sum", np.sum), ("reduce.max", np.max), ("reduce.min", np.min),
    ("reduce.prod", np.prod), ("reduce.l1", lambda x, **k: np.sum(np.abs(x), **k)),
    ("reduce.sum_square", lambda x, **k: np.sum(x * x, **k))])
@pytest.mark.parametrize("axis,keepdims", [((1,), True), (None, False), ((0, 2), False)])
def test_reductions(op, fn, axis, keepdims):
    x = RNG.uniform(0.5, 1.5, (2, 3, 4)).astype(np.float32) * np.sign(
        RNG.standard_normal((2, 3, 4))).astype(np.float32)
    check(op, [x], fn(x, axis=axis, keepdims=keepdims).astype(np.float32),
          {"axis": axis, "keepdims": keepdims}, rtol=1e-5)
    xi = (x * 3).astype(np.int32)
    check(op, [xi], fn(xi, axis=axis, keepdims=keepdims).astype(np.int32),
          {"axis": axis, "keepdims": keepdims})


def test_half_sum_accumulates_in_float32():
    x = np.full((4096,), 1.0, np.float16)
    ref, got = run_both("reduce.sum", [x], {"axis": None})
    assert float(ref) == float(got) == 4096.0


def test_prod_refuses_huge_reductions():
    net_var = graph.var("x", (2048,), "float32")
    net = graph.function([Call("reduce.prod", [net_var], {"axis": None})])
    with pytest.raises(GraphError, match="product over 2048 elements"):
        graph.build(net, "sim", {})


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("axis,keepdims,last", [(1, True, False), (0, False, False),
                                                 (-1, True, True)])
def test_arg_extremes(op, axis, keepdims, last):
    x = np.array([[1, 3, 3, 0], [2, 2, 1, 1], [0, 5, 5, 5]], np.float32)
    fn = np.argmax if op == "argmax" else np.argmin
    if last:
        idx = x.shape[axis] - 1 - fn(np.flip(x, axis), axis=axis)
    else:
        idx = fn(x, axis=axis)
    idx = idx.astype(np.int64)
    if keepdims:
        idx = np.expand_dims(idx, axis)
    attrs = {"axis": axis, "keepdims": keepdims, "select_last_index": last}
    check(op, [x], idx, attrs)
    check(op, [x.astype(np.int32)], idx, attrs)


def test_errors_name_the_operator():
    f = graph.var("f", (3,), "float32")
    i = graph.var("i", (3,), "int32")
    b = graph.var("b", (3,), "bool")
    with pytest.raises(GraphError, match="sin: argument 0 has dtype int32"):
        Call("sin", [i])
    with pytest.raises(GraphError, match="logical_and: argument 0 has dtype float32"):
        Call("logical_and", [f, b])
    with pytest.raises(GraphError, match="where: the condition"):
        Call("where", [f, f, f])
    with pytest.raises(GraphError, match="where: the two values have different dtypes"):
        Call("where", [b, f, i])
    with pytest.raises(GraphError, match="less: argument dtypes differ"):
        Call("less", [f, i])
    with pytest.raises(GraphError, match="approximate must be 'none' or 'tanh'"):
        Call("nn.gelu", [f], {"approximate": "fast"})
    with pytest.raises(GraphError, match="bit_shift: argument 0 has dtype float32"):
        Call("bit_shift", [f, f], {"direction": "left"})
    with pytest.raises(GraphError, match="axis 3 is out of range"):
        Call("reduce.sum", [f], {"axis": (3,)})


def test_activations_comparisons_and_where_fuse_into_the_convolution():
    from ptxforge.graph.ir import post_order
    from ptxforge.graph.opdefs import conv2d

    x = graph.var("x", (1, 8, 8, 8))
    y = conv2d(x, graph.const(np.ones((8, 8, 3, 3), np.float32)), (1, 1), (1, 1, 1, 1))
    z = Call("nn.hard_swish", [Call("nn.mish", [y])])
    z = Call("where", [Call("less", [z, graph.const(np.array([0.5], np.float32))]), z, y])
    r = Call("reduce.sum", [z], {"axis": (2, 3), "keepdims": True})
    opt = graph.optimize(graph.function([r, z]), {})
    names = sorted(n.op.name for n in post_order(opt.outputs)
                   if isinstance(n, Call) and isinstance(n.op, graph.Graph))
    assert names == ["fused_nn_conv2d_nn_mish_nn_hard_swish_less_where", "fused_reduce_sum"]


@pytest.mark.parametrize("dtype,values", [("int64", [-2**40, -2**41, -2**35]),
                                          ("int64", [2**40, 2**41, 2**35]),
                                          ("uint8", [3, 200, 7])])
def test_integer_extremes_beyond_int32(dtype, values):
    x = np.array(values, dtype)
    check("reduce.max", [x], np.array(x.max()), {"axis": None})
    check("reduce.min", [x], np.array(x.min()), {"axis": None})
    check("argmax", [x], np.array([x.argmax()], np.int64), {"axis": 0})
