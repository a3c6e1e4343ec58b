"""The default schedule of a task as a tuning candidate.

``graph.build`` compiles a fused function that has no record with its default schedule
(``graph.build_module.default_schedule_for``; a fused attention with the default chooser's
configuration). A tuning run measures that schedule too, once per task in the task's first
round, so that the best record of a task is never slower than what the network runs without
records: a few dozen candidates per task need not find the schedule the default choosers
pick by measured rules.

The tuner stays one-way (``docs/tuning.md``): it sends a :class:`DefaultPlan` (the task,
"its default schedule") with the record payload ``{"kind": "default"}``; the builder worker
makes the default schedule from the task's tensors under the build's target, prints its
pipeline, parses that text back and applies the parsed passes to the task's module, so the
candidate measured is exactly what the record's pipeline text replays (through
``ApplyHistoryBest`` like any record; ``records`` tools show its text). A default that cannot
be made (it raises) fails the build with a :class:`NoDefaultSchedule`.

A default that fails is recorded like any failed candidate (its ``error_no`` and
``error_msg``, the default's payload; where the builder could not make its pipeline, an
empty pipeline text): it took a trial, so the log's record count is the trials spent, and a
resumed run can tell it was tried. Every reader of records passes over error records
(``ApplyHistoryBest``, the best-record lookups, ``records best``/``distill``), and a
default without a state is no sample of the cost model. How a failure is reported
(:func:`report_default`): a wrong answer or a runtime fault is a WARNING of the
``ptxforge`` logger, once per task (a run measures a task's default once), because it is
the schedule ``graph.build`` compiles for the task when the log has no successful record
of it; other failures (no default schedule, a build error, a timeout) are logged at debug
or info level.

Resuming (:func:`default_settled`): a run over a log that holds a default record of the
task does not measure the default again, whether it succeeded or failed: a default that
fails to build or gives a wrong answer fails the same way the next time. A timeout
(``BUILD_TIMEOUT``, ``RUN_TIMEOUT``) is the exception, as it may come of a loaded machine
rather than of the schedule: the default is measured once more, and a second timeout
settles it (the log then holds both records).

Where a sketch's space holds the default (:func:`default_state`: a fused attention's
configuration, a row kernel's threads), the tuner measures that state instead, its payload
the state's with ``"default": true``: the policy and its cost model learn from it like any
state (the features are computed from states; the other defaults are none).

:func:`task_default_schedule` builds from the task what ``default_schedule_for`` builds from
the function (the tuners sit below the graph layer and cannot call it):

- an ``ops.attention`` over the task's placeholders that the fused kernel runs: the
  ``fused_attention`` step with the configuration of the default chooser
  (``choose_attention_config`` for the target's architecture);
- a row-wise normalization (the ``fused_rows`` sketch's rule): a block per row with the
  threads of :func:`~ptxforge.autosched.fused_rows.default_threads`, as
  ``graph.build_module.fused_rows_choice`` takes them;
- anything else: the operator library's ``default_schedule`` of the task's output.

``tests/test_tune_default_networks.py`` checks on the zoo networks that both give the same
pipeline text. Where ``graph.build`` falls back to one thread per output element (the
operator library's default raised) there is no default candidate.
"""

from __future__ import annotations

from ..measure.plan import PlanError, SchedulePlan
from ..measure.result import MeasureErrorNo
from ..progress import logger
from .state import TASKS, _task_source

DEFAULT_KIND = "default"
"""The ``kind`` of a default candidate's record payload."""

class NoDefaultSchedule(PlanError):
    """A task's default schedule cannot be made: the task gets no default candidate."""


def default_payload() -> dict:
    """The record payload of a default candidate."""
    return {"kind": DEFAULT_KIND}


def is_default_payload(payload) -> bool:
    """Whether a record's payload marks the task's default schedule: ``{"kind":
    "default"}``, or a search state's payload with ``"default": true`` (a default that is
    a state of one of the task's sketches, :func:`default_state`)."""
    return isinstance(payload, dict) and (payload.get("kind") == DEFAULT_KIND
                                          or payload.get("default") is True)


def is_default_input(inp) -> bool:
    """Whether the measure input ``inp`` is a task's default candidate."""
    return is_default_payload(getattr(inp, "payload", None))


def _limits(target):
    """The cuda target whose limits a schedule for ``target`` (the simulator: the cuda
    target of its architecture) is chosen under."""
    from ..target import as_target

    return as_target(f"cuda -arch={target.arch}") if target.is_sim else target


def attention_default(task, target):
    """The te schedule of ``task`` as the fused attention kernel with the default
    chooser's configuration, or None when ``graph.build`` would not run the task's
    function as that kernel (no ``ops.attention`` over the task's placeholders, or a
    problem the kernel cannot run on ``target``)."""
    from ..ops.attention import TAG, attention_inputs, attention_workload
    from ..ops.schedules.attention import AttentionError, choose_attention_config
    from .attention import AttentionStep
    from .printer import schedule_from_pipeline

    outs = list(task.ir_dag.outputs)
    if len(outs) != 1 or getattr(outs[0].op, "tag", "") != TAG:
        return None
    out = outs[0]
    tensors = list(task.tensors)
    try:
        ins = attention_inputs(out)
        w = attention_workload(out)
    except AttentionError:
        return None
    if {id(t) for t in ins} != {id(t) for t in tensors[:-1]} or tensors[-1] is not out:
        return None  # something else fused into the function: graph.build schedules it
    limits = _limits(target)
    try:
        with limits:
            cfg = choose_attention_config(w, limits)
    except AttentionError:
        return None
    step = AttentionStep(out.op.name, (cfg,), w, limits)
    from ..passes.pipeline import Pipeline

    return schedule_from_pipeline(task, Pipeline([step.step_pass(cfg)]))


def rows_default(task):
    """The te schedule of ``task`` as the default row kernel (a block per row), or None
    when the task is not a row-wise normalization."""
    from .fused_rows import default_threads, fused_rows_step, schedule_fused_rows

    step = fused_rows_step(task)
    if step is None:
        return None
    return schedule_fused_rows(step, default_threads(step.cols), True)


def default_state(task):
    """The search state of ``task`` whose schedule is its default, where a sketch's space
    holds it, else None: the fused attention sketch with the default chooser's
    configuration for the task's target (when the sketch offers it), the fused-rows sketch
    with :func:`~ptxforge.autosched.fused_rows.default_threads` threads, unrolled, the
    wgmma GEMM sketch with the configuration the operator library's default takes
    (:func:`~ptxforge.autosched.tensorcore.wgmma_default_state`). Measured as that state,
    the default is a sample the cost model learns from like any other, and the search
    mutates around it."""
    from .fused_rows import default_threads
    from .state import State

    for k, sk in enumerate(task.sketches):
        if len(sk.steps) != 1:
            continue
        step = sk.steps[0]
        if sk.name.startswith("fused_attention("):
            from ..ops.schedules.attention import AttentionError, choose_attention_config

            limits = _limits(task.target)
            try:
                with limits:
                    cfg = choose_attention_config(step.workload, limits)
            except AttentionError:
                return None
            if cfg in step.configs:
                return State(k, (step.configs.index(cfg),))
            return None
        if sk.name.startswith("fused_rows("):
            threads = step.threads()
            want = default_threads(step.cols)
            if want not in threads:
                return None
            return State(k, (threads.index(want), 1))
        if sk.name.startswith("wgmma_gemm("):
            from .tensorcore import wgmma_default_state

            return wgmma_default_state(task, k)
    return None


def task_default_schedule(task, target=None):
    """``(Schedule, args)``: the schedule ``graph.build`` compiles, without records, for the
    fused function of ``task``, made from the task's tensors for ``target`` (default: the
    current target, else the task's). Raises :class:`NoDefaultSchedule` when there is none
    (the operator library's default schedule raised)."""
    from ..target import Target, as_target

    target = as_target(target) if target is not None else (Target.current() or task.target)
    args = list(task.tensors)
    with target:
        sch = attention_default(task, target)
        if sch is not None:
            return sch, args
        try:
            sch = rows_default(task)
        except Exception as e:  # noqa: BLE001 - graph.build falls back as here
            logger.debug(f"{task.desc}: the fused-rows default failed "
                         f"({type(e).__name__}: {e}); the operator library's default next")
            sch = None
        if sch is not None:
            return sch, args
        from ..ops.schedules import default_schedule

        try:
            return default_schedule([args[-1]]), args
        except Exception as e:  # noqa: BLE001 - any failure means no default candidate
            raise NoDefaultSchedule(
                f"{task.desc}: the operator library's default schedule raised "
                f"{type(e).__name__}: {e}") from e


class DefaultPlan(SchedulePlan):
    """"The default schedule of the task", for the builder to make (the task by its token
    in :data:`~ptxforge.autosched.state.TASKS`, as a state's plan names it)."""

    def __init__(self, task):
        self.task = task
        self.token = TASKS.register(task)

    def pipeline(self):
        """The default schedule's passes, made here (under the current target)."""
        sch, _ = task_default_schedule(self.task)
        return sch.pipeline

    def schedule(self, module, ctx) -> tuple:
        """The default schedule as its record replays it: its pipeline printed, parsed
        back and applied to ``module``. A pipeline whose text does not parse back to the
        same text cannot be recorded: :class:`NoDefaultSchedule`."""
        from ..passes.pipeline import SchedulePipeline

        text = SchedulePipeline.of(self.pipeline()).text
        try:
            parsed = SchedulePipeline.parse(text)
        except Exception as e:  # noqa: BLE001 - any parse failure means not replayable
            raise NoDefaultSchedule(f"{self.task.desc}: the default schedule's pipeline text "
                                    f"does not parse ({type(e).__name__}: {e})") from e
        if parsed.text != text:
            raise NoDefaultSchedule(f"{self.task.desc}: the default schedule's pipeline text "
                                    "does not print back as it was parsed")
        return parsed(module, ctx), parsed

    def __reduce__(self):
        return (_default_plan_of, (self.token, _task_source(self.task)))

    def __repr__(self):
        return f"DefaultPlan({self.task.workload_key[:60]})"


def _default_plan_of(token: str, source: bytes) -> DefaultPlan:
    from .state import _rebuild_task

    plan = DefaultPlan.__new__(DefaultPlan)
    plan.task = TASKS.lookup(token, source, _rebuild_task)
    plan.token = token
    return plan


def default_input(task):
    """The measure input of ``task``'s default schedule: the task's spec, the payload
    ``{"kind": "default"}`` and a :class:`DefaultPlan`; its pipeline text comes back from
    the builder."""
    from ..measure import MeasureInput

    return MeasureInput(task.task_spec, "", default_payload(), plan=DefaultPlan(task))


def default_state_input(task, state):
    """The measure input of ``state`` (from :func:`default_state`), its payload marked as
    the task's default."""
    from .state import candidate_input

    inp = candidate_input(task, state)
    inp.payload["default"] = True
    return inp


TIMEOUTS = frozenset({MeasureErrorNo.BUILD_TIMEOUT, MeasureErrorNo.RUN_TIMEOUT})
"""The failures of a default candidate that may come of a loaded machine rather than of the
schedule (a resumed run measures such a default once more, :func:`default_settled`)."""

RETRIES_AFTER_TIMEOUT = 1
"""How many more times a default that timed out is measured by resumed runs."""


def default_settled(records) -> bool:
    """Whether ``records`` (``(input, result)`` pairs of one task, as a log holds them)
    settle the task's default candidate, so that a resumed run does not measure it again:
    a default record that did not time out does, failed or not, and so do timed-out ones
    once the default was tried :data:`RETRIES_AFTER_TIMEOUT` more times."""
    errors = [int(res.error_no) for inp, res in records if is_default_payload(inp.payload)]
    timeouts = sum(1 for e in errors if e in TIMEOUTS)
    return len(errors) > timeouts or timeouts > RETRIES_AFTER_TIMEOUT


def report_default(inp, res) -> None:
    """Log how the default candidate ``inp`` failed (nothing when it succeeded): a wrong
    answer or a runtime fault as a WARNING (the schedule ``graph.build`` compiles for the
    task without records is broken), a timeout at info level, anything else at debug
    level."""
    error_no = int(res.error_no)
    if error_no == 0:
        return
    name = inp.task.name or inp.task.workload_key[:80]
    known = error_no in set(MeasureErrorNo)
    what = MeasureErrorNo(error_no).name if known else f"error {error_no}"
    first = res.error_msg.strip().splitlines()[0] if res.error_msg.strip() else "no message"
    if error_no in (MeasureErrorNo.WRONG_ANSWER, MeasureErrorNo.RUNTIME_DEVICE):
        logger.warning(
            f"{name}: the default schedule failed its check ({what}: {first}). It is the "
            "schedule graph.build compiles for this task when there is no record of it; "
            "the task's records decide its build, and without a successful record the "
            "build runs this failing schedule.")
    elif error_no in TIMEOUTS:
        logger.info(f"{name}: the default candidate timed out ({what}: {first}); a run "
                    "resumed from this log tries it once more if it timed out there first")
    else:
        logger.debug(f"{name}: no default candidate ({what}: {first})")


__all__ = ["DEFAULT_KIND", "RETRIES_AFTER_TIMEOUT", "TIMEOUTS", "DefaultPlan",
           "NoDefaultSchedule", "default_input", "default_payload", "default_settled",
           "default_state", "default_state_input", "is_default_input", "is_default_payload",
           "report_default", "task_default_schedule"]
