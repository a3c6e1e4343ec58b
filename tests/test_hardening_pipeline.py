"""Schedule pipelines refuse lowering passes: a record whose pipeline holds one is skipped by
``apply_best`` and ``print_best`` like any record that does not apply, the builders refuse it,
and a te schedule cannot be given one."""

from __future__ import annotations

import numpy as np
import pytest

from ptxforge import autosched, te
from ptxforge.measure import MeasureInput, MeasureResult, TaskSpec, save_records
from ptxforge.measure.build import BuildOptions, build_candidate
from ptxforge.measure.result import MeasureErrorNo
from ptxforge.passes import (
    LoweringPassInScheduleError,
    Pipeline,
    SchedulePipeline,
    parse_pass,
)


@autosched.register_workload(override=True)
def hardening_rowsum():
    a = te.placeholder((8, 64), name="A")
    k = te.reduce_axis((0, 64), name="k")
    return [a, te.compute((8,), lambda i: te.sum(a[i, k], axis=k), name="B")]


CROSS_THREAD = 'bind(B.i, "blockIdx.x"), bind(B.k, "threadIdx.x")'
SERIAL = 'bind(B.i, "threadIdx.x")'


def _task():
    return autosched.SearchTask(func=hardening_rowsum, args=())


def _log(tmp_path, pipelines_costs) -> str:
    task = _task()
    spec = TaskSpec.from_tensors(task.tensors, task.workload_key)
    path = str(tmp_path / "t.log")
    save_records(path, [MeasureInput(spec, p) for p, _ in pipelines_costs],
                 [MeasureResult((c,), 0, "", 1.0, 1.0) for _, c in pipelines_costs])
    return path


@pytest.mark.parametrize("lowering", ["decompose_reduction()", "cross_thread_reduction()",
                                      "lower_blocks()", "simplify()", "unroll_loops()"])
def test_a_schedule_pipeline_refuses_each_lowering_pass_at_its_position(lowering):
    text = f"{CROSS_THREAD}, {lowering}"
    with pytest.raises(LoweringPassInScheduleError, match="lowering pass") as e:
        SchedulePipeline.parse(text)
    assert e.value.offset == len(CROSS_THREAD) + 2
    # the same passes built as objects, and added to a schedule pipeline
    with pytest.raises(LoweringPassInScheduleError):
        SchedulePipeline(list(Pipeline.parse(text)))
    with pytest.raises(LoweringPassInScheduleError):
        SchedulePipeline.parse(CROSS_THREAD) + parse_pass(lowering)
    # a general pipeline (opt, the lowering pipeline) still holds them
    assert Pipeline.parse(text).text == text


def test_a_te_schedule_refuses_a_lowering_pass():
    a, b = _task().tensors
    s = te.create_schedule(b.op)
    with pytest.raises(LoweringPassInScheduleError, match="decompose_reduction"):
        s.apply("decompose_reduction()")
    assert s.pipeline.text == ""


def test_apply_best_skips_a_cross_thread_record_with_a_lowering_pass(tmp_path):
    import ptxforge

    # the poisoned record is the best by cost; it used to build a kernel that races
    path = _log(tmp_path, [(CROSS_THREAD + ", decompose_reduction()", 1e-6),
                           (CROSS_THREAD, 1e-3)])
    task = _task()
    with pytest.warns(RuntimeWarning, match="lowering pass"):
        sch, args = task.apply_best(path)
    assert sch.pipeline.text == CROSS_THREAD
    m = ptxforge.build(sch, args, target="sim")
    x = np.random.default_rng(0).random((8, 64), dtype=np.float32)
    out = np.zeros(8, "float32")
    m(x, out)
    np.testing.assert_allclose(out, x.sum(1), rtol=1e-5)
    with pytest.warns(RuntimeWarning, match="lowering pass"):
        code = task.print_best(path)
    assert "decompose_reduction" not in code


def test_print_best_prints_the_record_apply_best_uses(tmp_path):
    path = _log(tmp_path, [(SERIAL + ", split(B.gone, factors=[2])", 1e-6), (SERIAL, 1e-3)])
    with pytest.warns(RuntimeWarning, match="does not apply"):
        code = _task().print_best(path)
    assert "gone" not in code and "threadIdx.x" in code


def test_only_lowering_records_raise_a_clear_error(tmp_path):
    path = _log(tmp_path, [(CROSS_THREAD + ", decompose_reduction()", 1e-6)])
    with pytest.warns(RuntimeWarning), pytest.raises(ValueError, match="lowering pass"):
        _task().apply_best(path)


def test_the_builder_refuses_a_lowering_pass_as_an_instantiation_error():
    task = _task()
    spec = TaskSpec.from_tensors(task.tensors, task.workload_key)
    res = build_candidate(MeasureInput(spec, CROSS_THREAD + ", decompose_reduction()"),
                    BuildOptions(compile_to="ir"))
    assert res.error_no == MeasureErrorNo.INSTANTIATION_ERROR
    assert "lowering pass" in res.error_msg
    ok = build_candidate(MeasureInput(spec, CROSS_THREAD), BuildOptions(compile_to="ir"))
    assert ok.error_no == 0
