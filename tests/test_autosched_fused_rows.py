"""The fused-rows sketch: softmax and layer norm as one kernel, a block per row."""

from __future__ import annotations

import numpy as np
import ptxforge
import pytest
from ptxforge import autosched, ops, te
from ptxforge.autosched.evolution import random_population
from ptxforge.autosched.features import population_features
from ptxforge.autosched.fused_rows import FusedRowsStep
from ptxforge.autosched.printer import schedule_from_pipeline
from ptxforge.autosched.state import State

from .roundtrip import roundtrip_skipped

SM80 = "cuda -arch=sm_80"


@autosched.register_workload
def fr_softmax(a, b, n):
    x = te.placeholder((a, b, n), "float32", name="x")
    return [x, ops.nn.softmax(x)]


@autosched.register_workload
def fr_layer_norm(rows, cols):
    """Layer norm as the network's lowering writes it: mean and variance of shape
    [rows, 1], then the scaled, shifted centered value."""
    x = te.placeholder((rows, cols), "float32", name="x")
    g = te.placeholder((cols,), "float32", name="g")
    b = te.placeholder((cols,), "float32", name="b")
    k1 = te.reduce_axis((0, cols), name="k1")
    s1 = te.compute((rows, 1), lambda i, z: te.sum(x[i, k1], axis=k1), name="s1")
    mean = te.compute((rows, 1), lambda i, z: s1[i, z] / float(cols), name="mean")
    d = te.compute((rows, cols), lambda i, j: x[i, j] - mean[i, 0], name="d")
    k2 = te.reduce_axis((0, cols), name="k2")
    s2 = te.compute((rows, 1), lambda i, z: te.sum(d[i, k2] * d[i, k2], axis=k2), name="s2")
    out = te.compute((rows, cols), lambda i, j: d[i, j] * te.rsqrt(s2[i, 0] / float(cols)
                                                                   + 1e-5) * g[j] + b[j],
                     name="out")
    return [x, g, b, out]


@autosched.register_workload
def fr_matmul(n):
    a = te.placeholder((n, n), "float32", name="a")
    b = te.placeholder((n, n), "float32", name="b")
    k = te.reduce_axis((0, n), name="k")
    return [a, b, te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k),
                             name="c")]


def _reference(fn, arrays):
    if fn is fr_softmax:
        (x,) = arrays
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    x, g, b = arrays
    mu = x.mean(1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(1, keepdims=True) + 1e-5) * g + b


def test_rule_applies_to_row_normalizations_only():
    for fn, args in ((fr_softmax, (2, 3, 40)), (fr_layer_norm, (6, 72))):
        task = autosched.SearchTask(func=fn, args=args, target=SM80)
        assert task.sketches[-1].name.startswith("fused_rows(")
        assert isinstance(task.sketches[-1].steps[0], FusedRowsStep)
    task = autosched.SearchTask(func=fr_matmul, args=(32,), target=SM80)
    assert not any(s.name.startswith("fused_rows") for s in task.sketches)


@autosched.register_workload
def fr_softmax_half(rows, n):
    """Float16 scores to float16 probabilities, the softmax in float32 (a 16-bit network's)."""
    x = te.placeholder((rows, n), "float16", name="x")
    return [x, ops.nn.softmax(ops.cast(x, "float32"), out_dtype="float16")]


def test_wide_rows_need_loads_in_flight():
    # GPT-2's attention softmax (12 heads x 1,024 rows of 1,024): one warp a row with a
    # plain loop keeps too few loads in flight to stream the scores at DRAM speed; the
    # model says so, and an unrolled loop or more warps win
    from ptxforge.autosched.fused_rows import fused_rows_model, fused_rows_step
    from ptxforge.autosched.hardware import HardwareParams
    from ptxforge.target import as_target

    task = autosched.SearchTask(func=fr_softmax_half, args=(12 * 1024, 1024),
                                target="cuda -arch=sm_90a")
    step = fused_rows_step(task)
    threads, unroll = np.array([32, 32, 256]), np.array([0, 1, 0])
    hw = HardwareParams.from_target(as_target("cuda -arch=sm_90a"))
    est = fused_rows_model(step, {step.slot("threads"): threads, step.slot("unroll"): unroll},
                           hw, 3)["est"]
    assert est[0] > 1.5 * est[1] and est[0] > 1.5 * est[2], est
    # at DRAM speed the model cannot go below the bytes over the bandwidth
    assert est.min() >= step.unique / hw.dram_bytes_per_s


@pytest.mark.parametrize("fn,args", [(fr_softmax, (2, 3, 40)), (fr_layer_norm, (6, 72))],
                         ids=["softmax", "layer_norm"])
def test_every_thread_count_makes_one_correct_kernel(fn, args):
    task = autosched.SearchTask(func=fn, args=args, target=SM80)
    fr = len(task.sketches) - 1
    rng = np.random.default_rng(0)
    pop = random_population(task, 200, rng)
    pop = pop[pop[:, 0] == fr]
    _, valid, est = population_features(task.models, pop, task.flop_ct, 132)
    assert valid.all() and np.isfinite(est).all()
    step = task.sketches[fr].steps[0]
    seen = set()
    for row in pop:
        text = State.from_row(row, task).pipeline_text(task)
        if text in seen:
            continue
        seen.add(text)
        with roundtrip_skipped(len(seen) > 2):  # the round trip on the first two states
            sch = schedule_from_pipeline(task, text)
            (kern,) = ptxforge.lower(sch, task.tensors).kernels()  # one kernel per task
            assert tuple(kern.attrs.launch.grid)[0] == step.rows
            arrays = [rng.standard_normal(t.shape).astype("float32")
                      for t in task.tensors[:-1]]
            out = np.zeros(task.tensors[-1].shape, "float32")
            ptxforge.build(sch, task.tensors, target="sim")(*arrays, out)
        np.testing.assert_allclose(out, _reference(fn, arrays), rtol=1e-4, atol=1e-5)
    assert len(seen) >= 4


@pytest.mark.parametrize("precision", ["float16", "tf32"])
def test_a_bert_layer_gets_its_sketches(precision):
    """The tasks of a BERT encoder layer as the network tuner extracts them: softmax and
    layer norm get the fused-rows sketch, the dense layers the tensor-core GEMM sketch; with
    fuse_ops' row epilogues on, the attention scores with their softmax (one function) get
    the row-epilogue sketch."""
    from ptxforge import graph
    from ptxforge.graph.zoo.bert import bert_encoder

    out, params, _ = bert_encoder(1, "float32", layers=1, seq_len=32)
    tasks, _ = autosched.extract_tasks(graph.function(out), params, SM80,
                                       precision=precision)
    by_desc = {t.desc: [s.name for s in t.sketches] for t in tasks}
    norms = [d for d in by_desc if d.endswith(("softmax", "layer_norm"))]
    assert len(norms) == 2
    for d in norms:
        assert any(n.startswith("fused_rows(") for n in by_desc[d]), d
    with graph.GraphPassContext(config={"fuse_ops.rows": True}):
        row_tasks, _ = autosched.extract_tasks(graph.function(out), params, SM80,
                                               precision=precision)
    rows_desc = {t.desc: [s.name for s in t.sketches] for t in row_tasks}
    (scores,) = [d for d in rows_desc if "softmax" in d]
    assert "gemm_rows(T_batch_matmul_NT)" in rows_desc[scores]
    dense = [d for d in by_desc if "dense" in d]
    assert dense
    want = "tensorcore_gemm("  # in both precisions since tensorcore(C) was retired
    for d in dense:
        assert any(n.startswith(want) for n in by_desc[d]), (d, by_desc[d])


@autosched.register_workload
def fr_softmax_out(rows, n, out_dtype):
    """A float32 softmax that rounds its output to ``out_dtype`` (as ``fold_output_cast``
    leaves it in a mixed-precision network)."""
    x = te.placeholder((rows, n), "float32", name="x")
    return [x, ops.nn.softmax(x, out_dtype=out_dtype or None)]


def test_sampled_states_of_a_softmax_with_a_float16_output():
    """The fused-rows states build and round the float32 kernel's result once: the same
    state on the float32 task gives the same values before the rounding."""
    task = autosched.SearchTask(func=fr_softmax_out, args=(6, 48, "float16"), target=SM80)
    wide = autosched.SearchTask(func=fr_softmax_out, args=(6, 48, ""), target=SM80)
    assert task.tensors[-1].dtype == "float16"
    assert task.workload_key != wide.workload_key
    assert task.compute_dag.structural_hash() != wide.compute_dag.structural_hash()
    fr = len(task.sketches) - 1
    assert task.sketches[fr].name.startswith("fused_rows(")
    rng = np.random.default_rng(1)
    pop = random_population(task, 64, rng)
    pop = pop[pop[:, 0] == fr]
    _, valid, est = population_features(task.models, pop, task.flop_ct, 132)
    assert valid.all() and np.isfinite(est).all()
    x = rng.standard_normal((6, 48)).astype("float32") * 3
    e = np.exp(x - x.max(-1, keepdims=True))
    ref = e / e.sum(-1, keepdims=True)
    texts = list(dict.fromkeys(State.from_row(row, task).pipeline_text(task) for row in pop))
    assert len(texts) >= 3
    for text in texts[:3]:
        out16 = np.zeros((6, 48), "float16")
        ptxforge.build(schedule_from_pipeline(task, text), task.tensors, target="sim")(x, out16)
        np.testing.assert_allclose(out16, ref, rtol=1e-3, atol=1e-4)
        out32 = np.zeros((6, 48), "float32")
        ptxforge.build(schedule_from_pipeline(wide, text), wide.tensors, target="sim")(x, out32)
        assert out16.tobytes() == out32.astype("float16").tobytes()
