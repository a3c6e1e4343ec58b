"""Operators whose output shape depends on values (Range, ConstantOfShape, Compress,
NonZero, Unique): with those values known at import they translate; otherwise the
``OnnxDataDependentError`` names the graph inputs to fix (``from_onnx(..., constants=)``),
and Compress with a known condition gathers from run-time data."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import graph

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from ptxforge.graph.frontend_onnx import OnnxDataDependentError  # noqa: E402


def _model(nodes, inputs, outputs, opset=21):
    g = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _run(net, params, feeds):
    lib = graph.build(net, "sim", params)
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**{k: v for k, v in feeds.items() if k in lib.plan.inputs})
    m.run()
    return [m.get_output(k).numpy() for k in range(len(net.outputs))]


def test_range_names_its_inputs_and_imports_with_them_bound():
    model = _model([helper.make_node("Range", ["s", "l", "d"], ["y"])],
                   [_vi(n, TensorProto.INT64, []) for n in "sld"],
                   [_vi("y", TensorProto.INT64, ["n"])])
    with pytest.raises(OnnxDataDependentError, match="Range start") as e:
        graph.from_onnx(model, {"s": (), "l": (), "d": ()})
    assert set(e.value.inputs) == {"s"}
    consts = {"s": np.array(7, np.int64), "l": np.array(-2, np.int64),
              "d": np.array(-3, np.int64)}
    net, params = graph.from_onnx(model, {}, constants=consts)
    (got,) = _run(net, params, {})
    np.testing.assert_array_equal(got, np.arange(7, -2, -3))


def test_compress_with_a_known_condition_gathers_run_time_data():
    cond = np.array([True, False, True, True])
    model = _model([helper.make_node("Compress", ["x", "c"], ["y"], axis=1)],
                   [_vi("x", TensorProto.FLOAT, [3, 4]), _vi("c", TensorProto.BOOL, [4])],
                   [_vi("y", TensorProto.FLOAT, [3, "n"])])
    with pytest.raises(OnnxDataDependentError, match="Compress condition") as e:
        graph.from_onnx(model, {"x": (3, 4), "c": (4,)})
    assert e.value.inputs == ("c",)
    net, params = graph.from_onnx(model, {"x": (3, 4)}, constants={"c": cond})
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert [p.name for p in net.params] == ["x"]  # the data stays an input
    (got,) = _run(net, params, {"x": x})
    np.testing.assert_array_equal(got, np.compress(cond, x, axis=1))
    flat = _model([helper.make_node("Compress", ["x", "c"], ["y"])],
                  [_vi("x", TensorProto.FLOAT, [3, 4]), _vi("c", TensorProto.BOOL, [5])],
                  [_vi("y", TensorProto.FLOAT, ["n"])])
    cond5 = np.array([0, 1, 1, 0, 1], bool)
    net, params = graph.from_onnx(flat, {"x": (3, 4)}, constants={"c": cond5})
    (got,) = _run(net, params, {"x": x})
    np.testing.assert_array_equal(got, np.compress(cond5, x))


@pytest.mark.parametrize("op", ["NonZero", "Unique"])
def test_value_shaped_outputs_name_the_input(op):
    model = _model([helper.make_node(op, ["x"], ["y"])],
                   [_vi("x", TensorProto.FLOAT, [2, 3])],
                   [_vi("y", TensorProto.INT64 if op == "NonZero" else TensorProto.FLOAT,
                        [2, "n"] if op == "NonZero" else ["n"])])
    with pytest.raises(OnnxDataDependentError, match=f"{op} input") as e:
        graph.from_onnx(model, {"x": (2, 3)})
    assert e.value.inputs == ("x",)


def test_constant_of_shape_from_an_input_names_it():
    model = _model([helper.make_node("ConstantOfShape", ["s"], ["y"],
                                     value=helper.make_tensor("v", TensorProto.FLOAT, [1],
                                                              [2.5]))],
                   [_vi("s", TensorProto.INT64, [2])], [_vi("y", TensorProto.FLOAT, ["a", "b"])])
    with pytest.raises(OnnxDataDependentError, match="ConstantOfShape shape") as e:
        graph.from_onnx(model, {"s": (2,)})
    assert e.value.inputs == ("s",)
    net, params = graph.from_onnx(model, {}, constants={"s": np.array([2, 3], np.int64)})
    (got,) = _run(net, params, {})
    np.testing.assert_array_equal(got, np.full((2, 3), 2.5, np.float32))
