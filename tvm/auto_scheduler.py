"""``tvm.auto_scheduler``: the Ansor-style auto-scheduler (``ptxforge.autosched``), with
TVM's measurement names: ``LocalBuilder`` and ``LocalRunner`` (``ptxforge.measure``) and
``SimRunner``, the CPU simulator runner that stands in for a GPU."""

from ..autosched import *  # noqa: F401,F403
from ..ir.compute_dag import ComputeDAG as _IRComputeDAG
from ..measure import LocalBuilder, LocalRunner, SimRunner  # noqa: F401
from ..passes.schedule.dag import ScheduleDAG


class ComputeDAG(ScheduleDAG):
    """TVM's ``auto_scheduler.ComputeDAG``: built from a workload's tensors (inputs, then
    outputs) or from a te schedule of them, with TVM's ``flop_ct`` and
    ``apply_steps_from_state`` next to the schedule-state methods of
    :class:`~ptxforge.passes.schedule.dag.ScheduleDAG` (``get_init_state``,
    ``print_python_code_from_state``)."""

    def __init__(self, compute_or_sch):
        dag = getattr(compute_or_sch, "dag", None)
        super().__init__(dag.tensors if isinstance(dag, _IRComputeDAG) else compute_or_sch)

    @property
    def flop_ct(self) -> float:
        """The floating-point operations of one run (TVM's attribute)."""
        return self.flop_count()

    def apply_steps_from_state(self, state, layout_rewrite=None):
        """``(schedule, tensors)``: a te schedule of this DAG with ``state`` applied (a
        schedule pipeline, its text, or a record's input)."""
        from ..passes.pipeline import SchedulePipeline
        from ..te import create_schedule

        sch = create_schedule([t.op for t in self.outputs])
        sch.apply(SchedulePipeline.of(getattr(state, "pipeline_text", state)))
        return sch, list(self.tensors)
