"""QuantizeLinear and DequantizeLinear (per tensor, per axis, blocked; int8, uint8, int16,
uint16) and EyeLike through the importer, the reference executor and a simulator build,
against ONNX's reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import graph

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

TYPES = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8, "int16": TensorProto.INT16,
         "uint16": TensorProto.UINT16, "float32": TensorProto.FLOAT,
         "float16": TensorProto.FLOAT16}


def _check(node, feeds, out_type, shape=None):
    shape = next(iter(feeds.values())).shape if shape is None else shape
    inputs = [helper.make_tensor_value_info(k, TYPES[str(v.dtype)], list(v.shape))
              for k, v in feeds.items()]
    g = helper.make_graph([node], "q", inputs,
                          [helper.make_tensor_value_info("y", out_type, list(shape))])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    net, params = graph.from_onnx(model, {k: v.shape for k, v in feeds.items()})
    ref = graph.evaluate(net, feeds, params)
    lib = graph.build(net, "sim", params)
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**{k: v for k, v in feeds.items() if k in lib.plan.inputs})
    m.run()
    for got in (ref, m.get_output(0).numpy()):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("qtype,layout", [("int8", "axis"), ("uint8", "blocked"),
                                          ("int16", "tensor"), ("uint16", "axis")])
def test_quantize_and_dequantize_match_onnx(qtype, layout):
    rng = np.random.default_rng(1)
    info = np.iinfo(qtype)
    x = (rng.standard_normal((2, 6, 4)) * 300).astype(np.float32)
    x[0, 0, :3] = [2.5, -3.5, 0.5]  # ties round to even
    shape = {"tensor": (), "axis": (6,), "blocked": (2, 3, 4)}[layout]
    attrs = {"tensor": {}, "axis": {"axis": 1}, "blocked": {"axis": 1, "block_size": 2}}[layout]
    scale = (rng.random(shape) + 0.5).astype(np.float32)
    zp = rng.integers(info.min // 4, info.max // 4 + 1, shape).astype(qtype)
    if layout == "tensor":
        scale, zp = np.float32(1.0).reshape(()), np.asarray(zp, qtype).reshape(())
    _check(helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], **attrs),
           {"x": x, "s": scale, "z": zp}, TYPES[qtype])
    q = rng.integers(info.min, info.max + 1, x.shape).astype(qtype)
    _check(helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], **attrs),
           {"x": q, "s": scale, "z": zp}, TensorProto.FLOAT)


def test_quantize_without_zero_point_is_uint8_and_refuses_float8():
    x = np.linspace(-10, 300, 24, dtype=np.float32).reshape(4, 6)
    _check(helper.make_node("QuantizeLinear", ["x", "s"], ["y"]),
           {"x": x, "s": np.float32(2.0).reshape(())}, TensorProto.UINT8)
    node = helper.make_node("QuantizeLinear", ["x", "s"], ["y"],
                            output_dtype=TensorProto.FLOAT8E4M3FN)
    g = helper.make_graph([node], "q", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
        helper.make_tensor_value_info("s", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT8E4M3FN, [4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(graph.GraphError, match="quantizing to .* is not supported"):
        graph.from_onnx(model, {"x": (4,), "s": ()})


def test_eye_like_is_a_constant_of_the_input_shape():
    x = np.zeros((3, 5), np.float16)
    _check(helper.make_node("EyeLike", ["x"], ["y"], k=1), {"x": x}, TensorProto.FLOAT16)
    _check(helper.make_node("EyeLike", ["x"], ["y"], k=-2, dtype=TensorProto.INT16),
           {"x": x}, TensorProto.INT16)
