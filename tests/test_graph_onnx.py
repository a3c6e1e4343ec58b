"""The ONNX importer: small models made with onnx.helper import, and the imported networks
match onnxruntime through the reference executor and through the simulator."""

from __future__ import annotations

import numpy as np
import ptxforge
import pytest
from ptxforge import graph

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(5)


def weight(name, *shape, low=-0.4, high=0.4):
    return numpy_helper.from_array(RNG.uniform(low, high, shape).astype(np.float32), name)


def ints(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def make_model(nodes, inputs, outputs, inits, opset=13):
    g = helper.make_graph(nodes, "test", inputs, outputs, inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def tensor(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def onnxruntime_output(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def check(model, feeds, layouts=(None, "NHWC"), rtol=1e-4):
    expected = onnxruntime_output(model, feeds)
    net, params = graph.from_onnx(model, {k: v.shape for k, v in feeds.items()})
    np.testing.assert_allclose(graph.evaluate(net, feeds, params), expected, rtol=rtol,
                               atol=1e-5)
    for layout in layouts:
        lib = graph.build(net, "sim", params, layout=layout)
        m = graph.GraphModule(lib, ptxforge.sim())
        m.set_input(**feeds)
        m.run()
        np.testing.assert_allclose(m.get_output(0).numpy(), expected, rtol=rtol, atol=1e-5)
    return net, params


def small_cnn():
    inits = [
        weight("conv1.weight", 8, 3, 3, 3), weight("conv1.bias", 8),
        weight("bn.weight", 8, low=0.5, high=1.5), weight("bn.bias", 8),
        weight("bn.running_mean", 8), weight("bn.running_var", 8, low=0.5, high=1.5),
        weight("conv2.weight", 8, 4, 3, 3),
        weight("fc.weight", 10, 8 * 2 * 2), weight("fc.bias", 10),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "conv1.weight", "conv1.bias"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn.weight", "bn.bias", "bn.running_mean",
                                                "bn.running_var"], ["b1"], epsilon=1e-5),
        helper.make_node("Relu", ["b1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["p1", "conv2.weight"], ["c2"], pads=[1, 1, 1, 1], group=2),
        helper.make_node("Clip", ["c2", "lo", "hi"], ["r2"]),
        helper.make_node("Add", ["r2", "p1"], ["s"]),
        helper.make_node("AveragePool", ["s"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p2"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["y"], axis=1),
    ]
    inits += [numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
              numpy_helper.from_array(np.array(6.0, np.float32), "hi")]
    return make_model(nodes, [tensor("x", [1, 3, 8, 8])], [tensor("y", [1, 10])], inits)


def test_small_cnn_matches_onnxruntime():
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    net, params = check(small_cnn(), {"x": x})
    assert "conv1.weight" in params and params["conv1.weight"].shape == (8, 3, 3, 3)
    assert [p.name for p in net.params][0] == "x"
    ops = [c.op for c in net.calls()]
    for op in ("nn.conv2d", "nn.batch_norm", "nn.relu", "nn.max_pool2d", "clip",
               "nn.avg_pool2d", "nn.batch_flatten", "nn.dense", "nn.softmax"):
        assert op in ops


def test_pytorch_style_flatten_and_matmul_graphs():
    # x.view(x.size(0), -1) exports as Shape, Gather, Unsqueeze, Concat, Reshape
    inits = [ints("zero", 0), ints("minus_one", [-1]), weight("w", 48, 6), weight("b", 6),
             ints("pads", [0, 0, 1, 0, 0, 0, 1, 0])]
    nodes = [
        helper.make_node("Pad", ["x", "pads"], ["xp"], mode="constant"),
        helper.make_node("GlobalAveragePool", ["xp"], ["g"]),
        helper.make_node("Mul", ["xp", "g"], ["scaled"]),
        helper.make_node("Transpose", ["scaled"], ["t"], perm=[0, 2, 3, 1]),
        helper.make_node("Shape", ["t"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["t", "target"], ["flat"]),
        helper.make_node("MatMul", ["flat", "w"], ["mm"]),
        helper.make_node("Add", ["mm", "b"], ["y0"]),
        helper.make_node("Sigmoid", ["y0"], ["y"]),
    ]
    inits.append(ints("axes0", [0]))
    model = make_model(nodes, [tensor("x", [2, 4, 2, 3])], [tensor("y", [2, 6])], inits)
    x = RNG.standard_normal((2, 4, 2, 3)).astype(np.float32)
    net, params = check(model, {"x": x}, layouts=(None,))
    assert "w_T" in params and params["w_T"].shape == (6, 48)  # stored as dense wants it
    assert "Shape" not in str(net)


def test_batched_matmul_and_layer_norm():
    inits = [weight("k", 2, 5, 4), weight("gamma", 4, low=0.5, high=1.5), weight("beta", 4)]
    nodes = [
        helper.make_node("MatMul", ["x", "k"], ["m"]),
        helper.make_node("LayerNormalization", ["m", "gamma", "beta"], ["y"], axis=-1,
                         epsilon=1e-5),
    ]
    model = make_model(nodes, [tensor("x", [2, 3, 5])], [tensor("y", [2, 3, 4])], inits,
                       opset=17)
    x = RNG.standard_normal((2, 3, 5)).astype(np.float32)
    check(model, {"x": x}, layouts=(None,))


def test_unsupported_operators_are_named():
    nodes = [helper.make_node("MaxRoiPool", ["x", "rois"], ["y"], name="pool1",
                              pooled_shape=[2, 2])]
    model = make_model(nodes, [tensor("x", [1, 3, 8, 8]), tensor("rois", [2, 5])],
                       [tensor("y", [2, 3, 2, 2])], [])
    with pytest.raises(graph.GraphError,
                       match="'pool1': ONNX operator MaxRoiPool is not supported"):
        graph.from_onnx(model)


def test_dynamic_inputs_need_a_shape(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    model = make_model(nodes, [tensor("x", ["batch", 3])], [tensor("y", ["batch", 3])], [])
    with pytest.raises(graph.GraphError, match="give its shape in shape_dict"):
        graph.from_onnx(model)
    path = tmp_path / "relu.onnx"
    onnx.save(model, str(path))
    net, params = graph.from_onnx(str(path), {"x": (4, 3)})
    assert net.outputs[0].shape == (4, 3) and params == {}


# -- import failures: always an OnnxImportError naming the file and the node -----------------


def _relu_model():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu1")]
    return make_model(nodes, [tensor("x", [2, 3])], [tensor("y", [2, 3])], [])


def test_file_errors_are_onnx_import_errors_naming_the_file(tmp_path):
    missing = tmp_path / "missing.onnx"
    with pytest.raises(graph.OnnxImportError, match="missing.onnx"):
        graph.from_onnx(str(missing))
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\xff\x00 this is not a protobuf \x13\x99" * 10)
    with pytest.raises(graph.OnnxImportError, match="garbage.onnx"):
        graph.from_onnx(str(garbage))
    good = tmp_path / "relu.onnx"
    onnx.save(_relu_model(), str(good))
    data = good.read_bytes()
    for cut in range(1, len(data) - 1):  # a model cut anywhere is an error, never opset 13
        (tmp_path / "cut.onnx").write_bytes(data[:cut])
        with pytest.raises(graph.OnnxImportError, match="cut.onnx"):
            graph.from_onnx(str(tmp_path / "cut.onnx"))


def test_models_are_checked_with_the_onnx_checker(tmp_path):
    nodes = [helper.make_node("Relu", ["nowhere"], ["y"], name="relu1")]
    g = helper.make_graph(nodes, "test", [tensor("x", [2, 3])], [tensor("y", [2, 3])], [])
    bad = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    path = tmp_path / "bad.onnx"
    onnx.save(bad, str(path))
    with pytest.raises(graph.OnnxImportError, match="bad.onnx.*(check|nowhere)"):
        graph.from_onnx(str(path))


def test_numpy_and_attribute_errors_name_the_node():
    shape = numpy_helper.from_array(np.array([7, 5], dtype=np.int64), "shape")
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="bad_reshape")]
    model = make_model(nodes, [tensor("x", [2, 3])], [tensor("y", [7, 5])], [shape])
    with pytest.raises(graph.OnnxImportError, match="bad_reshape"):
        graph.from_onnx(model)
    nodes = [helper.make_node("MaxPool", ["x"], ["y"], name="pool_without_kernel",
                              kernel_shape=[1, 1])]
    model = make_model(nodes, [tensor("x", [1, 1, 4, 4])], [tensor("y", [1, 1, 4, 4])], [])
    model.graph.node[0].ClearField("attribute")
    with pytest.raises(graph.OnnxImportError, match="pool_without_kernel"):
        graph.from_onnx(model)


def test_a_bfloat16_input_is_bfloat16():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu1")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2, 3])],
                       [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [2, 3])], [])
    net, _ = graph.from_onnx(model)
    assert net.params[0].dtype == "bfloat16"


def test_a_float16_model_imports_in_float16_and_casts_are_kept():
    w = numpy_helper.from_array(RNG.uniform(-0.4, 0.4, (8, 4)).astype(np.float16), "w")
    b = numpy_helper.from_array(RNG.uniform(-0.4, 0.4, (4,)).astype(np.float16), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]),
             helper.make_node("Add", ["mm", "b"], ["y0"]),
             helper.make_node("Cast", ["y0"], ["y32"], to=TensorProto.FLOAT),
             helper.make_node("Softmax", ["y32"], ["y"], axis=-1)]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 8])],
                       [tensor("y", [2, 4])], [w, b])
    net, params = graph.from_onnx(model)
    assert params["w_T"].dtype == np.float16 and params["b"].dtype == np.float16
    dense = [c for c in net.calls() if c.op == "nn.dense"]
    assert dense and dense[0].dtype == "float16"
    assert [c.dtype for c in net.calls() if c.op == "cast"] == ["float32"]
    x = RNG.standard_normal((2, 8)).astype(np.float16)
    ref = onnxruntime_output(model, {"x": x})
    out = graph.GraphModule(graph.build(net, "sim", params), ptxforge.sim())
    out.set_input(x=x)
    out.run()
    np.testing.assert_allclose(out.get_output(0).numpy(), ref, atol=2e-3)


def test_slice_of_a_tensor_is_a_strided_slice():
    """A Slice of a computed tensor (the query, key and value columns of a fused projection)
    imports as ``strided_slice``; its bounds must be known at import time."""
    inits = [ints("starts", [1, 4]), ints("ends", [-1, 100]), ints("axes", [0, 1]),
             ints("steps", [2, 1])]
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Slice", ["r", "starts", "ends", "axes", "steps"], ["y"])]
    model = make_model(nodes, [tensor("x", [7, 12])], [tensor("y", [3, 8])], inits)
    net, _ = check(model, {"x": RNG.standard_normal((7, 12)).astype(np.float32)},
                   layouts=(None,))
    assert "strided_slice" in [c.op_name for c in net.calls()]
    dyn = [helper.make_node("Slice", ["x", "starts", "e"], ["y"])]
    model = make_model(dyn, [tensor("x", [7, 12]),
                             helper.make_tensor_value_info("e", TensorProto.INT64, [2])],
                       [tensor("y", [None, None])], inits[:1])
    with pytest.raises(graph.OnnxImportError, match="known at import time"):
        graph.from_onnx(model, {"x": (7, 12), "e": (2,)})
