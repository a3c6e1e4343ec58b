"""Schedule plans: what a builder makes a candidate's schedule from when the tuner did not.

A tuner that searches states (the auto-scheduler: a sketch and its slot values; AutoTVM: a
template and a config) hands the builder a :class:`SchedulePlan` instead of pipeline text:
the builder worker turns the plan into the scheduled IR and its pipeline (as objects, once),
lowers and compiles it, and sends the pipeline's text back with the build result. The tuner's
process never builds a schedule for a candidate; the text exists only for the record
(:meth:`~ptxforge.measure.result.MeasureInput.learn_pipeline` stores it in the candidate when
the build returns).

Plans cross process boundaries by pickle. A plan names its task by a token that the tuner's
process registers (:class:`TaskRegistry`): a forked builder worker inherits the registry
and finds the task at once; any other process (a worker started after the task was made,
a remote builder) rebuilds the task from the bytes the plan carries and keeps it for the
next candidate.
"""

from __future__ import annotations

import abc
import pickle
import threading
import uuid
import weakref
from collections import OrderedDict

from ..ir.expr import IRError


class PlanError(IRError):
    """A plan does not schedule (a template rejected its config): the candidate is an
    ``INSTANTIATION_ERROR``, as a pipeline that does not apply is."""


class SchedulePlan(abc.ABC):
    """A candidate's schedule, to be made where it is compiled.

    In the tuner's process a plan also keeps the pipeline text its build returned
    (:meth:`learn`), which the candidate's record holds."""

    _text: str = ""
    _failed: bool = False

    @abc.abstractmethod
    def pipeline(self):
        """The schedule passes (a :class:`~ptxforge.passes.pipeline.Pipeline`) of this
        plan; an ``IRError`` (a ``ScheduleError``) for a plan that does not schedule."""

    @abc.abstractmethod
    def schedule(self, module, ctx) -> tuple:
        """``(scheduled module, pipeline)``: the schedule of this plan applied to
        ``module`` (the task's unscheduled IR) under the pass context ``ctx``, and the
        :class:`~ptxforge.passes.pipeline.Pipeline` that gives it (whose text goes into the
        record). Raises an ``IRError`` (a ``ScheduleError``) for a schedule that does not
        apply, as applying pipeline text would."""

    def learn(self, text: str, failed: bool = False) -> None:
        """Keep the pipeline text a build of this plan returned (``failed``: the build made
        none, and none is to be made here)."""
        if text:
            self._text = text
        elif failed:
            self._failed = True

    def known_text(self) -> str:
        """The pipeline text learned so far (empty if none)."""
        return self._text

    def pipeline_text(self) -> str:
        """The learned pipeline text; without one (a builder that ignores plans), the
        plan's pipeline made here, once. Empty for a plan that does not schedule."""
        if self._text or self._failed:
            return self._text
        try:
            self._text = self.pipeline().text
        except IRError:
            self._failed = True
        return self._text


class PipelinePlan(SchedulePlan):
    """A schedule given as a pipeline object (a runner's reference schedule): applied as it
    is, its text known without a build."""

    def __init__(self, pipeline):
        self._pipeline = pipeline
        self._text = pipeline.text

    def pipeline(self):
        return self._pipeline

    def schedule(self, module, ctx) -> tuple:
        from ..passes.pipeline import SchedulePipeline

        pipeline = SchedulePipeline.of(self._pipeline)
        return pipeline(module, ctx), pipeline

    def __reduce__(self):
        return (PipelinePlan, (self._pipeline,))


class TaskRegistry:
    """Tasks by token, in the process that made them (weakly: a task no one uses any more
    goes) and in the processes that rebuilt them from a plan's bytes (the last
    ``keep`` of them)."""

    def __init__(self, keep: int = 32):
        self._mine: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        self._rebuilt: OrderedDict = OrderedDict()
        self._keep = keep
        self._lock = threading.Lock()

    def register(self, task) -> str:
        """A token for ``task`` (the same one each time)."""
        token = getattr(task, "_plan_token", None)
        if token is None:
            token = uuid.uuid4().hex
            task._plan_token = token
        with self._lock:
            self._mine[token] = task
        return token

    def lookup(self, token: str, source: bytes, rebuild):
        """The task of ``token``: registered here or inherited from the process that
        forked this one, else ``rebuild(pickle.loads(source))`` (kept for the next
        plans)."""
        with self._lock:
            task = self._mine.get(token)
            if task is None:
                task = self._rebuilt.get(token)
                if task is not None:
                    self._rebuilt.move_to_end(token)
            if task is not None:
                return task
        task = rebuild(pickle.loads(source))
        with self._lock:
            self._rebuilt[token] = task
            while len(self._rebuilt) > self._keep:
                self._rebuilt.popitem(last=False)
        return task
