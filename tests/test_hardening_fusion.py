"""Fusion depth is capped: long element-wise chains (from the graph API and from ONNX) are
cut into fused functions of at most ``max_depth`` calls, which repeat along the chain, so
they build without overflowing the stack and in time linear in their length."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import graph
from ptxforge.graph import GraphError, nn
from ptxforge.graph.passes.fuse_ops import MAX_DEPTH, FuseOps


def _chain(n: int, shape=(4, 16)):
    x = graph.var("x", shape)
    y = x
    for i in range(n):
        y = nn.relu(y) if i % 2 == 0 else graph.add(y, x)
    return graph.function([y])


def _reference(x: np.ndarray, n: int) -> np.ndarray:
    y = x
    for i in range(n):
        y = np.maximum(y, 0) if i % 2 == 0 else y + x
    return y


def _fused_sizes(net, **kw) -> list[int]:
    from ptxforge.graph.passes import GraphPassContext

    with GraphPassContext():
        fused = FuseOps(**kw)(net)
    return [len(c.op.calls()) for c in fused.calls()]


def test_a_chain_of_400_elementwise_ops_builds_and_matches_numpy():
    net = _chain(400)
    sizes = _fused_sizes(net)
    assert max(sizes) <= MAX_DEPTH and sum(sizes) == 400
    lib = graph.build(net, target="sim")
    m = graph.GraphModule(lib, ptxforge.sim())
    x = np.random.default_rng(1).standard_normal((4, 16)).astype("float32")
    m.set_input("x", x)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), _reference(x, 400), rtol=1e-5)


def test_the_cut_chain_repeats_one_function_so_build_time_is_linear():
    # a uniform chain four times longer compiles no more distinct functions
    short = graph.extract_fused_functions(_chain(200))
    long = graph.extract_fused_functions(_chain(800))
    assert len(long) == len(short) <= 3
    assert sum(f.count for f in long) >= 800 // MAX_DEPTH


def test_max_depth_cuts_a_chain_and_is_checked():
    sizes = _fused_sizes(_chain(10), max_depth=4)
    assert max(sizes) <= 4 and sum(sizes) == 10 and len(sizes) >= 3
    for bad in (0, -1, 2.5, True):
        with pytest.raises(GraphError, match="max_depth"):
            FuseOps(max_depth=bad)


def test_an_onnx_chain_of_1000_relu_add_nodes_builds_and_matches_numpy():
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    n, nodes, prev = 1000, [], "x"
    for i in range(n):
        out = f"t{i}"
        nodes.append(helper.make_node("Relu", [prev], [out]) if i % 2 == 0
                     else helper.make_node("Add", [prev, "x"], [out]))
        prev = out
    g = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [4, 8])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    net, params = graph.from_onnx(model)
    lib = graph.build(net, target="sim", params=params)
    m = graph.GraphModule(lib, ptxforge.sim())
    x = np.random.default_rng(2).standard_normal((4, 8)).astype("float32")
    m.set_input("x", x)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), _reference(x, n), rtol=1e-5)
