"""The ONNX converters of element-wise, comparison, logic, activation and reduction
operators: one-node models made with onnx.helper, imported and run through the reference
executor and a simulator build, against onnxruntime (or numpy where it is the definition);
the fixed semantics (integer Div, Clip's default bounds, Gelu's tanh form, ReduceMean's
empty axes) and import-time evaluation of shape computations."""

from __future__ import annotations

import numpy as np
import ptxforge
import pytest
from ptxforge import graph

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(21)
F = RNG.standard_normal((2, 3, 4)).astype(np.float32)
ROW = RNG.standard_normal((4,)).astype(np.float32)
I64 = np.array([[7, -7, 9], [-9, 0, 4]], np.int64)
J64 = np.array([2, -2, 4], np.int64)


def _vi(name, value):
    elem = helper.np_dtype_to_tensor_dtype(value.dtype)
    return helper.make_tensor_value_info(name, elem, list(value.shape))


def model_of(op, inputs: dict, attrs=None, opset=17, inits=None, n_out=1):
    """A one-node model: ``inputs`` are graph inputs, ``inits`` initializers (name ->
    array); an empty name is an absent optional input."""
    inits = inits or {}
    names = list(inputs) + [n for n in inits if n not in inputs]
    node = helper.make_node(op, names, [f"y{k}" for k in range(n_out)], **(attrs or {}))
    types = {k: helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(v.dtype),
                                              list(v.shape))
             for k, v in {**inputs, **inits}.items() if k}
    schema = onnx.defs.get_schema(op, opset)
    try:
        inferred = onnx.shape_inference.infer_node_outputs(
            schema, node, types, input_data={k: numpy_helper.from_array(v, k)
                                             for k, v in inits.items()},
            opset_imports=[helper.make_opsetid("", opset)])
    except onnx.shape_inference.InferenceError:  # a model the importer must refuse
        inferred = {f"y{k}": next(iter(types.values())) for k in range(n_out)}
    outs = [helper.make_value_info(f"y{k}", inferred[f"y{k}"]) for k in range(n_out)]
    g = helper.make_graph([node], "t", [_vi(k, v) for k, v in inputs.items() if k],
                          outs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(m)
    return m


def run_ours(model, feeds):
    """The model's first output through the reference executor and a simulator build."""
    net, params = graph.from_onnx(model, {k: v.shape for k, v in feeds.items()})
    ref = graph.run_graph(net, feeds, params)[0]
    lib = graph.build(net, "sim", params)
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**{k: v for k, v in feeds.items() if k in lib.plan.inputs})
    m.run()
    return ref, m.get_output(0).numpy()


def onnxruntime_output(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def check(model, feeds, expected=None, rtol=1e-5, atol=1e-6):
    if expected is None:
        expected = onnxruntime_output(model, feeds)
    for got in run_ours(model, feeds):
        assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
        assert got.shape == expected.shape
        if got.dtype.kind in "biu":
            np.testing.assert_array_equal(got, expected)
        else:
            np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)
    return expected


UNARY = ["Relu", "Sigmoid", "Tanh", "Exp", "Neg", "Abs", "Sign", "Ceil", "Floor", "Round",
         "Reciprocal", "Sin", "Cos", "Tan", "Atan", "Sinh", "Cosh", "Asinh", "Erf", "Softplus",
         "Softsign", "HardSwish", "Mish"]


@pytest.mark.parametrize("op", UNARY)
def test_float_unary(op):
    x = F * 2
    x[0, 0, :2] = [2.5, -0.5]  # Round's halfway cases go to even
    check(model_of(op, {"x": x}, opset=18), {"x": x}, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("op", ["Asin", "Acos", "Atanh"])
def test_unit_interval_unary(op):
    x = np.clip(F * 0.4, -0.95, 0.95)
    check(model_of(op, {"x": x}), {"x": x}, rtol=2e-5, atol=2e-6)


def test_log_sqrt_acosh():
    x = np.abs(F) + 1.0
    for op in ("Log", "Sqrt", "Acosh"):
        check(model_of(op, {"x": x}), {"x": x})


@pytest.mark.parametrize("op,attrs", [
    ("LeakyRelu", {"alpha": 0.2}), ("Elu", {"alpha": 0.5}), ("Selu", {}),
    ("Celu", {"alpha": 1.5}), ("ThresholdedRelu", {"alpha": 0.3}),
    ("HardSigmoid", {"alpha": 0.25, "beta": 0.6}), ("IsNaN", {}), ("IsInf", {}),
    ("IsInf", {"detect_negative": 0}),
])
def test_activations_and_classification(op, attrs):
    x = F * 3
    x[0, 0, :2] = [np.inf, -np.inf]
    if op == "IsNaN":
        x[1, 1, 1] = np.nan
    if not op.startswith("Is"):
        x = np.nan_to_num(x, posinf=50.0, neginf=-50.0)
    check(model_of(op, {"x": x}, attrs), {"x": x})


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate):
    x = F * 3
    expected = check(model_of("Gelu", {"x": x}, {"approximate": approximate}, opset=20),
                     {"x": x})
    erf_form = 0.5 * x * (1 + np.vectorize(__import__("math").erf)(x / np.sqrt(2)))
    if approximate == "tanh":  # the tanh form is not the erf form
        assert np.abs(expected - erf_form).max() > 1e-4
    else:
        np.testing.assert_allclose(expected, erf_form, rtol=1e-5, atol=1e-6)


def test_prelu_slope_broadcasts():
    x = RNG.standard_normal((2, 3, 4, 4)).astype(np.float32)
    slope = np.array([0.1, 0.2, 0.3], np.float32).reshape(3, 1, 1)
    check(model_of("PRelu", {"x": x}, inits={"slope": slope}), {"x": x})


def test_swish_opset_24():
    x = F * 3
    expected = x / (1 + np.exp(-1.5 * x))
    model = model_of("Swish", {"x": x}, {"alpha": 1.5}, opset=24)
    for got in run_ours(model, {"x": x}):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean"])
def test_arithmetic_floats(op):
    check(model_of(op, {"a": F, "b": ROW}), {"a": F, "b": ROW})


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min"])
@pytest.mark.parametrize("dtype", ["int64", "int8", "uint8"])
def test_arithmetic_integers(op, dtype):
    a = I64.astype(dtype) if dtype != "uint8" else np.abs(I64).astype(dtype)
    b = J64.astype(dtype) if dtype != "uint8" else np.abs(J64).astype(dtype)
    check(model_of(op, {"a": a, "b": b}), {"a": a, "b": b})


def test_integer_div_truncates():
    a = np.array([7, -7, 7, -7, 1, -1], np.int32)
    b = np.array([2, 2, -2, -2, 3, 3], np.int32)
    check(model_of("Div", {"a": a, "b": b}), {"a": a, "b": b},
          np.array([3, -3, -3, 3, 0, 0], np.int32))


@pytest.mark.parametrize("fmod", [0, 1])
def test_mod(fmod):
    a, b = I64, J64
    check(model_of("Mod", {"a": a, "b": b}, {"fmod": fmod}), {"a": a, "b": b})
    if fmod:
        x, y = F * 5, ROW + 2.5
        check(model_of("Mod", {"a": x, "b": y}, {"fmod": 1}), {"a": x, "b": y})


def test_pow_dtypes():
    base = np.array([[2.0, -3.0, 0.5]], np.float32)
    check(model_of("Pow", {"a": base, "b": np.array([3, 2, -1], np.int64)}),
          {"a": base, "b": np.array([3, 2, -1], np.int64)})
    ib = np.array([2, -3, 5, 0], np.int64)
    ie = np.array([3, 3, 2, 4], np.int64)
    check(model_of("Pow", {"a": ib, "b": ie}), {"a": ib, "b": ie})
    square = model_of("Pow", {"a": F}, inits={"two": np.array(2.0, np.float32)})
    check(square, {"a": F})
    net, _ = graph.from_onnx(square)
    assert net.outputs[0].op == "multiply"
    fe = np.array([2.0, 1.0, 0.5, 3.0], np.float32)
    check(model_of("Pow", {"a": np.abs(ib), "b": fe}), {"a": np.abs(ib), "b": fe})


@pytest.mark.parametrize("op", ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"])
def test_comparisons(op):
    a, b = F.copy(), ROW
    a[0, 0] = b
    check(model_of(op, {"a": a, "b": b}, opset=16), {"a": a, "b": b})
    check(model_of(op, {"a": I64, "b": J64}, opset=16), {"a": I64, "b": J64})


def test_logic_where_and_bitwise():
    p, q = F > 0, ROW > 0
    for op in ("And", "Or", "Xor"):
        check(model_of(op, {"p": p, "q": q}), {"p": p, "q": q})
    check(model_of("Not", {"p": p}), {"p": p})
    check(model_of("Where", {"c": p, "a": F, "b": ROW}), {"c": p, "a": F, "b": ROW})
    for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
        check(model_of(op, {"a": I64, "b": J64}, opset=18), {"a": I64, "b": J64})
    check(model_of("BitwiseNot", {"a": I64}, opset=18), {"a": I64})
    x = np.array([1, 2, 255, 16], np.uint8)
    s = np.array([1, 3, 2, 4], np.uint8)
    for direction in ("LEFT", "RIGHT"):
        check(model_of("BitShift", {"x": x, "s": s}, {"direction": direction}),
              {"x": x, "s": s})


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "float32", "float16"])
def test_clip_default_bounds_keep_the_dtype_range(dtype):
    x = (F * 100).astype(dtype) if dtype != "uint8" else np.abs(F * 100).astype(dtype)
    check(model_of("Clip", {"x": x}, opset=13), {"x": x}, x)
    lo = np.array(-5, dtype) if dtype != "uint8" else np.array(3, dtype)
    check(model_of("Clip", {"x": x}, opset=13, inits={"lo": lo}), {"x": x},
          np.maximum(x, lo))
    hi = np.array(20, dtype)
    check(model_of("Clip", {"x": x, "": np.zeros(0)}, opset=13, inits={"hi": hi}),
          {"x": x}, np.minimum(x, hi))


def test_clip_attributes_and_tensor_bounds():
    check(model_of("Clip", {"x": F}, {"min": -0.5, "max": 0.5}, opset=6), {"x": F},
          np.clip(F, -0.5, 0.5))
    lo, hi = np.array(-0.2, np.float32), np.array(0.3, np.float32)
    check(model_of("Clip", {"x": F, "lo": lo, "hi": hi}), {"x": F, "lo": lo, "hi": hi})


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("axis,opset", [(1, 13), (-1, 13), (1, 11)])
def test_softmax_family(op, axis, opset):
    x = F * 3
    x[0, 0, 0] = x[0, 0, 1]  # a tie for Hardmax: the first index wins
    check(model_of(op, {"x": x}, {"axis": axis}, opset=opset), {"x": x})


REDUCTIONS = ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp", "ReduceMean"]


@pytest.mark.parametrize("op", REDUCTIONS)
@pytest.mark.parametrize("axes,keepdims", [([0, -1], 0), (None, 1)])
def test_reductions_axes_input(op, axes, keepdims):
    x = np.abs(F) + 0.5 if "Log" in op and "Exp" not in op else F
    inits = {"axes": np.array(axes, np.int64)} if axes is not None else {}
    check(model_of(op, {"x": x}, {"keepdims": keepdims}, opset=18, inits=inits), {"x": x},
          rtol=1e-5)


@pytest.mark.parametrize("op", REDUCTIONS)
def test_reductions_axes_attribute(op):
    x = np.abs(F) + 0.5
    attrs = {"keepdims": 0} if op == "ReduceSum" else {"axes": [0, 1], "keepdims": 0}
    inits = {"axes": np.array([0, 1], np.int64)} if op == "ReduceSum" else {}
    check(model_of(op, {"x": x}, attrs, opset=13, inits=inits), {"x": x})


def test_reduce_empty_axes():
    # opset 18: no axes reduces everything, unless noop_with_empty_axes
    check(model_of("ReduceMean", {"x": F}, {"keepdims": 0}, opset=18), {"x": F},
          np.array(F.mean(), np.float32))
    check(model_of("ReduceMean", {"x": F}, {"noop_with_empty_axes": 1}, opset=18), {"x": F},
          F)
    check(model_of("ReduceSum", {"x": F}, {"noop_with_empty_axes": 1}, opset=13,
                   inits={"axes": np.zeros(0, np.int64)}), {"x": F}, F)


def test_integer_reductions():
    for op in ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceMean"):
        check(model_of(op, {"x": I64}, {"keepdims": 0}, opset=18,
                       inits={"axes": np.array([1], np.int64)}), {"x": I64})


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("attrs", [{}, {"axis": 1, "keepdims": 0},
                                   {"axis": -1, "select_last_index": 1}])
def test_arg_extremes(op, attrs):
    x = np.round(F * 2)  # ties
    check(model_of(op, {"x": x}, attrs), {"x": x})


def test_shape_computation_evaluates_at_import_time():
    # Shape -> comparisons, Where, Max, Mod, ReduceProd and Div build a Reshape target
    x = F
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Equal", ["s", "four"], ["is4"]),
        helper.make_node("Where", ["is4", "minus1", "s"], ["w"]),
        helper.make_node("ReduceProd", ["s"], ["n"], keepdims=1),
        helper.make_node("Div", ["n", "four"], ["rows"]),
        helper.make_node("Max", ["rows", "one"], ["rows1"]),
        helper.make_node("Mod", ["rows1", "seven"], ["rows2"]),
        helper.make_node("Abs", ["rows2"], ["rows3"]),
        helper.make_node("Concat", ["rows3", "four"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array([v], np.int64), k)
             for k, v in (("four", 4), ("minus1", -1), ("one", 1), ("seven", 7))]
    g = helper.make_graph(nodes, "shapes", [_vi("x", x)],
                          [helper.make_tensor_value_info("y", 1, [6, 4])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    net, _ = graph.from_onnx(model)
    assert net.outputs[0].shape == (6, 4)
    assert all(getattr(n, "op", None) in (None, "reshape") for n in graph.ir.post_order(
        net.outputs))
    check(model, {"x": x}, x.reshape(6, 4))


def test_unsupported_values_name_the_node():
    with pytest.raises(graph.OnnxImportError, match=r"Mod.*fmod must be 0 or 1"):
        graph.from_onnx(model_of("Mod", {"a": I64, "b": J64}, {"fmod": 2}))
    with pytest.raises(graph.OnnxImportError, match=r"Gelu.*approximate='fast'"):
        graph.from_onnx(model_of("Gelu", {"x": F}, {"approximate": "fast"}, opset=20))
    # a dtype outside the schema (the checker does not infer types): named, not approximated
    g = helper.make_graph([helper.make_node("Sin", ["x"], ["y"])], "t", [_vi("x", I64)],
                          [_vi("y", I64)])
    sin_int = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    with pytest.raises(graph.OnnxImportError, match=r"Sin.*dtype int64"):
        graph.from_onnx(sin_int)
    with pytest.raises(graph.OnnxImportError, match=r"ReduceSum.*axis 5 is out of range"):
        graph.from_onnx(model_of("ReduceSum", {"x": F}, opset=13,
                                 inits={"axes": np.array([5], np.int64)}))
