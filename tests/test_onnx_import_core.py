"""The ONNX importer's core: operands computed at import time (from constants and shapes),
clear errors for data-dependent ones, graph inputs of every dtype, dynamic dimensions,
opsets 13-21, local functions, Constant in every form, operators imported through their
ONNX function bodies, and the size cap of import-time evaluation."""

from __future__ import annotations

import time
import tracemalloc

import numpy as np
import pytest

import ptxforge
from ptxforge import graph

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(11)


def ints(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def model_of(nodes, inputs, outputs, inits=(), opset=17, functions=()):
    g = helper.make_graph(nodes, "core", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8,
                          functions=list(functions))
    onnx.checker.check_model(m)
    return m


def f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def i64(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.INT64, shape)


def expected(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def check(model, feeds, shape_dict=None, compiled=True):
    """Import, and compare the reference executor (and a simulator build) with onnxruntime."""
    want = expected(model, feeds)
    net, params = graph.from_onnx(model, shape_dict)
    got = graph.run_graph(net, feeds, params)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    if compiled:
        lib = graph.build(net, "sim", params)
        m = graph.GraphModule(lib, ptxforge.sim())
        m.set_input(**{k: v for k, v in feeds.items() if k in lib.plan.inputs})
        m.run()
        for k, w in enumerate(want):
            np.testing.assert_allclose(m.get_output(k).numpy(), w, rtol=1e-5, atol=1e-6)
    return net, params


@pytest.mark.parametrize("attrs,dims", [({}, [2, 3, 4, 5]), ({"start": 1}, [3, 4, 5]),
                                        ({"end": 2}, [2, 3]), ({"start": -3, "end": -1},
                                                                [3, 4]),
                                        ({"start": 3, "end": 1}, []), ({"start": -9}, [2, 3,
                                                                                     4, 5])])
def test_shape_start_and_end(attrs, dims):
    # start / end were ignored once: Shape(x, start=1) gave all four dims
    nodes = [helper.make_node("Shape", ["x"], ["y"], **attrs)]
    model = model_of(nodes, [f32("x", [2, 3, 4, 5])], [i64("y", [len(dims)])], opset=15)
    net, _ = graph.from_onnx(model)
    out = graph.run_graph(net, {"x": np.zeros((2, 3, 4, 5), np.float32)})[0]
    assert out.dtype == np.int64 and out.tolist() == dims


def test_reshape_slice_and_expand_operands_from_shapes():
    """What exporters write for ``x.view(b, s, h, -1)`` and friends: shapes through Gather,
    Slice, Cast, arithmetic, Concat, ConstantOfShape and Range, all known at import."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero_s"], ["b"], axis=0),
        helper.make_node("Slice", ["s", "one", "two"], ["seq"]),
        helper.make_node("Cast", ["seq"], ["seqf"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["seqf"], ["seqi"], to=TensorProto.INT64),
        helper.make_node("Div", ["seqi", "two"], ["half"]),
        helper.make_node("Unsqueeze", ["b", "zero"], ["b1"]),
        helper.make_node("Concat", ["b1", "half", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["r"]),
        helper.make_node("Shape", ["r"], ["rs", ], start=-1),
        helper.make_node("ConstantOfShape", ["rs"], ["ones"],
                         value=numpy_helper.from_array(np.array([1.5], np.float32))),
        helper.make_node("Mul", ["r", "ones"], ["scaled"]),
        helper.make_node("Range", ["zero_s", "seq_s", "one_s"], ["pos"]),
        helper.make_node("Slice", ["scaled", "zero", "half", "one"], ["cut"]),
        helper.make_node("Concat", ["b1", "half", "rs"], ["full"], axis=0),
        helper.make_node("ConstantOfShape", ["full"], ["zeros"]),
        helper.make_node("Add", ["cut", "zeros"], ["y"]),
    ]
    inits = [ints("zero", [0]), ints("one", [1]), ints("two", [2]), ints("minus_one", [-1]),
             numpy_helper.from_array(np.array(0, np.int64), "zero_s"),
             numpy_helper.from_array(np.array(6, np.int64), "seq_s"),
             numpy_helper.from_array(np.array(1, np.int64), "one_s")]
    model = model_of(nodes, [f32("x", [2, 6, 4])], [f32("y", [2, 3, 8]), i64("pos", [6])],
                     inits)
    x = RNG.standard_normal((2, 6, 4)).astype(np.float32)
    net, _ = check(model, {"x": x})
    ops = {c.op_name for c in net.calls()}
    assert not ops & {"Shape", "Gather", "Concat"}, ops


def test_data_dependent_operands_are_named_errors():
    nodes = [helper.make_node("Relu", ["n"], ["m"]),
             helper.make_node("Reshape", ["x", "m"], ["y"], name="view")]
    model = model_of(nodes, [f32("x", [2, 6]), i64("n", [2])], [f32("y", ["a", "b"])])
    with pytest.raises(graph.OnnxImportError) as e:
        graph.from_onnx(model)
    text = str(e.value)
    assert "'view'" in text and "Reshape target shape" in text
    assert "graph input 'n'" in text and "known at import time" in text


def test_integer_and_bool_inputs_keep_their_dtypes():
    nodes = [helper.make_node("Cast", ["ids"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["mask"], ["mf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["f", "mf"], ["y"])]
    model = model_of(nodes, [i64("ids", [1, 8]),
                             helper.make_tensor_value_info("mask", TensorProto.BOOL, [1, 8])],
                     [f32("y", [1, 8])])
    net, _ = graph.from_onnx(model)
    assert [(p.name, p.dtype) for p in net.params] == [("ids", "int64"), ("mask", "bool")]
    feeds = {"ids": RNG.integers(0, 100, (1, 8)).astype(np.int64),
             "mask": RNG.integers(0, 2, (1, 8)).astype(bool)}
    np.testing.assert_array_equal(graph.run_graph(net, feeds)[0], expected(model, feeds)[0])


def test_dynamic_dimensions_need_a_fitting_shape_dict():
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    model = model_of(nodes, [f32("x", ["batch", 3])], [f32("y", ["batch", 3])])
    with pytest.raises(graph.OnnxImportError, match="dynamic dimensions.*'batch'.*shape_dict"):
        graph.from_onnx(model)
    with pytest.raises(graph.OnnxImportError, match="'y'.*not an input"):
        graph.from_onnx(model, {"y": (2, 3)})
    with pytest.raises(graph.OnnxImportError, match="does not fit"):
        graph.from_onnx(model, {"x": (2, 4)})
    with pytest.raises(graph.OnnxImportError, match="does not fit"):
        graph.from_onnx(model, {"x": (2, 3, 1)})
    net, _ = graph.from_onnx(model, {"x": (5, 3)})
    assert net.params[0].shape == (5, 3)


@pytest.mark.parametrize("opset", range(13, 22))
def test_opsets_13_to_21(opset):
    axes = [helper.make_node("Constant", [], ["axes"], value_ints=[0])]
    squeeze_in = ["r", "axes"]
    nodes = axes + [helper.make_node("Unsqueeze", ["x", "axes"], ["u"]),
                    helper.make_node("Relu", ["u"], ["r"]),
                    helper.make_node("Squeeze", squeeze_in, ["s"]),
                    helper.make_node("Softmax", ["s"], ["y"], axis=-1)]
    model = model_of(nodes, [f32("x", [3, 5])], [f32("y", [3, 5])], opset=opset)
    check(model, {"x": RNG.standard_normal((3, 5)).astype(np.float32)}, compiled=False)


def test_local_functions_are_inlined():
    body = [helper.make_node("Mul", ["a", "a"], ["sq"]),
            helper.make_node("Add", ["sq", "a"], ["out"])]
    fn = helper.make_function("local", "SquarePlus", ["a"], ["out"], body,
                              [helper.make_opsetid("", 17)])
    nodes = [helper.make_node("SquarePlus", ["x"], ["t"], domain="local"),
             helper.make_node("Relu", ["t"], ["y"])]
    g = helper.make_graph(nodes, "core", [f32("x", [4, 4])], [f32("y", [4, 4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid("local", 1)],
                              ir_version=8, functions=[fn])
    check(model, {"x": RNG.standard_normal((4, 4)).astype(np.float32)})


def test_constant_in_every_attribute_form():
    sparse = helper.make_sparse_tensor(numpy_helper.from_array(np.array([2.0, 3.0], np.float32)),
                                       numpy_helper.from_array(np.array([1, 5], np.int64)),
                                       [2, 3])
    forms = {"c0": {"value": numpy_helper.from_array(np.ones((2, 3), np.float32))},
             "c1": {"value_float": 0.5}, "c2": {"value_floats": [1.0, 2.0, 3.0]},
             "c3": {"sparse_value": sparse}}
    nodes = [helper.make_node("Constant", [], [k], **v) for k, v in forms.items()]
    nodes += [helper.make_node("Add", ["x", "c0"], ["a0"]),
              helper.make_node("Mul", ["a0", "c1"], ["a1"]),
              helper.make_node("Add", ["a1", "c2"], ["a2"]),
              helper.make_node("Add", ["a2", "c3"], ["y"]),
              helper.make_node("Constant", [], ["n"], value_int=7),
              helper.make_node("Constant", [], ["ns"], value_ints=[1, 2]),
              helper.make_node("Add", ["n", "ns"], ["z"])]
    model = model_of(nodes, [f32("x", [2, 3])], [f32("y", [2, 3]), i64("z", [2])])
    check(model, {"x": RNG.standard_normal((2, 3)).astype(np.float32)}, compiled=False)
    strings = [helper.make_node("Constant", [], ["s"], value_strings=["a"], name="words")]
    model = model_of(strings, [], [helper.make_tensor_value_info("s", TensorProto.STRING,
                                                                 [1])])
    with pytest.raises(graph.OnnxImportError, match="'words'.*string"):
        graph.from_onnx(model)


@pytest.mark.parametrize("op,attrs", [("Softplus", {}), ("Mish", {}),
                                      ("HardSigmoid", {"alpha": 0.3}), ("HardSwish", {}),
                                      ("MeanVarianceNormalization", {"axes": [0, 2, 3]})])
def test_operators_without_a_converter_import_through_their_function_body(op, attrs,
                                                                          monkeypatch):
    from ptxforge.graph import frontend_onnx

    # the operator may have a converter of its own: without it, its ONNX body is used
    monkeypatch.delitem(frontend_onnx._HANDLERS, op, raising=False)
    monkeypatch.delitem(frontend_onnx._STATIC, op, raising=False)
    model = model_of([helper.make_node(op, ["x"], ["y"], **attrs)], [f32("x", [2, 3, 4, 2])],
                     [f32("y", [2, 3, 4, 2])], opset=18)
    check(model, {"x": RNG.standard_normal((2, 3, 4, 2)).astype(np.float32)})


def test_unknown_domains_and_operators_are_named():
    nodes = [helper.make_node("FusedGemm", ["x"], ["y"], domain="com.microsoft", name="fg")]
    g = helper.make_graph(nodes, "core", [f32("x", [2, 2])], [f32("y", [2, 2])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid("com.microsoft", 1)],
                              ir_version=8)
    with pytest.raises(graph.OnnxImportError, match="'fg'.*domain 'com.microsoft'"):
        graph.from_onnx(model)


def test_import_time_evaluation_is_capped_by_size():
    """A 480 KB model whose [30000, 1] + [1, 30000] int64 Add (unused) once took 6.9 GB and
    17 s to import: unused values are never evaluated, and a used one that large is left
    to the graph."""
    inits = [numpy_helper.from_array(np.arange(30000, dtype=np.int64).reshape(30000, 1), "a"),
             numpy_helper.from_array(np.arange(30000, dtype=np.int64).reshape(1, 30000), "b")]
    nodes = [helper.make_node("Add", ["a", "b"], ["big"]),
             helper.make_node("Relu", ["x"], ["y"])]
    model = model_of(nodes, [f32("x", [2, 2])], [f32("y", [2, 2])], inits)
    tracemalloc.start()
    t0 = time.perf_counter()
    net, _ = graph.from_onnx(model)
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert seconds < 5 and peak < 64 << 20, (seconds, peak)
    assert [c.op_name for c in net.calls()] == ["nn.relu"]
    used = model_of(nodes[:1], [], [i64("big", [30000, 30000])], inits)
    tracemalloc.start()
    net, _ = graph.from_onnx(used)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 64 << 20 and [c.op_name for c in net.calls()] == ["add"]
    assert net.outputs[0].shape == (30000, 30000) and net.outputs[0].dtype == "int64"


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2])
def test_flatten_at_every_axis_including_the_rank(axis):
    # BERT's TorchScript export flattens its [1, 8] mask at axis 2 (= the rank): that is
    # [8, 1], not [1, 8]
    model = model_of([helper.make_node("Flatten", ["x"], ["y"], axis=axis)],
                     [f32("x", [2, 4])], [f32("y", ["a", "b"])])
    check(model, {"x": RNG.standard_normal((2, 4)).astype(np.float32)})


def test_operand_inputs_can_be_fixed_to_values():
    """A model taking its Reshape target as an input: the error names that input, and
    ``constants=`` imports the model for a given value of it."""
    from ptxforge.graph.frontend_onnx import OnnxDataDependentError

    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="view")]
    model = model_of(nodes, [f32("x", [2, 6]), i64("shape", [2])], [f32("y", ["a", "b"])])
    with pytest.raises(OnnxDataDependentError) as e:
        graph.from_onnx(model)
    assert e.value.inputs == ("shape",) and "'view'" in str(e.value)
    net, _ = graph.from_onnx(model, constants={"shape": np.array([3, 4], np.int64)})
    assert [p.name for p in net.params] == ["x"] and net.outputs[0].shape == (3, 4)
    with pytest.raises(graph.OnnxImportError, match="'nope'.*not an input"):
        graph.from_onnx(model, constants={"nope": np.zeros(2)})
