"""Values known at import time stay known after a converter has also used them as graph
constants, and operators with context-dependent function bodies (Attention) expand when
optional inputs are left out."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import graph

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402


def _compare(model, feeds, atol=1e-5):
    want = ReferenceEvaluator(model).run(None, feeds)
    net, params = graph.from_onnx(model, {k: v.shape for k, v in feeds.items()})
    lib = graph.build(net, "sim", params)
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**{k: v for k, v in feeds.items() if k in lib.plan.inputs})
    m.run()
    for k, w in enumerate(want):
        np.testing.assert_allclose(m.get_output(k).numpy(), w, atol=atol, rtol=1e-4)


def test_a_shape_value_used_as_a_tensor_still_folds_later():
    vi = helper.make_tensor_value_info
    nodes = [
        helper.make_node("Shape", ["x"], ["n"], start=1, end=2),  # [6], known
        helper.make_node("Add", ["n", "i"], ["ni"]),  # n used as a graph constant
        helper.make_node("Div", ["n", "two"], ["half"]),  # still known: folds
        helper.make_node("Concat", ["two", "half"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    g = helper.make_graph(nodes, "g", [vi("x", TensorProto.FLOAT, [1, 6]),
                                       vi("i", TensorProto.INT64, [1])],
                          [vi("y", TensorProto.FLOAT, [2, 3]), vi("ni", TensorProto.INT64, [1])],
                          [helper.make_tensor("two", TensorProto.INT64, [1], [2])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    _compare(model, {"x": np.arange(6, dtype=np.float32).reshape(1, 6),
                     "i": np.array([5], np.int64)})


def test_attention_with_optional_inputs_left_out_expands():
    vi = helper.make_tensor_value_info
    node = helper.make_node("Attention", ["q", "k", "v", "", "", "", "nonpad"], ["y"],
                            is_causal=1)
    g = helper.make_graph([node], "att", [
        vi("q", TensorProto.FLOAT, [2, 2, 3, 4]), vi("k", TensorProto.FLOAT, [2, 2, 5, 4]),
        vi("v", TensorProto.FLOAT, [2, 2, 5, 4]), vi("nonpad", TensorProto.INT64, [2])],
        [vi("y", TensorProto.FLOAT, [2, 2, 3, 4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 24)])
    rng = np.random.default_rng(0)
    feeds = {n: rng.random(s).astype(np.float32)
             for n, s in (("q", (2, 2, 3, 4)), ("k", (2, 2, 5, 4)), ("v", (2, 2, 5, 4)))}
    nonpad = np.array([5, 4], np.int64)
    want = ReferenceEvaluator(model).run(None, {**feeds, "nonpad": nonpad})[0]
    net, params = graph.from_onnx(model, {k: v.shape for k, v in feeds.items()},
                                  constants={"nonpad": nonpad})
    lib = graph.build(net, "sim", params)
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**{k: v for k, v in feeds.items() if k in lib.plan.inputs})
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), want, atol=1e-5, rtol=1e-4)
