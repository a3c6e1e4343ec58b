"""QuantizeLinear and DequantizeLinear (per tensor, per axis, blocked; int8, uint8, int16,
uint16, float8_e4m3fn, float8_e5m2) and EyeLike through the importer, the reference
executor and a simulator build, against ONNX's reference evaluator."""

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


def test_quantize_without_zero_point_is_uint8():
    x = np.linspace(-10, 300, 24, dtype=np.float32).reshape(4, 6)
    _check(helper.make_node("QuantizeLinear", ["x", "s"], ["y"]),
           {"x": x, "s": np.float32(2.0).reshape(())}, TensorProto.UINT8)


def _float8_model(node, x_type, y_type, n, inits=()):
    g = helper.make_graph([node], "q", [
        helper.make_tensor_value_info("x", x_type, [n]),
        helper.make_tensor_value_info("s", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("y", y_type, [n])], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize("to,saturate", [(TensorProto.FLOAT8E4M3FN, 1),
                                         (TensorProto.FLOAT8E5M2, 0)])
def test_float8_quantize_and_dequantize_match_onnx(to, saturate):
    """x / scale cast with ONNX's float8 rules (saturating or not), and back; the bits."""
    from ptxforge.graph.onnx_float8 import host_bits

    x = np.array([0.0, 1.3, -2.6, 900.0, -1e6, 30000.0, 1e-5, 7.77], np.float32)
    s = np.float32(0.5).reshape(())
    zero = helper.make_tensor("z", to, [], [0.0])
    q_model = _float8_model(helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"],
                                             saturate=saturate),
                            TensorProto.FLOAT, to, 8, [zero])
    (q,) = ReferenceEvaluator(q_model).run(None, {"x": x, "s": s})
    d_model = _float8_model(helper.make_node("DequantizeLinear", ["x", "s"], ["y"]),
                            to, TensorProto.FLOAT, 8)
    (d,) = ReferenceEvaluator(d_model).run(None, {"x": q, "s": s})
    for model, feeds, want in ((q_model, {"x": x, "s": s}, host_bits(q)),
                               (d_model, {"x": host_bits(q), "s": s}, d)):
        net, params = graph.from_onnx(model, {k: v.shape for k, v in feeds.items()})
        lib = graph.build(net, "sim", params)
        m = graph.GraphModule(lib, ptxforge.sim())
        m.set_input(**feeds)
        m.run()
        for got in (graph.evaluate(net, feeds, params), m.get_output(0).numpy()):
            np.testing.assert_array_equal(got, want)


def test_float8_zero_point_must_be_zero():
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])
    zero = helper.make_tensor("z", TensorProto.FLOAT8E4M3FN, [], [1.0])
    model = _float8_model(node, TensorProto.FLOAT, TensorProto.FLOAT8E4M3FN, 4, [zero])
    with pytest.raises(graph.GraphError, match="float8 zero point must be 0"):
        graph.from_onnx(model, {"x": (4,), "s": ()})


def test_eye_like_is_a_constant_of_the_input_shape():
    x = np.zeros((3, 5), np.float16)
    _check(helper.make_node("EyeLike", ["x"], ["y"], k=1), {"x": x}, TensorProto.FLOAT16)
    _check(helper.make_node("EyeLike", ["x"], ["y"], k=-2, dtype=TensorProto.INT16),
           {"x": x}, TensorProto.INT16)
