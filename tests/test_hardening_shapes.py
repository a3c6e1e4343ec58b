"""Tensor shapes are checked, never truncated: ``int(1.5)`` is 1, so a shape of
``(1.5, 4)`` once built a tensor of the wrong size. Every way a shape enters the graph layer
(``graph.var``, ``TensorType``, the ONNX importer's ``shape_dict``) raises a
:class:`GraphError` naming the offending extent; integral floats and numpy ints are fine."""

from __future__ import annotations

import numpy as np
import pytest

from ptxforge import graph
from ptxforge.graph.ir import GraphError, TensorType, check_shape

BAD = [
    ((1.5, 4), "1.5"),
    ((2, 0.5), "0.5"),
    ((True, 4), "True"),
    ((4, np.bool_(False)), "np.False_"),
    ((-1, 4), "-1"),
    ((4, "8"), "'8'"),
    ((float("nan"), 2), "nan"),
    ((float("inf"), 2), "inf"),
    ((None, 3), "None"),
]


@pytest.mark.parametrize("shape,named", BAD)
def test_var_rejects_a_bad_extent_naming_it(shape, named):
    with pytest.raises(GraphError) as info:
        graph.var("x", shape)
    msg = str(info.value)
    assert f"extent {named} at axis" in msg
    assert "'x'" in msg


@pytest.mark.parametrize("shape,named", BAD)
def test_tensor_type_rejects_a_bad_extent(shape, named):
    with pytest.raises(GraphError, match=f"extent {named} at axis"):
        TensorType(shape)


def test_a_shape_that_is_not_a_sequence_is_rejected():
    with pytest.raises(GraphError, match="tuple of ints, got 4"):
        graph.var("x", 4)


def test_integral_floats_and_numpy_ints_are_accepted():
    v = graph.var("x", (4.0, np.int64(3), np.float32(2.0), np.int32(0)))
    assert v.ty.shape == (4, 3, 2, 0)
    assert all(type(s) is int for s in v.ty.shape)
    assert TensorType(np.array([2, 5])).shape == (2, 5)
    assert check_shape([]) == ()


def _identity_model():
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(m)
    return m


@pytest.mark.parametrize("given,named", [((1.5, 4), "1.5"), ((-2, 4), "-2"),
                                         ((True, 4), "True")])
def test_onnx_shape_dict_rejects_a_bad_extent(given, named):
    from ptxforge.graph.onnx_model import OnnxImportError

    with pytest.raises(OnnxImportError) as info:
        graph.from_onnx(_identity_model(), shape_dict={"x": given})
    msg = str(info.value)
    assert "shape_dict['x']" in msg and f"extent {named} at axis 0" in msg


def test_onnx_shape_dict_accepts_integral_floats():
    net, _ = graph.from_onnx(_identity_model(), shape_dict={"x": (2.0, np.int64(4))})
    assert net.params[0].ty.shape == (2, 4)
