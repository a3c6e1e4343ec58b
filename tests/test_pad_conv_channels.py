"""``pad_conv_channels``: a tensor-core convolution over 3 channels (ResNet's 7x7 stride-2
stem) reads its input padded to 4 (or 8) channels with zeros, and its weight padded with
zero rows. Which convolutions it pads, where the padding goes after fusion, that the padded
network computes the unpadded one's result exactly, that the tensor-core conv schedules
(mma.sync and wgmma, the AutoTVM template and the auto-scheduler's sketches) run the padded
stem (K = 196 and 392, padded to the block) against numpy, and that its A tile is copied
with cp.async as wide as the padded channels and the tiles' copy width allow."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest

import ptxforge
from ptxforge import graph
from ptxforge.graph import nn as gnn
from ptxforge.graph.passes import PadConvChannels, optimization_pipeline

from .test_tensorcore_conv import check, conv_layer, f64, inlined_schedule, intrins, run

SM80 = "cuda -arch=sm_80"
SM90A = "cuda -arch=sm_90a"
RNG = np.random.default_rng(3)


def small_stem_net(layout: str = "NHWC", channels: int = 3):
    """An image (1 x 32 x 32 x ``channels``) through the 7x7 stride-2 stem (16 channels,
    bias, ReLU) and a 3x3 convolution (16 to 8 channels, ReLU). Inputs and weights are small
    integers, so every sum is exact in float32 and the rounding of each result to 16 bits
    does not depend on the order of the sums: padded and unpadded builds must agree bit for
    bit."""
    shape = (1, 32, 32, channels) if layout == "NHWC" else (1, channels, 32, 32)
    x = graph.var("data", shape)
    w1 = RNG.integers(-1, 2, (7, 7, channels, 16)).astype("float32")
    w2 = RNG.integers(-1, 2, (3, 3, 16, 8)).astype("float32")
    bias = RNG.integers(-4, 5, 16).astype("float32")
    if layout == "NCHW":
        w1, w2 = w1.transpose(3, 2, 0, 1), w2.transpose(3, 2, 0, 1)
    axis = 3 if layout == "NHWC" else 1
    y = gnn.conv2d(x, graph.const(w1, "stem_weight"), strides=2, padding=3,
                   data_layout=layout)
    y = gnn.relu(gnn.bias_add(y, graph.const(bias, "stem_bias"), axis=axis))
    y = gnn.relu(gnn.conv2d(y, graph.const(w2, "conv2_weight"), padding=1, data_layout=layout))
    data = RNG.integers(-2, 3, shape).astype("float32")
    return graph.function(y), data


def convs(g: graph.Graph) -> list:
    return [c for c in g.calls() if c.op == "nn.conv2d"]


def run_sim(lib, data) -> np.ndarray:
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(data=data)
    m.run()
    return m.get_output(0).numpy()


# -- the pass ----------------------------------------------------------------------------


@pytest.mark.parametrize("multiple", [4, 8])
def test_the_stem_reads_zero_padded_channels_and_weight_rows(multiple):
    net, _ = small_stem_net()
    g = graph.optimize(net, precision="float16", fuse=False, pad_channels=multiple)
    stem, second = convs(g)
    data, weight = stem.args
    assert data.op == "nn.pad" and data.attrs["pad_width"] == ((0, 0),) * 3 + ((0, multiple - 3),)
    assert data.shape == (1, 32, 32, multiple) and data.dtype == "float16"
    assert f"Tensor[(1, 32, 32, {multiple}), float16]" in str(g)
    # the weight is a constant padded at build time, its original rows kept
    assert isinstance(weight, graph.Constant) and weight.shape == (7, 7, multiple, 16)
    assert weight.name == "stem_weight"
    unpadded = convs(graph.optimize(net, precision="float16", fuse=False, pad_channels=1))[0]
    np.testing.assert_array_equal(weight.value[:, :, :3], unpadded.args[1].value)
    assert not weight.value[:, :, 3:].any()
    # the 16-channel convolution is left as it is
    assert second.args[0].shape[3] == 16 and second.args[1].shape == (3, 3, 16, 8)
    assert second.args[0].op != "nn.pad"
    assert PadConvChannels(multiple).text in optimization_pipeline(
        precision="float16", pad_channels=multiple).text
    assert "pad_conv_channels" not in optimization_pipeline(precision="float16",
                                                            pad_channels=1).text


def test_depthwise_grouped_nchw_aligned_and_input_weight_convs_are_left_alone():
    x = graph.var("x", (1, 8, 8, 3), "float16")
    depthwise = gnn.conv2d(x, graph.const(np.ones((3, 3, 1, 3), "float16")), padding=1,
                           groups=3, data_layout="NHWC")
    y = graph.var("y", (1, 8, 8, 6), "float16")
    grouped = gnn.conv2d(y, graph.const(np.ones((3, 3, 2, 6), "float16")), padding=1,
                         groups=3, data_layout="NHWC")
    z = graph.var("z", (1, 8, 8, 64), "float16")
    aligned = gnn.conv2d(z, graph.const(np.ones((1, 1, 64, 8), "float16")), data_layout="NHWC")
    nchw = gnn.conv2d(graph.var("n", (1, 3, 8, 8), "float16"),
                      graph.const(np.ones((8, 3, 3, 3), "float16")), padding=1)
    as_input = gnn.conv2d(x, graph.var("w", (3, 3, 3, 8), "float16"), padding=1,
                          data_layout="NHWC")
    fp32 = gnn.conv2d(graph.var("f", (1, 8, 8, 3)), graph.const(np.ones((3, 3, 3, 8), "float32")),
                      padding=1, data_layout="NHWC")
    for conv in (depthwise, grouped, aligned, nchw, as_input, fp32):
        g = graph.function(conv)
        assert PadConvChannels(4)(g) is g, conv
    # the same 3-channel input read by two convolutions is padded once
    w = graph.const(np.ones((3, 3, 3, 8), "float16"))
    two = graph.function(graph.add(gnn.conv2d(x, w, padding=1, data_layout="NHWC"),
                                   gnn.conv2d(x, w, padding=(1, 1), data_layout="NHWC")))
    padded = PadConvChannels(4)(two)
    assert [c.op for c in padded.calls()].count("nn.pad") == 1
    with pytest.raises(graph.GraphError, match="pad_channels must be a positive int"):
        optimization_pipeline(precision="float16", pad_channels=0)


def test_float32_is_unchanged_and_tf32_is_padded():
    net, data = small_stem_net()
    plain = graph.optimize(net, fuse=False)
    assert str(plain) == str(graph.optimize(net, fuse=False, pad_channels=1))
    assert all(c.args[0].shape[3] in (3, 16) for c in convs(plain))
    tf32 = graph.optimize(net, fuse=False, precision="tf32")
    stem = convs(tf32)[0]
    assert stem.attrs["precision"] == "tf32" and stem.args[0].shape == (1, 32, 32, 4)
    assert stem.args[0].dtype == "float32"
    padded = run_sim(graph.build(net, "sim", precision="tf32"), data)
    unpadded = run_sim(graph.build(net, "sim", precision="tf32", pad_channels=1), data)
    np.testing.assert_array_equal(padded, unpadded)
    np.testing.assert_array_equal(padded, graph.evaluate(net, {"data": data}))


@pytest.mark.parametrize("layout,first", [("NHWC", "fused_cast_nn_pad"),
                                          ("NCHW", "fused_transpose_cast_nn_pad")])
def test_the_padding_fuses_into_the_kernel_that_casts_the_input(layout, first):
    net, _ = small_stem_net(layout)
    padded = graph.extract_fused_functions(net, precision="float16")
    unpadded = graph.extract_fused_functions(net, precision="float16", pad_channels=1)
    assert len(padded) == len(unpadded)  # no kernel of its own
    assert padded[0].func.name == first
    assert padded[0].func.outputs[0].shape == (1, 32, 32, 4)
    stem = padded[1].func
    assert stem.name.startswith("fused_nn_conv2d")
    assert [tuple(p.shape) for p in stem.params[:2]] == [(1, 32, 32, 4), (7, 7, 4, 16)]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_padded_network_computes_the_unpadded_result_on_the_simulator(dtype):
    net, data = small_stem_net("NCHW")
    lib = graph.build(net, "sim", precision=dtype)
    assert any(f.func.func.params[0].shape[-1] == 4 for f in lib.functions.values()
               if "conv2d" in f.func.name)
    stem = next(f for f in lib.functions.values() if "conv2d" in f.func.name)
    assert f"mma_m16n8k16_{'f16' if dtype == 'float16' else 'bf16'}_f32_kn" in \
        intrins(stem.device_module)
    padded = run_sim(lib, data)
    unpadded = run_sim(graph.build(net, "sim", precision=dtype, pad_channels=1), data)
    np.testing.assert_array_equal(padded, unpadded)
    want = graph.evaluate(net, {"data": data})
    np.testing.assert_allclose(padded, want, rtol=1e-2, atol=1e-2 * np.abs(want).max())


def cp_async_bytes(ptx: str) -> Counter:
    """How many ``cp.async`` copies of each size (bytes) a PTX text holds."""
    return Counter(int(n) for n in re.findall(
        r"cp\.async\.c[ag]\.shared\.global(?:\.L2::\d+B)?\s*\[[^]]*\],\s*\[[^]]*\],\s*(\d+)",
        ptx))


def test_the_padded_stem_copies_its_input_with_cp_async_as_wide_as_its_channels():
    from ptxforge.graph.build_module import compile_function
    from ptxforge.ops.schedules.gemm.chooser import choose_conv_config

    net, _ = small_stem_net()
    lib = graph.build(net, SM90A, precision="float16")  # the default: 4 channels
    stem = next(f for f in lib.functions.values() if "conv2d" in f.func.name)
    assert stem.func.func.params[0].shape[-1] == 4
    ptx = {4: stem.ptx.get_source("ptx")}
    for multiple in (1, 8):  # the stem's kernel alone
        funcs = graph.extract_fused_functions(net, precision="float16", pad_channels=multiple)
        func = next(f for f in funcs if "conv2d" in f.name)
        assert func.func.params[0].shape[-1] == (3 if multiple == 1 else multiple)
        ptx[multiple] = compile_function(func, SM90A, None).ptx.get_source("ptx")
    sizes = {m: cp_async_bytes(text) for m, text in ptx.items()}
    # the copy width of each build's default tiles (the stem: 256 pixels x 16 channels)
    vec = {m: choose_conv_config(conv_layer(1, 32, 32, 3 if m == 1 else m, 16, 7, 2, 3)[0][-1]
                                 .op.input_tensors[0].op, SM90A).vec for m in (1, 4, 8)}
    # 3 channels: A element by element with synchronous loads, only B's copies are cp.async;
    # 4 (8): A in cp.async copies of 4 (8) elements where the tiles' vec allows, B in vec
    assert set(sizes[1]) == {2 * vec[1]}
    for m in (4, 8):
        assert set(sizes[m]) == {2 * min(m, vec[m]), 2 * vec[m]}, (m, vec[m], sizes[m])
        # A's loads moved from synchronous ld.global into cp.async
        assert ptx[m].count("ld.global") < ptx[1].count("ld.global")
        assert sum(sizes[m].values()) > sum(sizes[1].values())


# -- the schedules on the padded stem ------------------------------------------------------


@pytest.mark.parametrize("ci,dtype", [(4, "float16"), (8, "bfloat16")])
def test_mma_sync_and_wgmma_conv_schedules_run_the_padded_stem(ci, dtype):
    """K = 7*7*4 = 196 (7*7*8 = 392) padded to the block's K; the copies of A as wide as
    the channels: vec 4 (8) elements."""
    from ptxforge.ops.schedules.gemm.knobs import WgmmaScheduleConfig
    from ptxforge.ops.schedules.gemm.schedule import (
        schedule_conv2d_nhwc_tensorcore,
        schedule_conv2d_nhwc_wgmma,
    )

    tensors, arrays, reference = conv_layer(1, 16, 16, ci, 64, 7, 2, 3, dtype, "bias_relu")
    want = reference()
    for which in ("mma", "wgmma"):
        s, conv = inlined_schedule(tensors[-1])
        if which == "mma":
            schedule_conv2d_nhwc_tensorcore(s, conv, tensors[-1].op, SM80)
            target = "sim"
        else:
            schedule_conv2d_nhwc_wgmma(s, conv, tensors[-1].op, "sim -arch=sm_90a",
                                       WgmmaScheduleConfig(64, 1, 3, 1))
            target = "sim -arch=sm_90a"
        text = str(s.pipeline)
        assert f"split(conv2d_nhwc.A.shared.ax0.ax1.fused, factors=[{ci}])" in text
        assert "async_copy(conv2d_nhwc.A.shared)" in text
        mod = ptxforge.build(s, tensors, target=target)
        out = np.full(tensors[-1].shape, np.nan, arrays[0].dtype)
        mod(*arrays, out)
        check(f64(out, dtype), want, dtype)


def test_the_autotvm_template_runs_the_padded_stem():
    from ptxforge import autotvm
    from ptxforge.autotvm import tensorcore_conv  # noqa: F401  (registers the template)

    args = (1, 16, 16, 4, 64, 7, 7, 2, 3, "float16")
    task = autotvm.task.create(tensorcore_conv.NAME, args=args, target=SM80)
    space = task.config_space
    want = {"block_m": 32, "block_n": 64, "block_k": 64, "warps_m": 2, "warps_n": 2,
            "stages": 2, "vec": 8, "split_k": 1}
    knobs = [[e.val for e in space.space_map[name].entities].index(want[name])
             for name in space.space_map]
    s, tensors = task.instantiate(space.get(space.knob2point(knobs)))
    # K = 196 -> 256 in 4 blocks of 64; vec 8 copies A 4 elements at a time (its channels)
    assert "split(conv2d_nhwc.A.shared.ax0.ax1.fused, factors=[4])" in str(s.pipeline)
    _, arrays, reference = conv_layer(1, 16, 16, 4, 64, 7, 2, 3)
    mod, got = run(tensors, arrays, s)
    check(got, reference(), "float16")


def test_the_auto_scheduler_sketches_take_the_padded_stem_task():
    from ptxforge import autosched
    from ptxforge.autosched.evolution import random_population
    from ptxforge.autosched.features import population_features
    from ptxforge.autosched.printer import schedule_from_pipeline
    from ptxforge.autosched.state import State
    from ptxforge.ops import testing as ref

    net, _ = small_stem_net()
    tasks, _ = autosched.extract_tasks(net, None, SM90A, precision="float16")
    stem = next(t for t in tasks if "conv2d" in t.desc)
    assert stem.tensors[0].shape[-1] == 4 and tuple(stem.tensors[1].shape) == (7, 7, 4, 16)
    names = [s.name for s in stem.sketches]
    assert names[-2:] == ["tensorcore_conv(conv2d_nhwc)", "wgmma_conv(conv2d_nhwc)"]
    # the fused function's inputs: the padded image, the padded weight, the bias
    x = RNG.integers(-2, 3, (1, 32, 32, 4)).astype("float16")
    x[..., 3] = 0
    w = RNG.integers(-1, 2, (7, 7, 4, 16)).astype("float16")
    w[:, :, 3] = 0
    b = RNG.integers(-4, 5, 16).astype("float16")
    want = np.maximum(ref.conv2d_nhwc_python(x.astype(np.float64), w.astype(np.float64), 2, 3)
                      + b, 0)
    pop = random_population(stem, 300, np.random.default_rng(0))
    _, valid, _ = population_features(stem.models, pop, stem.flop_ct, 132)
    for sketch in (len(names) - 2, len(names) - 1):
        rows = pop[valid & (pop[:, 0] == sketch)]
        assert len(rows), names[sketch]
        for k, row in enumerate(rows[:2]):  # states the model accepts schedule the stem
            text = State.from_row(row, stem).pipeline_text(stem)
            assert "implicit_gemm(" in text
            vec = int(re.search(r"split\(conv2d_nhwc\.A\.shared\.ax0\.ax1\.fused, "
                                r"factors=\[(\d+)\]\)", text).group(1))
            assert vec in (1, 2, 4)  # never wider than the 4 channels
            assert vec == 1 or "async_copy(conv2d_nhwc.A.shared)" in text
            if k == 0:  # and one of each computes it (integers: exactly)
                mod = ptxforge.build(schedule_from_pipeline(stem, text), stem.tensors,
                                     target="sim -arch=sm_90a")
                out = np.full((1, 16, 16, 16), np.nan, "float16")
                mod(x, w, b, out)
                np.testing.assert_array_equal(out, want)


def test_the_command_line_takes_pad_channels():
    import argparse

    from ptxforge.cli.bench import add_bench_parser
    from ptxforge.cli.tune import add_tune_network_parser

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd")
    add_tune_network_parser(sub)
    add_bench_parser(sub)
    tune = ["tune-network", "resnet_v1-18", "--trials", "4", "--log", "x.json"]
    bench = ["bench", "network", "resnet_v1-18", "--log", "x.json"]
    for common in (tune, bench):
        assert parser.parse_args(common).pad_channels is None
        assert parser.parse_args(common + ["--pad-channels", "8"]).pad_channels == 8
