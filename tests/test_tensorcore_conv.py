"""conv2d NHWC on tensor cores as an implicit GEMM: the ``implicit_gemm`` schedule pass, the
tensor-core conv schedule (the default for float16 / bfloat16 and explicit-TF32 NHWC convs
on sm_80+) on the ResNet-18 layer shapes with their fused epilogues, checked on the simulator
against float64 numpy, its rule errors, PTX, and a mixed-precision network."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import te
from ptxforge.backend_ptx import compile_module, find_ptxas
from ptxforge.ir import dtype as dt
from ptxforge.ir.intrin import ANNOTATION
from ptxforge.ir.stmt import For, walk
from ptxforge.ops import nn
from ptxforge.ops import testing as ref
from ptxforge.ops.schedules import default_schedule
from ptxforge.ops.schedules.gemm.chooser import choose_conv_config
from ptxforge.ops.schedules.gemm.forms import tensorcore_conv_unsupported
from ptxforge.ops.schedules.gemm.knobs import TensorCoreConfig
from ptxforge.ops.schedules.gemm.rules import check_conv_config
from ptxforge.ops.schedules.gemm.schedule import schedule_conv2d_nhwc_tensorcore
from ptxforge.passes import Pipeline
from ptxforge.passes.errors import PassError
from ptxforge.passes.schedule.common import ScheduleError

SM80 = "cuda -arch=sm_80"
RNG = np.random.default_rng(14)
TOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 2e-3}
REJECTED = (PassError, ScheduleError)


def intrins(device_module) -> set:
    """The tensor intrinsics of a lowered module's kernels."""
    return {s.annotations[ANNOTATION] for k in device_module.kernels() for s in walk(k.body)
            if isinstance(s, For) and ANNOTATION in s.annotations}


def host(x, dtype):
    return dt.to_bfloat16(x) if dtype == "bfloat16" else x.astype(dtype)


def f64(a, dtype):
    return (dt.from_bfloat16(a) if dtype == "bfloat16" else a).astype(np.float64)


def conv_layer(n, h, w, ci, co, k, stride, pad, dtype="float16", epilogue="", precision=None):
    """A conv2d NHWC layer as a network fuses it: the convolution (float32 sums) cast to
    ``dtype``, then ``epilogue`` ("bias", "bias_relu", "bias_add_relu": bias, residual add,
    ReLU in ``dtype``). Returns ``(tensors, inputs, reference)``."""
    out_dtype = "float32" if dtype == "float32" else dtype
    d = te.placeholder((n, h, w, ci), dtype, name="data")
    kern = te.placeholder((k, k, ci, co), dtype, name="kernel")
    y = nn.conv2d_nhwc(d, kern, stride, pad, out_dtype=out_dtype, precision=precision)
    tensors = [d, kern]
    x = RNG.standard_normal((n, h, w, ci)) * 0.5
    wt = RNG.standard_normal((k, k, ci, co)) / np.sqrt(k * k * ci)
    arrays = [host(x, dtype), host(wt, dtype)]
    extra = []
    if "bias" in epilogue:
        b = te.placeholder((co,), out_dtype, name="bias")
        y = te.compute(y.shape, lambda *i, y=y: y[i] + b[i[3]], name="T_add")
        tensors.append(b)
        extra.append(("bias", host(RNG.standard_normal(co) * 0.1, out_dtype)))
    if "add" in epilogue:
        r = te.placeholder(y.shape, out_dtype, name="residual")
        y = te.compute(y.shape, lambda *i, y=y: y[i] + r[i], name="T_add_res")
        tensors.append(r)
        extra.append(("res", host(RNG.standard_normal(y.shape) * 0.5, out_dtype)))
    if "relu" in epilogue:
        y = te.compute(y.shape, lambda *i, y=y: te.max(y[i], te.const(0, out_dtype)),
                       name="T_relu")
    tensors.append(y)
    arrays += [a for _, a in extra]

    def reference():
        a, b = f64(arrays[0], dtype), f64(arrays[1], dtype)
        if precision == "tf32":
            a, b = dt.round_to(a, "tf32"), dt.round_to(b, "tf32")
        out = ref.conv2d_nhwc_python(a, b, stride, pad)
        for name, v in extra:
            out = out + (f64(v, out_dtype) if name == "res" else f64(v, out_dtype))
        return np.maximum(out, 0) if "relu" in epilogue else out

    return tensors, arrays, reference


def run(tensors, arrays, schedule):
    mod = ptxforge.build(schedule, tensors, target="sim")
    out_t = tensors[-1]
    out = np.full(out_t.shape, np.nan, out_t.dtype if out_t.dtype != "bfloat16"
                  else dt.BFLOAT16_HOST)
    mod(*arrays, out)
    return mod, f64(out, out_t.dtype)


def inlined_schedule(out):
    """A schedule of ``out`` with every injective stage but the output inlined (as
    ``default_schedule`` does) and the convolution stage."""
    from ptxforge.ir.te import ComputeOp

    s = te.create_schedule(out.op)
    ops = [op for op in s.dag.ops if isinstance(op, ComputeOp)]
    for op in ops:
        if not op.reduce_axis and op is not out.op:
            s[op].compute_inline()
    return s, next(op for op in ops if op.reduce_axis)


def check(got, want, dtype):
    tol = TOL[dtype]
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


# ---------------------------------------------------------------------------------------
# the implicit_gemm pass


def test_implicit_gemm_makes_padded_operand_views_and_a_product():
    (d, kern, out), arrays, reference = conv_layer(1, 5, 5, 3, 6, 3, 2, 1)
    conv = out.op.input_tensors[0]
    s = te.create_schedule(out.op)
    a, b, g = s.implicit_gemm(conv, pad_m=16, pad_n=8, pad_k=16)
    # M = 3x3 pixels -> 16, N = 6 channels -> 8, K = 3x3x3 -> 32
    assert (a.name, a.shape, b.shape, g.shape) == ("conv2d_nhwc.A", (16, 32), (32, 8), (16, 8))
    assert [x.name for x in s[g].op.axis] == ["m", "n"] and s[g].op.reduce_axis[0].name == "k"
    assert len(s[conv].op.axis) == 4 and not s[conv].op.reduce_axis
    text = str(s.pipeline)
    assert text == "implicit_gemm(conv2d_nhwc, pad_m=16, pad_n=8, pad_k=16)"
    # the pass text replays, and the unscheduled product computes the convolution
    replayed = Pipeline.parse(text)(te.create_schedule(out.op).module)
    assert str(replayed) == str(s.module)
    _, got = run([d, kern, out], arrays, s)
    check(got, reference(), "float16")


def test_implicit_gemm_rejects_what_is_not_a_fresh_product():
    (d, kern, out), _, _ = conv_layer(1, 6, 6, 8, 8, 3, 1, 1)
    conv = out.op.input_tensors[0]
    s = te.create_schedule(out.op)
    s[conv].split(s[conv].op.axis[1], factor=2)
    with pytest.raises(REJECTED, match="before its loops are split"):
        s.implicit_gemm(conv)
    s = te.create_schedule(out.op)
    with pytest.raises(REJECTED, match="not a reduction"):
        s.implicit_gemm(out)
    with pytest.raises(REJECTED, match="pad_k must be a positive int"):
        s.implicit_gemm(conv, pad_k=0)
    a = te.placeholder((16, 16), "float16", name="a")
    b = te.placeholder((16, 16), "float16", name="b")
    r = te.reduce_axis((0, 16), name="r")
    unused = te.compute((2, 16, 16), lambda z, i, j: te.sum(
        a[i, r].astype("float32") * b[j, r].astype("float32"), axis=r), name="unused")
    with pytest.raises(REJECTED, match="read by neither operand"):
        te.create_schedule(unused.op).implicit_gemm(unused)


def test_implicit_gemm_takes_a_leading_batch_axis():
    x = te.placeholder((2, 20, 24), "float16", name="x")
    y = te.placeholder((2, 12, 24), "float16", name="y")
    bmm = nn.batch_matmul(x, y, out_dtype="float32")
    s = te.create_schedule(bmm.op)
    a, b, g = s.implicit_gemm(bmm, pad_m=16, pad_n=16, pad_k=16)
    assert (a.shape, b.shape, g.shape) == ((2, 32, 32), (2, 32, 16), (2, 32, 16))
    assert [x.name for x in s[g].op.axis] == ["b", "m", "n"]
    xv = RNG.standard_normal((2, 20, 24)).astype("float16")
    yv = RNG.standard_normal((2, 12, 24)).astype("float16")
    _, got = run([x, y, bmm], [xv, yv], s)
    want = xv.astype(np.float64) @ yv.astype(np.float64).transpose(0, 2, 1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


# ---------------------------------------------------------------------------------------
# the default schedule on the ResNet-18 layer shapes (batch and spatial size shrunk where
# the shape's rule allows: 49 pixels, 3 channels, strides and 1x1 windows are kept)

LAYERS = {
    # name: (n, h, w, ci, co, k, stride, pad, epilogue)
    "stem_7x7_s2_3ch": (1, 16, 16, 3, 64, 7, 2, 3, "bias_relu"),
    "layer1_3x3_residual": (1, 8, 8, 64, 64, 3, 1, 1, "bias_add_relu"),
    "layer2_down_1x1_s2": (1, 8, 8, 64, 128, 1, 2, 0, "bias"),
    "layer4_down_1x1_s2_7x7x512": (1, 14, 14, 64, 512, 1, 2, 0, "bias"),
    "layer4_3x3_7x7": (1, 7, 7, 64, 64, 3, 1, 1, "bias_add_relu"),
    "batch2_odd_channels": (2, 5, 5, 12, 20, 3, 1, 1, ""),
}


@pytest.mark.parametrize("name", list(LAYERS))
def test_resnet18_layer_on_tensor_cores_matches_numpy(name):
    *shape, epilogue = LAYERS[name]
    tensors, arrays, reference = conv_layer(*shape, epilogue=epilogue)
    mod, got = run(tensors, arrays, default_schedule(tensors[-1], target=SM80))
    assert "mma_m16n8k16_f16_f32_kn" in intrins(mod.device_module)
    # the epilogue is fused: one kernel, or split-K's two where a residual's reads make
    # the chooser split (the second kernel adds it)
    _, conv = inlined_schedule(tensors[-1])
    epi = None if tensors[-1].op is conv else tensors[-1].op
    split = choose_conv_config(conv, SM80, epi).split_k
    assert len(mod.device_module.kernels()) == (1 if split == 1 else 2)
    check(got, reference(), "float16")


@pytest.mark.parametrize("dtype,precision", [("bfloat16", None), ("float32", "tf32")])
def test_bfloat16_and_explicit_tf32(dtype, precision):
    tensors, arrays, reference = conv_layer(1, 7, 7, 16, 24, 3, 1, 1, dtype, "bias_relu",
                                            precision)
    mod, got = run(tensors, arrays, default_schedule(tensors[-1], target=SM80))
    want = "mma_m16n8k8_tf32_f32" if precision else "mma_m16n8k16_bf16_f32_kn"
    used = intrins(mod.device_module)
    assert want in used
    if precision:  # the default loads TF32 fragments with ldmatrix (B kept [n, k])
        assert "ldmatrix_a_x4_tf32" in used and not any("load_" in n for n in used
                                                          if n.endswith("tf32"))
    check(got, reference(), dtype)


@pytest.mark.parametrize("cfg", [
    TensorCoreConfig(32, 32, 32, 2, 2, vec=8, stages=1, async_copy=False),
    TensorCoreConfig(64, 16, 16, 2, 1, vec=4, pad=0, stages=2, async_copy=True),
    TensorCoreConfig(16, 32, 32, 1, 2, vec=2, frag_load="load", stages=3, async_copy=True),
], ids=["sync", "pipelined_unpadded", "lane_loads"])
def test_explicit_configurations(cfg):
    tensors, arrays, reference = conv_layer(1, 7, 7, 16, 32, 3, 2, 1, epilogue="bias_relu")
    s, conv = inlined_schedule(tensors[-1])
    assert schedule_conv2d_nhwc_tensorcore(s, conv, tensors[-1].op, SM80, cfg) == cfg
    _, got = run(tensors, arrays, s)
    check(got, reference(), "float16")


@pytest.mark.parametrize("shape,epilogue,dtype,precision,split", [
    ((1, 7, 7, 64, 32, 3, 1, 1), "bias_add_relu", "float16", None, 2),
    ((2, 5, 5, 24, 16, 3, 1, 1), "", "float16", None, 3),       # K padded to 3 parts
    ((1, 7, 7, 128, 16, 1, 1, 0), "bias", "bfloat16", None, 2),
    ((1, 6, 6, 16, 16, 3, 1, 1), "bias_relu", "float32", "tf32", 4),
    ((1, 6, 6, 16, 16, 3, 1, 1), "bias_relu", "float32", "tf32_load", 4),
], ids=["residual_split2", "batch2_split3", "bf16_1x1_split2", "tf32_split4",
        "tf32_lane_loads_split4"])
def test_split_k_sums_partial_products_in_a_second_kernel(shape, epilogue, dtype, precision,
                                                          split):
    """split_k > 1: blockIdx.z computes a part of the reduction into float32 partial sums,
    and the second kernel adds them up with the epilogue; the result is the convolution.
    TF32 fragments come from ldmatrix, or lane by lane (``tf32_load``)."""
    load = "load" if precision == "tf32_load" else "ldmatrix"
    precision = "tf32" if precision == "tf32_load" else precision
    tensors, arrays, reference = conv_layer(*shape, dtype, epilogue, precision)
    s, conv = inlined_schedule(tensors[-1])
    tf32 = precision == "tf32"
    cfg = TensorCoreConfig(16, 16, 16 if tf32 else 32, 1, 2, vec=4, stages=2,
                           async_copy=True, frag_load=load, tf32=tf32, split_k=split)
    epi = None if tensors[-1].op is conv else tensors[-1].op
    schedule_conv2d_nhwc_tensorcore(s, conv, epi, SM80, cfg)
    mod, got = run(tensors, arrays, s)
    product, total = mod.device_module.kernels()
    assert tuple(product.attrs.launch.grid)[2] == split
    if tf32:
        assert ("ldmatrix_a_x4_tf32" if load == "ldmatrix" else "load_a_tf32") in \
            intrins(mod.device_module)
    check(got, reference(), dtype)


def test_split_k_rules():
    tensors, _, _ = conv_layer(1, 7, 7, 16, 16, 3, 1, 1, epilogue="bias")
    out = tensors[-1]
    s, conv = inlined_schedule(out)
    # K = 144 padded to 4 parts of 2 block_k steps of 32: too few for 3 stages
    cfg = TensorCoreConfig(16, 16, 32, 1, 2, vec=8, stages=3, async_copy=True, split_k=4)
    with pytest.raises(ScheduleError, match="per split_k part"):
        schedule_conv2d_nhwc_tensorcore(s, conv, out.op, SM80, cfg)
    with pytest.raises(ScheduleError, match="split_k to be a positive int"):
        check_conv_config(TensorCoreConfig(16, 16, 32, 1, 2, split_k=0), conv, SM80)


# ---------------------------------------------------------------------------------------
# what stays on CUDA cores, and the rules


def test_float32_depthwise_and_old_gpus_stay_on_cuda_cores():
    (d, k, out), _, _ = conv_layer(1, 6, 6, 8, 8, 3, 1, 1, "float32")
    assert "precision='tf32'" in tensorcore_conv_unsupported(out.op, SM80)
    assert not intrins(ptxforge.lower(default_schedule(out, target=SM80), [d, k, out]))
    (d, k, out), _, _ = conv_layer(1, 6, 6, 8, 8, 3, 1, 1)
    conv = out.op.input_tensors[0].op
    assert "needs sm_80+" in tensorcore_conv_unsupported(conv, "cuda -arch=sm_75")
    assert not intrins(ptxforge.lower(default_schedule(out, target="cuda -arch=sm_75"),
                                      [d, k, out]))
    x = te.placeholder((1, 6, 6, 8), "float16", name="x")
    w = te.placeholder((3, 3, 8, 1), "float16", name="w")
    dw = nn.depthwise_conv2d_nhwc(x, w, 1, 1, out_dtype="float16")
    assert not intrins(ptxforge.lower(default_schedule(dw, target=SM80), [x, w, dw]))
    with pytest.raises(ScheduleError, match="is not a conv2d NHWC"):
        s = te.create_schedule(dw.op)
        schedule_conv2d_nhwc_tensorcore(s, dw.op.input_tensors[0].op, dw.op, SM80)


@pytest.mark.parametrize("cfg,rule", [
    (TensorCoreConfig(32, 32, 32, 4, 2), "warp tile's rows .* are a multiple of 16"),
    (TensorCoreConfig(32, 32, 24, 2, 2), "block_k 24 is a multiple of 16"),
    (TensorCoreConfig(128, 128, 64, 2, 2, stages=2), "bytes of shared memory\\) to fit"),
    (TensorCoreConfig(32, 32, 32, 2, 2, stages=4), "at least 4 block_k steps"),
    (TensorCoreConfig(32, 32, 32, 2, 2, vec=3, async_copy=True), "cp.async of 4, 8 or 16"),
])
def test_illegal_configurations_name_the_rule(cfg, rule):
    (d, k, out), _, _ = conv_layer(1, 6, 6, 8, 8, 3, 1, 1)  # K = 72 -> 96 with block_k 32
    s, conv = inlined_schedule(out)
    with pytest.raises(ScheduleError, match=f"tensor-core conv2d conv2d_nhwc .*{rule}"):
        schedule_conv2d_nhwc_tensorcore(s, conv, out.op, SM80, cfg)


@pytest.mark.parametrize("shape", [(1, 7, 7, 512, 512, 3, 1, 1), (1, 28, 28, 128, 128, 3, 1, 1),
                                   (1, 224, 224, 3, 64, 7, 2, 3), (2, 28, 28, 128, 128, 3, 1, 1),
                                   (16, 224, 224, 3, 64, 7, 2, 3)],
                         ids=["seed_7x7", "layer2_28x28", "stem_224", "batch2_28x28",
                              "stem_224_batch16"])
def test_a_block_computes_only_its_own_pixels(shape):
    # A block tile of pixels that does not start a row of the image (16 of 7x7, 16 of 28x28,
    # 64 of 112x112) must still bound the block's C tile to block_m rows: one warp per
    # warps_m x warps_n, not the whole product once per block (which is slow, or over the
    # launch limits at full ResNet-18 size). With a batch the row (n*OH + y)*OW + x has a
    # loose bound (one image) as written; the tight one comes from its simplified form.
    # Each split-K part (blockIdx.z) is bounded the same way; the kernel summing the parts
    # runs once over the output, one thread an element.
    (d, k, out), _, _ = conv_layer(*shape)
    conv = out.op.input_tensors[0].op
    cfg = choose_conv_config(conv, SM80)
    kerns = ptxforge.lower(default_schedule(out, target=SM80), [d, k, out]).kernels()
    assert len(kerns) == (1 if cfg.split_k == 1 else 2)
    kern = kerns[0]
    assert tuple(kern.attrs.launch.block) == (32, cfg.warps_n, cfg.warps_m)
    n, h, w, _, co, kk, stride, pad = shape
    pixels = n * ((h + 2 * pad - kk) // stride + 1) * ((w + 2 * pad - kk) // stride + 1)
    assert tuple(kern.attrs.launch.grid) == (-(-pixels // cfg.block_m), -(-co // cfg.block_n),
                                             cfg.split_k)
    if cfg.split_k > 1:
        threads = kerns[1].attrs.launch.block[0] * kerns[1].attrs.launch.grid[0]
        assert pixels * co <= threads < pixels * co + kerns[1].attrs.launch.block[0]


def test_default_configuration_spreads_small_layers_over_the_sms():
    d = te.placeholder((1, 7, 7, 512), "float16", name="d")
    k = te.placeholder((3, 3, 512, 512), "float16", name="k")
    conv = nn.conv2d_nhwc(d, k, 1, 1, out_dtype="float16").op.input_tensors[0].op
    cfg = choose_conv_config(conv, SM80)
    # every split-K part of every output tile is a block of its own
    blocks = -(-49 // cfg.block_m) * (512 // cfg.block_n) * cfg.split_k
    assert blocks >= 64 and cfg.async_copy and cfg.stages >= 2


# ---------------------------------------------------------------------------------------
# PTX and a network


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas (CUDA toolkit) is not installed here")
def test_ptx_has_mma_ldmatrix_and_cp_async_and_assembles():
    tensors, _, _ = conv_layer(1, 7, 7, 64, 64, 3, 1, 1, epilogue="bias_add_relu")
    dev = ptxforge.lower(default_schedule(tensors[-1], target=SM80), tensors)
    for sm in ("sm_80", "sm_90"):
        ptx = compile_module(dev, sm).get_source("ptx")
        assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx
        assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
        # B [K, N] transposed: x2 or x4 as the warp tile's columns (the residual's split-K
        # tiles: 32 columns a warp, x4)
        assert ("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16" in ptx
                or "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx)
        assert "cp.async.cg.shared.global" in ptx or "cp.async.ca.shared.global" in ptx
        assert "ld.local" not in ptx and "st.local" not in ptx


@pytest.mark.parametrize("layout", ["NHWC", None], ids=["NHWC", "layout_not_given"])
def test_mixed_precision_network_runs_its_convolutions_on_tensor_cores(layout):
    """An NCHW network in float16 runs its convolutions as NHWC implicit GEMMs on the
    tensor cores, asked for (layout="NHWC") or not (a low precision converts the layout
    unless layout="NCHW" keeps it)."""
    from ptxforge import graph
    from ptxforge.graph import nn as gnn

    def rand(*shape, scale=1.0):
        return (RNG.standard_normal(shape) * scale).astype("float32")

    x = graph.var("data", (1, 3, 14, 14))  # NCHW in; the build converts to NHWC
    w1, b1 = graph.const(rand(16, 3, 3, 3, scale=0.3), "w1"), graph.const(rand(16), "b1")
    w2 = graph.const(rand(16, 16, 3, 3, scale=0.1), "w2")
    y = gnn.relu(gnn.bias_add(gnn.conv2d(x, w1, strides=2, padding=1), b1))
    y = gnn.relu(graph.add(gnn.conv2d(y, w2, padding=1), y))
    net = graph.function(gnn.batch_flatten(gnn.global_avg_pool2d(y)))
    data = rand(1, 3, 14, 14)
    want = graph.evaluate(net, {"data": data})
    lib = graph.build(net, "sim", layout=layout, precision="float16")
    convs = [f for f in lib.functions.values() if "conv2d" in f.func.name]
    assert len(convs) == 2
    for f in convs:
        assert "mma_m16n8k16_f16_f32_kn" in intrins(f.device_module), f.func.name
    if layout is None:  # layout="NCHW" keeps the network's convolutions in NCHW
        kept = graph.build(net, "sim", layout="NCHW", precision="float16")
        assert not any("mma" in str(intrins(f.device_module))
                       for f in kept.functions.values() if "conv2d" in f.func.name)
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(data=data)
    m.run()
    got = m.get_output(0).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-2 * np.abs(want).max())


# ---------------------------------------------------------------------------------------
# the AutoTVM template


def test_autotvm_template_rejects_illegal_knobs_tunes_and_dispatches(tmp_path):
    from ptxforge import autotvm
    from ptxforge.autotvm import tensorcore_conv as template
    from ptxforge.autotvm.space import InstantiationError
    from ptxforge.autotvm.tuner import RandomTuner
    from ptxforge.measure import LocalBuilder, load_records

    args = (1, 7, 7, 16, 32, 3, 3, 1, 1, "float16")
    task = autotvm.task.create(template.NAME, args=args, target=SM80)
    space = task.config_space
    assert list(space.space_map) == ["block_m", "block_n", "block_k", "warps_m", "warps_n",
                                     "stages", "vec", "split_k"]
    assert task.flop == 2 * 49 * 32 * 144
    # block_m 16 over 2 warps: 8-row warp tiles are no m16n8 fragments
    # block_m <= 64 (49 pixels), block_n <= 32, split_k 1-8 (K = 144 is at least 16 x 8)
    assert space.dims == [3, 2, 3, 3, 3, 4, 3, 4]
    bad = space.get(space.knob2point([0, 0, 0, 1, 0, 0, 0, 0]))
    with pytest.raises(InstantiationError, match="warp tile's rows .* a multiple of 16"):
        task.instantiate(bad)
    # 4 stages of block_k 64 over K = 144 (-> 192): only 3 steps
    with pytest.raises(InstantiationError, match="at least 4 block_k steps"):
        task.instantiate(space.get(space.knob2point([0, 0, 2, 0, 0, 3, 0, 0])))
    log = str(tmp_path / "conv.log")
    option = autotvm.measure_option(builder=LocalBuilder(n_parallel=2, compile_to="ir"),
                                    runner=autotvm.SimRunner(max_sim_seconds=5.0))
    tuner = RandomTuner(task, seed=3)
    tuner.tune(n_trial=4, measure_option=option,
               callbacks=[autotvm.callback.log_to_file(log)])
    records = load_records(log)
    ok = [r.correctness for _, r in records if r.error_no == 0]
    assert len(records) == 4 and "passed" in ok
    assert all(c == "passed" or c.startswith("skipped") for c in ok)  # none failed
    with autotvm.apply_history_best(log):
        s, tensors = template.conv2d_nhwc_tensorcore(*args)
    assert s.pipeline == task.pipeline(tuner.best_config)
    d, k, out = tensors
    x = RNG.standard_normal((1, 7, 7, 16)).astype("float16")
    w = (RNG.standard_normal((3, 3, 16, 32)) / 12).astype("float16")
    mod, got = run(tensors, [x, w], s)
    assert "mma_m16n8k16_f16_f32_kn" in intrins(mod.device_module)
    check(got, ref.conv2d_nhwc_python(x.astype(np.float64), w.astype(np.float64), 1, 1),
          "float16")
