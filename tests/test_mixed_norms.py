"""Row normalizations in mixed precision (``to_mixed_precision``'s ``ROUND`` policy): layer
and RMS norms read their data as it comes, compute in float32 and store the 16-bit result,
so a transformer's residual stream stays 16-bit; ``keep_norms_float32`` keeps them float32."""

from __future__ import annotations

import warnings

import numpy as np
import ptxforge
import pytest
from ptxforge import graph
from ptxforge.graph import nn
from ptxforge.graph import opdefs as G
from ptxforge.graph.passes import GraphPipeline, MixedPolicy, ToMixedPrecision
from ptxforge.graph.passes.to_mixed_precision import CONFIG_KEEP_NORMS_FLOAT32, policy_of
from ptxforge.graph.zoo.bert import bert_encoder

RNG = np.random.default_rng(16)


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype("float32")


def run_sim(lib, inputs: dict) -> np.ndarray:
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**inputs)
    m.run()
    return m.get_output(0).numpy()


def test_the_policy_of_the_norms():
    assert policy_of("nn.layer_norm") is MixedPolicy.ROUND
    assert policy_of("nn.rms_norm") is MixedPolicy.ROUND
    assert policy_of("nn.layer_norm", keep_norms_float32=True) is MixedPolicy.NEVER
    # a 16-bit softmax computes in 16 bits (ONNX): it keeps the cast up of its input
    assert policy_of("nn.softmax") is MixedPolicy.NEVER
    assert policy_of("nn.dense", keep_norms_float32=True) is MixedPolicy.ALWAYS


def residual_rms(dtype="float32"):
    """x -> dense -> h; dense(h) + h -> rms norm -> dense: a residual sum and its norm."""
    x = graph.var("x", (8, 16), dtype)
    w1, w2 = graph.const(rand(16, 16, scale=0.3), "w1"), graph.const(rand(16, 16, scale=0.3), "w2")
    h = nn.dense(x, w1)
    n = G.rms_norm(graph.add(nn.dense(h, w1), h), graph.const(rand(16) + 1.0, "g"))
    return graph.function(nn.dense(n, w2))


@pytest.mark.parametrize("low", ["float16", "bfloat16"])
def test_a_norm_of_a_low_sum_reads_it_and_stores_low(low):
    mixed = GraphPipeline([ToMixedPrecision(low)])(residual_rms())
    (norm,) = [c for c in mixed.calls() if c.op == "nn.rms_norm"]
    # the residual add reads two low values: low; the norm reads it uncast
    assert norm.args[0].op == "add" and norm.args[0].dtype == low
    assert norm.dtype == low and norm.attrs["out_dtype"] == ""
    assert norm.args[1].dtype == "float32"  # the weight is not rounded
    (last,) = [c for c in mixed.calls() if c.op == "nn.dense" and c.args[0] is norm]
    assert last.dtype == low
    # the only casts: the input down, the output up
    casts = [c for c in mixed.calls() if c.op == "cast"]
    assert sorted(c.dtype for c in casts) == sorted(["float32", low])


def test_a_norm_of_float32_data_rounds_its_result():
    x = graph.var("x", (4, 16))
    ln = nn.layer_norm(graph.exp(x), graph.const(rand(16)), graph.const(rand(16)))
    net = graph.function(nn.dense(ln, graph.const(rand(8, 16))))
    mixed = GraphPipeline([ToMixedPrecision("float16")])(net)
    (norm,) = [c for c in mixed.calls() if c.op == "nn.layer_norm"]
    assert norm.args[0].dtype == "float32" and norm.attrs["out_dtype"] == "float16"
    assert not any(c.op == "cast" and c.args[0] is norm for c in mixed.calls())
    kept = GraphPipeline([ToMixedPrecision("float16", keep_norms_float32=True)])(net)
    (norm,) = [c for c in kept.calls() if c.op == "nn.layer_norm"]
    assert norm.dtype == "float32" and norm.attrs["out_dtype"] == ""


def test_a_norm_that_is_the_output_stays_float32():
    x = graph.var("x", (2, 4, 16))
    h = graph.reshape(nn.dense(graph.reshape(x, (8, 16)), graph.const(rand(16, 16))), (8, 16))
    out = graph.reshape(nn.layer_norm(h, graph.const(rand(16)), graph.const(rand(16))),
                        (2, 4, 16))
    mixed = GraphPipeline([ToMixedPrecision("float16")])(graph.function(out))
    (norm,) = [c for c in mixed.calls() if c.op == "nn.layer_norm"]
    assert norm.dtype == "float32" and norm.args[0].op == "cast"
    assert mixed.outputs[0].dtype == "float32" and mixed.outputs[0].op == "reshape"


def test_keep_norms_float32_from_the_context_config_and_its_errors():
    net = residual_rms()
    with graph.GraphPassContext(config={CONFIG_KEEP_NORMS_FLOAT32: True}):
        kept = GraphPipeline([ToMixedPrecision("float16")])(net)
    assert [c.dtype for c in kept.calls() if c.op == "nn.rms_norm"] == ["float32"]
    with graph.GraphPassContext(config={CONFIG_KEEP_NORMS_FLOAT32: "yes"}):
        with pytest.raises(Exception, match="keep_norms_float32.*bool"):
            GraphPipeline([ToMixedPrecision("float16")])(net)


def test_a_16_bit_norm_computes_in_float32_and_rounds_once():
    """fp16 data, float32 scale and shift: the kernel's result is the float64 norm of the
    same data rounded to fp16, give or take one unit of the last place."""
    x16 = rand(6, 64, scale=4.0).astype(np.float16)
    g, b = rand(64) + 1.0, rand(64, scale=0.5)
    data = graph.var("x", (6, 64), "float16")
    net = graph.function(nn.layer_norm(data, graph.const(g), graph.const(b)))
    lib = graph.build(net, "sim")
    got = run_sim(lib, {"x": x16})
    assert got.dtype == np.float16
    xd = x16.astype(np.float64)
    want = ((xd - xd.mean(-1, keepdims=True)) / np.sqrt(xd.var(-1, keepdims=True) + 1e-5)
            * g + b).astype(np.float16)
    ulp = np.spacing(np.abs(want)).astype(np.float32)
    assert (np.abs(got.astype(np.float32) - want.astype(np.float32)) <= ulp).all()


def bert2():
    out, params, shape = bert_encoder(1, "float32", layers=2, seq_len=8, hidden=32, heads=4,
                                      intermediate=64)
    return graph.function(out), params, shape


def test_a_float16_bert_layer_keeps_its_residual_stream_in_float16():
    net, params, shape = bert2()
    fused = graph.optimize(net, params, precision="float16")
    kept = graph.optimize(net, params, precision="float16", keep_norms_float32=True)
    kernels = [(c.op.name, c.dtype) for c in fused.calls()]
    old = [(c.op.name, c.dtype) for c in kept.calls()]
    assert len(kernels) == len(old)  # the same kernels, other dtypes

    def residual(kernels):
        return [(n[len("fused_nn_dense_nn_bias_add_"):], d) for n, d in kernels
                if n.startswith("fused_nn_dense_nn_bias_add_") and "erf" not in n]

    # the first residual adds the float32 input (widening the product); the others add
    # float16 values in float16, the last widening its sum for the output norm
    assert residual(kernels) == [("cast_add", "float32"), ("add", "float16"),
                                 ("add", "float16"), ("add_cast", "float32")]
    assert residual(old) == [("cast_add", "float32")] + [("cast_cast_add", "float32")] * 3
    # every norm but the output's stores float16, and no kernel is only a cast
    assert [d for n, d in kernels if n == "fused_nn_layer_norm"] == ["float16"] * 3 + [
        "float32"]
    assert [n for n, _ in kernels].count("fused_cast") == 1  # the input's
    x = rand(*shape)
    ref = graph.evaluate(graph.bind_params(net, params), {"data": x})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", graph.NoTuningRecordWarning)
        lib = graph.build(net, "sim", params, precision="float16")
    got = run_sim(lib, {"data": x})
    np.testing.assert_allclose(got, ref, atol=2e-2 * np.abs(ref).max(), rtol=0)
