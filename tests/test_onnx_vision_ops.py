"""ONNX ``MaxUnpool``, ``Col2Im``, ``RoiAlign``, ``Det`` and ``NonMaxSuppression`` through the
importer, the reference executor and a simulator build, against ONNX's reference evaluator,
on cases beyond the backend node tests (duplicate indices, padded and strided blocks,
regions past the image, adaptive sampling, pivoting and singular matrices)."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import graph
from ptxforge.graph.frontend_onnx import OnnxDataDependentError, OnnxImportError

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64,
        np.dtype(np.float64): TensorProto.DOUBLE}


def _model(op, feeds, out_shape, out_type=TensorProto.FLOAT, opset=22, inits=(), **attrs):
    names = list(feeds)
    node = helper.make_node(op, names + [i.name for i in inits], ["y"], **attrs)
    g = helper.make_graph(
        [node], op, [helper.make_tensor_value_info(k, ELEM[v.dtype], list(v.shape))
                     for k, v in feeds.items()],
        [helper.make_tensor_value_info("y", out_type, out_shape)], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _check(model, feeds, rtol=1e-5, atol=1e-6, constants=None, compiled=True):
    """The reference executor's and (``compiled``) the simulator build's outputs against
    ONNX's."""
    (want,) = ReferenceEvaluator(model).run(None, {**feeds, **(constants or {})})
    net, params = graph.from_onnx(model, {k: v.shape for k, v in feeds.items()},
                                  constants=constants)
    ref = graph.run_graph(net, feeds, params)[0]
    np.testing.assert_allclose(ref, want, rtol, atol)
    if not compiled:
        return ref
    lib = graph.build(net, "sim", params)
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**{k: v for k, v in feeds.items() if k in lib.plan.inputs})
    m.run()
    got = m.get_output(0).numpy()
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol, atol)
    return got


def test_max_unpool_of_max_pool_indices_with_output_shape():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 6, 4)).astype(np.float32)
    pool = helper.make_model(helper.make_graph(
        [helper.make_node("MaxPool", ["x"], ["v", "i"], kernel_shape=[2, 2], strides=[2, 2])],
        "p", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("v", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("i", TensorProto.INT64, None)]),
        opset_imports=[helper.make_opsetid("", 22)])
    v, i = ReferenceEvaluator(pool).run(None, {"x": x})
    shape = helper.make_tensor("shape", TensorProto.INT64, [4], [2, 3, 7, 5])
    model = _model("MaxUnpool", {"x": v, "i": i}, [2, 3, 7, 5], inits=[shape],
                   kernel_shape=[2, 2], strides=[2, 2])
    got = _check(model, {"x": v, "i": i})
    assert np.count_nonzero(got) == v.size  # each pooled value once, the rest zeros


def test_max_unpool_duplicate_indices_keep_the_last_value():
    x = np.arange(1, 9, dtype=np.float32).reshape(1, 2, 2, 2)
    i = np.array([0, 3, 3, 10, 17, 17, 30, 16], dtype=np.int64).reshape(1, 2, 2, 2)
    model = _model("MaxUnpool", {"x": x, "i": i}, [1, 2, 4, 4], kernel_shape=[2, 2],
                   strides=[2, 2])
    got = _check(model, {"x": x, "i": i})
    assert got.reshape(-1)[3] == 3 and got.reshape(-1)[17] == 6


@pytest.mark.parametrize("image,block,attrs", [
    ((5, 6), (2, 3), {}),
    ((7, 6), (3, 2), {"strides": [2, 1], "pads": [1, 0, 2, 1]}),
    ((6, 7), (2, 2), {"dilations": [2, 3], "strides": [1, 2]}),
    ((3, 4, 5), (2, 1, 3), {"strides": [1, 2, 1], "pads": [0, 1, 1, 1, 0, 0]}),
])
def test_col2im_sums_overlapping_blocks(image, block, attrs):
    k = len(image)
    pads = attrs.get("pads", [0] * 2 * k)
    strides = attrs.get("strides", [1] * k)
    dil = attrs.get("dilations", [1] * k)
    blocks = int(np.prod([(image[d] + pads[d] + pads[k + d] - dil[d] * (block[d] - 1) - 1)
                          // strides[d] + 1 for d in range(k)]))
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3 * int(np.prod(block)), blocks)).astype(np.float32)
    inits = [helper.make_tensor("image", TensorProto.INT64, [k], list(image)),
             helper.make_tensor("block", TensorProto.INT64, [k], list(block))]
    model = _model("Col2Im", {"x": x}, [2, 3, *image], inits=inits, **attrs)
    _check(model, {"x": x})


def test_col2im_with_a_wrong_block_count_is_refused():
    x = np.zeros((1, 4, 7), np.float32)
    inits = [helper.make_tensor("image", TensorProto.INT64, [2], [4, 4]),
             helper.make_tensor("block", TensorProto.INT64, [2], [2, 2])]
    model = _model("Col2Im", {"x": x}, [1, 1, 4, 4], inits=inits)
    with pytest.raises(OnnxImportError, match="sliding blocks"):
        graph.from_onnx(model, {"x": x.shape})


def _rois():
    # inside, past the right and bottom edges, tiny, and starting left of the image
    return np.array([[0.5, 1.0, 6.2, 7.7], [3.0, 4.0, 12.0, 13.5], [2.0, 2.0, 2.3, 2.1],
                     [-3.0, -1.5, 4.0, 5.0]], dtype=np.float32)


@pytest.mark.parametrize("mode,ctm,ratio", [("avg", "half_pixel", 2),
                                            ("max", "output_half_pixel", 3),
                                            ("avg", "output_half_pixel", 1)])
def test_roi_align_against_onnx(mode, ctm, ratio):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 9, 10)).astype(np.float32)
    rois = _rois()
    batch = np.array([1, 0, 1, 0], dtype=np.int64)
    feeds = {"x": x, "rois": rois, "batch": batch}
    model = _model("RoiAlign", feeds, [4, 3, 3, 4], mode=mode,
                   coordinate_transformation_mode=ctm, output_height=3, output_width=4,
                   sampling_ratio=ratio, spatial_scale=0.8)
    # one of the fixed-ratio cases compiled: the builds take seconds each
    _check(model, feeds, rtol=1e-4, atol=1e-5, compiled=mode == "max")


def test_roi_align_adaptive_sampling_needs_the_regions():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 2, 8, 8)).astype(np.float32)
    rois = _rois()
    batch = np.zeros(4, dtype=np.int64)
    feeds = {"x": x, "rois": rois, "batch": batch}
    model = _model("RoiAlign", feeds, [4, 2, 2, 2], output_height=2, output_width=2,
                   sampling_ratio=0)
    with pytest.raises(OnnxDataDependentError) as e:
        graph.from_onnx(model, {k: v.shape for k, v in feeds.items()})
    assert e.value.inputs == ("rois",)
    # given the regions, every region gets its own number of samples per bin
    _check(model, {"x": x, "batch": batch}, rtol=1e-4, atol=1e-5, constants={"rois": rois})


def test_det_with_pivoting_and_singular_matrices():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 2, 5, 5)).astype(np.float32)
    x[0, 0, 0, 0] = 0.0  # the first pivot must come from another row
    x[1, 1, 3] = x[1, 1, 1] * 2  # two proportional rows: singular
    x[2, 0] = x[2, 0][[1, 0, 3, 2, 4]]  # a permutation of rows
    model = _model("Det", {"x": x}, [3, 2])
    got = _check(model, {"x": x}, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got, np.linalg.det(x.astype(np.float64)), rtol=1e-4,
                               atol=1e-5)
    assert abs(got[1, 1]) < 1e-4


def test_det_refuses_non_square_matrices():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(OnnxImportError, match=r"\[\.\.\., M, M\]"):
        graph.from_onnx(_model("Det", {"x": x}, []), {"x": x.shape})


def test_non_max_suppression_needs_known_boxes_and_scores():
    boxes = np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 0.9, 1, 1.9], [0, 10, 1, 11]]],
                     dtype=np.float32)
    scores = np.array([[[0.9, 0.75, 0.6, 0.95]]], dtype=np.float32)
    feeds = {"boxes": boxes, "scores": scores}
    inits = [helper.make_tensor("m", TensorProto.INT64, [1], [3]),
             helper.make_tensor("iou", TensorProto.FLOAT, [1], [0.5])]
    model = _model("NonMaxSuppression", feeds, [None, 3], TensorProto.INT64, inits=inits)
    with pytest.raises(OnnxDataDependentError) as e:
        graph.from_onnx(model, {k: v.shape for k, v in feeds.items()})
    assert set(e.value.inputs) == {"boxes", "scores"}
    net, params = graph.from_onnx(model, {}, constants=feeds)
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    np.testing.assert_array_equal(graph.run_graph(net, {}, params)[0], want)
    assert want.tolist() == [[0, 0, 3], [0, 0, 0], [0, 0, 2]]


@pytest.mark.parametrize("mode,indices", [("circular", [5, 2, 0]), ("linear", [0, 3, 1])])
def test_tensor_scatter_updates_the_cache(mode, indices):
    rng = np.random.default_rng(6)
    past = rng.standard_normal((3, 2, 6, 4)).astype(np.float32)
    update = rng.standard_normal((3, 2, 3, 4)).astype(np.float32)
    feeds = {"past": past, "update": update, "w": np.array(indices, np.int64)}
    model = _model("TensorScatter", feeds, [3, 2, 6, 4], opset=24, mode=mode)
    got = _check(model, feeds)
    if mode == "circular":  # batch 0 writes rows 5, 0, 1
        np.testing.assert_array_equal(got[0, :, [5, 0, 1]], update[0].transpose(1, 0, 2))


def test_deform_conv_groups_offset_groups_strides_mask_and_bias():
    rng = np.random.default_rng(7)
    n, c, h, w, m = 1, 4, 6, 7, 2
    kh, kw, stride, dil, pads = 3, 2, (2, 1), (1, 2), [1, 0, 1, 1]
    oh = (h + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (w + pads[1] + pads[3] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    feeds = {"x": rng.standard_normal((n, c, h, w)),
             "w": rng.standard_normal((m, c // 2, kh, kw)),
             "off": rng.standard_normal((n, 2 * 2 * kh * kw, oh, ow)) * 1.5,
             "b": rng.standard_normal(m),
             "mask": rng.random((n, 2 * kh * kw, oh, ow))}
    feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
    model = _model("DeformConv", feeds, [n, m, oh, ow], opset=19, group=2, offset_group=2,
                   kernel_shape=[kh, kw], strides=list(stride), dilations=list(dil), pads=pads)
    _check(model, feeds, rtol=1e-4, atol=1e-5)
