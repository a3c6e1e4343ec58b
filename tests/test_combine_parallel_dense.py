"""``strided_slice`` and the ``combine_parallel_dense`` pass: dense layers of one input become
one product whose columns the branches slice back, with the same values."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import graph, nd, ops, te
from ptxforge.graph import nn, passes
from ptxforge.graph.ir import Constant, GraphError
from ptxforge.ir.te import TEError

RNG = np.random.default_rng(7)


def rand(*shape):
    return RNG.uniform(-1, 1, shape).astype("float32")


def ops_of(g) -> list[str]:
    return [c.op_name for c in g.calls()]


# -- strided_slice -------------------------------------------------------------------------
@pytest.mark.parametrize("begin,end,strides,axes,want", [
    ([1, 2], [4, 9], None, None, np.s_[1:4, 2:9]),
    ([0, 2], [5, 9], [2, 3], None, np.s_[0:5:2, 2:9:3]),
    ([-3], [10**6], None, [1], np.s_[:, -3:]),
    ([2], [-1], [2], [0], np.s_[2:-1:2, :]),
], ids=["box", "strided", "negative_begin_clipped_end", "axes"])
def test_strided_slice_matches_numpy_in_te_and_the_graph(begin, end, strides, axes, want):
    x = rand(6, 10)
    A = te.placeholder((6, 10), "float32", name="A")
    B = ops.strided_slice(A, begin, end, strides, axes)
    assert B.shape == x[want].shape
    f = ptxforge.build(te.create_schedule(B.op), [A, B], target="sim")
    out = nd.empty(B.shape, "float32")
    f(nd.array(x), out)
    np.testing.assert_array_equal(out.numpy(), x[want])
    v = graph.var("x", (6, 10))
    net = graph.function(graph.strided_slice(v, begin, end, strides, axes))
    np.testing.assert_array_equal(graph.evaluate(net, {"x": x}), x[want])


@pytest.mark.parametrize("args,match", [
    (([0], [0]), "is empty"),
    (([0], [4], [-1]), "only positive strides"),
    (([0, 0], [4]), "the same length"),
    (([0], [4], None, [0, 1]), "the same length"),
    (([0], [4], None, [3]), "out of range"),
    (([0, 0], [2, 2], None, [1, 1]), "twice"),
])
def test_strided_slice_errors_say_what_is_wrong(args, match):
    A = te.placeholder((6, 10), "float32", name="A")
    with pytest.raises(TEError, match=match):
        ops.strided_slice(A, *args)
    with pytest.raises(GraphError, match=match):
        graph.strided_slice(graph.var("x", (6, 10)), *args)


# -- combine_parallel_dense ----------------------------------------------------------------
def branches(n=3, bias=True, units=(8, 8, 4), k=12, shared_input=True):
    x = graph.var("x", (5, k))
    other = graph.var("y", (5, k))
    outs = []
    for b in range(n):
        inp = x if shared_input or b == 0 else other
        y = nn.dense(inp, graph.const(rand(units[b % len(units)], k), f"w{b}"))
        if bias if isinstance(bias, bool) else bias[b]:
            y = nn.bias_add(y, graph.const(rand(units[b % len(units)]), f"b{b}"), axis=-1)
        outs.append(graph.multiply(y, 2.0 + b))  # each branch's own consumer
    return graph.function(outs)


def values(net):
    feed = {p.name: rand(*p.shape) for p in net.params}
    return feed, graph.evaluate(net, feed)


def test_three_dense_layers_of_one_input_become_one_product_with_its_bias():
    net = branches()
    out = passes.CombineParallelDense()(net)
    assert ops_of(out).count("nn.dense") == 1 and ops_of(out).count("nn.bias_add") == 1
    assert ops_of(out).count("strided_slice") == 3
    (dense,) = [c for c in out.calls() if c.op == "nn.dense"]
    assert isinstance(dense.args[1], Constant) and dense.args[1].shape == (20, 12)
    feed, want = values(net)
    for got, ref in zip(graph.evaluate(out, feed), want):
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


def test_what_is_not_combined():
    assert passes.CombineParallelDense()(branches(n=2)) is not None
    two = branches(n=2)
    assert ops_of(passes.CombineParallelDense()(two)).count("nn.dense") == 2  # Relay's 3
    assert ops_of(passes.CombineParallelDense(min_num_branches=2)(two)).count("nn.dense") == 1
    apart = branches(shared_input=False)  # two read x, one reads y: below the minimum
    assert ops_of(passes.CombineParallelDense()(apart)).count("nn.dense") == 3
    x = graph.var("x", (5, 12))
    w = graph.var("w", (8, 12))  # a weight that is not a constant
    net = graph.function([nn.dense(x, w), nn.dense(x, graph.const(rand(8, 12))),
                          nn.dense(x, graph.const(rand(8, 12)))])
    assert ops_of(passes.CombineParallelDense()(net)).count("nn.dense") == 3
    with pytest.raises(GraphError, match="min_num_branches"):
        passes.CombineParallelDense(min_num_branches=1)


def test_a_branch_without_bias_keeps_every_bias_after_its_slice():
    net = branches(bias=(True, False, True))
    out = passes.CombineParallelDense()(net)
    assert ops_of(out).count("nn.dense") == 1 and ops_of(out).count("nn.bias_add") == 2
    for bias_add in (c for c in out.calls() if c.op == "nn.bias_add"):
        assert bias_add.args[0].op == "strided_slice"
    feed, want = values(net)
    for got, ref in zip(graph.evaluate(out, feed), want):
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


def test_the_build_pipeline_combines_a_bert_layers_projections():
    from ptxforge.graph.zoo.bert import bert_layer

    assert "combine_parallel_dense" in graph.passes.optimization_pipeline().text
    out, params, shape = bert_layer(1, "float32", seq_len=16, hidden=32, heads=4,
                                    intermediate=64)
    net = graph.function(out)
    for precision in ("float32", "float16"):
        lib = graph.build(net, "sim", params, precision=precision, schedule_fn=None)
        firsts = [f.func.func.calls()[0] for f in lib.functions.values()]
        shapes = [tuple(c.args[1].shape) for c in firsts if c.op == "nn.dense"]
        assert (96, 32) in shapes and (32, 32) in shapes  # q, k, v in one; the output alone
        assert len(shapes) == 4  # qkv, output, intermediate, output of the feed-forward
        assert sum(f.func.count for f in lib.functions.values()
                   if f.func.func.calls()[0].op == "nn.dense") == 4
        x = RNG.standard_normal(shape).astype("float32")
        m = graph.GraphModule(lib)
        m.run(data=x)
        got = m.get_output(0).numpy().astype("float64")
        want = graph.evaluate(net, {"data": x}, params)
        tol = 1e-4 if precision == "float32" else 2e-2
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())
