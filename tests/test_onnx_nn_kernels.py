"""The kernels of the convolution, pooling, normalization and resizing operators of the
ONNX importer, at small shapes: each builds to PTX; the auto-scheduler's random samples of
each compile to correct kernels (simulator against the reference executor); and on a GPU
(``gpu``, ``sanitize``: small enough for compute-sanitizer runs) each runs against the
reference in float32 and float16."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import autosched, graph, measure
from ptxforge.autosched.state import State, state_payload
from ptxforge.graph import opdefs as G
from ptxforge.graph.ir import Constant
from ptxforge.graph.opdefs.conv_nd import conv_nd, conv_transpose
from ptxforge.graph.opdefs.norm_nd import group_norm, lrn
from ptxforge.graph.opdefs.pool_nd import max_pool_indices, pool
from ptxforge.graph.opdefs.resize import resize
from ptxforge.ops.nn.resize import axis_tables

RNG = np.random.default_rng(8)


def _cases(dtype: str = "float32") -> dict:
    x = graph.Var("x", (2, 4, 6, 7), dtype)
    x3 = graph.Var("x3", (1, 4, 3, 6, 7), dtype)
    x1 = graph.Var("x1", (2, 4, 33), dtype)
    cubic = axis_tables(6, 9, 1.5, "cubic", exclude_outside=True)
    linear = axis_tables(7, 3, 3 / 7, "linear", antialias=True)
    nearest = axis_tables(7, 14, 2.0, "nearest", "asymmetric", "floor")
    crop = axis_tables(6, 5, 5 / 6, "linear", "tf_crop_and_resize", roi=(-0.2, 1.1))

    def var(name, *shape):
        return graph.Var(name, shape, dtype)

    return {
        "conv3d_relu": lambda: G.relu(conv_nd(x3, var("w", 4, 2, 2, 3, 3), (1, 2, 1),
                                              (1, 1, 1, 0, 1, 1), groups=2)),
        "conv_transpose_2d": lambda: conv_transpose(x, var("w", 4, 3, 3, 3), (2, 2), 1,
                                                    output_padding=1, groups=2),
        "conv_transpose_1d": lambda: conv_transpose(x1, var("w", 4, 2, 4), (3,), (1, 0),
                                                    dilation=2),
        "lp_pool_3d": lambda: pool(x3, "lp", (2, 2, 2), 2, (0, 0, 0, 1, 1, 1), ceil_mode=True,
                                   p=3),
        "avg_pool_3d": lambda: pool(x3, "avg", (3, 3, 3), 1, 1),
        "max_pool_1d": lambda: pool(x1, "max", (4,), 3, (1, 2), ceil_mode=True),
        "max_pool_indices": lambda: max_pool_indices(x, (2, 3), 2, (0, 1, 1, 1),
                                                     storage_order=1),
        "max_pool2d_ceil": lambda: G.max_pool2d(x, (2, 2), (2, 2), (1, 1, 1, 1),
                                                ceil_mode=True),
        "avg_pool2d_ceil": lambda: G.avg_pool2d(x, (2, 2), (2, 2), (1, 1, 1, 1), ceil_mode=True,
                                                count_include_pad=True),
        "instance_norm": lambda: group_norm(x, var("g", 4), var("b", 4), 4),
        "group_norm_3d": lambda: group_norm(x3, var("g", 2), var("b", 2), 2),
        # rows of 2 x 300 elements: one block per (sample, group), a cross-thread reduction
        "group_norm_long_rows": lambda: G.relu(group_norm(graph.Var("xl", (2, 4, 15, 20), dtype),
                                                          var("g", 2), var("b", 2), 2)),
        "lrn": lambda: lrn(x, 3, 0.01, 0.6, 1.5),
        "resize_cubic": lambda: resize(x, [2], [(Constant(cubic[0]), Constant(cubic[1]))],
                                       False),
        "resize_antialias": lambda: resize(x, [3], [(Constant(linear[0]), Constant(linear[1]))],
                                           False),
        "resize_nearest": lambda: resize(x, [3], [(Constant(nearest[0]), None)], True),
        "resize_crop": lambda: resize(x, [2], [(Constant(crop[0]), Constant(crop[1]))], False,
                                      extrapolation=2.5),
    }


def _net(case: str, dtype: str = "float32") -> graph.Graph:
    y = _cases(dtype)[case]()
    return graph.Graph(graph.ir.free_vars([y]), [y])


@pytest.mark.parametrize("case", sorted(_cases()))
def test_every_kernel_compiles_to_ptx(case):
    lib = graph.build(_net(case), "cuda")
    if case == "group_norm_long_rows":
        text = "\n".join(f.device_module.__str__() for f in lib.functions.values())
        assert "blockIdx.x" in text and "shfl" in text
    assert lib.functions
    for f in lib.functions.values():
        assert f.ptx is not None


@pytest.mark.parametrize("case", sorted(_cases()))
def test_auto_scheduler_samples_compile_to_correct_kernels(case, tmp_path):
    net = _net(case)
    tasks, _ = autosched.extract_tasks(net, {}, "cuda")
    assert tasks
    log = str(tmp_path / "records.json")
    for k, task in enumerate(tasks):
        policy = autosched.SketchPolicy(task, autosched.RandomModel(seed=k), seed=k)
        state = State.from_row(policy.sample_initial_population(1)[0], task)
        inp = measure.MeasureInput(task.task_spec, state.pipeline_text(task),
                                   state_payload(task, state))
        measure.save_records(log, [inp], [measure.MeasureResult((1e-5,), 0, "", 0.1, 0.0)])
    with autosched.ApplyHistoryBest(log) as ctx:
        lib = graph.build(net, "sim")
    assert len(ctx.applied) == len(tasks)
    feeds = {v.name: RNG.uniform(-1, 1, v.shape).astype(np.float32) for v in net.params}
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**feeds)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), graph.evaluate(net, feeds),
                               rtol=1e-4, atol=1e-5)


def test_long_group_norm_rows_run_one_block_per_group_on_the_simulator():
    net = _net("group_norm_long_rows")
    feeds = {v.name: RNG.uniform(-1, 1, v.shape).astype(np.float32) for v in net.params}
    m = graph.GraphModule(graph.build(net, "sim"), ptxforge.sim())
    m.set_input(**feeds)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), graph.evaluate(net, feeds),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.sanitize
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("case", sorted(_cases()))
def test_kernel_on_the_gpu_matches_the_reference(case, dtype):
    from ptxforge.ir import dtype as dt

    net = _net(case, dtype)
    feeds = {v.name: RNG.uniform(-1, 1, v.shape).astype(dt.to_numpy(dtype))
             for v in net.params}
    expected = graph.evaluate(net, feeds)
    m = graph.GraphModule(graph.build(net, "cuda"), ptxforge.cuda(0))
    m.set_input(**feeds)
    m.run()
    got = m.get_output(0).numpy()
    if expected.dtype.kind in "iu":
        np.testing.assert_array_equal(got, expected)
    else:
        tol = 1e-4 if dtype == "float32" else 2e-2
        np.testing.assert_allclose(got.astype(np.float32), expected.astype(np.float32),
                                   rtol=tol, atol=tol)
