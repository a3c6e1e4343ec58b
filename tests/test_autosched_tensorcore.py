"""The tensor-core sketch rule: an fp16 dense layer tuned with the simulator runner finds,
records and replays a tensor-core kernel; the rule stays off where it does not apply."""

from __future__ import annotations

import numpy as np
import ptxforge
from ptxforge import autosched, measure, te
from ptxforge.autosched.printer import python_schedule_code
from ptxforge.autosched.search_policy import SketchPolicy
from ptxforge.autosched.state import state_from_payload
from ptxforge.autosched.tensorcore import TensorCoreStep, bank_conflict
from ptxforge.ops.schedules.tensorcore import dense_tensorcore_compute

SM80 = "cuda -arch=sm_80"


@autosched.register_workload
def tc_dense_fp16(M, N, K):
    """fp16 dense, fp32 accumulation, cast to fp16."""
    return dense_tensorcore_compute(M, N, K, "float16", out_dtype="float16")


@autosched.register_workload
def tc_dense_fp32(M, N, K):
    return dense_tensorcore_compute(M, N, K, "float32", out_dtype="float32")


def test_rule_applies_to_fp16_products_on_sm80_only():
    names = [s.name for s in autosched.SearchTask(func=tc_dense_fp16, args=(64, 64, 64),
                                                  target=SM80).sketches]
    assert names[-1] == "tensorcore(C)" and "tile(C)" in names
    # float32 (TF32 is never chosen silently), awkward extents, a target without mma.sync
    for args, target in (((64, 64, 64), "cuda -arch=sm_75"), ((48, 64, 24), SM80)):
        task = autosched.SearchTask(func=tc_dense_fp16, args=args, target=target)
        assert not any(s.name.startswith("tensorcore") for s in task.sketches)
    task = autosched.SearchTask(func=tc_dense_fp32, args=(64, 64, 64), target=SM80)
    assert not any(s.name.startswith("tensorcore") for s in task.sketches)
    assert list(bank_conflict([128, 144, 64])) == [8, 1, 4]


def test_tuning_finds_records_and_replays_a_tensor_core_kernel(tmp_path):
    task = autosched.SearchTask(func=tc_dense_fp16, args=(64, 64, 64), target=SM80)
    tc = len(task.sketches) - 1
    log = str(tmp_path / "tc.json")
    opts = autosched.TuningOptions(
        num_measure_trials=6, num_measures_per_round=3,
        builder=measure.LocalBuilder(n_parallel=1, compile_to="ir"),
        runner=measure.SimRunner(), measure_callbacks=[autosched.RecordToFile(log)])
    pol = SketchPolicy(task, autosched.XGBModel(), {"evolutionary_search_population": 128,
                                                    "evolutionary_search_num_iters": 1},
                       seed=0)
    task.tune(opts, search_policy=pol)
    recs = measure.load_records(log)
    ok = [(i, r) for i, r in recs if r.ok]
    assert ok and all(r.correctness == "passed" for _, r in ok)
    best_inp, _ = autosched.ApplyHistoryBest(log).best[task.workload_key]
    state = state_from_payload(task, best_inp.payload)
    assert state is not None and state.sketch == tc
    assert isinstance(task.sketches[tc].steps[0], TensorCoreStep)
    text = state.pipeline_text(task)
    assert best_inp.pipeline_text == text and "tensorize" in text
    assert "mma_m16n8k16_f16_f32" in text and "async_copy" in text
    code = python_schedule_code(task, text)
    assert ".tensorize(" in code and ".storage_align(" in code and "s.apply(" not in code
    ns = {"te": te, "tensors": task.tensors}
    exec(code, ns)
    assert ns["s"].pipeline.text == text
    sch, args = task.apply_best(log)
    assert sch.pipeline.text == text
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, size=(64, 64)).astype("float16")
    b = rng.uniform(-1, 1, size=(64, 64)).astype("float16")
    out = np.zeros((64, 64), "float16")
    ptxforge.build(sch, args, target="sim")(a, b, out)
    ref = a.astype("float32") @ b.astype("float32").T
    np.testing.assert_allclose(out.astype("float32"), ref, rtol=1e-2, atol=1e-2)
    # the record replays to the same kernel
    again = autosched.SearchTask(func=tc_dense_fp16, args=(64, 64, 64), target=SM80)
    sch2, _ = again.apply_best(log)
    assert sch2.pipeline.text == sch.pipeline.text
