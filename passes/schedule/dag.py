"""ScheduleDAG: a ComputeDAG that knows schedules.

The IR's :class:`~ptxforge.ir.compute_dag.ComputeDAG` is the computation alone (its
operations, text, work and hash). What TVM's ``auto_scheduler.ComputeDAG`` adds about
schedules (the initial state, a state printed as te code) needs the schedule passes, so it
lives here, a floor above the IR: te schedules (``s.dag``), search tasks
(``task.compute_dag``), ``ptxforge.ComputeDAG`` and ``ptxforge.tvm.auto_scheduler.ComputeDAG``
all give one.
"""

from __future__ import annotations

from ...ir.compute_dag import ComputeDAG
from ...ir.te import TEError
from ..pipeline import SchedulePipeline
from .python_code import StageTable, schedule_python_code


class ScheduleDAG(ComputeDAG):
    """A :class:`~ptxforge.ir.compute_dag.ComputeDAG` with the schedule-state methods of
    TVM's ``auto_scheduler.ComputeDAG``; a state is a schedule pipeline."""

    def get_init_state(self) -> SchedulePipeline:
        """The unscheduled state: an empty schedule pipeline (a
        :class:`~ptxforge.passes.pipeline.SchedulePipeline`, as a record's, so adding a
        lowering pass to it is refused)."""
        return SchedulePipeline([])

    def print_python_code_from_state(self, state) -> str:
        """The te schedule code of ``state``: a pass pipeline or its text, a record's input
        (``inp.state`` or the input itself), or :meth:`get_init_state`, as TVM prints it
        (``s = te.create_schedule(...)``, then one line per primitive)."""
        tuples = [op.name for op in self.compute_ops if op.num_outputs > 1]
        if tuples:
            raise TEError(f"print_python_code_from_state: stage {tuples[0]} is a tuple compute, "
                          "which the schedule-code printer does not write; print the "
                          "pipeline's text (s.pipeline.text) instead")
        text = getattr(state, "pipeline_text", state)
        if not isinstance(text, str) and not hasattr(text, "passes"):
            raise TypeError("print_python_code_from_state takes a pass pipeline (or its text) "
                            f"or a record's input, got {type(state).__name__}; an auto-"
                            "scheduler State needs its task: use state.pipeline(task)")
        return schedule_python_code(StageTable.of_dag(self), text)
