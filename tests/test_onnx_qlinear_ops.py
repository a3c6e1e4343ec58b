"""MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv (int8 / uint8 operands, int32
products) through the importer, the reference executor, a simulator build and PTX, against
numpy and ONNX's reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import graph
from ptxforge.graph.frontend_onnx import OnnxDataDependentError

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

TYPES = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8, "int32": TensorProto.INT32,
         "float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16}


def _model(node, feeds, out_type, out_shape, inits=()):
    init_names = {i.name for i in inits}
    g = helper.make_graph(
        [node], "q", [helper.make_tensor_value_info(k, TYPES[str(v.dtype)], list(v.shape))
                      for k, v in feeds.items() if k not in init_names],
        [helper.make_tensor_value_info("y", out_type, list(out_shape))], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


def _run(model, feeds):
    """(reference executor, simulator) outputs."""
    net, params = graph.from_onnx(model, {k: v.shape for k, v in feeds.items()})
    ref = graph.evaluate(net, feeds, params)
    lib = graph.build(net, "sim", params)
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**{k: v for k, v in feeds.items() if k in lib.plan.inputs})
    m.run()
    return ref, m.get_output(0).numpy()


def _ints(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


@pytest.mark.parametrize("ta,tb,shapes", [("uint8", "int8", ((5, 7), (7, 3))),
                                          ("int8", "uint8", ((2, 5, 7), (7, 3))),
                                          ("int8", "int8", ((2, 5, 7), (2, 7, 3))),
                                          ("uint8", "uint8", ((7,), (7, 3)))])
def test_matmul_integer_with_per_row_and_column_zero_points(ta, tb, shapes):
    rng = np.random.default_rng(0)
    (sa, sb) = shapes
    a, b = _ints(rng, ta, sa), _ints(rng, tb, sb)
    za = _ints(rng, ta, (sa[-2],)) if len(sa) >= 2 else _ints(rng, ta, ())
    zb = _ints(rng, tb, (sb[-1],))
    want = np.matmul(a.astype(np.int32) - (za.reshape(-1, 1) if za.ndim else za),
                     b.astype(np.int32) - zb)
    node = helper.make_node("MatMulInteger", ["a", "b", "za", "zb"], ["y"])
    feeds = {"a": a, "b": b, "za": za, "zb": zb}
    for got in _run(_model(node, feeds, TensorProto.INT32, want.shape), feeds):
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, want)


def test_conv_integer_with_per_channel_weight_zero_points_and_groups():
    rng = np.random.default_rng(1)
    x, w = _ints(rng, "uint8", (1, 4, 6, 5)), _ints(rng, "uint8", (6, 2, 3, 3))
    zx, zw = np.uint8(9).reshape(()), _ints(rng, "uint8", (6,))
    node = helper.make_node("ConvInteger", ["x", "w", "zx", "zw"], ["y"], group=2,
                            pads=[1, 0, 1, 2], strides=[1, 2])
    feeds = {"x": x, "w": w, "zx": zx, "zw": zw}
    xi = x.astype(np.int64) - 9
    wi = w.astype(np.int64) - zw.reshape(6, 1, 1, 1)
    xp = np.pad(xi, ((0, 0), (0, 0), (1, 1), (0, 2)))
    want = np.zeros((1, 6, 6, 3), np.int64)
    for o in range(6):
        g = o // 3
        for i in range(6):
            for j in range(3):
                win = xp[0, 2 * g:2 * g + 2, i:i + 3, 2 * j:2 * j + 3]
                want[0, o, i, j] = (win * wi[o]).sum()
    for got in _run(_model(node, feeds, TensorProto.INT32, want.shape), feeds):
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("qtype,stype", [("uint8", "float32"), ("int8", "float16")])
def test_qlinear_matmul_matches_onnx(qtype, stype):
    rng = np.random.default_rng(2)
    a, b = _ints(rng, qtype, (3, 4, 16)), _ints(rng, qtype, (16, 5))
    scalars = {"sa": 0.02, "sb": 0.013, "sy": 0.37}
    inits = [numpy_helper.from_array(np.array(v, stype), k) for k, v in scalars.items()]
    feeds = {"a": a, "za": _ints(rng, qtype, ()), "b": b, "zb": _ints(rng, qtype, ()),
             "zy": _ints(rng, qtype, ())}
    node = helper.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"],
                            ["y"])
    model = _model(node, feeds, TYPES[qtype], (3, 4, 5), inits)
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    for got in _run(model, feeds):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_qlinear_conv_per_channel_scale_and_bias_matches_onnx():
    rng = np.random.default_rng(3)
    x, w = _ints(rng, "uint8", (1, 3, 7, 7)), _ints(rng, "uint8", (4, 3, 3, 3))
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "sx"),
             numpy_helper.from_array(np.array([0.01, 0.02, 0.003, 0.04], np.float32), "sw"),
             numpy_helper.from_array(np.array(0.9, np.float32), "sy")]
    feeds = {"x": x, "zx": np.uint8(120).reshape(()), "w": w,
             "zw": np.uint8(128).reshape(()), "zy": np.uint8(100).reshape(()),
             "b": rng.integers(-5000, 5000, (4,)).astype(np.int32)}
    node = helper.make_node("QLinearConv", ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy", "b"],
                            ["y"], pads=[1, 1, 1, 1])
    model = _model(node, feeds, TensorProto.UINT8, (1, 4, 7, 7), inits)
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    for got in _run(model, feeds):
        assert got.dtype == np.uint8
        np.testing.assert_array_equal(got, want)


def test_scales_from_data_and_float_operands_are_refused():
    feeds = {"a": np.zeros((2, 3), np.uint8), "sa": np.float32(1).reshape(()),
             "za": np.uint8(0).reshape(()), "b": np.zeros((3, 2), np.uint8),
             "sb": np.float32(1).reshape(()), "zb": np.uint8(0).reshape(()),
             "sy": np.float32(1).reshape(()), "zy": np.uint8(0).reshape(())}
    node = helper.make_node("QLinearMatMul", list(feeds), ["y"])
    model = _model(node, feeds, TensorProto.UINT8, (2, 2))
    with pytest.raises(OnnxDataDependentError, match="the a scale") as e:
        graph.from_onnx(model, {k: v.shape for k, v in feeds.items()})
    assert "sa" in e.value.inputs
    bad = {"a": np.zeros((2, 3), np.float32), "b": np.zeros((3, 2), np.uint8)}
    model = _model(helper.make_node("MatMulInteger", ["a", "b"], ["y"]), bad,
                   TensorProto.INT32, (2, 2))
    with pytest.raises(graph.GraphError, match="A has dtype float32; supported: int8, uint8"):
        graph.from_onnx(model, {k: v.shape for k, v in bad.items()})


def test_matmul_integer_compiles_to_ptx():
    feeds = {"a": np.zeros((8, 16), np.int8), "b": np.zeros((16, 8), np.int8)}
    model = _model(helper.make_node("MatMulInteger", ["a", "b"], ["y"]), feeds,
                   TensorProto.INT32, (8, 8))
    net, params = graph.from_onnx(model, {k: v.shape for k, v in feeds.items()})
    ptx = graph.build(net, "cuda -arch=sm_80", params).get_source("ptx")
    assert "mad.lo.s32" in ptx or "mul.lo.s32" in ptx
