"""16-bit floats accumulate in float32 and round once, in the numpy references as in the
kernels (and in ONNX's reference): a sum of products rounded to float16 after every tap
drifts by several units in the last place, which made the reference executor disagree with
ONNX's expected outputs (CausalConvWithState with SiLU in float16)."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import graph
from ptxforge.ir import dtype as dt
from ptxforge.ops import testing

HALF = ("float16", "bfloat16")


def _half(x, dtype):
    return dt.to_bfloat16(x) if dtype == "bfloat16" else x.astype(np.float16)


def _rounded_once(exact, dtype):
    """The float64 result rounded to ``dtype`` once, and one unit in its last place."""
    r = _half(exact.astype(np.float32), dtype)
    w = testing.widen(r)
    bits = 8 if dtype == "bfloat16" else 11
    ulp = np.exp2(np.floor(np.log2(np.maximum(np.abs(w), 1e-30))) - (bits - 1))
    return w, ulp


def _ulps(got, exact, dtype):
    want, ulp = _rounded_once(exact, dtype)
    return np.max(np.abs(testing.widen(got) - want) / ulp)


@pytest.mark.parametrize("dtype", HALF)
def test_conv_references_round_once(dtype):
    rng = np.random.default_rng(3)
    x = _half(rng.random((2, 8, 1, 40), np.float32), dtype)
    w = _half(rng.random((8, 8, 1, 16), np.float32), dtype)
    exact = testing.conv2d_nchw_python(testing.widen(x), testing.widen(w), 1, 0)
    got = testing.conv2d_nchw_python(x, w, 1, 0)
    assert got.dtype == x.dtype and _ulps(got, exact, dtype) <= 1.0
    dw = _half(rng.random((8, 1, 1, 16), np.float32), dtype)
    exact = testing.depthwise_conv2d_nchw_python(testing.widen(x), testing.widen(dw), 1, 0)
    got = testing.depthwise_conv2d_nchw_python(x, dw, 1, 0)
    assert got.dtype == x.dtype and _ulps(got, exact, dtype) <= 1.0


@pytest.mark.parametrize("dtype", HALF)
def test_depthwise_conv_reference_and_compiled_agree_in_16_bits(dtype):
    rng = np.random.default_rng(5)
    xv = _half(rng.random((2, 4, 1, 24), np.float32), dtype)
    wv = _half(rng.random((4, 1, 1, 8), np.float32), dtype)
    x = graph.var("x", xv.shape, dtype)
    w = graph.var("w", wv.shape, dtype)
    net = graph.function([graph.nn.conv2d(x, w, groups=4)])
    exact = testing.depthwise_conv2d_nchw_python(testing.widen(xv), testing.widen(wv), 1, 0)
    ref = graph.evaluate(net, {"x": xv, "w": wv}, {})
    m = graph.GraphModule(graph.build(net, "sim"), ptxforge.sim())
    m.set_input(x=xv, w=wv)
    m.run()
    got = m.get_output(0).numpy()
    assert _ulps(ref, exact, dtype) <= 1.0 and _ulps(got, exact, dtype) <= 1.0


def test_onnx_causal_conv_silu_float16_matches_onnx_reference():
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    # the function body ONNX gives CausalConvWithState: a depthwise Conv1d in float16, SiLU
    # in float32
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], group=4),
             helper.make_node("Cast", ["c"], ["c32"], to=TensorProto.FLOAT),
             helper.make_node("Sigmoid", ["c32"], ["s"]),
             helper.make_node("Mul", ["c32", "s"], ["y32"]),
             helper.make_node("Cast", ["y32"], ["y"], to=TensorProto.FLOAT16)]
    g = helper.make_graph(nodes, "silu16", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 4, 40]),
        helper.make_tensor_value_info("w", TensorProto.FLOAT16, [4, 1, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2, 4, 29])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    rng = np.random.default_rng(0)
    feeds = {"x": rng.random((2, 4, 40)).astype(np.float16),
             "w": rng.random((4, 1, 12)).astype(np.float16)}
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    net, params = graph.from_onnx(model, {k: v.shape for k, v in feeds.items()})
    ref = graph.evaluate(net, feeds, params)
    m = graph.GraphModule(graph.build(net, "sim", params), ptxforge.sim())
    m.set_input(**feeds)
    m.run()
    for got in (ref, m.get_output(0).numpy()):
        # float32 sums in another order: at most one unit in the last place apart
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32),
                                   rtol=2.0 ** -10, atol=0)


def _build_run(net, feeds):
    lib = graph.build(net, "sim")
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**feeds)
    m.run()
    return m.get_output(0).numpy()


def test_float16_softmax_kernel_rounds_as_the_reference():
    """A float16 softmax computes in float16 (ONNX's softmax_precision default, numpy's
    arithmetic): the kernel gives the reference executor's bits, not a float32 softmax
    rounded once (a unit in the last place apart on about a tenth of these elements)."""
    rng = np.random.default_rng(11)
    xv = (rng.standard_normal((16, 37)) * 4).astype(np.float16)
    x = graph.var("x", xv.shape, "float16")
    net = graph.function([graph.nn.softmax(x)])
    ref = graph.evaluate(net, {"x": xv}, {})
    np.testing.assert_array_equal(_build_run(net, {"x": xv}), ref)
    once = testing.softmax_python(xv.astype(np.float32)).astype(np.float16)
    assert not np.array_equal(once, ref)  # the data tells the two definitions apart


@pytest.mark.parametrize("dtype,scale,moves", [("float16", 0.5946, False),
                                               ("float16", 0.5, True),
                                               ("float32", 0.5946, True)])
def test_scaled_product_operands_keep_their_16_bit_rounding(dtype, scale, moves):
    """Exporters scale an attention's query and key by sqrt(scale) each. Moving a factor
    onto the product skips the 16-bit rounding of the scaled operands; in float16 only a
    power of two (exact) moves, and the optimized graph gives the original's bits."""
    from ptxforge.graph.build_module import optimize
    from ptxforge.graph.ir import Call, post_order

    rng = np.random.default_rng(2)
    qv = rng.random((6, 4, 8)).astype(dtype)
    kv = rng.random((6, 8, 6)).astype(dtype)
    q, k = graph.var("q", qv.shape, dtype), graph.var("k", kv.shape, dtype)
    s = graph.const(np.asarray(scale, dtype), "s", dtype)
    net = graph.function([graph.nn.batch_matmul(Call("multiply", [q, s]),
                                                Call("multiply", [k, s]),
                                                transpose_b=False)])
    opt = optimize(net, {}, fuse=False)
    ops = [n.op for n in post_order(opt.outputs) if isinstance(n, Call)]
    assert (ops.count("multiply") == 1) == moves
    feeds = {"q": qv, "k": kv}
    want = graph.evaluate(net, feeds, {})
    if not moves:
        np.testing.assert_array_equal(graph.evaluate(opt, feeds, {}), want)
        np.testing.assert_array_equal(_build_run(net, feeds), want)


def test_float16_causal_attention_compiles_to_the_reference_bits():
    """ONNX's attention function body in float16 (scaled query and key, causal bias,
    softmax, product with V): the compiled network gives the reference executor's bits."""
    from ptxforge.graph.ir import Call

    rng = np.random.default_rng(4)
    qv, kv, vv = (rng.random(s).astype(np.float16) for s in ((6, 4, 8), (6, 8, 6), (6, 6, 8)))
    q, k, v = (graph.var(n, a.shape, "float16") for n, a in zip("qkv", (qv, kv, vv)))
    s = graph.const(np.asarray(8 ** -0.25, np.float16), "s", "float16")
    bias = np.where(np.arange(6)[None, :] <= np.arange(4)[:, None], 0, -np.inf)
    scores = graph.nn.batch_matmul(Call("multiply", [q, s]), Call("multiply", [k, s]),
                                   transpose_b=False)
    scores = Call("add", [scores, graph.const(bias.astype(np.float16), "bias", "float16")])
    net = graph.function([graph.nn.batch_matmul(graph.nn.softmax(scores), v,
                                                transpose_b=False)])
    feeds = {"q": qv, "k": kv, "v": vv}
    np.testing.assert_array_equal(_build_run(net, feeds), graph.evaluate(net, feeds, {}))
