"""The canonicalization passes: common subexpressions, layout operators moved below
element-wise work, products and norms written as the kernels expect them; and real exports
of a Hugging Face BERT encoder compiling to the same kernels as the zoo's BERT."""

from __future__ import annotations

import collections
import os

import numpy as np
import ptxforge
import pytest
from ptxforge import graph
from ptxforge.graph import opdefs as G
from ptxforge.graph.build_module import optimize
from ptxforge.graph.ir import Constant, Graph, Var, bind_params, graph_from_outputs
from ptxforge.graph.passes import (
    CanonicalizeNorms,
    CanonicalizeProducts,
    CombineParallelDense,
    EliminateCommonSubexpr,
    SinkLayoutOps,
    canonicalization_pipeline,
)
from ptxforge.graph.zoo.bert import bert_encoder

EXPORTS = os.path.join(os.path.dirname(__file__), "data", "transformer_exports")
RNG = np.random.default_rng(7)


def const(*shape, scale=0.2):
    return Constant(RNG.standard_normal(shape).astype(np.float32) * scale)


def ops_of(g: Graph) -> list[str]:
    return [c.op_name for c in g.calls()]


def same_values(before: Graph, after: Graph, **feeds):
    got, want = graph.evaluate(after, feeds), graph.evaluate(before, feeds)
    for g, w in zip(*(v if isinstance(v, list) else [v] for v in (got, want))):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_cse_makes_repeated_reshapes_one_node_so_parallel_products_combine():
    x = Var("x", (1, 8, 16))
    outs = [G.dense(G.reshape(x, (8, 16)), const(16, 16)) for _ in range(3)]
    net = graph_from_outputs(G.concatenate(outs, axis=1))
    out = EliminateCommonSubexpr()(net)
    assert ops_of(out).count("reshape") == 1
    assert ops_of(CombineParallelDense()(out)).count("nn.dense") == 1
    assert ops_of(CombineParallelDense()(net)).count("nn.dense") == 3  # not without CSE
    same_values(net, out, x=RNG.standard_normal((1, 8, 16)).astype(np.float32))


def test_reshape_sinks_below_bias_residual_and_layer_norm():
    x = Var("x", (1, 8, 16))
    h = G.reshape(x, (8, 16))
    y = G.reshape(G.dense(h, const(16, 16)), (1, 8, 16))
    y = G.add(G.add(y, const(16)), x)
    y = G.layer_norm(y, const(16), const(16), epsilon=1e-5)
    net = graph_from_outputs(G.reshape(y, (8, 16)))
    out = SinkLayoutOps()(net)
    # every call works in two dimensions now; the only reshapes read the input
    assert all(c.args[0] is x for c in out.calls() if c.op_name == "reshape")
    assert all(c.ndim == 2 for c in out.calls())
    same_values(net, out, x=RNG.standard_normal((1, 8, 16)).astype(np.float32))


def test_reshape_that_removes_dimensions_stays_and_nothing_moves_back_and_forth():
    x = Var("x", (2, 4, 8))
    y = G.add(G.reshape(x, (8, 8)), G.reshape(G.dense(G.reshape(x, (8, 8)), const(8, 8)),
                                                (8, 8)))
    net = graph_from_outputs(y)
    once = SinkLayoutOps(max_rounds=1)(net)
    assert str(SinkLayoutOps(max_rounds=1)(once)) == str(once)  # a fixed point
    assert once.outputs[0].op_name == "add" and once.outputs[0].ndim == 2


def test_transposes_merge_and_scalars_follow_them():
    x = Var("x", (2, 3, 4, 5))
    y = G.transpose(G.transpose(x, (0, 2, 1, 3)), (0, 2, 1, 3))
    z = G.multiply(G.transpose(G.add(y, const(1)), (0, 2, 1, 3)), const(1))
    net = graph_from_outputs(z)
    out = SinkLayoutOps()(net)
    names = ops_of(out)
    assert names.count("transpose") == 1 and names[-1] == "transpose"
    same_values(net, out, x=RNG.standard_normal((2, 3, 4, 5)).astype(np.float32))


def test_bias_add_transpose_flags_and_scales_fold_into_products():
    x = Var("x", (8, 16))
    q = Var("q", (4, 8, 16))
    k = Var("k", (4, 8, 16))
    lin = G.add(G.dense(x, const(32, 16)), const(1, 32))
    scores = G.batch_matmul(G.multiply(q, const(1)),
                            G.transpose(G.multiply(k, const(1)), (0, 2, 1)), transpose_b=False)
    net = graph_from_outputs([lin, scores])
    out = CanonicalizeProducts()(net)
    assert ops_of(out).count("nn.bias_add") == 1
    bmm = next(c for c in out.calls() if c.op_name == "nn.batch_matmul")
    assert bmm.attrs["transpose_b"] is True and bmm.args[0] is q and bmm.args[1] is k
    assert out.outputs[1].op_name == "multiply" and out.outputs[1].args[0] is bmm
    same_values(net, out, x=RNG.standard_normal((8, 16)).astype(np.float32),
                q=RNG.standard_normal((4, 8, 16)).astype(np.float32),
                k=RNG.standard_normal((4, 8, 16)).astype(np.float32))


def test_a_key_transposed_over_the_heads_is_read_through_transpose_b():
    q = Var("q", (1, 2, 8, 4))
    k = Var("k", (1, 8, 2, 4))
    qq = G.reshape(q, (2, 8, 4))
    kt = G.reshape(G.transpose(k, (0, 2, 3, 1)), (2, 4, 8))
    net = graph_from_outputs(G.batch_matmul(qq, kt, transpose_b=False))
    out = CanonicalizeProducts()(net)
    bmm = out.outputs[0]
    assert bmm.attrs["transpose_b"] is True
    assert [c.attrs["axes"] for c in out.calls() if c.op_name == "transpose"] == [(0, 2, 1, 3)]
    same_values(net, out, q=RNG.standard_normal((1, 2, 8, 4)).astype(np.float32),
                k=RNG.standard_normal((1, 8, 2, 4)).astype(np.float32))


def decomposed_layer_norm(x, gamma=None, beta=None, rsqrt=False, square="power", eps=1e-5):
    d = G.subtract(x, G.mean(x, axis=-1, keepdims=True))
    sq = G.power(d, Constant(np.float32(2.0))) if square == "power" else G.multiply(d, d)
    var = G.add(G.mean(sq, axis=-1, keepdims=True), Constant(np.float32(eps)))
    y = G.multiply(d, G.rsqrt(var)) if rsqrt else G.divide(d, G.sqrt(var))
    if gamma is not None:
        y = G.multiply(y, gamma)
    if beta is not None:
        y = G.add(y, beta)
    return y


@pytest.mark.parametrize("rsqrt,square,affine", [(False, "power", True), (True, "mul", True),
                                                 (False, "power", False)])
def test_layer_norm_is_rebuilt_from_its_decomposition(rsqrt, square, affine):
    x = Var("x", (6, 16))
    gamma, beta = (const(16), const(16)) if affine else (None, None)
    net = graph_from_outputs(decomposed_layer_norm(x, gamma, beta, rsqrt, square))
    out = CanonicalizeNorms()(net)
    assert ops_of(out) == ["nn.layer_norm"]
    assert out.outputs[0].attrs["epsilon"] == pytest.approx(1e-5)
    same_values(net, out, x=RNG.standard_normal((6, 16)).astype(np.float32))


def test_a_shared_normalization_keeps_its_gamma_apart():
    x = Var("x", (6, 16))
    core = decomposed_layer_norm(x)
    net = graph_from_outputs([G.multiply(core, const(16)), G.exp(core)])
    out = CanonicalizeNorms()(net)
    assert ops_of(out).count("nn.layer_norm") == 1 and "multiply" in ops_of(out)
    same_values(net, out, x=RNG.standard_normal((6, 16)).astype(np.float32))


def test_mean_over_another_axis_is_not_a_layer_norm():
    x = Var("x", (6, 16))
    d = G.subtract(x, G.mean(x, axis=0, keepdims=True))
    v = G.add(G.mean(G.multiply(d, d), axis=0, keepdims=True), Constant(np.float32(1e-5)))
    net = graph_from_outputs(G.divide(d, G.sqrt(v)))
    assert "nn.layer_norm" not in ops_of(CanonicalizeNorms()(net))


def test_rms_norm_is_rebuilt_and_compiles():
    x = Var("x", (4, 32))
    w = const(32)
    ms = G.add(G.mean(G.power(x, Constant(np.float32(2.0))), axis=-1, keepdims=True),
               Constant(np.float32(1e-6)))
    net = graph_from_outputs(G.multiply(G.multiply(x, G.rsqrt(ms)), w))
    out = CanonicalizeNorms()(net)
    assert ops_of(out) == ["nn.rms_norm"]
    data = RNG.standard_normal((4, 32)).astype(np.float32)
    same_values(net, out, x=data)
    mod = graph.GraphModule(graph.build(out, "sim"), ptxforge.sim())
    mod.set_input(x=data)
    mod.run()
    np.testing.assert_allclose(mod.get_output(0).numpy(), graph.evaluate(net, {"x": data}),
                               rtol=1e-5, atol=1e-6)


def kernels(g: Graph) -> collections.Counter:
    """The fused functions a graph compiles to, by the operators inside each (in a fixed
    order: the order of a chain of element-wise operators differs between front ends)."""
    out = collections.Counter()
    for c in g.calls():
        inner = c.op.calls() if isinstance(c.op, Graph) else [c]
        out["+".join(sorted(i.op_name for i in inner))] += 1
    return out


def zoo_kernels(precision):
    out, params, _ = bert_encoder(1, "float32", layers=2, seq_len=16, hidden=32, heads=2,
                                  intermediate=64)
    return kernels(optimize(graph_from_outputs(out), params, precision=precision))


@pytest.mark.parametrize("name", ["bert_encoder_ts14", "bert_encoder_ts17",
                                  "bert_encoder_dynamo18"])
@pytest.mark.parametrize("precision", ["float32", "float16"])
def test_bert_exports_compile_to_the_zoo_kernels(name, precision):
    net, params = graph.from_onnx(os.path.join(EXPORTS, f"{name}.onnx"))
    got = kernels(optimize(net, params, precision=precision))
    assert got == zoo_kernels(precision)


def test_without_canonicalization_the_export_needs_more_kernels():
    from ptxforge.graph.passes import FuseOps, GraphPipeline, optimization_pipeline

    net, params = graph.from_onnx(os.path.join(EXPORTS, "bert_encoder_dynamo18.onnx"))
    canon = {p.name for p in canonicalization_pipeline()} - {"fold_constant"}
    passes = [p for p in optimization_pipeline(precision="float16") if p.name not in canon]
    plain = GraphPipeline(passes)(bind_params(net, params))
    assert isinstance(passes[-1], FuseOps)
    assert sum(kernels(plain).values()) > sum(zoo_kernels("float16").values()) + 10


@pytest.mark.parametrize("precision,tol", [("float32", 1e-4), ("float16", 3e-2)])
def test_canonicalized_export_matches_onnxruntime_on_the_simulator(precision, tol):
    ort = pytest.importorskip("onnxruntime")
    path = os.path.join(EXPORTS, "bert_encoder_dynamo18.onnx")
    x = RNG.standard_normal((1, 16, 32)).astype(np.float32)
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"hidden": x})[0]
    net, params = graph.from_onnx(path)
    mod = graph.GraphModule(graph.build(net, "sim", params, precision=precision),
                            ptxforge.sim())
    mod.set_input(hidden=x)
    mod.run()
    err = np.abs(mod.get_output(0).numpy() - ref).max() / np.abs(ref).max()
    assert err < tol


def test_division_by_a_constant_becomes_a_multiply_by_its_reciprocal():
    from ptxforge.graph.passes import CanonicalizeArith

    x = Var("x", (4, 8))
    i = Var("i", (4, 8), "int32")
    net = graph_from_outputs([G.divide(x, Constant(np.float32(np.sqrt(2.0)))),
                              G.divide(x, Constant(np.float32(0.0))),
                              G.divide(i, Constant(np.int32(3)))])
    out = CanonicalizeArith()(net)
    first, zero, ints = out.outputs
    assert first.op_name == "multiply"
    assert float(first.args[1].value.reshape(())) == np.float32(1 / np.sqrt(2.0))
    assert zero.op_name == "divide" and ints.op_name == "divide"  # left as they are


def test_small_constants_are_one_node_by_value_large_ones_by_identity():
    x = Var("x", (4, 80))
    big = np.ones(80, np.float32)
    outs = [G.add(x, Constant(np.float32(1.0))), G.add(x, Constant(np.float32(1.0))),
            G.multiply(x, Constant(big.copy())), G.multiply(x, Constant(big.copy()))]
    out = EliminateCommonSubexpr()(graph_from_outputs(G.concatenate(outs, axis=0)))
    assert [c.op_name for c in out.calls()].count("add") == 1
    assert [c.op_name for c in out.calls()].count("multiply") == 2


def test_a_mask_over_the_heads_follows_the_scores_reshape():
    s = Var("s", (2, 8, 8))  # [heads, q, k] scores of batch 1
    mask = Var("mask", (1, 1, 8, 8))
    scores = G.add(G.reshape(s, (1, 2, 8, 8)), mask)
    net = graph_from_outputs(G.reshape(G.softmax(scores, axis=-1), (2, 8, 8)))
    out = SinkLayoutOps()(net)
    assert all(c.ndim == 3 for c in out.calls() if c.op_name in ("add", "nn.softmax"))
    same_values(net, out, s=RNG.standard_normal((2, 8, 8)).astype(np.float32),
                mask=RNG.standard_normal((1, 1, 8, 8)).astype(np.float32))


@pytest.mark.parametrize("precision", ["float32", "float16"])
def test_the_nan_guard_of_a_masked_softmax_is_part_of_the_softmax(precision):
    from ptxforge.graph.opdefs.logic import isnan, where
    from ptxforge.graph.passes import FoldNanGuard

    x = Var("x", (4, 64))
    p = G.softmax(x, axis=-1)
    net = graph_from_outputs(where(isnan(p), Constant(np.float32(0.0)), p))
    out = FoldNanGuard()(net)
    assert ops_of(out) == ["nn.softmax"] and out.outputs[0].attrs["nan_to_zero"] is True
    data = RNG.standard_normal((4, 64)).astype(np.float32)
    data[1, :] = -np.inf  # a row with every key masked
    want = graph.evaluate(net, {"x": data})
    assert np.isnan(graph.evaluate(graph_from_outputs(p), {"x": data})).any()
    np.testing.assert_array_equal(graph.evaluate(out, {"x": data}), want)
    mod = graph.GraphModule(graph.build(out, "sim", precision=precision), ptxforge.sim())
    mod.set_input(x=data)
    mod.run()
    got = mod.get_output(0).numpy()
    assert not np.isnan(got).any() and (got[1] == 0).all()
    np.testing.assert_allclose(got, want, rtol=2e-3 if precision == "float16" else 1e-5,
                               atol=1e-3 if precision == "float16" else 1e-7)


def test_a_guard_of_a_softmax_read_elsewhere_stays():
    from ptxforge.graph.opdefs.logic import isnan, where
    from ptxforge.graph.passes import FoldNanGuard

    x = Var("x", (4, 8))
    p = G.softmax(x, axis=-1)
    net = graph_from_outputs([where(isnan(p), Constant(np.float32(0.0)), p), G.exp(p)])
    assert "where" in ops_of(FoldNanGuard()(net))


@pytest.mark.parametrize("hq,hk,lq,s,mask,causal", [
    (4, 4, 8, 8, None, False),
    (4, 2, 8, 8, None, True),         # grouped-query, causal
    (2, 1, 4, 8, "bool", False),      # multi-query, a padding mask over the keys
    (2, 2, 8, 8, "float", True),
])
def test_attention_decomposes_into_products_and_a_softmax(hq, hk, lq, s, mask, causal):
    from ptxforge.graph.opdefs.attention import attention
    from ptxforge.graph.passes import DecomposeAttention

    q, k, v = Var("q", (2, hq, lq, 16)), Var("k", (2, hk, s, 16)), Var("v", (2, hk, s, 8))
    feeds = {n: RNG.standard_normal(x.shape).astype(np.float32) for n, x in
             (("q", q), ("k", k), ("v", v))}
    m = None
    if mask == "bool":
        m = Var("m", (2, 1, 1, s), "bool")
        keep = np.ones((2, 1, 1, s), bool)
        keep[0, ..., 5:] = False
        keep[1] = False  # every key of the second sequence masked: zeros
        feeds["m"] = keep
    elif mask == "float":
        m = Var("m", (1, 1, lq, s))
        feeds["m"] = RNG.standard_normal((1, 1, lq, s)).astype(np.float32)
    net = graph_from_outputs(attention(q, k, v, m, scale=0.3, is_causal=causal))
    out = DecomposeAttention()(net)
    names = ops_of(out)
    assert "nn.attention" not in names and names.count("nn.batch_matmul") == 2
    want = graph.evaluate(net, feeds)
    np.testing.assert_allclose(graph.evaluate(out, feeds), want, rtol=1e-5, atol=1e-6)
    if mask == "bool":
        assert (want[1] == 0).all()
    mod = graph.GraphModule(graph.build(out, "sim"), ptxforge.sim())
    mod.set_input(**feeds)
    mod.run()
    np.testing.assert_allclose(mod.get_output(0).numpy(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.torch_frontend
@pytest.mark.parametrize("precision", ["float32", "float16"])
def test_torch_export_of_the_bert_encoder_compiles_to_the_zoo_kernels(precision):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, vocab_size=16,
                                  max_position_embeddings=16, attn_implementation="sdpa")
    torch.manual_seed(0)
    bert = transformers.BertModel(cfg, add_pooling_layer=False).eval()

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, hidden):
            return self.bert.encoder(hidden).last_hidden_state

    x = torch.randn(1, 16, 32)
    net, params = graph.from_torch(Encoder().eval(), (x,))
    assert "nn.attention" in ops_of(net)  # torch keeps the attention whole
    assert kernels(optimize(net, params, precision=precision)) == zoo_kernels(precision)
    mod = graph.GraphModule(graph.build(net, "sim", params, precision=precision),
                            ptxforge.sim())
    mod.set_input(**{net.params[0].name: x.numpy()})
    mod.run()
    with torch.no_grad():
        want = Encoder().eval()(x).numpy()
    err = np.abs(mod.get_output(0).numpy() - want).max() / np.abs(want).max()
    assert err < (1e-4 if precision == "float32" else 3e-2)


def test_a_scale_stays_on_an_operand_when_the_product_changes_dtype():
    q = Var("q", (2, 4, 8), "float16")
    k = Var("k", (2, 4, 8), "float16")
    bmm = G.batch_matmul(G.multiply(q, Constant(np.float16(0.5))), k, out_dtype="float32")
    out = CanonicalizeProducts()(graph_from_outputs(bmm))
    assert ops_of(out) == ["multiply", "nn.batch_matmul"]  # unchanged, no dtype clash
    feeds = {"q": RNG.standard_normal((2, 4, 8)).astype(np.float16),
             "k": RNG.standard_normal((2, 4, 8)).astype(np.float16)}
    same_values(graph_from_outputs(bmm), out, **feeds)
