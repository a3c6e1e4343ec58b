"""A builder takes the module a tensor-core sketch's te schedule made instead of applying the
same passes to the task's module again: the scheduled and the lowered IR are those the
second application gives, and any other pipeline is applied as before."""

from __future__ import annotations

import pytest
from ptxforge import autosched
from ptxforge.autosched.state import State, StatePlan, scheduled_by
from ptxforge.measure.build import BuildOptions, build_candidate
from ptxforge.passes import PassContext
from ptxforge.passes.lower import lowering_pipeline
from ptxforge.passes.pipeline import SchedulePipeline
from ptxforge.passes.schedule.schedule import create_schedule, record_schedules
from ptxforge.target import as_target

from .test_autosched_tensorcore import tc_dense_layer  # registered there

_TASKS: dict = {}


def _task(target: str, k: int = 64):
    key = (target, k)
    if key not in _TASKS:
        _TASKS[key] = autosched.SearchTask(func=tc_dense_layer,
                                           args=(64, 128, k, "float16"), target=target)
    return _TASKS[key]


def _states(task, prefix: str, count: int) -> list:
    """Up to ``count`` random valid states of the sketches whose name starts with
    ``prefix``."""
    policy = autosched.SketchPolicy(task, autosched.RandomModel(seed=3),
                                    {"evolutionary_search_population": 64,
                                     "evolutionary_search_num_iters": 1}, seed=3, verbose=0)
    rows = policy.search_one_round(24)
    out = [State.from_row(r, task) for r in rows
           if task.sketches[int(r[0])].name.startswith(prefix)]
    return out[:count]


@pytest.mark.parametrize("target,prefix", [("cuda -arch=sm_80", "tensorcore_gemm"),
                                           ("cuda -arch=sm_90a", "wgmma_gemm")])
def test_te_schedule_module_is_the_pipeline_applied_again(target, prefix):
    task = _task(target)
    states = _states(task, prefix, 1)
    assert states, f"no {prefix} state sampled"
    module = task.task_spec.module()
    for st in states:
        plan = StatePlan(task, st)
        ctx = PassContext(verify=True)
        with as_target(target), ctx:
            with record_schedules() as made:
                pipeline = SchedulePipeline.of(plan.pipeline())
            reused = scheduled_by(made, pipeline, module)
            assert reused is not None, "the te schedule's module was not taken"
            again = pipeline(module, ctx)
            assert str(reused) == str(again)
            assert str(lowering_pipeline()(reused, ctx)) == str(lowering_pipeline()(again, ctx))
        # the builder's path gives the same text for the record
        scheduled, made_pipeline = plan.schedule(module, PassContext(verify=False))
        assert made_pipeline.text == pipeline.text
        assert str(scheduled) == str(again)


def test_other_pipelines_are_applied_to_the_task_module():
    task = _task("cuda -arch=sm_80")
    states = _states(task, "tile", 1)
    assert states
    plan = StatePlan(task, states[0])
    module = task.task_spec.module()
    with record_schedules() as made:
        pipeline = SchedulePipeline.of(plan.pipeline())
    assert made == []  # a CUDA-core sketch makes no te schedule
    assert scheduled_by(made, pipeline, module) is None
    scheduled, _ = plan.schedule(module, PassContext(verify=False))
    assert str(scheduled) == str(pipeline(module, PassContext(verify=False)))


def test_a_schedule_is_not_taken_when_its_ir_or_passes_differ():
    task = _task("cuda -arch=sm_80")
    states = _states(task, "tensorcore_gemm", 1)
    assert states
    plan = StatePlan(task, states[0])
    module = task.task_spec.module()
    with record_schedules() as made:
        pipeline = SchedulePipeline.of(plan.pipeline())
    # another task's unscheduled IR: the passes must be applied to it, not taken
    other = _task("cuda -arch=sm_80", 32).task_spec.module()
    assert scheduled_by(made, pipeline, other) is None
    # one pass more than the schedule applied
    longer = SchedulePipeline(tuple(pipeline) + (tuple(pipeline)[-1],))
    assert scheduled_by(made, longer, module) is None
    # two schedules made: which one gave the module is unknown
    a, w, bias, out = tc_dense_layer(8, 8, 8, "float16")
    assert scheduled_by(made + [create_schedule(out.op)], pipeline, module) is None


def test_builds_of_reused_schedules_succeed():
    task = _task("cuda -arch=sm_90a")
    for st in _states(task, "wgmma_gemm", 1) + _states(task, "tensorcore_gemm", 1):
        from ptxforge.autosched.state import candidate_input

        res = build_candidate(candidate_input(task, st),
                              BuildOptions(target_sm="sm_90a", compile_to="ir"))
        assert res.error_no == 0, res.error_msg
        assert res.pipeline_text == st.pipeline_text(task)
