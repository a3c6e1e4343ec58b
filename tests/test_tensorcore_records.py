"""Tensor-core record logs written before the GEMM template's redesign (commit 997c816:
``tests/data/records_tensorcore_*_v1``) still load and replay to the very pass pipelines
they recorded: AutoTVM records of the mma.sync dense, batch_matmul and conv templates and
of the wgmma dense template, and auto-scheduler records of the ``tensorcore``,
``tensorcore_gemm`` and ``wgmma_gemm`` sketches. The knobs and slots they store are values
(or positions in choice tuples that only grow at their end), so no migration is needed.

The logs are never regenerated for a change of code; they stand for logs users have."""

from __future__ import annotations

import os

import pytest

import ptxforge.autotvm.tensorcore_conv  # noqa: F401  (registers the templates)
import ptxforge.autotvm.tensorcore_dense  # noqa: F401
import ptxforge.autotvm.tensorcore_wgmma  # noqa: F401
from ptxforge import autosched, autotvm, measure, ops, te
from ptxforge.autosched.state import state_from_payload
from ptxforge.passes.pipeline import Pipeline

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
AUTOTVM_LOG = os.path.join(DATA, "records_tensorcore_autotvm_v1.log")
AUTOSCHED_LOG = os.path.join(DATA, "records_tensorcore_autosched_v1.json")


@autosched.register_workload(override=True)
def tc_records_dense(M, N, K, dtype):
    """The dense layer (bias, relu, cast back) the auto-scheduler records were tuned on."""
    a = te.placeholder((M, K), dtype, name="A")
    w = te.placeholder((N, K), dtype, name="W")
    bias = te.placeholder((N,), "float32", name="bias")
    c = ops.nn.dense(a, w, out_dtype="float32")
    out = te.compute((M, N), lambda i, j: te.max(c[i, j] + bias[j], 0.0).astype(dtype),
                     name="relu")
    return [a, w, bias, out]


def test_old_autotvm_tensor_core_records_replay():
    records = list(autotvm.record.load_from_file(AUTOTVM_LOG))
    assert len(records) == 12
    assert {inp.task.name for inp, _ in records} == {
        "dense_tensorcore.cuda", "batch_matmul_tensorcore.cuda",
        "conv2d_nhwc_tensorcore.cuda", "dense_wgmma.cuda"}
    for inp, _ in records:
        task = autotvm.task.create(inp.task.name, args=inp.task.args, target=inp.target)
        again = task.measure_input(inp.config)
        want = Pipeline.parse(inp.pipeline_text).text
        assert Pipeline.parse(again.pipeline_text).text == want, (inp.task.name, inp.config)


def test_old_autotvm_tensor_core_records_dispatch():
    records = list(autotvm.record.load_from_file(AUTOTVM_LOG))
    for name in ("dense_tensorcore.cuda", "dense_wgmma.cuda"):
        mine = [(i, r) for i, r in records if i.task.name == name]
        best, _ = min(mine, key=lambda r: r[1].mean)
        workload = (name,) + tuple(best.task.args)
        with autotvm.apply_history_best(AUTOTVM_LOG) as ctx:
            cfg = ctx.query(best.target, workload)
            assert not cfg.is_fallback
            from ptxforge.target import as_target

            with as_target(best.target):
                s, _ = autotvm.task.TEMPLATES[name](*best.task.args)
        assert s.pipeline.text == Pipeline.parse(best.pipeline_text).text


@pytest.mark.parametrize("target,sketches", [
    ("cuda -arch=sm_80", {"tensorcore(T_matmul_NT)", "tensorcore_gemm(T_matmul_NT)"}),
    ("cuda -arch=sm_90a", {"tensorcore(T_matmul_NT)", "tensorcore_gemm(T_matmul_NT)",
                           "wgmma_gemm(T_matmul_NT)"}),
])
def test_old_autosched_tensor_core_records_replay(target, sketches):
    recs = [(i, r) for i, r in measure.load_records(AUTOSCHED_LOG)
            if i.task.target == target]
    assert recs
    seen = set()
    for inp, _ in recs:
        task = autosched.SearchTask(workload_key=inp.task.workload_key, target=target)
        state = state_from_payload(task, inp.payload)
        assert state is not None
        seen.add(inp.payload["sketch"])
        assert (Pipeline.parse(state.pipeline_text(task)).text
                == Pipeline.parse(inp.pipeline_text).text)
    assert seen == sketches
