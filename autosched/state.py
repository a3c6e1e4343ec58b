"""Search states: a sketch of the task plus one value per slot of the sketch.

A state turns into a pass pipeline (:meth:`State.pipeline`) or its text
(:meth:`State.pipeline_text`), and into the JSON payload records store next to that text
(:func:`state_payload`), from which :func:`state_from_payload` recovers it (by sketch name
and explicit slot values, so records stay readable and survive reordering of sketches).

The tuner measures a state without making its pipeline: :func:`candidate_input` gives the
builder a :class:`StatePlan` (the task's token, the sketch and the slot values), and the
builder worker makes the pipeline, applies it once and returns its text for the record.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..measure.plan import SchedulePlan, TaskRegistry
from ..passes.pipeline import Pipeline

PAYLOAD_KIND = "autosched"


@dataclass(frozen=True)
class State:
    """One point of the search space of a task: ``sketch`` indexes the task's sketches,
    ``values`` holds one value (table row or choice index) per slot of that sketch."""

    sketch: int
    values: tuple

    def pipeline(self, task) -> Pipeline:
        """The schedule passes of this state for ``task``."""
        return task.sketches[self.sketch].pipeline(self.values)

    def pipeline_text(self, task) -> str:
        """The text of :meth:`pipeline`, as measure inputs and records carry it."""
        return task.sketches[self.sketch].pipeline_text(self.values)

    def row(self, width: int) -> np.ndarray:
        """This state as a population row (sketch index, then values, zero-padded)."""
        out = np.zeros(width, dtype=np.int64)
        out[0] = self.sketch
        out[1: 1 + len(self.values)] = self.values
        return out

    @classmethod
    def from_row(cls, row, task) -> State:
        sk = int(row[0])
        n = len(task.sketches[sk].slots)
        return cls(sk, tuple(int(v) for v in row[1: 1 + n]))


def state_payload(task, state: State) -> dict:
    """The JSON-able description of ``state`` stored in records."""
    sk = task.sketches[state.sketch]
    return {"kind": PAYLOAD_KIND, "sketch": sk.name, "state": sk.describe(state.values)}


def state_from_payload(task, payload) -> State | None:
    """The state a record's payload describes, or None if it is not one of this task's
    sketches (another tuner's record, or a sketch this version no longer makes). A record
    of a retired sketch maps onto the sketch that took its place
    (:func:`~ptxforge.autosched.tensorcore.migrate_payload`), and one written before a
    slot was added takes the value the kernel it built had
    (:func:`~ptxforge.autosched.tensorcore.complete_payload`: the wgmma steps' ``raster``
    1)."""
    if not isinstance(payload, dict) or payload.get("kind") != PAYLOAD_KIND:
        return None
    name, values = payload.get("sketch"), payload.get("state", {})
    if isinstance(name, str):
        from .tensorcore import complete_payload, migrate_payload

        if not any(sk.name == name for sk in task.sketches):
            name, values = migrate_payload(name, values) or (name, values)
        values = complete_payload(name, values)
    for k, sk in enumerate(task.sketches):
        if sk.name == name:
            try:
                return State(k, sk.row_of(values))
            except (ValueError, TypeError, KeyError, IndexError, AttributeError):
                return None
    return None


TASKS = TaskRegistry()
"""The search tasks plans of this process name (and those rebuilt from plans' bytes)."""


class StatePlan(SchedulePlan):
    """A state of a task, for the builder to schedule: the task (by its token in
    :data:`TASKS`), the sketch index and the slot values."""

    def __init__(self, task, state: State):
        self.task = task
        self.token = TASKS.register(task)
        self.sketch = state.sketch
        self.values = tuple(int(v) for v in state.values)

    missing = ""  # why the sketch is not in a task rebuilt from the plan's bytes

    def pipeline(self) -> Pipeline:
        """The schedule passes of the state (the sketch's steps run here: a tensor-core
        step builds its te schedule)."""
        if self.sketch < 0:
            from ..measure.plan import PlanError

            raise PlanError(self.missing)
        return self.task.sketches[self.sketch].pipeline(self.values)

    def schedule(self, module, ctx) -> tuple:
        from ..passes.pipeline import SchedulePipeline
        from ..passes.schedule.schedule import record_schedules

        with record_schedules() as made:
            passes = self.pipeline()
        pipeline = SchedulePipeline.of(passes)
        done = scheduled_by(made, pipeline, module)
        if done is not None:
            return done, pipeline
        return pipeline(module, ctx), pipeline

    def __reduce__(self):
        name = self.task.sketches[self.sketch].name
        return (_plan_of, (self.token, _task_source(self.task), self.sketch, name,
                           self.values))

    def __repr__(self):
        return f"StatePlan({self.task.workload_key[:60]}, sketch {self.sketch}, {self.values})"


_TEXTS: dict = {}  # id(module) -> (module, its text): the unscheduled modules seen here


def _text_of(module) -> str:
    hit = _TEXTS.get(id(module))
    if hit is None or hit[0] is not module:
        if len(_TEXTS) > 64:
            _TEXTS.clear()
        hit = _TEXTS[id(module)] = (module, str(module))
    return hit[1]


def scheduled_by(made: list, pipeline, module):
    """The module a te schedule made while the state's pipeline was built, when applying
    ``pipeline`` to ``module`` would give it again; else None.

    A tensor-core sketch makes its pipeline by running a te schedule, which applies every
    pass to its own unscheduled IR as it goes. When that schedule is the only one made,
    its passes are the whole pipeline (the same objects, in order) and its unscheduled IR
    prints as ``module`` does (same stages, buffers and loop names), the passes, which are
    functions of the IR and their parameters, would rebuild exactly its module: the builder
    takes it instead of applying them a second time."""
    if len(made) != 1:
        return None
    s = made[0]
    own = tuple(s.pipeline)  # flushes deferred primitives, as emitting the pipeline did
    mine = tuple(pipeline)
    if len(own) != len(mine) or any(a is not b for a, b in zip(own, mine)):
        return None
    if str(s.initial_module) != _text_of(module):
        return None
    return s.module


def _task_source(task) -> bytes:
    """What rebuilds ``task`` in another process (pickled once per task): its tensors, key,
    target, hardware figures and description."""
    src = getattr(task, "_plan_source", None)
    if src is None:
        import pickle

        src = pickle.dumps((list(task.tensors), task.workload_key, task.target,
                            task.hardware_params, task.desc))
        task._plan_source = src
    return src


def _rebuild_task(source: tuple):
    from ..ir.compute_dag import ComputeDAG
    from .search_task import SearchTask

    tensors, key, target, hardware_params, desc = source
    return SearchTask(compute_dag=ComputeDAG(tensors), workload_key=key, target=target,
                      hardware_params=hardware_params, desc=desc)


def _plan_of(token: str, source: bytes, sketch: int, name: str, values: tuple) -> StatePlan:
    plan = StatePlan.__new__(StatePlan)
    plan.task = TASKS.lookup(token, source, _rebuild_task)
    sketches = plan.task.sketches
    if not (0 <= sketch < len(sketches) and sketches[sketch].name == name):
        # a task rebuilt elsewhere made its sketches in another order: find it by name
        # (unpickling never raises: a missing sketch fails the build, not the worker)
        found = [k for k, sk in enumerate(sketches) if sk.name == name]
        sketch = found[0] if found else -1
        plan.missing = (f"the task rebuilt in this process has no sketch {name!r} (it has "
                        f"{[sk.name for sk in sketches]})")
    plan.token, plan.sketch, plan.values = token, sketch, values
    return plan


def candidate_input(task, state: State):
    """The measure input of ``state``: the task's spec, the state's payload and a
    :class:`StatePlan`; its pipeline text comes back from the builder."""
    from ..measure import MeasureInput

    return MeasureInput(task.task_spec, "", state_payload(task, state),
                        plan=StatePlan(task, state))
