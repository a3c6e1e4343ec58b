"""Graph passes on small graphs: each pass changes what it should, keeps the values, and
runs under the pass infrastructure (text form, printing, dumping, verification)."""

from __future__ import annotations

import io
import os
from dataclasses import dataclass

import numpy as np
import pytest
from ptxforge import graph
from ptxforge.graph import nn, passes
from ptxforge.graph.ir import Call, Constant, Graph, Var
from ptxforge.passes import PassError

RNG = np.random.default_rng(3)


def rand(*shape, low=-1.0, high=1.0):
    return RNG.uniform(low, high, shape).astype("float32")


def const(*shape, low=-1.0, high=1.0, name=""):
    return graph.const(rand(*shape, low=low, high=high), name)


def ops_of(g: Graph) -> list[str]:
    return [c.op_name for c in g.calls()]


def conv_bn_net(layout="NCHW"):
    """conv -> batch norm -> relu -> conv (+ residual) -> relu -> pool -> flatten -> dense."""
    if layout == "NCHW":
        x = graph.var("data", (1, 3, 8, 8))
        w1, w2 = const(8, 3, 3, 3, name="w1"), const(8, 8, 3, 3, name="w2")
        axis = 1
    else:
        x = graph.var("data", (1, 8, 8, 3))
        w1, w2 = const(3, 3, 3, 8, name="w1"), const(3, 3, 8, 8, name="w2")
        axis = 3
    y = nn.conv2d(x, w1, padding=1, data_layout=layout)
    y = nn.batch_norm(y, const(8, low=0.5, high=1.5), const(8), const(8),
                      const(8, low=0.5, high=1.5), axis)
    y = nn.relu(y)
    z = nn.conv2d(y, w2, padding=1, data_layout=layout)
    z = nn.relu(graph.add(z, y))
    pooled = nn.global_avg_pool2d(z, layout)
    out = nn.dense(nn.batch_flatten(pooled), const(5, 8, name="fc"))
    return graph.function(out)


def data_for(net: Graph) -> dict:
    return {p.name: rand(*p.shape) for p in net.params}


def assert_same_values(a: Graph, b: Graph, inputs: dict) -> None:
    np.testing.assert_allclose(graph.evaluate(b, inputs), graph.evaluate(a, inputs),
                               rtol=1e-5, atol=1e-6)


def test_simplify_inference_removes_batch_norm():
    net = conv_bn_net()
    out = passes.SimplifyInference()(net)
    assert "nn.batch_norm" in ops_of(net)
    assert "nn.batch_norm" not in ops_of(out)
    assert "multiply" in ops_of(out) and "add" in ops_of(out)
    assert_same_values(net, out, data_for(net))


def test_fold_constant_evaluates_constant_subgraphs_and_keeps_names():
    w = graph.const(rand(4, 4), "weight")
    folded_part = graph.multiply(graph.transpose(w), 2.0)
    x = graph.var("x", (3, 4))
    net = graph.function(nn.dense(x, folded_part))
    out = passes.FoldConstant()(net)
    assert ops_of(out) == ["nn.dense"]
    weight = out.calls()[0].args[1]
    assert isinstance(weight, Constant) and weight.name == "weight"
    np.testing.assert_allclose(weight.value, w.value.T * 2)
    assert_same_values(net, out, data_for(net))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_fold_scale_axis_folds_batch_norm_into_conv_weights(layout):
    net = conv_bn_net(layout)
    pipeline = graph.GraphPipeline.parse(
        "simplify_inference, fold_constant, fold_scale_axis, fold_constant")
    out = pipeline(net)
    # the batch norm's scale is gone into the first conv's weights; its shift is a bias add
    first = out.calls()[0]
    assert first.op == "nn.conv2d"
    assert "multiply" not in ops_of(out)
    assert ops_of(out).count("add") == 2  # the folded shift and the residual add
    assert not np.allclose(first.args[1].value, net.calls()[0].args[1].value)
    assert_same_values(net, out, data_for(net))


def test_fold_scale_axis_moves_a_scale_through_a_bias_add_of_dense():
    x = graph.var("x", (2, 6))
    y = graph.multiply(graph.add(nn.dense(x, const(4, 6)), const(4)), const(4))
    net = graph.function(y)
    out = graph.GraphPipeline.parse("fold_scale_axis")(net)
    assert ops_of(out) == ["nn.dense", "add"]
    assert_same_values(net, out, data_for(net))


def test_fold_scale_axis_leaves_a_shared_conv_alone():
    x = graph.var("x", (1, 2, 5, 5))
    c = nn.conv2d(x, const(3, 2, 3, 3))
    net = graph.function([graph.multiply(c, const(3, 1, 1)), c])
    out = passes.FoldScaleAxis()(net)
    assert ops_of(out) == ops_of(net)


def test_convert_layout_runs_convolutions_in_nhwc():
    net = conv_bn_net("NCHW")
    out = graph.GraphPipeline.parse("simplify_inference, convert_layout, fold_constant")(net)
    convs = [c for c in out.calls() if c.op == "nn.conv2d"]
    assert convs and all(c.attrs["data_layout"] == "NHWC" for c in convs)
    assert all(c.attrs["kernel_layout"] == "HWIO" for c in convs)
    pools = [c for c in out.calls() if c.op == "nn.global_avg_pool2d"]
    assert pools[0].attrs["layout"] == "NHWC"
    # one transpose where the data enters; leaving the pooled [1, 1, 1, C] is a reshape
    assert ops_of(out).count("transpose") == 1
    assert out.outputs[0].shape == net.outputs[0].shape
    assert_same_values(net, out, data_for(net))


def test_convert_layout_adapts_concat_and_broadcast_operands():
    x = graph.var("x", (1, 2, 6, 6))
    a = nn.conv2d(x, const(3, 2, 1, 1))
    b = nn.conv2d(x, const(4, 2, 3, 3), padding=1)
    cat = graph.concatenate([a, b], axis=1)
    y = graph.multiply(cat, const(7, 1, 1))
    net = graph.function(nn.softmax(y, axis=1))
    out = passes.ConvertLayout()(net)
    cat_new = next(c for c in out.calls() if c.op == "concatenate")
    assert cat_new.attrs["axis"] == 3
    soft = next(c for c in out.calls() if c.op == "nn.softmax")
    assert soft.attrs["axis"] == 3
    assert_same_values(net, out, data_for(net))


def test_winograd_replaces_eligible_convolutions_only():
    x = graph.var("x", (1, 8, 8, 8))
    y = nn.conv2d(x, const(3, 3, 8, 8), padding=1, data_layout="NHWC")
    y = nn.conv2d(y, const(3, 3, 8, 8), strides=2, padding=1, data_layout="NHWC")
    y = nn.conv2d(y, const(1, 1, 8, 8), data_layout="NHWC")
    net = graph.function(y)
    out = passes.Winograd()(net)
    assert ops_of(out) == ["nn.conv2d_winograd", "nn.conv2d", "nn.conv2d"]
    wino = out.calls()[0]
    assert wino.attrs["tile_size"] == 4  # output height 8
    assert isinstance(wino.args[1], Constant) and wino.args[1].shape == (6, 6, 8, 8)
    inputs = data_for(net)
    np.testing.assert_allclose(graph.evaluate(out, inputs), graph.evaluate(net, inputs),
                               rtol=1e-4, atol=1e-4)


def test_winograd_keeps_tf32_convolutions_direct():
    # a TF32 conv replaced by the (float32-only) Winograd one would silently drop TF32
    x = graph.var("x", (1, 8, 8, 8))
    y = nn.conv2d(x, const(3, 3, 8, 8), padding=1, data_layout="NHWC")
    net = graph.function(nn.conv2d(y, const(3, 3, 8, 8), padding=1, data_layout="NHWC",
                                   precision="tf32"))
    out = passes.Winograd()(net)
    assert ops_of(out) == ["nn.conv2d_winograd", "nn.conv2d"]
    assert out.calls()[1].attrs["precision"] == "tf32"
    tf32 = passes.optimization_pipeline(winograd=True, precision="tf32", fuse=False)(
        graph.function(y))
    assert ops_of(tf32) == ["nn.conv2d"] and tf32.calls()[0].attrs["precision"] == "tf32"


def _fused_functions(g: Graph) -> list[Graph]:
    return [c.op for c in g.calls()]


def test_fuse_ops_puts_bias_residual_and_relu_into_the_conv():
    net = graph.optimize(conv_bn_net("NHWC"), fuse=False)
    out = passes.FuseOps()(net)
    funcs = _fused_functions(out)
    names = [f.name for f in funcs]
    assert names[0] == "fused_nn_conv2d_add_nn_relu"
    second = funcs[1]
    assert [c.op for c in second.calls()] == ["nn.conv2d", "add", "nn.relu"]
    assert all(f.is_primitive for f in funcs)
    # every operator landed in exactly one function
    assert sum(len(f.calls()) for f in funcs) == len(net.calls())
    assert_same_values(net, out, data_for(net))


def test_fuse_ops_follows_diamonds_to_the_post_dominator():
    x = graph.var("x", (4, 8))
    h = nn.bias_add(nn.dense(x, const(8, 8)), const(8), axis=1)
    gelu = graph.multiply(h, graph.multiply(graph.add(graph.erf(graph.multiply(h, 0.7)), 1.0),
                                            0.5))
    net = graph.function(nn.softmax(gelu))
    out = passes.FuseOps()(net)
    funcs = _fused_functions(out)
    assert len(funcs) == 2
    assert [c.op for c in funcs[0].calls()] == [
        "nn.dense", "nn.bias_add", "multiply", "erf", "add", "multiply", "multiply"]
    assert funcs[1].name == "fused_nn_softmax"
    # scalars stay inside as immediates; the weight and bias are parameters
    assert len(funcs[0].params) == 3
    assert_same_values(net, out, data_for(net))


def test_fuse_ops_stops_at_values_used_twice_and_at_opaque_ops():
    x = graph.var("x", (1, 4, 6, 6))
    c = nn.conv2d(x, const(4, 4, 3, 3), padding=1)
    r = nn.relu(c)
    branch = nn.conv2d(r, const(4, 4, 1, 1))
    out_node = graph.add(r, branch)
    net = graph.function(out_node)
    out = passes.FuseOps()(net)
    funcs = _fused_functions(out)
    # r is used by the 1x1 conv and by the add: the 3x3 conv group ends at r
    assert [f.name for f in funcs] == ["fused_nn_conv2d_nn_relu", "fused_nn_conv2d_add"]
    assert_same_values(net, out, data_for(net))


def test_fuse_ops_marks_reshape_only_functions_as_views():
    x = graph.var("x", (2, 3, 4))
    y = graph.reshape(nn.softmax(x), (6, 4))
    net = graph.function(nn.softmax(graph.expand_dims(y, 0)))
    out = passes.FuseOps()(net)
    funcs = _fused_functions(out)
    assert [bool(f.attrs.get("view")) for f in funcs] == [False, True, False]


def test_pipeline_text_round_trips_and_runs_with_dumps(tmp_path):
    text = ("simplify_inference, fold_constant, convert_layout(layout=\"NHWC\"), "
            "fold_scale_axis(max_rounds=4), winograd(tile_size=2), fuse_ops")
    pipeline = graph.GraphPipeline.parse(text)
    canonical = ("simplify_inference(), fold_constant(), convert_layout(), "
                 "fold_scale_axis(max_rounds=4), winograd(tile_size=2), fuse_ops()")
    assert pipeline.text == canonical
    assert graph.GraphPipeline.parse(canonical).text == canonical
    stream = io.StringIO()
    net = conv_bn_net("NCHW")
    with graph.GraphPassContext(print_after=["fuse_ops"], dump_dir=tmp_path,
                                time_passes=True, stream=stream):
        out = pipeline(net)
    printed = stream.getvalue()
    assert ";; IR after fuse_ops()" in printed
    assert "def @fused_nn_conv2d_winograd" in printed
    assert "pass timing" in printed
    files = sorted(os.listdir(tmp_path))
    assert files[0] == "000_input.txt" and "006_fuse_ops.txt" in files
    assert_same_values(net, out, data_for(net))


def test_unknown_graph_pass_names_are_reported():
    with pytest.raises(Exception, match="unknown pass 'fuse_op'; did you mean 'fuse_ops'"):
        graph.GraphPipeline.parse("fuse_op")


def test_verification_names_a_pass_that_breaks_the_graph():
    @dataclass(frozen=True)
    class Breaker(passes.GraphPass):
        name = "breaker"

        def apply(self, g, ctx):
            stray = Var("stray", g.outputs[0].ty)
            return Graph(g.params, [graph.add(g.outputs[0], stray)], g.name)

    x = graph.var("x", (2,))
    with pytest.raises(PassError, match="pass breaker\\(\\) failed: .*uses var %stray"):
        Breaker()(graph.function(graph.exp(x)))


def test_fused_graph_rejects_refusing():
    out = passes.FuseOps()(graph.function(graph.exp(graph.var("x", (2,)))))
    with pytest.raises(PassError, match="already fused"):
        passes.FuseOps()(out)
    assert isinstance(out.calls()[0], Call)
