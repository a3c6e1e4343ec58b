"""Templates and tuning tasks.

``@autotvm.template("name")`` registers a function that declares a computation, builds a
schedule from the knobs of ``autotvm.get_config()`` and returns ``(s, tensors)``.
``autotvm.task.create(name, args, target)`` runs it once in collecting mode to learn its
config space and makes a :class:`Task`; a tuner then instantiates the template with
configs, and each instantiation's schedule becomes pass pipeline text for the builders.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass, field
from typing import Any

from ..measure.plan import PlanError, SchedulePlan, TaskRegistry
from ..measure.result import MeasureInput as RawInput
from ..measure.result import TaskSpec
from ..passes.pipeline import Pipeline
from ..target import Target, as_target
from .dispatch import DEFAULT_TARGET, ApplyConfig, DispatchContext, workload_key
from .space import ConfigEntity, ConfigSpace, InstantiationError

TEMPLATES: dict = {}


class TemplateFunction:
    """A registered template. Calling it builds the schedule with the config the current
    dispatch context gives for its workload (``apply_history_best``, or a fallback)."""

    def __init__(self, name: str, func):
        self.name = name
        self.func = func
        self.default_knobs = None
        functools.update_wrapper(self, func)

    def defaults(self, fn):
        """Declare the knob values the template uses without a tuned record (its fallback
        configuration): ``fn(*args) -> {knob: value}``. Tuners measure that configuration
        first, so a tuned record is never one the untuned template beats. Use as a
        decorator: ``@my_template.defaults``."""
        self.default_knobs = fn
        return fn

    def __call__(self, *args, **kwargs):
        if kwargs:
            raise TypeError(f"template {self.name} takes positional arguments only (they "
                            "form its workload)")
        workload = (self.name,) + tuple(args)
        ctx = DispatchContext.current()
        configs = (ctx.query_all(DEFAULT_TARGET, workload)
                   or [ctx.query(DEFAULT_TARGET, workload)])
        for n, cfg in enumerate(configs):
            try:
                with ApplyConfig(cfg):
                    out = self.func(*args)
                _check_legal(out)
                return out
            except Exception as e:
                if n + 1 == len(configs):
                    raise
                # a recorded config that no longer fits the template: the next best
                warnings.warn(f"{self.name}{tuple(args)}: config #{n + 1} does not fit the "
                              f"template ({type(e).__name__}: {e}); trying the next best",
                              RuntimeWarning, stacklevel=2)
        raise AssertionError("query_all returns at least one config")

    def __repr__(self):
        return f"<autotvm template {self.name!r}>"


def _check_legal(instance) -> None:
    """Refuse a template instance whose schedule cannot compute each output once (a record
    is not re-measured when dispatched, so this is where a bad best is caught)."""
    from ..passes.lower.check_coverage import check_coverage
    from ..passes.schedule.schedule import Schedule

    sch = instance[0] if isinstance(instance, tuple) and instance else instance
    if isinstance(sch, Schedule):
        check_coverage(sch.module.main)


def template(name: str, func=None):
    """Register a template under ``name`` (use as ``@autotvm.template("group/op")``).
    Registering a name again replaces the earlier template."""
    if not isinstance(name, str) or not name:
        raise TypeError("autotvm.template needs a name: @autotvm.template('group/op')")

    def register(f):
        t = TemplateFunction(name, f)
        TEMPLATES[name] = t
        return t

    return register(func) if func is not None else register


def _as_args(args) -> tuple:
    """Template arguments as the template expects them (JSON lists back to tuples)."""
    def fix(x):
        return tuple(fix(v) for v in x) if isinstance(x, list) else x

    return tuple(fix(a) for a in args)


@dataclass(frozen=True)
class MeasureInput:
    """An AutoTVM candidate: the task and one config (:attr:`pipeline_text`: its schedule
    as pass text, empty when the template could not be instantiated; ``scheduled_text``:
    the IR that schedule gives, which the builder takes instead of applying it again;
    ``plan``: a :class:`ConfigPlan` when the candidate goes to the builder unscheduled,
    :meth:`Task.candidate`: the builder instantiates the template, and the pipeline text is
    the one its build returned)."""

    target: str
    task: Task
    config: ConfigEntity
    _pipeline_text: str = ""
    scheduled_text: str = field(default="", compare=False, repr=False)
    plan: Any = field(default=None, compare=False, repr=False)

    @property
    def pipeline_text(self) -> str:
        """The schedule as pass text (for a plan: what its build returned, or made here
        when no build returned one)."""
        if self._pipeline_text or self.plan is None:
            return self._pipeline_text
        return self.plan.pipeline_text()

    def payload(self) -> dict:
        """What a record stores to rebuild this input."""
        return {"autotvm": {"template": self.task.name,
                            "args": _jsonable_args(self.task.args),
                            "config": self.config.to_json_dict()}}

    def to_measure(self) -> RawInput:
        """The builder's and runner's view of this candidate (sharing its plan, so the
        text a build returns reaches both)."""
        return RawInput(self.task.spec, self._pipeline_text, self.payload(),
                        self.scheduled_text, self.plan)

    def __repr__(self) -> str:
        return (f"MeasureInput(target={self.target!r}, task={self.task!r}, "
                f"config={self.config!r}, pipeline_text={self._pipeline_text!r})")


TASKS = TaskRegistry()
"""The AutoTVM tasks plans of this process name (and those rebuilt from plans' bytes)."""


class ConfigPlan(SchedulePlan):
    """A config of a task, for the builder to instantiate: the template runs in the builder
    worker (once), and its schedule is both the scheduled IR and the pipeline."""

    def __init__(self, task: Task, config: ConfigEntity):
        self.task = task
        self.config = config
        self.token = TASKS.register(task)

    def pipeline(self) -> Pipeline:
        return self._instance().pipeline

    def schedule(self, module, ctx) -> tuple:
        s = self._instance()
        return s.module, s.pipeline

    def _instance(self):
        """The template's schedule for the config; a template that rejects the config
        raises :class:`~ptxforge.measure.plan.PlanError` (any exception of it marks the
        config invalid, as the tuner has always treated it)."""
        from ..ir.expr import IRError

        try:
            s, _ = self.task.instantiate(self.config)
        except IRError:
            raise
        except Exception as e:  # noqa: BLE001 - a template's failure is the config's
            raise PlanError(f"{type(e).__name__}: {e}") from e
        return s

    def __reduce__(self):
        src = getattr(self.task, "_plan_source", None)
        if src is None:
            import pickle

            src = pickle.dumps((self.task.name, list(self.task.args), self.task.target))
            self.task._plan_source = src
        return (_config_plan, (self.token, src, self.config.index))

    def __repr__(self):
        return f"ConfigPlan({self.task.name}, config {self.config.index})"


def _rebuild_task(source: tuple) -> Task:
    name, args, target = source
    return create(name, args, target)


def _config_plan(token: str, source: bytes, index: int) -> ConfigPlan:
    plan = ConfigPlan.__new__(ConfigPlan)
    plan.task = TASKS.lookup(token, source, _rebuild_task)
    plan.config = plan.task.config_space.get(index)
    plan.token = token
    return plan


def _jsonable_args(args):
    from .dispatch import _jsonable

    return _jsonable(list(args))


class Task:
    """A template with fixed arguments: its config space, flop count and unscheduled IR."""

    def __init__(self, name: str, args, target: str = DEFAULT_TARGET):
        self.name = name
        self.args = _as_args(args)
        self.target = str(target)
        self.func = TEMPLATES[name].func if name in TEMPLATES else None
        self.config_space: ConfigSpace | None = None
        self.flop = 0.0
        self.spec: TaskSpec | None = None

    @property
    def workload(self) -> tuple:
        """``(template name, *args)``, the key records and dispatch use."""
        return (self.name,) + tuple(self.args)

    @property
    def workload_key(self) -> str:
        return workload_key(self.workload)

    def _require_template(self):
        if self.func is None:
            if self.name not in TEMPLATES:
                raise KeyError(
                    f"no template named {self.name!r} is registered in this process; define "
                    "it (its @autotvm.template decorator must run) before using the task")
            self.func = TEMPLATES[self.name].func
        return self.func

    def _target_scope(self):
        """A context making the task's target current, unless the caller made one current
        (templates, and their defaults, read the target's limits and instructions: wgmma
        needs sm_90a)."""
        from contextlib import nullcontext

        from ..target import Target, as_target

        return as_target(self.target) if Target.current() is None else nullcontext()

    def instantiate(self, config):
        """Run the template with ``config``; return ``(schedule, tensors)``."""
        from ..passes import PassContext

        func = self._require_template()
        scope = self._target_scope()
        # the schedule primitives re-apply passes eagerly; the builder verifies nothing
        # either, so skip the per-pass verifier while tuning
        with scope, PassContext(verify=False), ApplyConfig(config):
            return func(*self.args)

    def default_config(self) -> ConfigEntity | None:
        """The configuration the template uses without a record, when it declares one
        (:meth:`TemplateFunction.defaults`) and the space holds it; else None. The
        defaults are those of the task's target (as :meth:`instantiate` sees it), not of
        the GPU of this process: a task for sm_90a made on a machine without one has the
        defaults of sm_90a."""
        t = TEMPLATES.get(self.name)
        fn = getattr(t, "default_knobs", None)
        if fn is None or self.config_space is None:
            return None
        from .space import AnnotateEntity, OtherOptionEntity, ReorderEntity, SplitEntity

        with self._target_scope():
            values = fn(*self.args)
        if set(values) != set(self.config_space.space_map):
            return None
        entities = {k: v if isinstance(v, (SplitEntity, ReorderEntity, AnnotateEntity,
                                           OtherOptionEntity)) else OtherOptionEntity(v)
                    for k, v in values.items()}
        try:
            return self.config_space.get(self.config_space.index_of(entities))
        except ValueError:  # a default outside the knobs' candidates
            return None

    def pipeline(self, config: ConfigEntity) -> Pipeline:
        """The schedule passes of ``config`` (instantiates the template)."""
        s, _ = self.instantiate(config)
        return s.pipeline

    def measure_input(self, config: ConfigEntity) -> MeasureInput:
        """The candidate for ``config``: the template runs once, and the input carries both
        its pipeline (for records) and the IR it gave (for the builder). Raises
        :class:`InstantiationError` (or an ``IRError``) when the template rejects the
        config."""
        s, _ = self.instantiate(config)
        return MeasureInput(self.target, self, config, str(s.pipeline), str(s.module))

    def candidate(self, config: ConfigEntity) -> MeasureInput:
        """The candidate for ``config`` without running the template here: the builder
        instantiates it in its worker (a :class:`ConfigPlan`) and returns the pipeline text
        for the record; a config the template rejects comes back as an
        ``INSTANTIATION_ERROR`` result. What a tuner sends to the builders."""
        return MeasureInput(self.target, self, config, "", plan=ConfigPlan(self, config))

    def __repr__(self):
        return (f"Task(func_name={self.name}, args={self.args}, kwargs={{}}, "
                f"workload={self.workload})")


def create(task_name: str, args, target: Target | str = DEFAULT_TARGET,
           target_host=None) -> Task:
    """Make the task of template ``task_name`` with ``args`` for ``target`` (a string such
    as ``"cuda"`` or ``"cuda -arch=sm_80"``, or a :class:`~ptxforge.target.Target`): learn
    its config space (by running it once, with the target current, so the template sees
    its limits) and its unscheduled IR and flop count. ``task.target`` is the target's
    record string (``"cuda"`` for ``"sim"`` too: measure without a GPU with
    ``runner=autotvm.SimRunner()``)."""
    if task_name not in TEMPLATES:
        known = ", ".join(sorted(TEMPLATES)) or "none"
        raise KeyError(f"no template named {task_name!r} (registered: {known})")
    t = as_target(target or DEFAULT_TARGET)
    target = t.record_spec
    task = Task(task_name, args, target)
    space = ConfigSpace()
    with t:
        s, _ = task.instantiate(space)
    space._collect = False
    task.config_space = space
    dag_tensors = s.dag.tensors
    spec = TaskSpec.from_tensors(dag_tensors, task.workload_key, target, name=task_name)
    task.flop = space.flop or spec.flop
    task.spec = spec if not space.flop else TaskSpec(
        spec.workload_key, spec.target, spec.module_text, task.flop, spec.name)
    return task


def task_from_payload(payload: dict, target: str = DEFAULT_TARGET) -> Task | None:
    """The task a record was measured for (None when its template is not registered
    here)."""
    a = payload.get("autotvm") if payload else None
    if not a or a.get("template") not in TEMPLATES:
        return None
    return create(a["template"], _as_args(a["args"]), target)


__all__ = ["InstantiationError", "MeasureInput", "TEMPLATES", "Task", "TemplateFunction",
           "create", "template", "task_from_payload"]
