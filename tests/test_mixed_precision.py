"""Mixed precision for networks: the ``to_mixed_precision`` and ``use_tf32`` passes, their
cast placement, ``graph.build(..., precision=)`` on the simulator against the float32
reference, and task keys per precision."""

from __future__ import annotations

import numpy as np
import ptxforge
import pytest
from ptxforge import graph
from ptxforge.graph import nn
from ptxforge.graph.ir import GraphError
from ptxforge.graph.passes import GraphPipeline, ToMixedPrecision, UseTF32
from ptxforge.graph.zoo.bert import bert_layer

RNG = np.random.default_rng(15)


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype("float32")


def small_cnn():
    """conv (bias, relu) -> max pool -> conv + residual -> global pool -> dense -> softmax."""
    x = graph.var("data", (2, 8, 8, 4))
    w1, b1 = graph.const(rand(3, 3, 4, 16, scale=0.3), "w1"), graph.const(rand(16), "b1")
    w2 = graph.const(rand(3, 3, 16, 16, scale=0.1), "w2")
    wd = graph.const(rand(10, 16, scale=0.3), "wd")
    y = nn.relu(nn.bias_add(nn.conv2d(x, w1, padding=1, data_layout="NHWC"), b1, axis=3))
    y = nn.max_pool2d(y, 2, 2, layout="NHWC")
    y = nn.relu(graph.add(nn.conv2d(y, w2, padding=1, data_layout="NHWC"), y))
    y = nn.batch_flatten(nn.global_avg_pool2d(y, layout="NHWC"))
    return graph.function(nn.softmax(nn.dense(y, wd)))


def casts(g: graph.Graph) -> list:
    return [c for c in g.calls() if c.op == "cast"]


def run_sim(lib, inputs: dict) -> np.ndarray:
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**inputs)
    m.run()
    return m.get_output(0).numpy()


def test_cast_placement_in_a_small_cnn():
    net = small_cnn()
    mixed = GraphPipeline([ToMixedPrecision("float16")])(net)
    by_op = {c.op: c for c in mixed.calls()}
    for op in ("nn.conv2d", "nn.dense", "nn.max_pool2d", "add", "nn.relu"):
        assert by_op[op].dtype == "float16", op
    assert by_op["nn.softmax"].dtype == "float32"
    assert mixed.outputs[0].dtype == "float32" and mixed.params[0].dtype == "float32"
    # constants were converted in the pass (no cast of a constant remains): one cast for
    # the input, one before the softmax; nothing else crosses between regions
    assert [(c.args[0].dtype, c.dtype) for c in casts(mixed)] == [
        ("float32", "float16"), ("float16", "float32")]
    weights = [n for n in mixed.nodes() if isinstance(n, graph.Constant) and n.value.size > 1]
    assert weights and all(w.dtype == "float16" for w in weights)
    # keep_io_dtype=False leaves a low-precision output when the last op is low
    low_out = GraphPipeline([ToMixedPrecision("float16", keep_io_dtype=False)])(
        graph.function(net.outputs[0].args[0]))
    assert low_out.outputs[0].dtype == "float16" and not casts(low_out)[1:]


def _op_dtypes(mixed) -> dict:
    kinds = {}
    for c in mixed.calls():
        kinds.setdefault(c.op, set()).add(c.dtype)
    return kinds


def test_layer_norm_and_softmax_stay_float32_in_a_bert_layer_with_keep_norms_float32():
    out, params, _ = bert_layer(1, "float32", seq_len=8, hidden=32, heads=4, intermediate=64)
    net = graph.bind_params(graph.function(out), params)
    mixed = GraphPipeline.parse("to_mixed_precision(dtype=\"bfloat16\", "
                                "keep_norms_float32=True), fold_constant")(net)
    kinds = _op_dtypes(mixed)
    assert kinds["nn.layer_norm"] == {"float32"} and kinds["nn.softmax"] == {"float32"}
    assert kinds["nn.dense"] == {"bfloat16"} and kinds["nn.batch_matmul"] == {"bfloat16"}
    # each value is cast at most once per dtype
    seen = [(id(c.args[0]), c.dtype) for c in casts(mixed)]
    assert len(seen) == len(set(seen))
    assert not any(isinstance(c.args[0], graph.Constant) for c in casts(mixed))


def test_bert_layer_norms_round_to_the_low_dtype_and_the_output_norm_stays_float32():
    out, params, _ = bert_layer(1, "float32", seq_len=8, hidden=32, heads=4, intermediate=64)
    net = graph.bind_params(graph.function(out), params)
    mixed = GraphPipeline.parse("to_mixed_precision(dtype=\"bfloat16\"), fold_constant")(net)
    norms = [c for c in mixed.calls() if c.op == "nn.layer_norm"]
    # the attention block's norm reads the float32 input's residual sum and rounds its
    # result; the layer's output norm (reached through a reshape) stays float32
    assert sorted(c.dtype for c in norms) == ["bfloat16", "float32"]
    inner = next(c for c in norms if c.dtype == "bfloat16")
    assert inner.attrs["out_dtype"] in ("", "bfloat16")
    assert all(p.dtype == "float32" for p in inner.args[1:])  # scale and shift unrounded
    kinds = _op_dtypes(mixed)
    assert kinds["nn.softmax"] == {"float32"}
    # the feed-forward block's residual add reads the rounded norm: it runs in bfloat16
    adds = [c for c in mixed.calls() if c.op == "add" and inner in c.args]
    assert adds and all(c.dtype == "bfloat16" for c in adds)
    seen = [(id(c.args[0]), c.dtype) for c in casts(mixed)]
    assert len(seen) == len(set(seen))


@pytest.mark.parametrize("dtype,tol", [("float16", 1e-2), ("bfloat16", 3e-2)])
def test_mixed_precision_network_matches_float32_on_the_simulator(dtype, tol):
    net = small_cnn()
    x = rand(2, 8, 8, 4)
    ref = graph.evaluate(net, {"data": x})
    lib = graph.build(net, "sim", precision=dtype)
    convs = [c for f in lib.functions.values() for c in f.func.func.calls()
             if c.op == "nn.conv2d"]
    assert convs and all(c.args[1].dtype == dtype for c in convs)
    out = run_sim(lib, {"data": x})
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, ref, atol=tol * np.abs(ref).max(), rtol=0)
    assert (out.argmax(1) == ref.argmax(1)).all()


def test_bert_layer_in_float16_matches_float32_on_the_simulator():
    out, params, shape = bert_layer(1, "float32", seq_len=8, hidden=32, heads=4, intermediate=64)
    net = graph.function(out)
    x = rand(*shape)
    ref = graph.evaluate(net, {"data": x}, params)
    got = run_sim(graph.build(net, "sim", params, precision="float16"), {"data": x})
    np.testing.assert_allclose(got, ref, atol=1e-2 * np.abs(ref).max(), rtol=0)


def test_tf32_marks_the_matrix_ops_and_task_keys_differ_per_precision():
    from ptxforge.autosched import extract_tasks

    net = small_cnn()
    marked = GraphPipeline([UseTF32()])(net)
    prec = {c.op: c.attrs.get("precision") for c in marked.calls()}
    assert prec["nn.conv2d"] == "tf32" and prec["nn.dense"] == "tf32"
    keys = {}
    for p in ("float32", "tf32", "float16", "bfloat16"):
        tasks, _ = extract_tasks(net, target="cuda", precision=p)
        keys[p] = {t.workload_key for t in tasks if "conv2d" in t.desc}
    for a in keys:
        for b in keys:
            if a != b:
                assert not keys[a] & keys[b], (a, b)
    x = rand(2, 8, 8, 4)
    ref = graph.evaluate(net, {"data": x})
    got = run_sim(graph.build(net, "sim", precision="tf32"), {"data": x})
    np.testing.assert_allclose(got, ref, atol=5e-3 * np.abs(ref).max(), rtol=0)


def test_bad_precisions_are_errors():
    net = small_cnn()
    with pytest.raises(GraphError, match="precision must be one of"):
        graph.build(net, "sim", precision="fp8")
    with pytest.raises(GraphError, match="winograd"):
        graph.build(net, "sim", precision="float16", winograd=True)
    with pytest.raises(Exception, match="dtype must be one of"):
        GraphPipeline([ToMixedPrecision("float64")])(net)
    x16 = graph.var("x", (2, 4), "float16")
    w16 = graph.const(rand(3, 4).astype("float16"))
    with pytest.raises(GraphError, match="tf32"):
        nn.dense(x16, w16, precision="tf32")


def test_tune_network_dtype_flag():
    import argparse

    from ptxforge.cli.tune import NETWORK_TOLERANCE, add_tune_network_parser

    parser = argparse.ArgumentParser()
    add_tune_network_parser(parser.add_subparsers(dest="cmd"))
    common = ["tune-network", "resnet_v1-18", "--trials", "4", "--log", "x.json"]
    assert parser.parse_args(common).dtype == "float32"
    for dtype in ("float16", "bfloat16", "tf32"):
        assert parser.parse_args(common + ["--dtype", dtype]).dtype == dtype
        assert NETWORK_TOLERANCE[dtype] > NETWORK_TOLERANCE["float32"]
    with pytest.raises(SystemExit):
        parser.parse_args(common + ["--dtype", "fp8"])


def test_bert_encoder_stacks_layers_with_their_own_weights():
    from ptxforge.graph.zoo.bert import bert_encoder

    out, params, shape = bert_encoder(1, "float32", layers=2, seq_len=4, hidden=16, heads=2,
                                      intermediate=32)
    one, one_params, _ = bert_layer(1, "float32", seq_len=4, hidden=16, heads=2,
                                    intermediate=32)
    assert set(one_params) < set(params) and len(params) == 2 * len(one_params)
    assert all(f"layer1_{k}" in params for k in one_params)
    net = graph.function(out)
    assert sum(c.op == "nn.layer_norm" for c in net.calls()) == 4
    x = rand(*shape)
    ref = graph.evaluate(net, {"data": x}, params)
    got = run_sim(graph.build(net, "sim", params, precision="float16"), {"data": x})
    np.testing.assert_allclose(got, ref, atol=1e-2 * np.abs(ref).max(), rtol=0)
