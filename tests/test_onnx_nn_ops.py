"""ONNX convolution, pooling, normalization and resizing operators: small models made with
onnx.helper import, and the imported networks match onnxruntime (or numpy) through the
reference executor and through the simulator build, NCHW and under ``convert_layout``."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import graph
from ptxforge.graph.frontend_onnx import OnnxImportError

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(11)
F32 = TensorProto.FLOAT


def make_model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "test", inputs, outputs, list(inits))
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    # outputs are declared without shapes; ONNX's shape inference fills them in
    model = onnx.shape_inference.infer_shapes(model)
    onnx.checker.check_model(model)
    return model


def info(name, shape, elem=F32):
    return helper.make_tensor_value_info(name, elem, shape)


def init(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def rand(*shape, low=-1.0, high=1.0):
    return RNG.uniform(low, high, shape).astype(np.float32)


def onnxruntime_outputs(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def check(model, feeds, expected=None, layouts=(None, "NHWC"), rtol=1e-4, atol=1e-5):
    """Import ``model``; its outputs through the reference executor and the simulator build
    (each layout) must match ``expected`` (default: onnxruntime's)."""
    if expected is None:
        expected = onnxruntime_outputs(model, feeds)
    net, params = graph.from_onnx(model, {k: v.shape for k, v in feeds.items()})
    got = graph.interpreter.run_graph(net, feeds, params)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
    for layout in layouts:
        lib = graph.build(net, "sim", params, layout=layout)
        m = graph.GraphModule(lib, ptxforge.sim())
        m.set_input(**feeds)
        m.run()
        for k, e in enumerate(expected):
            np.testing.assert_allclose(m.get_output(k).numpy(), e, rtol=rtol, atol=atol)
    return net


def ops_of(net):
    return [c.op for c in net.calls()]


# -- pooling: the ceil-mode window that starts in the padding ---------------------------------


@pytest.mark.parametrize("op_type", ["MaxPool", "AveragePool"])
def test_ceil_mode_drops_a_window_that_starts_in_the_padding(op_type):
    # 5 wide, window 2, stride 2, padding 1 on both sides: ceil((5+2-2)/2)+1 = 4 windows, but
    # the 4th starts at 6 = 5 + 1, in the padding after the input: ONNX and PyTorch give 3
    x = rand(1, 2, 5, 5)
    node = helper.make_node(op_type, ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2],
                            pads=[1, 1, 1, 1], ceil_mode=1)
    model = make_model([node], [info("x", [1, 2, 5, 5])], [info("y", None)])
    (expected,) = onnxruntime_outputs(model, {"x": x})
    assert expected.shape == (1, 2, 3, 3)
    net = check(model, {"x": x})
    assert net.outputs[0].shape == (1, 2, 3, 3)


def test_ceil_mode_that_keeps_its_last_window_still_rounds_up():
    x = rand(1, 1, 6, 7)
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                            ceil_mode=1)
    model = make_model([node], [info("x", [1, 1, 6, 7])], [info("y", None)])
    net = check(model, {"x": x})
    assert net.outputs[0].shape == (1, 1, 3, 3)


@pytest.mark.parametrize("op_type,attrs", [
    ("MaxPool", {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ("AveragePool", {"kernel_shape": [3], "strides": [2], "pads": [1, 0], "ceil_mode": 1,
                     "count_include_pad": 1}),
    ("LpPool", {"kernel_shape": [2], "strides": [1], "p": 3}),
    ("MaxPool", {"kernel_shape": [4], "strides": [2], "auto_pad": "SAME_UPPER"}),
    ("MaxPool", {"kernel_shape": [3], "dilations": [2], "pads": [2, 1]}),
])
def test_pool_1d(op_type, attrs):
    x = rand(2, 3, 9)
    model = make_model([helper.make_node(op_type, ["x"], ["y"], **attrs)],
                       [info("x", [2, 3, 9])], [info("y", None)], opset=19)
    net = check(model, {"x": x}, layouts=(None,))
    assert "nn.pool" in ops_of(net)


@pytest.mark.parametrize("op_type,attrs", [
    ("MaxPool", {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2], "pads": [1, 0, 1, 0, 1, 1]}),
    ("AveragePool", {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2], "pads": [1, 1, 0, 1, 1, 1],
                     "ceil_mode": 1}),
    ("AveragePool", {"kernel_shape": [3, 3, 3], "pads": [1, 1, 1, 1, 1, 1],
                     "count_include_pad": 1}),
])
def test_pool_3d(op_type, attrs):
    x = rand(1, 2, 5, 4, 5)
    model = make_model([helper.make_node(op_type, ["x"], ["y"], **attrs)],
                       [info("x", [1, 2, 5, 4, 5])], [info("y", None)], opset=19)
    check(model, {"x": x}, layouts=(None,))


@pytest.mark.parametrize("shape,attrs", [
    ((1, 2, 6, 5), {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1]}),
    ((1, 2, 6, 5), {"kernel_shape": [2, 2], "strides": [2, 2], "storage_order": 1}),
    ((2, 3, 8), {"kernel_shape": [3], "strides": [2], "ceil_mode": 1}),
    ((1, 2, 3, 4, 4), {"kernel_shape": [2, 2, 2], "strides": [1, 2, 2], "dilations": [2, 1, 1]}),
])
def test_max_pool_indices(shape, attrs):
    # integer-valued data with ties: the first maximum of each window is the one indexed
    x = RNG.integers(0, 4, shape).astype(np.float32)
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], **attrs)
    model = make_model([node], [info("x", list(shape))],
                       [info("y", None), info("i", None, TensorProto.INT64)], opset=12)
    net = check(model, {"x": x}, layouts=(None,))
    assert net.outputs[1].dtype == "int64"


def test_global_pools_in_any_rank():
    x = rand(2, 3, 4, 3, 2)
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["a"]),
             helper.make_node("GlobalMaxPool", ["x"], ["m"]),
             helper.make_node("GlobalLpPool", ["x"], ["l"], p=2)]
    model = make_model(nodes, [info("x", [2, 3, 4, 3, 2])],
                       [info("a", None), info("m", None), info("l", None)])
    check(model, {"x": x}, layouts=(None,))
    x1 = rand(2, 3, 7)
    model = make_model(nodes[:2], [info("x", [2, 3, 7])], [info("a", None), info("m", None)])
    check(model, {"x": x1}, layouts=(None,))


def test_pool_storage_order_is_2d_only():
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2], storage_order=1)
    model = make_model([node], [info("x", [1, 1, 4])],
                       [info("y", None), info("i", None, TensorProto.INT64)], opset=12)
    with pytest.raises(OnnxImportError, match="storage_order=1"):
        graph.from_onnx(model)


# -- convolutions ------------------------------------------------------------------------------


@pytest.mark.parametrize("attrs", [
    {"pads": [1, 2], "strides": [2]},
    {"auto_pad": "SAME_UPPER", "strides": [2]},
    {"dilations": [2], "pads": [0, 3]},
    {"group": 2, "pads": [1, 1]},
])
def test_conv_1d_runs_as_a_2d_convolution(attrs):
    x = rand(2, 4, 11)
    w = rand(6, 4 // attrs.get("group", 1), 3)
    b = rand(6)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], **attrs),
             helper.make_node("Relu", ["c"], ["y"])]
    model = make_model(nodes, [info("x", [2, 4, 11])], [info("y", None)],
                       [init("w", w), init("b", b)])
    net = check(model, {"x": x})
    assert "nn.conv2d" in ops_of(net)
    # bias and relu fuse into the convolution's function
    fused = graph.optimize(net, graph.from_onnx(model)[1])
    assert sum(isinstance(c.op, graph.Graph) and "conv2d" in c.op.name
               for c in fused.calls()) == 1


@pytest.mark.parametrize("attrs", [
    {"pads": [1, 0, 1, 1, 1, 0], "strides": [1, 2, 1]},
    {"group": 2, "strides": [2, 1, 2], "auto_pad": "SAME_LOWER"},
    {"dilations": [1, 2, 1]},
])
def test_conv_3d(attrs):
    x = rand(1, 4, 4, 5, 4)
    w = rand(4, 4 // attrs.get("group", 1), 2, 3, 2)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)]
    model = make_model(nodes, [info("x", [1, 4, 4, 5, 4])], [info("y", None)],
                       [init("w", w), init("b", rand(4))])
    net = check(model, {"x": x}, layouts=(None,))
    assert "nn.conv_nd" in ops_of(net)


@pytest.mark.parametrize("shape,wshape,attrs", [
    ((1, 3, 5), (3, 2, 3), {"strides": [2], "pads": [1, 0], "output_padding": [1]}),
    ((1, 4, 3, 4), (4, 1, 3, 2), {"strides": [2, 3], "group": 2, "dilations": [1, 2]}),
    ((2, 2, 3, 3), (2, 3, 3, 3), {"strides": [2, 2], "output_shape": [7, 8]}),
    ((1, 2, 3, 3), (2, 2, 2, 2), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 2, 3, 2), (2, 2, 2, 2, 3), {"strides": [1, 2, 2], "pads": [0, 1, 0, 0, 0, 1]}),
])
def test_conv_transpose(shape, wshape, attrs):
    x = rand(*shape)
    c_out = wshape[1] * attrs.get("group", 1)
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)]
    model = make_model(nodes, [info("x", list(shape))], [info("y", None)],
                       [init("w", rand(*wshape)), init("b", rand(c_out))])
    net = check(model, {"x": x}, layouts=(None,))
    assert "nn.conv_transpose" in ops_of(net)


def test_conv_of_unsupported_rank_is_a_clear_error():
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"])],
                       [info("x", [1, 1, 2, 2, 2, 2])], [info("y", None)],
                       [init("w", rand(1, 1, 1, 1, 1, 1))])
    with pytest.raises(OnnxImportError, match="4-D convolutions are not supported"):
        graph.from_onnx(model)


# -- normalizations ----------------------------------------------------------------------------


def test_instance_norm_then_relu():
    x = rand(2, 3, 4, 5)
    nodes = [helper.make_node("InstanceNormalization", ["x", "s", "b"], ["n"], epsilon=1e-3),
             helper.make_node("Relu", ["n"], ["y"])]
    model = make_model(nodes, [info("x", [2, 3, 4, 5])], [info("y", None)],
                       [init("s", rand(3)), init("b", rand(3))])
    net = check(model, {"x": x})
    assert "nn.group_norm" in ops_of(net)
    fused = graph.optimize(net, graph.from_onnx(model)[1])
    assert [c.op.name for c in fused.calls()] == ["fused_nn_group_norm_nn_relu"]


def _group_norm_expected(x, scale, bias, groups, eps):
    n, c = x.shape[:2]
    xg = x.astype(np.float64).reshape(n, groups, -1)
    y = (xg - xg.mean(-1, keepdims=True)) / np.sqrt(xg.var(-1, keepdims=True) + eps)
    shape = (1, c) + (1,) * (x.ndim - 2)
    return (y.reshape(x.shape) * scale.reshape(shape) + bias.reshape(shape)).astype(np.float32)


def test_group_norm_scale_per_channel():
    x = rand(2, 6, 3, 2)
    scale, bias = rand(6), rand(6)
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3,
                            epsilon=1e-4)
    model = make_model([node], [info("x", [2, 6, 3, 2])], [info("y", [2, 6, 3, 2])],
                       [init("s", scale), init("b", bias)], opset=21)
    check(model, {"x": x}, [_group_norm_expected(x, scale, bias, 3, 1e-4)], layouts=(None,))


def test_group_norm_scale_per_group():
    # GroupNormalization-18's form (one scale and bias per group), as the operator takes it
    from ptxforge.graph.opdefs.norm_nd import group_norm

    x = graph.Var("x", (2, 6, 5), "float32")
    s, b = graph.Var("s", (3,), "float32"), graph.Var("b", (3,), "float32")
    net = graph.Graph([x, s, b], [group_norm(x, s, b, 3, 1e-3)])
    feeds = {"x": rand(2, 6, 5), "s": rand(3), "b": rand(3)}
    expected = _group_norm_expected(feeds["x"], np.repeat(feeds["s"], 2),
                                    np.repeat(feeds["b"], 2), 3, 1e-3)
    np.testing.assert_allclose(graph.evaluate(net, feeds), expected, rtol=1e-5, atol=1e-5)
    lib = graph.build(net, "sim")
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**feeds)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape,axis,scale_shape", [
    ((2, 3, 4, 5), 1, (3, 4, 5)), ((2, 3, 4, 5), -2, (4, 5)), ((2, 3, 4, 5), 2, (1, 5)),
    ((2, 3, 4, 5), -1, (5,)),
    # rows of 360 elements: group normalization's one-block-per-row statistics
    ((2, 3, 10, 12), 1, (3, 10, 12)), ((2, 3, 10, 12), 1, (10, 1)),
])
def test_layer_norm_on_any_axis_with_its_statistics(shape, axis, scale_shape):
    x = rand(*shape)
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y", "mean", "inv"],
                            axis=axis, epsilon=1e-4)
    model = make_model([node], [info("x", list(shape))],
                       [info("y", None), info("mean", None), info("inv", None)],
                       [init("s", rand(*scale_shape)), init("b", rand(*scale_shape))])
    net = check(model, {"x": x}, layouts=(None,))
    long_rows = np.prod(shape[axis % len(shape):]) >= 256 and axis % len(shape) < len(shape) - 1
    assert ("nn.group_norm" in ops_of(net)) == long_rows


def test_batch_norm_on_3d_and_5d_data():
    for shape in ((2, 3, 7), (1, 3, 2, 3, 2)):
        x = rand(*shape)
        node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])
        model = make_model([node], [info("x", list(shape))], [info("y", None)],
                           [init("s", rand(3)), init("b", rand(3)), init("m", rand(3)),
                            init("v", rand(3, low=0.5, high=1.5))])
        check(model, {"x": x}, layouts=(None,))


def test_batch_norm_training_mode_uses_the_batch_statistics():
    """Training mode (opset 14+): the batch's mean and population variance normalize, and
    the running statistics are blended with momentum; the saved statistics of opset 9 are
    refused."""
    from onnx.reference import ReferenceEvaluator

    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"],
                            training_mode=1, momentum=0.8)
    inits = [init("s", rand(3)), init("b", rand(3)), init("m", rand(3)), init("v", rand(3))]
    model = make_model([node], [info("x", [2, 3, 4])],
                       [info("y", [2, 3, 4]), info("rm", [3]), info("rv", [3])], inits,
                       opset=15)
    x = rand(2, 3, 4)
    want = ReferenceEvaluator(model).run(None, {"x": x})
    net, params = graph.from_onnx(model)
    lib = graph.build(net, "sim", params)
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(x=x)
    m.run()
    for k, w in enumerate(want):
        np.testing.assert_allclose(graph.run_graph(net, {"x": x}, params)[k], w, 1e-5, 1e-6)
        np.testing.assert_allclose(m.get_output(k).numpy(), w, 1e-5, 1e-6)
    old = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"],
                           ["y", "rm", "rv", "sm", "sv"])
    model = make_model([old], [info("x", [2, 3, 4])],
                       [info("y", [2, 3, 4])] + [info(n, [3]) for n in ("rm", "rv", "sm", "sv")],
                       inits, opset=9)
    with pytest.raises(OnnxImportError, match="training mode before opset 14"):
        graph.from_onnx(model)


def test_mean_variance_normalization_and_lrn():
    x = rand(2, 5, 3, 3)
    nodes = [helper.make_node("MeanVarianceNormalization", ["x"], ["m"]),
             helper.make_node("LRN", ["m"], ["y"], size=3, alpha=0.01, beta=0.6, bias=1.5)]
    model = make_model(nodes, [info("x", [2, 5, 3, 3])], [info("y", [2, 5, 3, 3])])
    net = check(model, {"x": x})
    assert "nn.lrn" in ops_of(net)


@pytest.mark.parametrize("p,axis", [(2, 1), (1, -1)])
def test_lp_normalization_with_a_zero_slice(p, axis):
    x = rand(3, 4, 5)
    x[1, :, :] = 0.0
    x[:, :, 2] = 0.0
    node = helper.make_node("LpNormalization", ["x"], ["y"], p=p, axis=axis)
    model = make_model([node], [info("x", [3, 4, 5])], [info("y", [3, 4, 5])])
    norm = (np.abs(x.astype(np.float64)) ** p).sum(axis=axis, keepdims=True) ** (1.0 / p)
    expected = np.where(norm == 0, 0.0, x / np.where(norm == 0, 1.0, norm)).astype(np.float32)
    check(model, {"x": x}, [expected], layouts=(None,))


# -- half precision ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_convolution_pooling_and_normalization(dtype):
    from ptxforge.graph import opdefs as G
    from ptxforge.graph.opdefs.conv_nd import conv_nd, conv_transpose
    from ptxforge.graph.opdefs.norm_nd import group_norm
    from ptxforge.graph.opdefs.pool_nd import pool
    from ptxforge.ir import dtype as dt

    npdt = dt.to_numpy(dtype)
    x = graph.Var("x", (1, 4, 3, 4, 4), dtype)
    w = graph.Var("w", (4, 2, 2, 2, 2), dtype)
    y = conv_nd(x, w, (1, 1, 1), padding=1, groups=2)
    y = pool(y, "avg", (2, 2, 2), 2, (0, 0, 0, 1, 1, 1), ceil_mode=True)
    y = group_norm(y, graph.Var("g", (2,), dtype), graph.Var("b", (2,), dtype), 2)
    y = conv_transpose(y, graph.Var("t", (4, 3, 2, 2, 2), dtype), (2, 2, 2))
    net = graph.Graph([x, w, graph.Var("g", (2,), dtype), graph.Var("b", (2,), dtype),
                       graph.Var("t", (4, 3, 2, 2, 2), dtype)], [G.relu(y)])
    net = graph.Graph(graph.ir.free_vars(net.outputs), net.outputs)
    feeds = {v.name: RNG.uniform(-1, 1, v.shape).astype(npdt) for v in net.params}
    expected = graph.evaluate(net, feeds)
    assert expected.dtype == npdt
    lib = graph.build(net, "sim")
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**feeds)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy().astype(np.float32),
                               expected.astype(np.float32), rtol=5e-2, atol=5e-2)


# -- resizing ----------------------------------------------------------------------------------


def _resize_model(shape, attrs, scales=None, sizes=None, roi=None, axes=None, opset=19):
    inits = [init("roi", np.array(roi if roi is not None else [], np.float32))]
    inputs = ["x", "roi"]
    if scales is not None:
        inits.append(init("scales", np.array(scales, np.float32)))
        inputs.append("scales")
    if sizes is not None:
        inits.append(init("sizes", np.array(sizes, np.int64)))
        inputs += ["", "sizes"] if scales is None else ["sizes"]
    if axes is not None:
        attrs = {**attrs, "axes": axes}
    node = helper.make_node("Resize", inputs, ["y"], **attrs)
    return make_model([node], [info("x", list(shape))], [info("y", None)], inits, opset=opset)


@pytest.mark.parametrize("attrs,scales,sizes", [
    ({"mode": "nearest"}, [1, 1, 2, 2], None),
    ({"mode": "nearest", "nearest_mode": "round_prefer_ceil",
      "coordinate_transformation_mode": "asymmetric"}, None, [1, 2, 7, 3]),
    ({"mode": "nearest", "nearest_mode": "floor",
      "coordinate_transformation_mode": "align_corners"}, [1, 1, 2, 0.5], None),
    ({"mode": "linear"}, [1, 1, 2, 0.5], None),
    ({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, None, [1, 2, 3, 9]),
    ({"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, None,
     [1, 2, 1, 4]),
    ({"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1}, [1, 1, 1.5, 2], None),
    ({"mode": "cubic", "coordinate_transformation_mode": "half_pixel_symmetric"},
     [1, 1, 0.7, 1.3], None),
    ({"mode": "linear", "antialias": 1}, [1, 1, 0.5, 0.4], None),
])
def test_resize_modes(attrs, scales, sizes):
    x = rand(1, 2, 5, 6)
    model = _resize_model(x.shape, attrs, scales, sizes)
    net = check(model, {"x": x}, layouts=(None,))
    assert "image.resize" in ops_of(net)


def test_resize_crop_with_extrapolation_along_given_axes():
    x = rand(1, 2, 5, 6)
    attrs = {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
             "extrapolation_value": 7.5}
    # axes 3 then 2: the crop box runs past the input on both sides of the height
    model = _resize_model(x.shape, attrs, sizes=[4, 6], roi=[0.1, -0.3, 0.8, 1.4], axes=[3, 2])
    (expected,) = onnxruntime_outputs(model, {"x": x})
    assert (expected == 7.5).any()
    check(model, {"x": x}, layouts=(None,))


def test_resize_keep_aspect_ratio_and_nearest_fusion():
    x = rand(1, 3, 4, 6)
    attrs = {"mode": "nearest", "keep_aspect_ratio_policy": "not_larger"}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["c", "", "", "sizes"], ["r"], axes=[2, 3], **attrs),
             helper.make_node("Relu", ["r"], ["y"])]
    model = make_model(nodes, [info("x", [1, 3, 4, 6])], [info("y", None)],
                       [init("w", rand(4, 3, 3, 3)), init("sizes", np.array([9, 9], np.int64))],
                       opset=19)
    net = check(model, {"x": x})
    assert net.outputs[0].shape == (1, 4, 6, 9)


def test_upsample_nearest_and_linear():
    x = rand(1, 2, 3, 4)
    for mode, opset in (("nearest", 9), ("linear", 9)):
        node = helper.make_node("Upsample", ["x", "scales"], ["y"], mode=mode)
        model = make_model([node], [info("x", [1, 2, 3, 4])], [info("y", [1, 2, 6, 12])],
                           [init("scales", np.array([1, 1, 2, 3], np.float32))], opset=opset)
        check(model, {"x": x}, layouts=(None,))
    # opset 7-8: the scales are an attribute
    node = helper.make_node("Upsample", ["x"], ["y"], mode="nearest", scales=[1.0, 1.0, 3.0, 2.0])
    model = make_model([node], [info("x", [1, 2, 3, 4])], [info("y", [1, 2, 9, 8])], opset=8)
    check(model, {"x": x}, [np.repeat(np.repeat(x, 3, axis=2), 2, axis=3)], layouts=(None,))


def test_resize_needs_constant_scales():
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest")
    model = make_model([node], [info("x", [1, 1, 2, 2]), info("scales", [4])],
                       [info("y", [1, 1, 4, 4])], opset=13)
    with pytest.raises(OnnxImportError,
                       match=r"Resize scales \('scales'\) must be known at import time.*"
                             r"graph input 'scales'"):
        graph.from_onnx(model, {"x": (1, 1, 2, 2), "scales": (4,)})


# -- what PyTorch's exporter writes ------------------------------------------------------------


@pytest.mark.corpus  # importing torch and exporting take about a minute on a busy CPU
def test_pytorch_export_of_audio_and_image_layers_matches_eager():
    torch = pytest.importorskip("torch")
    import io

    nn = torch.nn

    class Layers(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1d = nn.Conv1d(4, 8, 3, padding=1)
            self.inorm = nn.InstanceNorm1d(8, affine=True)
            self.conv2d = nn.Conv2d(2, 4, 3, padding=1)
            self.gnorm = nn.GroupNorm(2, 4)
            self.up = nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1)
            self.pool = nn.MaxPool2d(2, 2, padding=1, ceil_mode=True)
            self.resize = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
            self.lnorm = nn.LayerNorm([16])

        def forward(self, audio, image):
            a = self.lnorm(torch.relu(self.inorm(self.conv1d(audio))))
            b = self.resize(self.pool(self.up(self.gnorm(self.conv2d(image)))))
            return a, b

    torch.manual_seed(0)
    model = Layers().eval()
    audio, image = torch.randn(1, 4, 16), torch.randn(1, 2, 5, 5)
    buf = io.BytesIO()
    torch.onnx.export(model, (audio, image), buf, opset_version=17, dynamo=False,
                      input_names=["audio", "image"])
    proto = onnx.load_from_string(buf.getvalue())
    with torch.no_grad():
        expected = [t.numpy() for t in model(audio, image)]
    check(proto, {"audio": audio.numpy(), "image": image.numpy()}, expected, layouts=(None,),
          atol=1e-5)


def test_a_float16_model_of_these_operators_runs_in_float16():
    h = TensorProto.FLOAT16
    w = RNG.uniform(-0.5, 0.5, (4, 3, 3)).astype(np.float16)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1]),
        helper.make_node("InstanceNormalization", ["c", "s", "b"], ["n"]),
        helper.make_node("MaxPool", ["n"], ["p"], kernel_shape=[3], strides=[2], ceil_mode=1),
        helper.make_node("Resize", ["p", "", "scales"], ["r"], mode="linear"),
        helper.make_node("LayerNormalization", ["r", "g"], ["y"], axis=1),
    ]
    inits = [init("w", w), init("s", np.ones(4, np.float16)), init("b", np.zeros(4, np.float16)),
             init("scales", np.array([1, 1, 2], np.float32)),
             init("g", RNG.uniform(0.5, 1.5, (4, 14)).astype(np.float16))]
    model = make_model(nodes, [info("x", [2, 3, 15], h)], [info("y", [2, 4, 14], h)], inits)
    x = RNG.uniform(-1, 1, (2, 3, 15)).astype(np.float16)
    net, params = graph.from_onnx(model)
    assert net.outputs[0].dtype == "float16"
    # the same model in float32 is the expectation
    model32 = onnx.ModelProto.FromString(model.SerializeToString())
    for t in model32.graph.initializer:
        if t.data_type == h:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32),
                                               t.name))
    for v in list(model32.graph.input) + list(model32.graph.output):
        v.type.tensor_type.elem_type = F32
    del model32.graph.value_info[:]
    (expected,) = onnxruntime_outputs(model32, {"x": x.astype(np.float32)})
    check(model, {"x": x}, [expected.astype(np.float16)], layouts=(None,), rtol=3e-2,
          atol=3e-2)
