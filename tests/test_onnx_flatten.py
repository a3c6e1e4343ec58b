"""ONNX Flatten at every axis, including ``axis == rank`` (a ``[size, 1]`` result), which
the TorchScript exporter writes for BERT's attention mask."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from ptxforge import graph


@pytest.mark.parametrize("axis", [-3, -1, 0, 1, 2, 3])
def test_flatten_axes_match_onnx(axis):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    k = axis + 3 if axis < 0 else axis
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [[1, 2, 6, 24][k], [24, 12, 4, 1][k]])
    node = helper.make_node("Flatten", ["x"], ["y"], axis=axis)
    model = helper.make_model(helper.make_graph([node], "f", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    want = data.reshape(int(np.prod(data.shape[:k])), -1)
    net, params = graph.from_onnx(model)
    got = graph.evaluate(net, {"x": data}, params)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
