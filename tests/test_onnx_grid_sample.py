"""GridSample (2-D and 3-D; nearest, linear, cubic; zeros, border, reflection padding)
through the importer, the reference executor and a simulator build, against ONNX's
reference evaluator, with grids reaching well outside the image."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import graph

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402


def _check(x, grid, **attrs):
    out = (x.shape[0], x.shape[1]) + grid.shape[1:-1]
    g = helper.make_graph(
        [helper.make_node("GridSample", ["x", "grid"], ["y"], **attrs)], "gs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape)),
         helper.make_tensor_value_info("grid", TensorProto.FLOAT, list(grid.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out))])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    feeds = {"x": x, "grid": grid}
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    net, params = graph.from_onnx(model, {"x": x.shape, "grid": grid.shape})
    ref = graph.evaluate(net, feeds, params)
    lib = graph.build(net, "sim", params)
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**feeds)
    m.run()
    for got in (ref, m.get_output(0).numpy()):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode,padding,align", [
    ("cubic", "border", 0), ("linear", "reflection", 0), ("nearest", "zeros", 1)])
def test_grid_sample_2d_matches_onnx(mode, padding, align):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, 4, 5)).astype(np.float32)
    grid = (rng.random((1, 3, 4, 2)) * 4.4 - 2.2).astype(np.float32)  # reaches past [-1, 1]
    grid[0, 0, 0] = [0.5, -0.25]  # an exact tie for nearest on the 4-wide axis
    _check(x, grid, mode=mode, padding_mode=padding, align_corners=align)


def test_grid_sample_3d_linear_zeros():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 1, 3, 4, 2)).astype(np.float32)
    grid = (rng.random((1, 2, 2, 3, 3)) * 2.6 - 1.3).astype(np.float32)
    _check(x, grid, mode="linear", padding_mode="zeros", align_corners=0)


def test_grid_sample_unknown_mode_is_refused():
    g = helper.make_graph(
        [helper.make_node("GridSample", ["x", "grid"], ["y"], mode="area")], "gs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2]),
         helper.make_tensor_value_info("grid", TensorProto.FLOAT, [1, 2, 2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 2, 2])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    with pytest.raises(graph.GraphError, match="mode 'area'"):
        graph.from_onnx(model, {"x": (1, 1, 2, 2), "grid": (1, 2, 2, 2)})
