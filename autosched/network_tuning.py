"""Tuning a network's tasks into a record file: the task scheduler's loop with its progress
bar, shared by ``ptxforge tune-network`` and ``ptxforge.tune_torch``.

A run resumes from its record file: trials of these tasks already in the log count
(:func:`plan_trials`), the task scheduler starts from their best records, and new records
are appended. :func:`tune_network` measures the trials left and returns a
:class:`NetworkTuning` whose :meth:`~NetworkTuning.report` is the table and summary the
command line prints.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from ..progress import ProgressBar, logger
from ..stages import collect
from .options import LocalRPCMeasureContext, TuningOptions
from .records import RecordToFile, load_records
from .task_scheduler import (
    FAILED_COST,
    PrintTableInfo,
    TaskScheduler,
    TaskSchedulerCallback,
    format_table,
)

RUNNERS = ("gpu", "sim")


class Measurement:
    """The builder and runner of one tuning run; :meth:`close` stops their workers.

    ``runner`` ``"gpu"`` measures in an isolated GPU worker (``min_repeat_ms`` the least
    duration of a timing repeat; ``early_stop``: a candidate clearly slower than its task's
    best ends after a short pilot, :mod:`ptxforge.measure.timing`); ``"sim"`` estimates on
    the simulator, which runs each candidate against a reference too when ``sim_check`` is
    set."""

    def __init__(self, runner: str, min_repeat_ms: float, sim_check: bool,
                 early_stop: bool = True):
        from .. import measure

        if runner not in RUNNERS:
            raise ValueError(f"runner must be one of {RUNNERS}, got {runner!r}")
        self.kind = runner
        if runner == "gpu":
            self._ctx = LocalRPCMeasureContext(repeat=1, min_repeat_ms=min_repeat_ms,
                                               timeout=10, early_stop=early_stop)
            self.runner = self._ctx.runner
            # the search and the GPU runner's worker are on every round's critical path
            self.builder = measure.LocalBuilder(niceness=measure.build.BUILDER_NICENESS)
        else:
            self._ctx = None
            self.runner = measure.SimRunner(check_correctness=sim_check)
            # the simulator runs device IR: no PTX or cubin needed
            self.builder = measure.LocalBuilder(compile_to="ir")

    def close(self) -> None:
        self.builder.close()
        if self._ctx is not None:
            self._ctx.close()


@dataclass(frozen=True)
class TrialPlan:
    """How many trials a run asked for measures now.

    Attributes:
        earlier: trials of these tasks the log holds already.
        todo: trials to measure now: those missing from the asked number, but at least one
            per task (every round of the scheduler's warm-up needs a trial per task), or 0
            when the log holds the asked number already.
        resume: whether the log exists (the run appends to it and starts from its records).
    """

    earlier: int
    todo: int
    resume: bool


def plan_trials(tasks, log: str, trials: int) -> TrialPlan:
    """The :class:`TrialPlan` of tuning ``tasks`` to ``trials`` trials in all into ``log``.
    Raises ``ValueError`` when ``trials`` is below the number of tasks."""
    if trials < len(tasks):
        raise ValueError(f"trials must be at least the number of tasks ({len(tasks)}), got "
                         f"{trials}")
    resume = os.path.exists(log)
    keys = {t.workload_key for t in tasks}
    earlier = (sum(1 for inp, _ in load_records(log) if inp.task.workload_key in keys)
               if resume else 0)
    todo = max(trials - earlier, len(tasks)) if trials > earlier else 0
    return TrialPlan(earlier, todo, resume)


def default_table(log: str) -> str:
    """Where the task table of a run into ``log`` is kept: the log's name with
    ``.tasks.txt``."""
    return (log[:-5] if log.endswith(".json") else log) + ".tasks.txt"


class NetworkProgress(TaskSchedulerCallback):
    """After every task scheduler round: the bar and a log message."""

    def __init__(self, bar: ProgressBar):
        self.bar = bar
        self.rounds = 0

    def post_tune(self, task_scheduler, task_id):
        ts = task_scheduler
        self.rounds += 1
        est = any(ts.best_estimated)
        if all(c < FAILED_COST for c in ts.best_costs):
            total = f"{ts.cur_score * 1e3:.3f} ms{' (estimated)' if est else ''}"
        else:
            total = "-"
        self.bar.update(ts.ct, f"round {self.rounds}  latency {total}")
        logger.info(f"round {self.rounds}: task {task_id} ({ts.tasks[task_id].desc}), "
                    f"{ts.ct}/{self.bar.total} trials, estimated total latency {total}")


@dataclass(frozen=True)
class NetworkTuning:
    """What one run of :func:`tune_network` did.

    Attributes:
        scheduler: the task scheduler, with each task's best cost.
        elapsed_s: the run's wall time.
        stages: seconds of the main process by stage (``search``, ``measure``, ``learn``).
        builder: the run's builder (closed), which keeps its workers' stage times.
        log: the record file written.
        table: the file the task table was written to.
        resumed: whether the run started from earlier records of ``log``.
        runner: the run's runner (closed), which keeps its workers' times.
        time_budget_s: the run's wall-clock budget (None: none).
    """

    scheduler: TaskScheduler
    elapsed_s: float
    stages: dict
    builder: object
    log: str
    table: str
    resumed: bool
    runner: object = None
    time_budget_s: float | None = None

    @property
    def trials(self) -> int:
        """The trials measured in this run."""
        return self.scheduler.ct

    def report(self) -> str:
        """The task table and a line of totals."""
        rate = self.trials / max(self.elapsed_s, 1e-9)
        resumed = f"; resumed from {self.log}" if self.resumed else ""
        budget = ""
        if self.scheduler.stopped_by_budget:
            ts = self.scheduler
            budget = (f"\nstopped at the time budget of {self.time_budget_s:g} s with "
                      f"{ts.tasks_tuned()} of {len(ts.tasks)} tasks tuned (the others keep "
                      f"their default schedules); every measured candidate is recorded in "
                      f"{self.log} (run again to go on)")
        return (f"{format_table(self.scheduler, None)}\n"
                f"{self.trials} trials in {self.elapsed_s:.1f} s ({rate:.2f} trials/s)"
                f"{resumed}; the table is in {self.table}{budget}")


def tune_network(tasks, weights, log: str, todo: int, *, runner: str = "sim",
                 resume: bool | None = None, table: str | None = None, seed: int = 0,
                 per_round: int = 64, min_repeat_ms: float = 10.0,
                 sim_check: bool = True, load_model: str | None = None,
                 search_ahead: int = 2, early_stop: bool = True,
                 time_budget_s: float | None = None,
                 keep_builders_busy: bool | None = None,
                 measure_default: bool | None = None) -> NetworkTuning:
    """Run the task scheduler over ``tasks`` (weighted by ``weights``) for ``todo`` trials,
    appending records to ``log``, with a progress bar on a terminal and a log message per
    round.

    Args:
        runner: ``"gpu"`` or ``"sim"`` (see :class:`Measurement`).
        resume: start from the records of ``log`` (default: when it exists).
        table: where the task table is kept (default: :func:`default_table`).
        seed, per_round: the search's seed and trials per task per round.
        min_repeat_ms, sim_check: as :class:`Measurement` takes them.
        load_model: a saved cost model (``--save-model``, ``records train-model``) that
            seeds the search.
        search_ahead: rounds still being measured while the next one is searched
            (:class:`~ptxforge.autosched.TuningOptions`; 0 waits for every round). The
            default, 2, keeps candidates of three tasks in flight, which the builders need
            to stay busy on a 16-core machine (ResNet-18 fp16 on the H100 machine: 22.7
            trials/s with 0, 25.7 with 1, 29.1 with 2); with 1 or more, the warm-up also
            searches further rounds while the builders run low
            (:meth:`~ptxforge.autosched.TaskScheduler.tune`).
        early_stop: the GPU runner's early stop (see :class:`Measurement`).
        time_budget_s: wall-clock seconds the tuning may take (None: no limit); it stops
            at whichever of ``todo`` and the budget comes first
            (:class:`~ptxforge.autosched.TuningOptions`).
        keep_builders_busy: the scheduler searches its next round whenever the builders
            run low, after the warm-up too (:class:`TaskScheduler`); the rounds it takes
            then depend on the timing. Default: on for the GPU runner (whose measurements
            vary from run to run anyway), off for the simulator's, whose seeded runs stay
            reproducible.
        measure_default: measure each task's default schedule as a candidate of its first
            round (:class:`~ptxforge.autosched.TuningOptions`); a task whose default is
            recorded in ``log`` already does not measure it again. Default: on for the GPU
            runner, off for the simulator's (whose estimates cannot say the default is
            slower, and whose short test runs would measure little else).
    """
    if todo < 1:
        raise ValueError(f"todo must be at least 1 trial, got {todo}")
    resume = os.path.exists(log) if resume is None else resume
    table = table or default_table(log)
    if keep_builders_busy is None:
        keep_builders_busy = runner == "gpu"
    if measure_default is None:
        measure_default = runner == "gpu"
    bar = ProgressBar(todo, "trials")
    scheduler = TaskScheduler(
        tasks, weights, load_log_file=log if resume else None, seed=seed,
        load_model_file=load_model,
        callbacks=[PrintTableInfo(table), NetworkProgress(bar)],
        keep_builders_busy=keep_builders_busy)
    measurement = Measurement(runner, min_repeat_ms, sim_check, early_stop)
    options = TuningOptions(
        num_measure_trials=todo, num_measures_per_round=per_round,
        builder=measurement.builder, runner=measurement.runner, verbose=0,
        measure_callbacks=[RecordToFile(log)], search_ahead=search_ahead,
        time_budget_s=time_budget_s, measure_default=measure_default)
    t0 = time.perf_counter()
    try:
        with collect() as stages:
            scheduler.tune(options)
    finally:
        bar.close()
        measurement.close()
    return NetworkTuning(scheduler, time.perf_counter() - t0, dict(stages),
                         measurement.builder, log, table, resume, measurement.runner,
                         options.time_budget_s)
