"""ONNX ``Cast`` / ``CastLike`` to and from the 8-bit floats ``float8_e4m3fn`` and
``float8_e5m2`` (with and without ``saturate``) through the importer, the reference executor,
a simulator build and PTX, against ONNX's reference evaluator (which computes with
ml_dtypes). fp8 host arrays are uint8 bit patterns; values are compared exactly."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import graph
from ptxforge.graph.onnx_float8 import host_bits
from ptxforge.ir.float8 import float8_from_bits

onnx = pytest.importorskip("onnx")
ml_dtypes = pytest.importorskip("ml_dtypes")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

F8 = {"float8_e4m3fn": TensorProto.FLOAT8E4M3FN, "float8_e5m2": TensorProto.FLOAT8E5M2}
TYPES = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16,
         "int32": TensorProto.INT32, "bool": TensorProto.BOOL, **F8}

# ties (to even), subnormals, the largest finite values and just past them, infinities, NaN
EDGES = [0.0, -0.0, 1.0, 1.0625, 1.1875, -2.75, 0.001953125, 0.0009765625, 2.0 ** -17,
         448.0, 460.0, 464.0, 465.0, 480.0, -500.0, 57344.0, 61439.0, 61440.0, -61441.0,
         1e9, -1e9, np.inf, -np.inf, np.nan, 3.3, -0.017, 240.0, 0.3]


def _model(nodes, inputs, out_type, out_shape, inits=()):
    g = helper.make_graph(
        nodes, "f8", [helper.make_tensor_value_info(k, TYPES[t], list(s))
                      for k, (t, s) in inputs.items()],
        [helper.make_tensor_value_info("y", out_type, list(out_shape))], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


def _values(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """``got`` as numbers: fp8 bit patterns decoded in ``want``'s format."""
    if want.dtype.name.startswith("float8"):
        assert got.dtype == np.uint8
        return float8_from_bits(got, want.dtype.name)
    assert got.dtype == want.dtype
    return got


def _check(model, feeds: dict, target: str = "sim"):
    """Reference executor and simulator build against ONNX's reference evaluator."""
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    host = {k: host_bits(v) for k, v in feeds.items()}
    net, params = graph.from_onnx(model, {k: v.shape for k, v in feeds.items()})
    ref = graph.evaluate(net, host, params)
    lib = graph.build(net, target, params)
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**{k: v for k, v in host.items() if k in lib.plan.inputs})
    m.run()
    expected = want.astype(np.float32) if want.dtype.name.startswith("float8") else want
    for got in (ref, m.get_output(0).numpy()):
        assert got.shape == want.shape
        np.testing.assert_array_equal(_values(got, want), expected)
    return lib


@pytest.mark.parametrize("src", ["float32", "float16"])
@pytest.mark.parametrize("to", list(F8))
def test_saturating_cast_to_float8(src, to):
    with np.errstate(over="ignore"):  # 1e9 and 61441 are infinities in float16
        x = np.array(EDGES, np.float32).astype(src)
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=F8[to])],
                   {"x": (src, x.shape)}, F8[to], x.shape)
    _check(model, {"x": x})


def test_non_saturating_cast_to_e4m3fn_overflows_to_nan():
    x = np.array(EDGES, np.float32)
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=F8["float8_e4m3fn"],
                                     saturate=0)],
                   {"x": ("float32", x.shape)}, F8["float8_e4m3fn"], x.shape)
    _check(model, {"x": x})
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    # the tie at 464 still rounds to 448; 465 and the infinities are NaN
    decoded = want.astype(np.float32)
    assert decoded[EDGES.index(464.0)] == 448 and np.isnan(decoded[EDGES.index(465.0)])


@pytest.mark.parametrize("src", ["float32", "float16"])
def test_non_saturating_cast_to_e5m2_overflows_to_infinity(src):
    with np.errstate(over="ignore"):
        x = np.array(EDGES, np.float32).astype(src)
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=F8["float8_e5m2"],
                                     saturate=0)],
                   {"x": (src, x.shape)}, F8["float8_e5m2"], x.shape)
    _check(model, {"x": x})
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    decoded = want.astype(np.float32)
    # 61439 rounds to the largest finite value (in float32 data; float16 holds 61440), the
    # tie at 61440 to the infinity
    assert decoded[EDGES.index(61439.0)] == (57344 if src == "float32" else np.inf)
    assert decoded[EDGES.index(61440.0)] == np.inf
    assert decoded[EDGES.index(-61441.0)] == -np.inf


def test_cast_from_float8_inputs_and_between_formats():
    bits = np.arange(256, dtype=np.uint8)
    for src in F8:
        x = bits.view(getattr(ml_dtypes, src))
        for out in (TensorProto.FLOAT, TensorProto.FLOAT16):
            model = _model([helper.make_node("Cast", ["x"], ["y"], to=out)],
                           {"x": (src, x.shape)}, out, x.shape)
            _check(model, {"x": x})
        other = next(f for f in F8 if f != src)
        model = _model([helper.make_node("Cast", ["x"], ["y"], to=F8[other])],
                       {"x": (src, x.shape)}, F8[other], x.shape)
        _check(model, {"x": x})


def test_cast_like_takes_the_float8_type_of_its_second_input():
    x = np.array(EDGES, np.float32).reshape(4, 7)
    like = np.zeros((1,), ml_dtypes.float8_e5m2)
    model = _model([helper.make_node("CastLike", ["x", "like"], ["y"])],
                   {"x": ("float32", x.shape), "like": ("float8_e5m2", like.shape)},
                   F8["float8_e5m2"], x.shape)
    _check(model, {"x": x, "like": like})


def test_float8_initializers_used_at_run_time():
    """fp8 initializers are graph constants holding their bit patterns: a tensor one is a
    weight the kernel loads, a one-element one an immediate (NaN included)."""
    w = np.array([0.5, -448, 3.25, np.nan], np.float32).astype(ml_dtypes.float8_e4m3fn)
    s = np.array([np.nan], np.float32).astype(ml_dtypes.float8_e4m3fn)
    nodes = [helper.make_node("Where", ["c", "w", "x"], ["t"]),
             helper.make_node("Where", ["d", "s", "t"], ["y"])]
    model = _model(nodes, {"c": ("bool", (4,)), "d": ("bool", (4,)),
                           "x": ("float8_e4m3fn", (4,))},
                   F8["float8_e4m3fn"], (4,),
                   [numpy_helper.from_array(w, "w"), numpy_helper.from_array(s, "s")])
    x = np.array([1, 2, -3, 0.25], np.float32).astype(ml_dtypes.float8_e4m3fn)
    feeds = {"c": np.array([True, False, True, True]), "d": np.array([False, False, True,
                                                                       False]), "x": x}
    net, params = graph.from_onnx(model, {k: v.shape for k, v in feeds.items()})
    consts = [n for n in graph.ir.post_order(net.outputs) if isinstance(n, graph.ir.Constant)]
    assert {c.dtype for c in consts} == {"float8_e4m3fn"}
    assert all(c.value.dtype == np.uint8 for c in consts)
    lib = _check(model, feeds)
    assert "cvt" not in lib.get_source()  # selected as bit patterns, never converted


def test_float8_infinity_initializer_keeps_its_bits():
    """A one-element e5m2 infinity (an ml_dtypes array numpy calls a float) stays an fp8
    constant whose bits the kernel loads: no conversion (they saturate) turns it into the
    largest finite value, and the output stays fp8."""
    inf = np.array([np.inf], np.float32).astype(ml_dtypes.float8_e5m2)
    nodes = [helper.make_node("Where", ["c", "inf", "x"], ["y"])]
    model = _model(nodes, {"c": ("bool", (3,)), "x": ("float8_e5m2", (3,))},
                   F8["float8_e5m2"], (3,), [numpy_helper.from_array(inf, "inf")])
    x = np.array([1, 2, -3], np.float32).astype(ml_dtypes.float8_e5m2)
    _check(model, {"c": np.array([True, False, True]), "x": x})


def test_int_and_constant_sources():
    x = np.array([-1000, -465, -464, -7, 0, 3, 463, 100000], np.int32)
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=F8["float8_e4m3fn"],
                                     saturate=0)],
                   {"x": ("int32", x.shape)}, F8["float8_e4m3fn"], x.shape)
    _check(model, {"x": x})
    # a constant cast at import time follows ONNX's saturation rules too
    c = numpy_helper.from_array(np.array([1e6, -3.3, np.inf], np.float32), "c")
    nodes = [helper.make_node("Cast", ["c"], ["cc"], to=F8["float8_e5m2"]),
             helper.make_node("Cast", ["cc"], ["cf"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["x", "cf"], ["y"])]
    model = _model(nodes, {"x": ("float32", (3,))}, TensorProto.FLOAT, (3,), [c])
    _check(model, {"x": np.array([1, 2, 3], np.float32)})


@pytest.mark.parametrize("node,inputs,message", [
    (helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E4M3FNUZ),
     {"x": ("float32", (3,))}, "FLOAT8E4M3FNUZ.* is not supported"),
])
def test_unsupported_float8_casts_are_refused(node, inputs, message):
    out = node.attribute[0].i
    model = _model([node], inputs, out, (3,))
    with pytest.raises(graph.GraphError, match=message):
        graph.from_onnx(model, {"x": (3,)})


def test_float64_to_float8_is_refused():
    g = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E4M3FN)],
                          "f8", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT8E4M3FN, [3])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(graph.GraphError, match="float64 to float8_e4m3fn .* round twice"):
        graph.from_onnx(model, {"x": (3,)})


def test_non_saturating_cast_compiles_to_ptx():
    x = np.array(EDGES, np.float32)
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=F8["float8_e4m3fn"],
                                     saturate=0)],
                   {"x": ("float32", x.shape)}, F8["float8_e4m3fn"], x.shape)
    net, params = graph.from_onnx(model, {"x": x.shape})
    ptx = graph.build(net, "cuda -arch=sm_90a", params).get_source("ptx")
    assert "cvt.rn.satfinite.e4m3x2.f32" in ptx
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=F8["float8_e5m2"],
                                     saturate=0)],
                   {"x": ("float32", x.shape)}, F8["float8_e5m2"], x.shape)
    net, params = graph.from_onnx(model, {"x": x.shape})
    ptx = graph.build(net, "cuda -arch=sm_90a", params).get_source("ptx")
    assert "cvt.rn.satfinite.e5m2x2.f32" in ptx
