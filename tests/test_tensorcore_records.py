"""Tensor-core record logs written before the GEMM template's redesign (commit 997c816:
``tests/data/records_tensorcore_*_v1``) still load and replay to the very pass pipelines
they recorded: AutoTVM records of the mma.sync dense, batch_matmul and conv templates and
of the wgmma dense template, and auto-scheduler records of the ``tensorcore``,
``tensorcore_gemm`` and ``wgmma_gemm`` sketches. The knobs and slots they store are values
(or positions in choice tuples that only grow at their end), so no migration is needed,
but for the retired sketch ``tensorcore(C)``: its records replay from their stored
pipelines (what the dispatch contexts apply) and their states map onto
``tensorcore_gemm(C)`` (``split_k`` 1), by the rule of ``migrate_payload``.

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
    from ptxforge.autosched.printer import schedule_from_pipeline

    recs = [(i, r) for i, r in measure.load_records(AUTOSCHED_LOG)
            if i.task.target == target]
    assert recs
    seen = set()
    for inp, _ in recs:
        task = autosched.SearchTask(workload_key=inp.task.workload_key, target=target)
        want = Pipeline.parse(inp.pipeline_text).text
        # every record replays its stored pipeline (ApplyHistoryBest, apply_best)
        assert schedule_from_pipeline(task, inp.pipeline_text).pipeline.text == want
        state = state_from_payload(task, inp.payload)
        assert state is not None
        name = inp.payload["sketch"]
        seen.add(name)
        sketch = task.sketches[state.sketch]
        if name.startswith("tensorcore("):
            # the retired sketch: the state of tensorcore_gemm with its values, split_k 1
            assert name not in {s.name for s in task.sketches}
            assert sketch.name == "tensorcore_gemm" + name[len("tensorcore"):]
            values = sketch.describe(state.values)
            assert values == {**inp.payload["state"], "T_matmul_NT.tc.split_k": 1}
            assert "mma_m16n8k16_" in state.pipeline_text(task)
        else:
            assert sketch.name == name
            assert Pipeline.parse(state.pipeline_text(task)).text == want
    assert seen == sketches


def test_old_tensorcore_sketch_records_dispatch_their_kernels(tmp_path):
    """A log of the retired sketch's records only: ``apply_best`` applies the best one as
    recorded, the very pipeline (on sm_80 and sm_90a)."""
    import json

    with open(AUTOSCHED_LOG) as f:
        lines = [ln for ln in f if json.loads(ln)["payload"]["sketch"].startswith("tensorcore(")]
    for target in ("cuda -arch=sm_80", "cuda -arch=sm_90a"):
        mine = [ln for ln in lines if json.loads(ln)["task"]["target"] == target]
        log = tmp_path / f"old_{target[-5:]}.json"
        log.write_text("".join(mine))
        ok = [(i, r) for i, r in measure.load_records(str(log)) if r.ok]
        assert mine and ok
        inp, _ = min(ok, key=lambda ir: ir[1].mean)
        task = autosched.SearchTask(workload_key=inp.task.workload_key, target=target)
        sch, _ = task.apply_best(str(log))
        assert sch.pipeline.text == Pipeline.parse(inp.pipeline_text).text
        assert "mma_m16n8k16" in sch.pipeline.text


def test_a_wgmma_state_recorded_before_the_block_order_slot_maps_to_the_plain_order():
    """A ``wgmma_gemm`` payload of the form written before the ``raster`` slot (no value
    for it) is the state of the kernel it built: the plain block order, 1; a payload with
    a value keeps it, and one with a value the slot does not offer is no state."""
    from ptxforge.autosched.state import state_payload

    task = autosched.SearchTask(func=tc_records_dense, args=(1024, 768, 768, "float16"),
                                target="cuda -arch=sm_90a")
    (k,) = [k for k, sk in enumerate(task.sketches) if sk.name.startswith("wgmma_gemm(")]
    sk = task.sketches[k]
    raster = sk.steps[0].slot("raster")
    assert dict((s.name, s.choices) for s in sk.slots)[raster] == (1, 2, 4, 8)
    old = {"kind": "autosched", "sketch": sk.name, "state": {
        "T_matmul_NT.wg.block_n": 128, "T_matmul_NT.wg.warpgroups": 2,
        "T_matmul_NT.wg.stages": 4, "T_matmul_NT.wg.in_flight": 1,
        "T_matmul_NT.wg.split_k": 1}}
    state = state_from_payload(task, old)
    assert state is not None and sk.describe(state.values) == {**old["state"], raster: 1}
    assert state_payload(task, state)["state"][raster] == 1
    grouped = {**old, "state": {**old["state"], raster: 4}}
    assert sk.describe(state_from_payload(task, grouped).values)[raster] == 4
    assert state_from_payload(task, {**old, "state": {**old["state"], raster: 3}}) is None
    # the state of the old payload schedules the plain order: no grouped block loop
    assert "blockIdx.y" in state.pipeline_text(task)
    assert "blockIdx.y" not in state_from_payload(task, grouped).pipeline_text(task)
