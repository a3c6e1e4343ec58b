"""A schedule (a pass pipeline) as a te schedule of a search task, and as Python schedule
code in the style of the tutorial's "Equivalent python schedule" (the printer itself is
:mod:`ptxforge.passes.schedule.python_code`, beside the te schedule API it inverts).
"""

from __future__ import annotations

from ..passes.pipeline import Pipeline, SchedulePipeline
from ..passes.schedule.python_code import StageTable, schedule_python_code
from ..te import create_schedule


def _as_pipeline(pipeline: Pipeline | str) -> Pipeline:
    return SchedulePipeline.of(pipeline)


def schedule_from_pipeline(task, pipeline: Pipeline | str):
    """A te schedule of ``task`` with the passes of ``pipeline`` (a Pipeline, or its text as
    a record holds it) applied and recorded in ``s.pipeline``."""
    sch = create_schedule([t.op for t in task.ir_dag.outputs])
    want = set(task.analysis.stages) | set(task.analysis.placeholders)
    got = set(sch._names.values())
    if want != got:
        raise ValueError(
            f"the schedule's stage names {sorted(got)} differ from the task's {sorted(want)}; "
            "give the task's tensors as inputs then outputs, in the workload's order")
    sch.apply(_as_pipeline(pipeline))
    return sch


def stage_table(task) -> StageTable:
    """The names of ``task``'s stages and loops for the schedule-code printer, read from the
    task's analysis (which has already lowered the DAG once)."""
    an = task.analysis
    ndim = {name: len(op.shape) for name, op in an.placeholders.items()}
    ndim.update({name: len(st.shape) for name, st in an.stages.items()})
    return StageTable(
        args=tuple(an.names[id(t.op)] for t in task.tensors),
        outputs=tuple(an.names[id(t.op)] for t in task.ir_dag.outputs),
        order=tuple(an.order()),
        axes={name: (tuple(a for a, _ in st.spatial), tuple(a for a, _ in st.reduce))
              for name, st in an.stages.items()},
        ndim=ndim)


def python_schedule_code(task, pipeline: Pipeline | str) -> str:
    """``pipeline`` (a Pipeline, or its text as a record holds it) as Python te schedule
    code for ``task`` (see :mod:`ptxforge.passes.schedule.python_code`)."""
    return schedule_python_code(stage_table(task), pipeline)
