"""A softmax over the rows of a tensor-core product as the product's epilogue: one kernel
for an attention's scores and probabilities (fuse_ops' row-epilogue rule, the default
schedule of :mod:`ptxforge.ops.schedules.gemm_rows`, the ``gemm_rows`` sketch)."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import autosched, graph, ops, te
from ptxforge.autosched.evolution import random_population
from ptxforge.autosched.features import population_features
from ptxforge.autosched.printer import schedule_from_pipeline
from ptxforge.autosched.state import State
from ptxforge.graph import nn, passes
from ptxforge.ir.te import ComputeOp
from ptxforge.ops.schedules import default_schedule
from ptxforge.ops.schedules.gemm.forms import GemmForm, gemm_form
from ptxforge.ops.schedules.gemm.knobs import TensorCoreConfig, WgmmaScheduleConfig
from ptxforge.ops.schedules.gemm_rows import (
    choose_row_config,
    row_configs,
    row_epilogue,
    row_threads,
    schedule_gemm_rows,
)

from .lowp import host

RNG = np.random.default_rng(7)


def _scores(batch, m, n, k):
    """``softmax(cast(a b^T * 0.125, float32), out_dtype=float16)``: an attention's scores
    as a mixed-precision network computes them."""
    a = te.placeholder((batch, m, k), "float16", name="query")
    b = te.placeholder((batch, n, k), "float16", name="key")
    c = ops.nn.batch_matmul(a, b, out_dtype="float16")
    y = ops.cast(ops.multiply(c, te.const(0.125, "float16")), "float32")
    return a, b, ops.nn.softmax(y, -1, "float16")


def _want(av, bv):
    s = (np.matmul(av, bv.transpose(0, 2, 1)).astype(np.float16)
         * np.float16(0.125)).astype(np.float64)
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _run(s, a, b, p, target):
    mod = ptxforge.build(s, [a, b, p], target=target)
    av, bv = host(RNG, a.shape, "float16"), host(RNG, b.shape, "float16")
    out = np.full(p.shape, np.nan, "float16")
    mod(av, bv, out)
    kernels = str(mod.device_module).count('"kind": "kernel"')
    return kernels, out.astype(np.float64), _want(av.astype(np.float64), bv.astype(np.float64))


def _rows_of(p):
    s = te.create_schedule(p.op)
    return s, row_epilogue([op for op in s.dag.ops if isinstance(op, ComputeOp)], [p])


@pytest.mark.parametrize("target,cfg,m", [
    ("sim", None, 64),
    ("sim -arch=sm_80", TensorCoreConfig(16, 128, 32, 1, 2, stages=1, async_copy=True), 64),
    ("sim -arch=sm_90a", WgmmaScheduleConfig(128, 1, 1, 0), 64),
    ("sim -arch=sm_90a", WgmmaScheduleConfig(128, 2, 1, 0), 128),
], ids=["default", "mma_sync_16_rows", "wgmma", "wgmma_two_warpgroups"])
def test_attention_scores_and_softmax_are_one_kernel(target, cfg, m):
    # 16 rows of mma.sync: a cross-thread reduction over threadIdx.x, 2 rows at a time;
    # one warpgroup: 64 rows on 128 threads (guarded), each row by one thread; two: the
    # 128 rows on threadIdx.x, each row's halves reduced across threadIdx.y
    a, b, p = _scores(2, m, 128, 32)
    s, rows = _rows_of(p)
    assert rows is not None and len(rows.reductions) == 2
    if cfg is None:
        s = default_schedule(p, target)
    else:
        schedule_gemm_rows(s, rows, target, cfg)
    text = s.pipeline.text
    assert ("wgmma_m64n128k16" if isinstance(cfg, WgmmaScheduleConfig)
            else "mma_m16n8k16") in text
    kernels, got, want = _run(s, a, b, p, target)
    assert kernels == 1
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-3)  # fp16 probabilities
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=2e-2)


def test_row_configs_cover_every_target_and_the_thread_plans():
    # BERT-base's scores: every target has a tile, wgmma among them on sm_90a
    form = GemmForm(12, 128, 128, 64, "float16", "float32", False, False, True)
    for t in ("cuda", "cuda -arch=sm_80", "cuda -arch=sm_86", "cuda -arch=sm_90a", "sim"):
        assert choose_row_config(form, t) is not None, t
    assert any(isinstance(c, WgmmaScheduleConfig) for c in row_configs(form, "cuda -arch=sm_90a"))
    assert not any(isinstance(c, WgmmaScheduleConfig) for c in row_configs(form, "sim"))
    assert all(c.block_n == 128 and 128 % c.block_m == 0 for c in row_configs(form, "sim"))
    # every row fuse_ops lets in (N a multiple of 16 up to 256) has mma.sync tiles
    for n in range(16, 257, 16):
        assert row_configs(GemmForm(2, 16, n, 32, "float16", "float32", False, False,
                                    True), "sim"), n
    # rows over the threads: all rows bound, no cross-thread reduction
    assert row_threads(128, ((32, "x"), (2, "y"), (2, "z"))) == (
        [(32, "x"), (2, "y"), (2, "z")], None)
    # a thread index left over reduces along the row
    assert row_threads(64, ((32, "x"), (4, "y"), (1, "z"))) == ([(32, "x")], (4, "y"))
    # a guarded row index never goes with a cross-thread reduction (its barriers)
    assert row_threads(16, ((32, "x"), (4, "y"))) == ([(4, "y")], (32, "x"))
    assert row_threads(64, ((128, "x"), (1, "y"))) == ([(64, "x")], None)
    # rows longer than one tile: nothing
    assert row_configs(GemmForm(1, 64, 512, 64, "float16", "float32", False, False, True),
                       "sim") == []


def test_what_is_not_a_row_epilogue():
    a = te.placeholder((2, 64, 32), "float16", name="a")
    b = te.placeholder((2, 128, 32), "float16", name="b")
    c = ops.cast(ops.nn.batch_matmul(a, b, out_dtype="float16"), "float32")
    # a softmax over a non-last axis
    _, rows = _rows_of(ops.nn.softmax(c, 1))
    assert rows is None
    # rows longer than a tile: a row epilogue, but no tile covers it, so the default
    # schedule runs each stage on its own (several kernels)
    a2 = te.placeholder((1, 32, 32), "float16", name="a2")
    b2 = te.placeholder((1, 512, 32), "float16", name="b2")
    p = ops.nn.softmax(ops.cast(ops.nn.batch_matmul(a2, b2, out_dtype="float16"),
                                "float32"), -1, "float16")
    _, rows = _rows_of(p)
    assert rows is not None
    assert choose_row_config(gemm_form(rows.product, "sim"), "sim") is None
    dev = ptxforge.lower(default_schedule(p, "sim"), [a2, b2, p])
    assert len(dev.kernels()) > 1


# ---------------------------------------------------------------------------------------
# fuse_ops


def _attention(seq, heads=2, dim=16, axis=-1, dtype="float16"):
    q = graph.var("q", (heads, seq, dim), dtype)
    k = graph.var("k", (heads, seq, dim), dtype)
    v = graph.var("v", (heads, seq, dim), dtype)
    scores = graph.multiply(nn.batch_matmul(q, k), graph.const(np.array(0.25, dtype)))
    probs = nn.softmax(graph.cast(scores, "float32"), axis=axis, out_dtype=dtype)
    return graph.function(nn.batch_matmul(probs, v, transpose_b=False))


def _kernels(fused):
    return [c.op for c in fused.calls() if not c.op.attrs.get("view")]


def test_fuse_ops_makes_the_softmax_the_scores_epilogue():
    net = _attention(32)
    fused = passes.FuseOps(rows=True)(net)
    apart = passes.FuseOps()(net)  # off by default
    assert len(_kernels(fused)) == len(_kernels(apart)) - 1
    (scores,) = [f for f in _kernels(fused) if any(c.op == "nn.softmax" for c in f.calls())]
    assert scores.name.startswith("fused_nn_batch_matmul_multiply_cast_nn_softmax")
    assert scores.outputs[0].op == "nn.softmax"
    with graph.GraphPassContext(config={"fuse_ops.rows": True}):
        lib = graph.build(net, "sim")
    assert sum(1 for k in lib.call_keys if k is not None) == len(_kernels(fused))
    m = graph.GraphModule(lib)
    inputs = {n: RNG.uniform(-1, 1, (2, 32, 16)).astype("float16") for n in "qkv"}
    m.run(**inputs)
    want = graph.evaluate(net, inputs)
    got = m.get_output(0).numpy().astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-2 * np.abs(want).max())


@pytest.mark.parametrize("case", ["other_axis", "long_rows", "float32", "two_readers"])
def test_what_the_row_rule_leaves_a_kernel_of_its_own(case):
    if case == "other_axis":
        net = _attention(32, axis=1)
    elif case == "long_rows":
        net = _attention(512)
    elif case == "float32":
        net = _attention(32, dtype="float32")
    else:  # the scores have another reader
        q = graph.var("q", (2, 32, 16), "float16")
        k = graph.var("k", (2, 32, 16), "float16")
        s = graph.cast(nn.batch_matmul(q, k), "float32")
        net = graph.function(graph.add(nn.softmax(s), s))
    fused = passes.FuseOps(rows=True)(net)
    assert any([c.op for c in f.calls()] == ["nn.softmax"] for f in _kernels(fused))


def test_a_float16_bert_layer_has_one_kernel_less():
    # (test_fuse_layouts runs this network on the simulator against its reference)
    from ptxforge.graph.zoo.bert import bert_layer

    out, params, shape = bert_layer(1, "float32", seq_len=32, hidden=32, heads=2,
                                    intermediate=64)
    net = graph.function(out)
    opt = graph.optimize(net, params, precision="float16", fuse=False)
    fused = _kernels(passes.FuseOps(rows=True)(opt))
    assert len(fused) == len(_kernels(passes.FuseOps()(opt))) - 1
    calls = [[c.op for c in f.calls()] for f in fused]
    assert ["nn.softmax"] not in calls
    assert any("nn.softmax" in c and "nn.batch_matmul" in c for c in calls)


# ---------------------------------------------------------------------------------------
# the auto-scheduler


@autosched.register_workload
def rows_scores(batch, m, n, k):
    return list(_scores(batch, m, n, k))


@pytest.mark.parametrize("target", ["cuda -arch=sm_80", "cuda -arch=sm_90a"])
def test_the_gemm_rows_sketch_states_make_one_correct_kernel(target):
    task = autosched.SearchTask(func=rows_scores, args=(2, 64, 128, 32), target=target)
    names = [sk.name for sk in task.sketches]
    k = names.index("gemm_rows(T_batch_matmul_NT)")
    rng = np.random.default_rng(0)
    pop = random_population(task, 64, rng)
    pop = pop[pop[:, 0] == k]
    _, valid, est = population_features(task.models, pop, task.flop_ct, 132)
    assert len(pop) and valid.all() and np.isfinite(est).all()
    step = task.sketches[k].steps[0]
    wgmma = any(isinstance(c, WgmmaScheduleConfig) for c in step.configs)
    assert wgmma == target.endswith("sm_90a")
    seen = set()
    sim = "sim -arch=sm_90a" if wgmma else "sim"
    for row in pop:
        text = State.from_row(row, task).pipeline_text(task)
        if text in seen:
            continue
        seen.add(text)
        if len(seen) > 2:
            break
        sch = schedule_from_pipeline(task, text)
        a, b, p = task.tensors
        kernels, got, want = _run(sch, a, b, p, sim)
        assert kernels == 1
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-3)
    assert len(seen) >= 2


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", [None, WgmmaScheduleConfig(128, 2, 1, 0)],
                         ids=["default", "wgmma"])
def test_bert_base_scores_and_softmax_on_the_gpu(cfg):
    from ptxforge.backend_ptx import array, compile_module, cuda, empty
    from ptxforge.target import Target

    dev = cuda(0)
    if cfg is not None and dev.sm != "sm_90":
        pytest.skip(f"wgmma needs an sm_90 GPU (sm_90a code); this one is {dev.sm}")
    target = Target("cuda -arch=sm_90a") if cfg is not None else Target("cuda")
    a, b, p = _scores(12, 128, 128, 64)
    s, rows = _rows_of(p)
    with target:
        if cfg is None:
            s = default_schedule(p, target)
        else:
            schedule_gemm_rows(s, rows, target, cfg)
        dm = ptxforge.lower(s, [a, b, p])
        assert len(dm.kernels()) == 1
        loaded = compile_module(dm, target).load(dev)
    av, bv = host(RNG, a.shape, "float16"), host(RNG, b.shape, "float16")
    out = empty(p.shape, "float16", dev)
    loaded(array(av, dev, "float16"), array(bv, dev, "float16"), out)
    want = _want(av.astype(np.float64), bv.astype(np.float64))
    np.testing.assert_allclose(out.numpy().astype(np.float64), want, rtol=0, atol=2e-3)
