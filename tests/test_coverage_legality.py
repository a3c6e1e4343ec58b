"""Bindings that cannot cover every output element exactly once are rejected at lowering,
with an error naming the stage, the loop and the rule (each case built and ran wrong on the
simulator before the check existed)."""

from __future__ import annotations

import numpy as np
import ptxforge
import pytest
from ptxforge import te
from ptxforge.ir.expr import IRError
from ptxforge.passes.lower import LoweringError


def _rejected(s, tensors, stage: str, loop: str, rule: str) -> LoweringError:
    with pytest.raises(IRError) as info:
        ptxforge.build(s, tensors, target="sim")
    err = info.value
    while not isinstance(err, LoweringError) and err.__cause__ is not None:
        err = err.__cause__
    assert isinstance(err, LoweringError), str(info.value)
    assert (err.stage, err.axis, err.limit) == (stage, loop, rule), str(err)
    text = str(info.value)
    assert f"stage {stage}" in text and f"loop {loop}" in text and f"[rule: {rule}]" in text
    return err


def _run(s, tensors, inputs):
    f = ptxforge.build(s, tensors, target="sim")
    dev = ptxforge.sim()
    out = ptxforge.nd.empty(tensors[-1].shape, "float32", dev)
    f(*[ptxforge.nd.array(x, dev) for x in inputs], out)
    return out.numpy()


def test_one_tag_bound_to_two_loops_of_a_stage():
    a = te.placeholder((35,), name="A")
    b = te.compute((35,), lambda i: a[i] * 2.0, name="B")
    s = te.create_schedule(b.op)
    xo, xi = s[b].split(s[b].op.axis[0], factor=2)
    s[b].bind(xo, te.thread_axis("threadIdx.x"))
    s[b].bind(xi, te.thread_axis("threadIdx.x"))
    _rejected(s, [a, b], "B", "i.inner", "one tag per stage index")


def test_inner_loop_longer_than_the_enclosing_loop_of_its_tag():
    a = te.placeholder((35,), name="A")
    b = te.compute((35,), lambda i: a[i] * 2.0, name="B")
    s = te.create_schedule(b.op)
    xo, xi = s[b].split(s[b].op.axis[0], factor=32)
    s[b].bind(xo, te.thread_axis("threadIdx.x"))
    s[b].bind(xi, te.thread_axis("threadIdx.x"))
    _rejected(s, [a, b], "B", "i.inner", "one tag per stage index")


def _sum(n=34):
    a = te.placeholder((n,), name="A")
    k = te.reduce_axis((0, n), name="k")
    b = te.compute((1,), lambda i: te.sum(a[k], axis=k), name="B")
    return a, b


def test_reduce_loop_bound_to_a_block_index():
    a, b = _sum()
    s = te.create_schedule(b.op)
    s[b].bind(s[b].op.reduce_axis[0], te.thread_axis("blockIdx.x"))
    _rejected(s, [a, b], "B", "k", "no cross-block reduction")


def test_reduce_loops_bound_to_two_thread_indices():
    a = te.placeholder((4, 8), name="A")
    k1 = te.reduce_axis((0, 4), name="k1")
    k2 = te.reduce_axis((0, 8), name="k2")
    b = te.compute((1,), lambda i: te.sum(a[k1, k2], axis=[k1, k2]), name="B")
    s = te.create_schedule(b.op)
    s[b].bind(s[b].op.reduce_axis[0], te.thread_axis("threadIdx.y"))
    s[b].bind(s[b].op.reduce_axis[1], te.thread_axis("threadIdx.x"))
    _rejected(s, [a, b], "B", "k2", "one reducing thread index")


def test_the_cross_thread_reduction_over_one_index_still_builds():
    a, b = _sum()
    s = te.create_schedule(b.op)
    s[b].bind(s[b].op.axis[0], te.thread_axis("blockIdx.x"))
    s[b].bind(s[b].op.reduce_axis[0], te.thread_axis("threadIdx.x"))
    x = np.random.default_rng(0).uniform(size=34).astype("float32")
    np.testing.assert_allclose(_run(s, [a, b], [x]), [x.sum()], rtol=1e-5)


def test_block_index_under_a_serial_loop_of_its_kernel():
    a = te.placeholder((8, 16), name="A")
    b = te.compute((8, 16), lambda i, j: a[i, j] + 1.0, name="B")
    s = te.create_schedule(b.op)
    s[b].bind(s[b].op.axis[1], te.thread_axis("blockIdx.x"))
    _rejected(s, [a, b], "B", "j", "block index outermost")


def test_producer_spread_over_blocks_inside_its_reader():
    a = te.placeholder((8, 16), name="A")
    t = te.compute((8, 16), lambda i, j: a[i, j] * 2.0, name="T")
    b = te.compute((8, 16), lambda i, j: t[i, 15 - j] + 1.0, name="B")
    s = te.create_schedule(b.op)
    s[b].bind(s[b].op.axis[0], te.thread_axis("blockIdx.x"))
    s[t].compute_at(s[b], s[b].op.axis[0])
    s[t].bind(s[t].op.axis[1], te.thread_axis("blockIdx.y"))
    _rejected(s, [a, b], "T", "j", "producer visible to its readers")


def test_producer_spread_over_threads_into_registers():
    a = te.placeholder((8, 16), name="A")
    b = te.compute((8, 16), lambda i, j: a[i, 15 - j] + 1.0, name="B")
    s = te.create_schedule(b.op)
    al = s.cache_read(a, "local", [s[b]])
    s[b].bind(s[b].op.axis[0], te.thread_axis("blockIdx.x"))
    s[al].compute_at(s[b], s[b].op.axis[0])
    s[al].bind(s[al].op.axis[1], te.thread_axis("threadIdx.x"))
    _rejected(s, [a, b], al.name, s[al].op.axis[1].name, "producer visible to its readers")


def test_the_same_producer_in_shared_memory_builds_and_is_right():
    a = te.placeholder((8, 16), name="A")
    b = te.compute((8, 16), lambda i, j: a[i, 15 - j] + 1.0, name="B")
    s = te.create_schedule(b.op)
    sh = s.cache_read(a, "shared", [s[b]])
    s[b].bind(s[b].op.axis[0], te.thread_axis("blockIdx.x"))
    s[b].bind(s[b].op.axis[1], te.thread_axis("threadIdx.x"))
    s[sh].compute_at(s[b], s[b].op.axis[0])
    s[sh].bind(s[sh].op.axis[1], te.thread_axis("threadIdx.x"))
    x = np.random.default_rng(1).uniform(size=(8, 16)).astype("float32")
    np.testing.assert_allclose(_run(s, [a, b], [x]), x[:, ::-1] + 1.0, rtol=1e-6)


def test_reduction_replicated_over_the_threads_of_its_kernel():
    a = te.placeholder((4, 8), name="A")
    k = te.reduce_axis((0, 8), name="k")
    t = te.compute((4,), lambda i: te.sum(a[i, k], axis=k), name="T")
    b = te.compute((4, 16), lambda i, j: t[i] + 1.0, name="B")
    s = te.create_schedule(b.op)
    s[b].bind(s[b].op.axis[0], te.thread_axis("blockIdx.x"))
    s[b].bind(s[b].op.axis[1], te.thread_axis("threadIdx.x"))
    s[t].compute_at(s[b], s[b].op.axis[0])
    _rejected(s, [a, b], "T", "k", "reduction replicated")


def test_cross_thread_reduction_keeps_the_guard_of_a_non_dividing_split():
    # found by the mutation fuzzer: the write-back of the tree reduction ignored the guard
    # of the spatial split (6 rows by 2x4) and stored past the end of the output
    from ptxforge import ops
    from ptxforge.passes.pipeline import Pipeline

    a = te.placeholder((6, 11), name="A")
    out = ops.sum(ops.exp(a), axis=1)
    s = te.create_schedule(out.op)
    text = ('split(compute_red.ax0, factors=[2]), split(compute_red.ax0.outer, factors=[4]), '
            'split(compute_red.k1, factors=[2]), '
            'bind(compute_red.ax0.outer.outer, "blockIdx.x"), '
            'bind(compute_red.k1.outer, "threadIdx.y"), '
            'bind(compute_red.ax0.outer.inner, "threadIdx.x"), compute_inline(compute)')
    f = ptxforge.build(Pipeline.parse(text)(s.module), None, target="sim")
    x = np.random.default_rng(2).uniform(size=(6, 11)).astype("float32")
    got = np.full(6, np.nan, "float32")
    f(x, got)
    np.testing.assert_allclose(got, np.exp(x).sum(axis=1), rtol=1e-5)
