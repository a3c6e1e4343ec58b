"""Empty tensors (a dimension of 0) in ONNX models: a node whose result has no elements
becomes an empty constant at import (no kernel computes it), so empty slices, empty
triangles and empty operands of a concatenation import, run and match ONNX's reference."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import graph

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

F = TensorProto.FLOAT


def _run(nodes, inputs, outputs, feeds, inits=()):
    g = helper.make_graph(nodes, "e", [helper.make_tensor_value_info(k, t, s)
                                       for k, t, s in inputs],
                          [helper.make_tensor_value_info(k, t, s) for k, t, s in outputs],
                          list(inits))
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    want = ReferenceEvaluator(model).run(None, feeds)
    net, params = graph.from_onnx(model, {k: v.shape for k, v in feeds.items()})
    lib = graph.build(net, "sim", params)
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**{k: v for k, v in feeds.items() if k in lib.plan.inputs})
    m.run()
    for k, w in enumerate(want):
        for got in (graph.run_graph(net, feeds, params)[k], m.get_output(k).numpy()):
            assert got.shape == w.shape and got.dtype == w.dtype
            np.testing.assert_array_equal(got, w)
    return net


def test_empty_slice_and_its_concatenation():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    inits = [helper.make_tensor(n, TensorProto.INT64, [1], [v])
             for n, v in (("b", 9), ("e", 20), ("ax", 1))]
    nodes = [helper.make_node("Slice", ["x", "b", "e", "ax"], ["s"]),
             helper.make_node("Concat", ["s", "x"], ["c"], axis=1),
             helper.make_node("Relu", ["c"], ["y"])]
    net = _run(nodes, [("x", F, [3, 4])], [("s", F, [3, 0]), ("y", F, [3, 4])], {"x": x},
               inits)
    assert net.outputs[0].shape == (3, 0)


def test_trilu_of_an_empty_input():
    x = np.zeros((3, 0, 5), np.int64)
    _run([helper.make_node("Trilu", ["x"], ["y"], upper=0)],
         [("x", TensorProto.INT64, [3, 0, 5])], [("y", TensorProto.INT64, [3, 0, 5])],
         {"x": x})
