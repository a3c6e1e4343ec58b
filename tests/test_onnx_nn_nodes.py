"""The ONNX backend node tests of the convolution, pooling, normalization and resizing
operators (the onnx package's own cases, regenerated from its test-case code): each imports,
and its outputs match the expected ones through the reference executor and through the
simulator build. Heavy (collecting the cases takes the onnx package about a minute), so
marked ``onnx_conformance``.

Scales, sizes and crop boxes arrive as graph inputs in these cases; shapes are static
here, so the test makes them initializers (what an exported model holds)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import ptxforge
from ptxforge import graph

pytestmark = pytest.mark.onnx_conformance
onnx = pytest.importorskip("onnx")

CASES = [
    "test_l2normalization_axis_0", "test_l2normalization_axis_1", "test_l1normalization_axis_0",
    "test_l1normalization_axis_1", "test_l1normalization_axis_last",
    "test_lpnormalization_default",
    "test_averagepool_2d_precomputed_pads",
    "test_averagepool_2d_precomputed_pads_count_include_pad",
    "test_averagepool_2d_precomputed_strides", "test_averagepool_2d_precomputed_same_upper",
    "test_averagepool_1d_default", "test_averagepool_2d_default",
    "test_averagepool_3d_default", "test_averagepool_2d_same_upper",
    "test_averagepool_2d_same_lower", "test_averagepool_2d_pads",
    "test_averagepool_2d_pads_count_include_pad", "test_averagepool_2d_strides",
    "test_averagepool_2d_ceil", "test_averagepool_2d_ceil_last_window_starts_on_pad",
    "test_averagepool_2d_dilations", "test_averagepool_3d_dilations_small",
    "test_averagepool_3d_dilations_large_count_include_pad_is_0_ceil_mode_is_True",
    "test_averagepool_3d_dilations_large_count_include_pad_is_0_ceil_mode_is_False",
    "test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_True",
    "test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_False",
    "test_batchnorm_example", "test_batchnorm_epsilon", "test_batchnorm_example_training_mode",
    "test_batchnorm_epsilon_training_mode", "test_basic_conv_with_padding",
    "test_basic_conv_without_padding", "test_conv_with_strides_padding",
    "test_conv_with_strides_no_padding", "test_conv_with_strides_and_asymmetric_padding",
    "test_conv_with_autopad_same", "test_convinteger_without_padding",
    "test_convinteger_with_padding", "test_convtranspose", "test_convtranspose_1d",
    "test_convtranspose_3d", "test_convtranspose_output_shape", "test_convtranspose_pad",
    "test_convtranspose_kernel_shape", "test_convtranspose_pads",
    "test_convtranspose_dilations", "test_convtranspose_autopad_same",
    "test_convtranspose_group_2", "test_convtranspose_group_2_image_3",
    "test_globalaveragepool", "test_globalaveragepool_precomputed", "test_globalmaxpool",
    "test_globalmaxpool_precomputed", "test_group_normalization_example",
    "test_group_normalization_epsilon", "test_instancenorm_example",
    "test_instancenorm_epsilon", "test_layer_normalization_4d_axis0",
    "test_layer_normalization_4d_axis_negative_4", "test_layer_normalization_4d_axis1",
    "test_layer_normalization_4d_axis_negative_3", "test_layer_normalization_4d_axis2",
    "test_layer_normalization_4d_axis_negative_2", "test_layer_normalization_4d_axis3",
    "test_layer_normalization_4d_axis_negative_1", "test_layer_normalization_default_axis",
    "test_layer_normalization_2d_axis0", "test_layer_normalization_2d_axis_negative_2",
    "test_layer_normalization_2d_axis1", "test_layer_normalization_2d_axis_negative_1",
    "test_layer_normalization_3d_axis0_epsilon",
    "test_layer_normalization_3d_axis_negative_3_epsilon",
    "test_layer_normalization_3d_axis1_epsilon",
    "test_layer_normalization_3d_axis_negative_2_epsilon",
    "test_layer_normalization_3d_axis2_epsilon",
    "test_layer_normalization_3d_axis_negative_1_epsilon", "test_lppool_1d_default",
    "test_lppool_2d_default", "test_lppool_3d_default", "test_lppool_2d_same_upper",
    "test_lppool_2d_same_lower", "test_lppool_2d_pads", "test_lppool_2d_strides",
    "test_lppool_2d_dilations", "test_lrn", "test_lrn_default", "test_maxpool_2d_uint8",
    "test_maxpool_2d_precomputed_pads", "test_maxpool_with_argmax_2d_precomputed_pads",
    "test_maxpool_2d_precomputed_strides", "test_maxpool_with_argmax_2d_precomputed_strides",
    "test_maxpool_2d_precomputed_same_upper", "test_maxpool_1d_default",
    "test_maxpool_2d_default", "test_maxpool_3d_default", "test_maxpool_2d_same_upper",
    "test_maxpool_2d_same_lower", "test_maxpool_2d_pads", "test_maxpool_2d_strides",
    "test_maxpool_2d_ceil", "test_maxpool_2d_ceil_output_size_reduce_by_one",
    "test_maxpool_2d_dilations", "test_maxpool_3d_dilations",
    "test_maxpool_3d_dilations_use_ref_impl", "test_maxpool_3d_dilations_use_ref_impl_large",
    "test_mvn", "test_resize_upsample_scales_nearest", "test_resize_downsample_scales_nearest",
    "test_resize_upsample_sizes_nearest", "test_resize_downsample_sizes_nearest",
    "test_resize_upsample_scales_linear", "test_resize_upsample_scales_linear_align_corners",
    "test_resize_downsample_scales_linear",
    "test_resize_downsample_scales_linear_align_corners", "test_resize_upsample_scales_cubic",
    "test_resize_upsample_scales_cubic_align_corners", "test_resize_downsample_scales_cubic",
    "test_resize_downsample_scales_cubic_align_corners", "test_resize_upsample_sizes_cubic",
    "test_resize_downsample_sizes_cubic",
    "test_resize_upsample_scales_cubic_A_n0p5_exclude_outside",
    "test_resize_downsample_scales_cubic_A_n0p5_exclude_outside",
    "test_resize_upsample_scales_cubic_asymmetric", "test_resize_tf_crop_and_resize",
    "test_resize_tf_crop_and_resize_extrapolation_value",
    "test_resize_downsample_sizes_linear_pytorch_half_pixel",
    "test_resize_upsample_sizes_nearest_floor_align_corners",
    "test_resize_upsample_sizes_nearest_round_prefer_ceil_asymmetric",
    "test_resize_upsample_sizes_nearest_ceil_half_pixel",
    "test_resize_downsample_scales_linear_antialias",
    "test_resize_downsample_sizes_linear_antialias",
    "test_resize_downsample_scales_cubic_antialias",
    "test_resize_downsample_sizes_cubic_antialias",
    "test_resize_upsample_scales_nearest_axes_2_3",
    "test_resize_upsample_scales_nearest_axes_3_2",
    "test_resize_upsample_sizes_nearest_axes_2_3",
    "test_resize_upsample_sizes_nearest_axes_3_2", "test_resize_tf_crop_and_resize_axes_2_3",
    "test_resize_tf_crop_and_resize_axes_3_2", "test_resize_upsample_sizes_nearest_not_larger",
    "test_resize_upsample_sizes_nearest_not_smaller",
    "test_resize_downsample_sizes_nearest_not_larger",
    "test_resize_downsample_sizes_nearest_not_smaller",
    "test_resize_downsample_scales_linear_half_pixel_symmetric",
    "test_resize_upsample_scales_linear_half_pixel_symmetric", "test_upsample_nearest",
]
EXPECTED_FAILURES: dict[str, str] = {}


@functools.lru_cache(maxsize=1)
def _all_cases() -> dict:
    import warnings

    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {c.name: c for c in node.collect_testcases(None)}


def _with_constant_inputs(model, names, feeds):
    """``model`` with every input but the first made an initializer (Resize's scales, sizes
    and roi, Upsample's scales), and the feeds that remain."""
    from onnx import numpy_helper

    model = onnx.ModelProto.FromString(model.SerializeToString())
    keep = [i for i in model.graph.input if i.name == names[0]]
    feeds = dict(feeds)
    for name in names[1:]:
        model.graph.initializer.append(numpy_helper.from_array(feeds.pop(name), name))
    del model.graph.input[:]
    model.graph.input.extend(keep)
    return model, feeds


def _compare(got, expected, case):
    got = np.asarray(got)
    if expected.dtype.kind in "iub":
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got.astype(np.float64), expected,
                                   rtol=max(case.rtol, 1e-3), atol=max(case.atol, 1e-5))


@pytest.mark.parametrize("name", CASES)
def test_node(name):
    if name in EXPECTED_FAILURES:
        pytest.xfail(EXPECTED_FAILURES[name])
    case = _all_cases()[name]
    inputs, outputs = case.data_sets[0]
    names = [i.name for i in case.model.graph.input]
    feeds = dict(zip(names, inputs))
    model = case.model
    if any(n.op_type in ("Resize", "Upsample") for n in model.graph.node):
        model, feeds = _with_constant_inputs(model, names, feeds)
    net, params = graph.from_onnx(model, {k: v.shape for k, v in feeds.items()})
    got = graph.interpreter.run_graph(net, feeds, params)
    assert len(got) == len(outputs)
    for g, e in zip(got, outputs):
        _compare(g, e, case)
    lib = graph.build(net, "sim", params)
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**feeds)
    m.run()
    for k, e in enumerate(outputs):
        _compare(m.get_output(k).numpy(), e, case)
