"""The default GPU schedules (``ptxforge.ops.schedules``): every operator and some
multi-operator DAGs match numpy on the simulator; realistic layers (ResNet-18, the seed
layer) lower within the GPU's limits; a few compile to PTX; the tile chooser, the DAG plan
and the registry behave as documented."""

from __future__ import annotations

import re
import zlib

import numpy as np
import pytest

import ptxforge
import ptxforge.ops as ops
from ptxforge import te, workloads
from ptxforge.ir.te import ComputeOp
from ptxforge.ops import testing as ref
from ptxforge.ops.schedules import (
    choose_tiling,
    default_schedule,
    default_schedule_for,
    plan,
    rank_tilings,
    register_schedule,
    registered_tags,
    schedule_injective,
    schedule_reduce,
    schedule_tiled,
)
from ptxforge.ops.schedules.cases import RESNET18, SMALL, Workload, workload
from ptxforge.ops.schedules.tiling import MAX_INNER, SHARED_MARGIN
from ptxforge.passes import PassContext

MAX_SHARED = 48 * 1024
TILED_TAGS = ("conv2d_nchw", "conv2d_nhwc", "depthwise_conv2d_nchw", "depthwise_conv2d_nhwc",
              "dense", "matmul", "batch_matmul")


def _seed(*parts) -> int:
    return zlib.crc32(repr(parts).encode())


def _run_sim(w: Workload, s, rng):
    f = ptxforge.build(s, w.tensors, target="sim")
    inputs = w.random_inputs(rng)
    dev = ptxforge.sim()
    out = ptxforge.nd.empty(w.output.shape, w.output.dtype, dev)
    f(*[ptxforge.nd.array(x, dev) for x in inputs], out)
    return out.numpy(), w.expected(inputs)


def _elements(shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if shape else 1


# ---------------------------------------------------------------------------------------
# every operator on small shapes

PARAMS = [pytest.param(case, shape, id=f"{case}-{k}")
          for case, shapes in SMALL.items() for k, shape in enumerate(shapes)]


@pytest.mark.parametrize("case,shape", PARAMS)
def test_default_schedule_matches_numpy(case, shape):
    w = workload(case, **shape)
    s = default_schedule(w.output)
    module = ptxforge.lower(s, w.tensors)
    # the output is computed in parallel unless it is tiny
    last = module.kernels()[-1]
    threads = int(np.prod(last.launch.block)) * int(np.prod(last.launch.grid))
    if _elements(w.output.shape) >= 32:
        assert threads >= 32
    got, want = _run_sim(w, s, np.random.default_rng(_seed(case, shape)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------
# DAGs of several operators


def _ph(shape, name):
    return te.placeholder(shape, name=name)


def dag_conv_relu_pool():
    d, k = _ph((1, 3, 9, 9), "d"), _ph((4, 3, 3, 3), "k")
    out = ops.nn.max_pool2d(ops.nn.relu(ops.nn.conv2d_nchw(d, k, 1, 1)), 3, 2, 1)
    return Workload("conv-relu-pool", [d, k, out], lambda a, b: ref.pool2d_python(
        np.maximum(ref.conv2d_nchw_python(a, b, 1, 1), 0), 3, 2, 1, 1, "max")), 2


def dag_residual_block():
    d, k1, k2 = _ph((2, 4, 6, 6), "d"), _ph((4, 4, 3, 3), "k1"), _ph((4, 4, 3, 3), "k2")
    b = _ph((1, 4, 1, 1), "b")
    c1 = ops.nn.relu(ops.nn.conv2d_nchw(d, k1, 1, 1) + b)
    out = ops.nn.relu(ops.nn.conv2d_nchw(c1, k2, 1, 1) + d)

    def reference(x, w1, w2, bb):
        h = np.maximum(ref.conv2d_nchw_python(x, w1, 1, 1) + bb, 0)
        return np.maximum(ref.conv2d_nchw_python(h, w2, 1, 1) + x, 0)

    return Workload("residual", [d, k1, k2, b, out], reference), 2


def dag_dense_softmax():
    a, w = _ph((3, 10), "a"), _ph((6, 10), "w")
    out = ops.nn.softmax(ops.nn.dense(a, w))
    return Workload("dense-softmax", [a, w, out], lambda x, y: ref.softmax_python(
        ref.dense_python(x.astype(np.float64), y))), 4


def dag_gap_flatten_dense():
    d, w, b = _ph((2, 8, 3, 3), "d"), _ph((5, 8), "w"), _ph((5,), "b")
    out = ops.nn.dense(ops.nn.flatten(ops.nn.global_avg_pool2d(d)), w, b)
    return Workload("gap-flatten-dense", [d, w, b, out], lambda x, y, z: ref.dense_python(
        x.mean(axis=(2, 3)), y, z)), 2


def dag_batch_norm_conv():
    d, k = _ph((1, 3, 5, 5), "d"), _ph((2, 3, 3, 3), "k")
    g, b, m, v = (_ph((3,), n) for n in ("g", "b", "m", "v"))
    out = ops.nn.conv2d_nchw(ops.nn.relu(ops.nn.batch_norm(d, g, b, m, v)), k, 1, 1)

    def reference(x, kk, gg, bb, mm, vv):
        y = np.maximum(ref.batch_norm_python(x, gg, bb, mm, vv), 0)
        return ref.conv2d_nchw_python(y, kk, 1, 1)

    return Workload("bn-conv", [d, k, g, b, m, v, out], reference, 0.5, 1.5), 1


def dag_matmul_chain():
    a, b, c = _ph((4, 5), "A"), _ph((5, 6), "B"), _ph((6, 3), "C")
    out = ops.nn.matmul(ops.nn.matmul(a, b), c)
    return Workload("matmul-chain", [a, b, c, out], lambda x, y, z: x @ y @ z), 2


@pytest.mark.parametrize("build", [dag_conv_relu_pool, dag_residual_block, dag_dense_softmax,
                                   dag_gap_flatten_dense, dag_batch_norm_conv,
                                   dag_matmul_chain])
def test_default_schedule_of_a_dag_matches_numpy(build):
    w, kernels = build()
    s = default_schedule(w.output)
    assert len(ptxforge.lower(s, w.tensors).kernels()) == kernels
    got, want = _run_sim(w, s, np.random.default_rng(_seed(w.name)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_two_outputs_of_one_dag():
    d, k = _ph((1, 3, 5, 5), "d"), _ph((2, 3, 3, 3), "k")
    conv = ops.nn.conv2d_nchw(d, k, 1, 1)
    act = ops.nn.relu(conv)
    s = default_schedule([conv, act])
    f = ptxforge.build(s, [d, k, conv, act], target="sim")
    rng = np.random.default_rng(11)
    x, w = rng.uniform(-1, 1, (1, 3, 5, 5)), rng.uniform(-1, 1, (2, 3, 3, 3))
    dev = ptxforge.sim()
    outs = [ptxforge.nd.empty(t.shape, "float32", dev) for t in (conv, act)]
    f(ptxforge.nd.array(x.astype("float32"), dev), ptxforge.nd.array(w.astype("float32"), dev),
      *outs)
    want = ref.conv2d_nchw_python(x, w, 1, 1)
    np.testing.assert_allclose(outs[0].numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(outs[1].numpy(), np.maximum(want, 0), rtol=1e-5, atol=1e-5)


def test_random_shapes_of_the_tiled_operators_match_numpy():
    rng = np.random.default_rng(2024)
    kinds = ["conv2d_nchw", "conv2d_nhwc", "depthwise_conv2d_nchw", "dense", "batch_matmul"]
    for trial in range(25):
        kind = kinds[trial % len(kinds)]
        r = lambda lo, hi: int(rng.integers(lo, hi + 1))  # noqa: E731
        if kind.startswith("conv2d"):
            k = [1, 3, 5][r(0, 2)]
            shape = dict(n=r(1, 3), ci=r(1, 9), h=r(k, 10), w=r(k, 10), co=r(1, 13), k=k,
                         stride=r(1, 2), pad=r(0, k // 2), bias=bool(r(0, 1)),
                         relu=bool(r(0, 1)))
        elif kind.startswith("depthwise"):
            shape = dict(n=r(1, 2), c=r(1, 6), m=r(1, 2), h=r(3, 9), w=r(3, 9), stride=r(1, 2))
        elif kind == "dense":
            shape = dict(batch=r(1, 9), in_dim=r(1, 40), out_dim=r(1, 40), bias=bool(r(0, 1)))
        else:
            b = r(1, 3)
            shape = dict(batch=b, batch_b=[b, 1][r(0, 1)], m=r(1, 12), k=r(1, 30), n=r(1, 12),
                         transpose_a=bool(r(0, 1)), transpose_b=bool(r(0, 1)))
        w = workload(kind, **shape)
        got, want = _run_sim(w, default_schedule(w.output), rng)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"{kind} {shape}")


# ---------------------------------------------------------------------------------------
# structure of the schedules


def _allocs(module) -> dict:
    return {m.group(1): (int(m.group(2)), m.group(3)) for m in re.finditer(
        r"alloc ([\w.]+): float32\[(\d+)\] (\w+)", str(module))}


def test_seed_layer_is_one_tiled_kernel_with_the_epilogue_fused():
    data, kernel, bias, out = workloads.conv2d_layer(*workloads.SEED_ARGS)
    s = default_schedule(out)
    module = ptxforge.lower(s, [data, kernel, bias, out])
    (k,) = module.kernels()
    assert set(k.launch.stages) >= {"compute", "pad_temp.shared", "kernel.shared"}
    allocs = _allocs(module)
    assert allocs["pad_temp.shared"][1] == "shared" and allocs["kernel.shared"][1] == "shared"
    assert [v for v in allocs.values() if v[1] == "local"], "no local accumulator"
    # enough blocks for most SMs of an H100, and each thread a few outputs at most
    threads = int(np.prod(k.launch.block))
    assert int(np.prod(k.launch.grid)) >= 64
    assert 64 <= threads <= 1024
    assert k.shared_bytes <= MAX_SHARED
    text = str(k)
    assert text.count("barrier") == 2
    assert "unroll" in text


def test_plan_inlines_injective_stages_and_fuses_elementwise_epilogues():
    data, kernel, bias, out = workloads.conv2d_layer(*workloads.SEED_ARGS)
    p = plan(out)
    names = {id(op): op.name for op in p.ops}
    assert sorted(names[i] for i in p.inlined) == ["T_add", "pad_temp"]
    ((conv_id, consumer),) = p.epilogue.items()
    assert names[conv_id] == "compute" and consumer is out.op

    x = _ph((2, 9), "x")
    sm = plan(ops.nn.softmax(x))
    assert [op.name for op in sm.ops if id(op) in sm.inlined] == ["T_softmax_exp"]
    assert sm.epilogue == {}

    d = _ph((1, 2, 6, 6), "d")
    avg = plan(ops.nn.avg_pool2d(d, 2, 2, 0))
    assert len(avg.epilogue) == 1  # the division by the window size


def test_a_reduction_read_at_a_window_is_not_fused():
    d, k = _ph((1, 3, 9, 9), "d"), _ph((4, 3, 3, 3), "k")
    conv = ops.nn.conv2d_nchw(d, k, 1, 1)
    p = plan(ops.nn.max_pool2d(conv, 3, 2, 1))
    assert p.epilogue == {}


def test_pooling_runs_one_output_per_thread_without_shared_memory():
    w = workload("max_pool2d", n=1, c=64, h=112, w=112, k=3, stride=2, pad=1)
    (k,) = ptxforge.lower(default_schedule(w.output), w.tensors).kernels()
    assert k.shared_bytes == 0
    assert int(np.prod(k.launch.block)) * int(np.prod(k.launch.grid)) >= _elements(
        w.output.shape)
    assert k.launch.block[0] == 256


def test_injective_block_size_shrinks_for_small_tensors():
    big = workload("relu", shape=(1, 64, 56, 56))
    small = workload("relu", shape=(300,))
    (kb,) = ptxforge.lower(default_schedule(big.output), big.tensors).kernels()
    (ks,) = ptxforge.lower(default_schedule(small.output), small.tensors).kernels()
    assert kb.launch.block == (256, 1, 1)
    assert ks.launch.block[0] < 256 and ks.launch.grid[0] >= 2


def test_schedules_respect_a_smaller_gpu():
    small = ("cuda -arch=sm_86 -num_sms=8 -max_threads_per_block=128 "
             "-max_shared_memory_per_block=8192")
    data, kernel, bias, out = workloads.conv2d_layer(*workloads.SEED_ARGS)
    ctx = PassContext(config={"gpu_limits": {"max_threads_per_block": 128,
                                             "max_shared_memory_per_block": 8 * 1024}})
    module = ptxforge.lower(default_schedule(out, target=small), [data, kernel, bias, out],
                            ctx=ctx)
    for k in module.kernels():
        assert int(np.prod(k.launch.block)) <= 128
        assert k.shared_bytes <= 8 * 1024


# ---------------------------------------------------------------------------------------
# realistic shapes: lower only


REALISTIC = dict(RESNET18)
REALISTIC["layer1_3x3_batch8"] = ("conv2d_nchw", {"n": 8, "ci": 64, "h": 56, "w": 56,
                                                  "co": 64, "bias": True, "relu": True})
REALISTIC["bert_batch_matmul"] = ("batch_matmul", {"batch": 12, "m": 128, "k": 64, "n": 128})
REALISTIC["mobilenet_depthwise"] = ("depthwise_conv2d_nchw", {"n": 1, "c": 128, "h": 56,
                                                               "w": 56})
REALISTIC["dense_batch64"] = ("dense", {"batch": 64, "in_dim": 1024, "out_dim": 1000,
                                        "bias": True, "relu": True})


@pytest.mark.parametrize("name", sorted(REALISTIC))
def test_realistic_layers_lower_within_the_gpu_limits(name):
    case, shape = REALISTIC[name]
    w = workload(case, **shape)
    s = default_schedule(w.output)
    module = ptxforge.lower(s, w.tensors)
    tiled = [op for op in s.dag.ops if isinstance(op, ComputeOp) and op.tag in TILED_TAGS]
    for k in module.kernels():
        assert int(np.prod(k.launch.block)) <= 1024
        assert k.shared_bytes <= MAX_SHARED
    if tiled:
        (k,) = module.kernels()  # the epilogue is fused
        tiling = choose_tiling(tiled[0])
        assert k.launch.grid[0] == tiling.blocks
        assert int(np.prod(k.launch.block)) == tiling.num_threads
        assert k.shared_bytes <= tiling.shared_bytes + SHARED_MARGIN
        # the work spreads over the GPU unless the layer is too small for it
        outputs = _elements(w.output.shape)
        assert tiling.blocks * tiling.num_threads * 8 >= min(outputs, 132 * 32)


@pytest.mark.parametrize("name", ["layer4_3x3 (seed)", "fc", "maxpool", "softmax",
                                  "layer1_3x3_nhwc"])
def test_default_schedules_compile_to_ptx(name):
    case, shape = RESNET18[name]
    w = workload(case, **shape)
    built = ptxforge.build(default_schedule(w.output), w.tensors, target="cuda")
    ptx = built.get_source("ptx")
    lowered = built.device_module.kernels()
    assert ptx.count(".entry") == len(lowered)
    for k in lowered:
        assert f".maxntid {k.launch.block[0]}, 1, 1" in ptx
    if any(k.shared_bytes for k in lowered):
        assert "ld.shared" in ptx and "bar.sync" in ptx


# ---------------------------------------------------------------------------------------
# the tile chooser


def _random_reduction(rng):
    kind = ["conv2d_nchw", "conv2d_nhwc", "dense", "batch_matmul", "depthwise_conv2d_nchw"][
        int(rng.integers(5))]
    if kind.startswith("conv2d"):
        shape = dict(n=int(rng.integers(1, 5)), ci=int(rng.integers(1, 600)),
                     h=int(rng.integers(3, 120)), w=int(rng.integers(3, 120)),
                     co=int(rng.integers(1, 600)), k=3, stride=int(rng.integers(1, 3)))
    elif kind == "dense":
        shape = dict(batch=int(rng.integers(1, 300)), in_dim=int(rng.integers(1, 3000)),
                     out_dim=int(rng.integers(1, 3000)))
    elif kind == "batch_matmul":
        shape = dict(batch=int(rng.integers(1, 20)), m=int(rng.integers(1, 300)),
                     k=int(rng.integers(1, 300)), n=int(rng.integers(1, 300)))
    else:
        shape = dict(n=1, c=int(rng.integers(1, 300)), h=int(rng.integers(3, 120)),
                     w=int(rng.integers(3, 120)))
    w = workload(kind, **shape)
    red = [op for op in ptxforge.te.create_schedule(w.output).dag.ops
           if isinstance(op, ComputeOp) and op.reduce_axis]
    return red[0]


def test_tilings_respect_the_limits_on_random_shapes():
    rng = np.random.default_rng(7)
    for _ in range(30):
        op = _random_reduction(rng)
        ranked = rank_tilings(op, count=4)
        assert ranked
        costs = [t.cycles for t in ranked]
        t = ranked[0]
        assert t == choose_tiling(op)
        extents = [int(a.extent) for a in op.axis]
        r_extent = int(op.reduce_axis[t.chunk_axis].extent)
        assert 1 <= t.num_threads <= 1024
        assert all(1 <= i <= MAX_INNER for i in t.inner)
        assert all(th * i <= e for th, i, e in zip(t.threads, t.inner, extents))
        assert r_extent % t.chunk == 0
        assert t.shared_bytes + SHARED_MARGIN <= MAX_SHARED
        assert t.blocks == int(np.prod([-(-e // (th * i)) for th, i, e in
                                        zip(t.threads, t.inner, extents)]))
        # best first (ties within 1% are ordered by divisibility, then thread count)
        assert all(a <= b * 1.011 for a, b in zip(costs, costs[1:]))


def test_a_matrix_vector_product_reads_its_weights_directly():
    w = workload("dense", batch=1, in_dim=512, out_dim=1000, bias=True)
    red = [op for op in ptxforge.te.create_schedule(w.output).dag.ops
           if isinstance(op, ComputeOp) and op.reduce_axis][0]
    t = choose_tiling(red)
    # the data row is shared by every thread, each weight row belongs to one thread
    assert t.staged == (True, False)
    s = default_schedule(w.output)
    text = str(ptxforge.lower(s, w.tensors))
    assert "data.shared" in text and "weight.shared" not in text


# ---------------------------------------------------------------------------------------
# the registry


def test_registry_maps_tags_to_stage_schedules():
    assert default_schedule_for("conv2d_nchw") is schedule_tiled
    from ptxforge.ops.schedules.gemm.schedule import schedule_matmul

    # products: tensor cores where they apply, else schedule_tiled
    assert default_schedule_for("dense") is schedule_matmul
    assert default_schedule_for("pool_max") is schedule_reduce
    assert default_schedule_for("injective,pad") is schedule_injective
    assert default_schedule_for("elemwise") is schedule_injective
    generic = default_schedule_for("no_such_tag")
    assert generic is default_schedule_for("")
    assert {"conv2d_nhwc", "batch_matmul", "comm_reduce", "softmax_output"} <= set(
        registered_tags())


def test_register_schedule_refuses_silent_replacement_and_allows_override():
    with pytest.raises(ValueError, match="already registered"):
        register_schedule("conv2d_nchw", schedule_reduce)
    calls = []

    def custom(s, op, epilogue=None, target=None):
        calls.append(op.name)
        schedule_reduce(s, op, epilogue, target=target)

    register_schedule("pool_max", custom, override=True)
    try:
        w = workload("max_pool2d")
        got, want = _run_sim(w, default_schedule(w.output), np.random.default_rng(3))
        np.testing.assert_allclose(got, want, rtol=1e-5)
        assert calls == ["tensor"]
    finally:
        register_schedule("pool_max", schedule_reduce, override=True)
    assert default_schedule_for("pool_max") is schedule_reduce


def test_default_schedule_rejects_placeholders():
    x = _ph((3, 4), "x")
    with pytest.raises(TypeError, match="computed te tensors"):
        default_schedule(x)
