"""CumProd and ReverseSequence through the importer, the reference executor and a simulator
build, against numpy and ONNX's reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import graph

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

TYPES = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16,
         "int32": TensorProto.INT32, "int64": TensorProto.INT64}


def _check(node, feeds, out_dtype, inits=()):
    names = {i.name for i in inits}
    x = next(iter(feeds.values()))
    g = helper.make_graph(
        [node], "s", [helper.make_tensor_value_info(k, TYPES[str(v.dtype)], list(v.shape))
                      for k, v in feeds.items()],
        [helper.make_tensor_value_info("y", TYPES[out_dtype], list(x.shape))], list(inits))
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 26)])
    model.ir_version = 13
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    net, params = graph.from_onnx(model, {k: v.shape for k, v in feeds.items()
                                          if k not in names})
    ref = graph.evaluate(net, feeds, params)
    lib = graph.build(net, "sim", params)
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**{k: v for k, v in feeds.items() if k in lib.plan.inputs})
    m.run()
    for got in (ref, m.get_output(0).numpy()):
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-6 if want.dtype != np.float16 else 1e-3)
    return want


@pytest.mark.parametrize("dtype,axis,exclusive,reverse", [
    ("float32", 1, 0, 0), ("float32", -1, 1, 1), ("int32", 0, 1, 0), ("float16", 2, 0, 1)])
def test_cumprod_matches_onnx(dtype, axis, exclusive, reverse):
    rng = np.random.default_rng(0)
    x = (rng.random((2, 5, 4)) + 0.5).astype(dtype) if dtype != "int32" else \
        rng.integers(-3, 4, (2, 5, 4)).astype(np.int32)
    ax = numpy_helper.from_array(np.array(axis, np.int64), "axis")
    node = helper.make_node("CumProd", ["x", "axis"], ["y"], exclusive=exclusive,
                            reverse=reverse)
    want = _check(node, {"x": x}, dtype, [ax])
    # against numpy's own cumprod, for the plain form
    if not exclusive and not reverse:
        np.testing.assert_allclose(want, np.cumprod(x, axis=axis), rtol=1e-6)


def test_cumprod_over_a_long_axis_is_refused():
    g = helper.make_graph([helper.make_node("CumProd", ["x", "axis"], ["y"])], "s",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2000])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2000])],
                          [numpy_helper.from_array(np.array(1, np.int64), "axis")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 26)])
    model.ir_version = 13
    net, params = graph.from_onnx(model, {"x": (2, 2000)})
    with pytest.raises(graph.GraphError, match="running products over at most 1024"):
        graph.build(net, "sim", params)


@pytest.mark.parametrize("time_axis,lens_dtype", [(0, "int64"), (1, "int32")])
def test_reverse_sequence_matches_onnx(time_axis, lens_dtype):
    x = np.arange(5 * 4 * 3, dtype=np.float32).reshape(5, 4, 3)
    if time_axis == 1:
        x = x.transpose(1, 0, 2).copy()  # [batch 4, time 5, 3]
    lens = np.array([5, 0, 3, 1], lens_dtype)
    node = helper.make_node("ReverseSequence", ["x", "lens"], ["y"], time_axis=time_axis,
                            batch_axis=1 - time_axis)
    want = _check(node, {"x": x, "lens": lens}, "float32")
    xt = x if time_axis == 0 else x.transpose(1, 0, 2)
    wt = want if time_axis == 0 else want.transpose(1, 0, 2)
    for b, n in enumerate(lens):
        np.testing.assert_array_equal(wt[:n, b], xt[:n, b][::-1])
        np.testing.assert_array_equal(wt[n:, b], xt[n:, b])


def test_reverse_sequence_with_wrong_axes_is_refused():
    g = helper.make_graph(
        [helper.make_node("ReverseSequence", ["x", "lens"], ["y"], time_axis=0, batch_axis=0)],
        "s", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2]),
              helper.make_tensor_value_info("lens", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(graph.GraphError, match="time_axis 0 and batch_axis 0 must be 0 and 1"):
        graph.from_onnx(model, {"x": (3, 2), "lens": (2,)})
