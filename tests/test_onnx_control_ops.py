"""ONNX ``If`` with a condition known at import (the taken branch imported in place), and
function bodies whose ``If`` branches use the body's values (``AffineGrid``), against ONNX's
reference evaluator on the reference executor and a simulator build."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import graph
from ptxforge.graph.frontend_onnx import OnnxDataDependentError

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402


def _run(model, feeds, constants=None):
    (want,) = ReferenceEvaluator(model).run(None, {**feeds, **(constants or {})})
    net, params = graph.from_onnx(model, {k: v.shape for k, v in feeds.items()},
                                  constants=constants)
    np.testing.assert_allclose(graph.run_graph(net, feeds, params)[0], want, 1e-5, 1e-6)
    lib = graph.build(net, "sim", params)
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**{k: v for k, v in feeds.items() if k in lib.plan.inputs})
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), want, 1e-5, 1e-6)
    return net


def _if_model(cond_from_input: bool):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    then_b = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 3])])
    two = helper.make_tensor("two", TensorProto.FLOAT, [1], [2.0])
    else_b = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2, 3])],
                               [two])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b)]
    inputs, inits = [x], []
    if cond_from_input:
        inputs.append(helper.make_tensor_value_info("c", TensorProto.BOOL, []))
    else:
        # a condition computed from a shape: the rank of x is 2
        nodes[:0] = [helper.make_node("Shape", ["x"], ["s"]),
                     helper.make_node("Size", ["s"], ["n"]),
                     helper.make_node("Equal", ["n", "k"], ["c"])]
        inits.append(helper.make_tensor("k", TensorProto.INT64, [], [3]))
    g = helper.make_graph(nodes, "if", inputs, [y], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


def test_if_on_a_shape_imports_the_taken_branch():
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    net = _run(_if_model(False), {"x": x})
    ops = {n.op for n in graph.ir.post_order(net.outputs) if isinstance(n, graph.ir.Call)}
    assert ops == {"multiply"}  # the else branch (rank 2 != 3): x * 2


def test_if_on_data_names_the_input_and_imports_for_its_value():
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    model = _if_model(True)
    with pytest.raises(OnnxDataDependentError) as e:
        graph.from_onnx(model, {"x": x.shape, "c": ()})
    assert e.value.inputs == ("c",)
    net = _run(model, {"x": x}, constants={"c": np.array(True)})
    ops = {n.op for n in graph.ir.post_order(net.outputs) if isinstance(n, graph.ir.Call)}
    assert ops == {"nn.relu"}


@pytest.mark.parametrize("size,align", [((2, 3, 4, 5), 0), ((1, 2, 3, 4, 2), 1)])
def test_affine_grid_function_body_with_branches(size, align):
    """AffineGrid has no converter: its function body branches (If) on the rank of size
    and on align_corners, and the branches read the body's own values by name."""
    k = len(size) - 2
    rng = np.random.default_rng(5)
    theta = rng.standard_normal((size[0], k, k + 1)).astype(np.float32)
    node = helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=align)
    g = helper.make_graph(
        [node], "ag", [helper.make_tensor_value_info("theta", TensorProto.FLOAT, theta.shape),
                       helper.make_tensor_value_info("size", TensorProto.INT64, [len(size)])],
        [helper.make_tensor_value_info("grid", TensorProto.FLOAT,
                                       [size[0], *size[2:], k])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    _run(model, {"theta": theta}, constants={"size": np.array(size, np.int64)})


def test_scan_unrolled_with_directions_axes_and_an_outer_value():
    """Two states, two scan inputs (one read backwards along axis 1), a body reading a value
    of the enclosing graph, and two scan outputs (one stacked on axis 1, one reversed)."""
    f = TensorProto.FLOAT
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "a_t"], ["s_mid"]),
         helper.make_node("Mul", ["s_mid", "w"], ["s_out"]),
         helper.make_node("Mul", ["p_in", "b_t"], ["p_out"]),
         helper.make_node("Sub", ["s_out", "p_out"], ["y_t"]),
         helper.make_node("Identity", ["p_out"], ["z_t"])],
        "body",
        [helper.make_tensor_value_info(n, f, [3]) for n in ("s_in", "p_in", "a_t", "b_t")],
        [helper.make_tensor_value_info(n, f, [3]) for n in ("s_out", "p_out", "y_t", "z_t")])
    node = helper.make_node("Scan", ["s0", "p0", "a", "b"], ["s", "p", "y", "z"],
                            body=body, num_scan_inputs=2, scan_input_axes=[0, 1],
                            scan_input_directions=[0, 1], scan_output_axes=[1, 0],
                            scan_output_directions=[0, 1])
    g = helper.make_graph(
        [helper.make_node("Relu", ["wx"], ["w"]), node],
        "scan", [helper.make_tensor_value_info("s0", f, [3]),
                 helper.make_tensor_value_info("p0", f, [3]),
                 helper.make_tensor_value_info("a", f, [4, 3]),
                 helper.make_tensor_value_info("b", f, [3, 4]),
                 helper.make_tensor_value_info("wx", f, [3])],
        [helper.make_tensor_value_info("y", f, [3, 4]),
         helper.make_tensor_value_info("z", f, [4, 3]),
         helper.make_tensor_value_info("s", f, [3])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)])
    rng = np.random.default_rng(6)
    feeds = {k: rng.standard_normal(shape).astype(np.float32) for k, shape in
             (("s0", (3,)), ("p0", (3,)), ("a", (4, 3)), ("b", (3, 4)), ("wx", (3,)))}
    # the spec's loop (ONNX's reference evaluator has no reverse directions)
    st, pt, ys, zs = feeds["s0"], feeds["p0"], [], []
    for t in range(4):
        st = (st + feeds["a"][t]) * np.maximum(feeds["wx"], 0)
        pt = pt * feeds["b"][:, 3 - t]
        ys.append(st - pt)
        zs.append(pt)
    want = [np.stack(ys, 1), np.stack(zs[::-1], 0), st]
    net, params = graph.from_onnx(model, {k: v.shape for k, v in feeds.items()})
    for got in (graph.run_graph(net, feeds, params), None):
        if got is None:
            lib = graph.build(net, "sim", params)
            m = graph.GraphModule(lib, ptxforge.sim())
            m.set_input(**feeds)
            m.run()
            got = [m.get_output(k).numpy() for k in range(3)]
        for g_, w in zip(got, want):
            np.testing.assert_allclose(g_, w, 1e-5, 1e-6)


def _loop_model(data_condition: bool):
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    if data_condition:  # continue while the first element grows
        cond = [helper.make_node("Greater", ["x_out", "x_in"], ["g"]),
                helper.make_node("Cast", ["g"], ["gf"], to=f),
                helper.make_node("ReduceMin", ["gf"], ["m"], keepdims=0),
                helper.make_node("Cast", ["m"], ["c_out"], to=TensorProto.BOOL)]
    else:  # continue while i < 3: four iterations
        cond = [helper.make_node("Less", ["i", "three"], ["c_out"])]
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=f),
         helper.make_node("Mul", ["x_in", "fi"], ["t"]),
         helper.make_node("Add", ["t", "x_in"], ["x_out"]),
         *cond,
         helper.make_node("Sin", ["x_out"], ["s_out"])],
        "body", [helper.make_tensor_value_info("i", i64, []),
                 helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("x_in", f, [2])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_out", f, [2]),
         helper.make_tensor_value_info("s_out", f, [2])],
        [helper.make_tensor("three", i64, [], [3])])
    g = helper.make_graph(
        [helper.make_node("Loop", ["n", "", "x"], ["y", "s"], body=body)], "loop",
        [helper.make_tensor_value_info("x", f, [2])],
        [helper.make_tensor_value_info("y", f, [2]),
         helper.make_tensor_value_info("s", f, [4, 2])],
        [helper.make_tensor("n", i64, [], [6])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)])


def test_loop_unrolled_with_carried_values_scan_outputs_and_an_early_exit():
    """A Loop with a trip count of 6 whose body stops after 4 iterations (its condition,
    computed from the iteration number, is known at import), carrying a run-time value and
    collecting a scan output; a condition computed from data is refused."""
    x = np.array([0.5, -1.25], np.float32)
    xs, ss = x, []
    for i in range(4):
        xs = xs * np.float32(i) + xs
        ss.append(np.sin(xs))
    net, params = graph.from_onnx(_loop_model(False), {"x": x.shape})
    lib = graph.build(net, "sim", params)
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(x=x)
    m.run()
    for k, want in enumerate((xs, np.stack(ss))):
        np.testing.assert_allclose(graph.run_graph(net, {"x": x}, params)[k], want, 1e-6)
        np.testing.assert_allclose(m.get_output(k).numpy(), want, 1e-6)
    with pytest.raises(graph.GraphError, match="condition depends on tensor data"):
        graph.from_onnx(_loop_model(True), {"x": x.shape})
