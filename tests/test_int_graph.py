"""Integer and bool tensors in networks: graph inputs such as ``input_ids`` and
``attention_mask``, integer arithmetic with ONNX semantics in the reference executor and in
the compiled network (simulator), and the memory plan of 1- and 8-byte elements."""

from __future__ import annotations

import numpy as np
import ptxforge
import pytest
from ptxforge import graph
from ptxforge.ir import dtype as dt

INTS = ("int8", "uint8", "int32", "int64")


def compile_and_run(outputs, inputs: dict) -> tuple[np.ndarray, np.ndarray, graph.GraphLibrary]:
    """(reference executor's result, the simulator's result, the library)."""
    net = graph.function(outputs)
    ref = graph.evaluate(net, inputs, {})
    lib = graph.build(net, target="sim")
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**inputs)
    m.run()
    return ref, m.get_output(0).numpy(), lib


@pytest.mark.parametrize("d", INTS)
def test_integer_divide_truncates_in_the_reference_and_compiled(d):
    x = graph.var("x", (8,), d)
    y = graph.var("y", (8,), d)
    if d == "uint8":
        xs = np.array([7, 200, 255, 0, 9, 100, 3, 1], d)
        ys = np.array([2, 3, 255, 7, 9, 7, 5, 1], d)
    else:
        xs = np.array([-3, 3, -7, 7, -1, 100, -100, 0], d)
        ys = np.array([2, 2, 2, -2, 3, 7, 7, -5], d)
    ref, got, _ = compile_and_run(graph.divide(x, y), {"x": xs, "y": ys})
    want = np.trunc(xs.astype(np.float64) / ys).astype(d)
    np.testing.assert_array_equal(ref, want)
    np.testing.assert_array_equal(got, want)
    if d != "uint8":
        assert got[0] == -1  # -3 / 2 rounds toward zero (the floor would be -2)


def test_int64_divide_is_exact_beyond_float64():
    x = graph.var("x", (4,), "int64")
    y = graph.var("y", (4,), "int64")
    xs = np.array([2**62 + 1, -(2**62) - 3, 2**53 + 1, -(2**63)], "int64")
    ys = np.array([3, 7, 1, 2], "int64")
    ref, got, _ = compile_and_run(graph.divide(x, y), {"x": xs, "y": ys})
    want = np.array([int(a / b) if abs(a) < 2**53 else (abs(int(a)) // int(b))
                     * (1 if a >= 0 else -1) for a, b in zip(xs.tolist(), ys.tolist())],
                    "int64")
    np.testing.assert_array_equal(ref, want)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("d", INTS)
def test_clip_with_the_dtype_range_or_float32_range_keeps_values(d):
    lo, hi = dt.int_range(d)
    x = graph.var("x", (8,), d)
    xs = np.array([lo, hi, 0, 1, lo + 1, hi - 1, 5, 2], d)
    f32 = float(np.finfo(np.float32).max)
    for a_min, a_max in ((float(lo), float(hi)), (-f32, f32)):
        ref, got, _ = compile_and_run(graph.clip(x, a_min, a_max), {"x": xs})
        np.testing.assert_array_equal(ref, xs)
        np.testing.assert_array_equal(got, xs)


@pytest.mark.parametrize("d", ("int8", "uint8"))
def test_small_integer_overflow_wraps(d):
    x = graph.var("x", (6,), d)
    y = graph.var("y", (6,), d)
    lo, hi = dt.int_range(d)
    xs = np.array([hi, lo, 100, 77, hi, 3], d)
    ys = np.array([1, hi, 100, 5, hi, lo], d)
    with np.errstate(over="ignore"):
        want_add, want_mul = xs + ys, xs * ys
    for node, want in ((graph.add(x, y), want_add), (graph.multiply(x, y), want_mul)):
        ref, got, _ = compile_and_run(node, {"x": xs, "y": ys})
        np.testing.assert_array_equal(ref, want)
        np.testing.assert_array_equal(got, want)


def test_token_ids_and_attention_mask_as_inputs():
    """An int64 mask input turned into an additive float bias, and int32 ids shifted."""
    mask = graph.var("attention_mask", (2, 5), "int64")
    scores = graph.var("scores", (2, 5), "float32")
    bias = graph.multiply(graph.subtract(graph.const(np.float32(1.0)),
                                         graph.cast(mask, "float32")),
                          graph.const(np.float32(-10000.0)))
    out = graph.add(scores, bias)
    m = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], "int64")
    s = np.random.default_rng(3).standard_normal((2, 5)).astype("float32")
    ref, got, lib = compile_and_run(out, {"attention_mask": m, "scores": s})
    want = s + (1 - m.astype("float32")) * np.float32(-10000.0)
    np.testing.assert_allclose(ref, want, rtol=0, atol=0)
    np.testing.assert_allclose(got, want, rtol=0, atol=0)
    slot = lib.plan.slots[lib.plan.inputs["attention_mask"]]
    assert slot.ty.dtype == "int64"


def test_bool_input_and_bool_output():
    b = graph.var("b", (3, 4), "bool")
    x = graph.cast(b, "int32")
    ref, got, lib = compile_and_run(graph.cast(graph.add(x, x), "bool"),
                                    {"b": np.eye(3, 4, dtype=bool)})
    np.testing.assert_array_equal(ref, np.eye(3, 4, dtype=bool))
    np.testing.assert_array_equal(got, np.eye(3, 4, dtype=bool))
    assert got.dtype == np.bool_


def test_memory_plan_sizes_bool_as_one_byte_and_aligns_int64():
    b = graph.var("b", (1000,), "bool")
    i8 = graph.cast(b, "int8")
    i64 = graph.cast(graph.add(i8, i8), "int64")
    out = graph.add(i64, i64)
    net = graph.function(out)
    lib = graph.build(net, target="sim")
    plan = lib.plan
    b_slot = plan.slots[plan.inputs["b"]]
    assert b_slot.ty.nbytes == 1000  # one byte per bool
    for slot in plan.slots:
        storage = plan.storages[slot.storage]
        assert storage.nbytes >= slot.ty.nbytes
        assert storage.nbytes % 8 == 0  # int64 elements stay 8-byte aligned
    m = graph.GraphModule(lib, ptxforge.sim())
    bs = np.arange(1000) % 3 == 0
    m.run(b=bs)
    np.testing.assert_array_equal(m.get_output(0).numpy(), bs.astype("int64") * 4)


def _onnx_run(nodes, inputs, output, inits, feeds, opset=13):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import helper

    g = helper.make_graph(nodes, "ints", inputs, [output], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=8)
    onnx.checker.check_model(model)
    sess = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"])
    expected = sess.run(None, feeds)[0]
    net, params = graph.from_onnx(model, {k: v.shape for k, v in feeds.items()})
    ref = graph.evaluate(net, feeds, params)
    lib = graph.build(net, "sim", params)
    m = graph.GraphModule(lib, ptxforge.sim())
    m.run(**feeds)
    return expected, ref, m.get_output(0).numpy()


@pytest.mark.parametrize("bounds", ("dtype", "none", "min only"))
def test_onnx_clip_on_int8_keeps_values(bounds):
    """The reported bug: Clip on int8 compiled to zeros (a default bound, float32's range,
    became an int8 constant that wrapped to 0)."""
    from onnx import TensorProto, helper, numpy_helper

    x = np.array([[-128, -5, 0, 3, 127, 100]], "int8")
    names = {"dtype": ["x", "lo", "hi"], "none": ["x"], "min only": ["x", "lo"]}[bounds]
    inits = [numpy_helper.from_array(np.array(-128, "int8"), "lo"),
             numpy_helper.from_array(np.array(127, "int8"), "hi")]
    inits = [t for t in inits if t.name in names]
    expected, ref, got = _onnx_run(
        [helper.make_node("Clip", names, ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.INT8, x.shape)],
        helper.make_tensor_value_info("y", TensorProto.INT8, x.shape), inits, {"x": x})
    np.testing.assert_array_equal(expected, x)
    np.testing.assert_array_equal(ref, x)
    np.testing.assert_array_equal(got, x)


def test_onnx_integer_div_truncates_like_onnxruntime():
    from onnx import TensorProto, helper

    a = np.array([[-3, 3, -7, 7, -(2**40) - 1, 2**53 + 1]], "int64")
    b = np.array([[2, 2, 2, -2, 2, 1]], "int64")
    expected, ref, got = _onnx_run(
        [helper.make_node("Div", ["a", "b"], ["y"])],
        [helper.make_tensor_value_info("a", TensorProto.INT64, a.shape),
         helper.make_tensor_value_info("b", TensorProto.INT64, b.shape)],
        helper.make_tensor_value_info("y", TensorProto.INT64, a.shape), [],
        {"a": a, "b": b})
    assert expected[0, 0] == -1
    np.testing.assert_array_equal(ref, expected)
    np.testing.assert_array_equal(got, expected)


def test_inputs_refuse_data_that_would_change_silently():
    ids = graph.var("ids", (4,), "int32")
    mask = graph.var("mask", (4,), "bool")
    out = graph.multiply(ids, graph.cast(mask, "int32"))
    lib = graph.build(graph.function(out), target="sim")
    m = graph.GraphModule(lib, ptxforge.sim())
    with pytest.raises(graph.GraphError, match="input 'ids'.*truncate"):
        m.set_input(ids=np.array([1.5, 2, 3, 4]))
    with pytest.raises(graph.GraphError, match="input 'ids'.*does not fit int32"):
        m.set_input(ids=np.array([1, 2**40, 3, 4], "int64"))
    with pytest.raises(graph.GraphError, match="input 'mask'.*not be 0 or 1"):
        m.set_input(mask=np.array([0, 1, 2, 0], "int64"))
    # values that fit convert: int64 token ids into an int32 input, 0/1 into a bool one
    m.run(ids=np.array([5, -6, 7, 8], "int64"), mask=[1, 0, 1, 1])
    np.testing.assert_array_equal(m.get_output(0).numpy(), [5, 0, 7, 8])


def test_device_arrays_refuse_lossy_integer_copies():
    arr = ptxforge.nd.empty((3,), "uint8", ptxforge.sim())
    with pytest.raises(dt.DTypeError, match="-1 does not fit uint8"):
        arr.copyfrom(np.array([1, -1, 2]))
    with pytest.raises(dt.DTypeError, match="truncate"):
        arr.copyfrom(np.array([1.0, 2.0, 3.0], "float32"))
    arr.copyfrom(np.array([0, 255, 7]))
    np.testing.assert_array_equal(arr.numpy(), np.array([0, 255, 7], "uint8"))
    f = ptxforge.nd.empty((2,), "float32", ptxforge.sim())
    f.copyfrom(np.array([1, 2], "int64"))  # into floats numpy's conversion is kept
    np.testing.assert_array_equal(f.numpy(), [1.0, 2.0])


def test_reference_executor_refuses_float_data_for_integer_inputs():
    ids = graph.var("ids", (2,), "int64")
    net = graph.function(graph.add(ids, ids))
    with pytest.raises(graph.GraphError, match="parameter %ids.*truncate"):
        graph.evaluate(net, {"ids": np.array([1.5, 2.0])})
    np.testing.assert_array_equal(graph.evaluate(net, {"ids": [3, 4]}), [6, 8])
