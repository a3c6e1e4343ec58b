"""What a :class:`~ptxforge.autosched.TaskScheduler` reports as it goes: the callbacks
called before and after every round (:class:`TaskSchedulerCallback`), the per-task table
(:func:`format_table`, printed and kept in a file by :class:`PrintTableInfo`) and the
estimated total latency over time (:class:`LogEstimatedLatency`)."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from ..atomic_file import replace_atomically

if TYPE_CHECKING:
    from .task_scheduler import TaskScheduler

FAILED_COST = 1e10
"""The best cost of a task without a successful measurement (seconds), as TVM uses."""


class TaskSchedulerCallback:
    """Called before and after every round of a :class:`TaskScheduler`, and when tuning
    ends."""

    def pre_tune(self, task_scheduler: TaskScheduler, task_id: int) -> None:
        """Before ``task_id`` is tuned for a round."""

    def post_tune(self, task_scheduler: TaskScheduler, task_id: int) -> None:
        """After ``task_id`` was tuned for a round."""

    def finish(self, task_scheduler: TaskScheduler) -> None:
        """After the last round."""


def format_table(ts: TaskScheduler, next_id: int | None) -> str:
    """The task scheduler's table (TVM's layout): one row per task with its best latency,
    speed and trials, then the estimated total latency, the trials and time of this run and
    the next task to tune. Simulator estimates are marked with ``*``."""
    descs = [t.desc or f"task {i}" for i, t in enumerate(ts.tasks)]
    width = min(max([16] + [len(d) for d in descs]), 61)
    estimated = any(ts.best_estimated[i] and ts.best_costs[i] < FAILED_COST
                    for i in range(len(ts.tasks)))
    mark = "*" if estimated else ""
    head = (f"|  ID  | {'Task Description':^{width}s} | Latency (ms){mark} | "
            f"Speed (GFLOPS){mark} | Trials |")
    rule = "-" * len(head)
    lines = ["-" * 70, "-" * 30 + "  [ Task Scheduler ]", "-" * 70, head, rule]
    for i, task in enumerate(ts.tasks):
        cost = ts.best_costs[i]
        star = "*" if ts.best_estimated[i] else ""
        lat = f"{cost * 1e3:.3f}{star}" if cost < FAILED_COST else "-"
        speed = f"{task.flop_ct / cost / 1e9:.2f}{star}" if cost < FAILED_COST else "-"
        dead = " (done)" if i in ts.dead_tasks else ""
        desc = descs[i] if len(descs[i]) <= width else descs[i][: width - 2] + ".."
        lines.append(f"| {i:4d} | {desc:>{width}s} | {lat:>{12 + len(mark)}s} | "
                     f"{speed:>{14 + len(mark)}s} | {ts.task_trials[i]:6d} |{dead}")
    lines.append(rule)
    if all(c < FAILED_COST for c in ts.best_costs):
        total = f"{ts.cur_score * 1e3:.3f}"
    else:
        total = "-"
    used = time.time() - ts.tic if ts.tic is not None else 0.0
    nxt = "-" if next_id is None else str(next_id)
    foot = (f"Estimated total latency: {total} ms\tTrials: {ts.ct}\tUsed time : {used:.0f} s"
            f"\tNext ID: {nxt}\t")
    if ts.loaded_trials:
        foot += f"(plus {ts.loaded_trials} trials loaded from {ts.load_log_file})"
    lines.append(foot)
    if estimated:
        lines.append("* estimated by the simulator runner's model, not measured on a GPU")
    return "\n".join(lines)


class PrintTableInfo(TaskSchedulerCallback):
    """Print the per-task table before every round and after the last one (when the tuning
    options' ``verbose`` >= 1), and keep the latest table in ``table_file`` if given."""

    def __init__(self, table_file: str | os.PathLike | None = None):
        self.table_file = os.fspath(table_file) if table_file is not None else None

    def _show(self, ts: TaskScheduler, next_id: int | None) -> None:
        text = format_table(ts, next_id)
        if ts.tune_option is None or ts.tune_option.verbose >= 1:
            print(text, flush=True)
        if self.table_file:
            folder = os.path.dirname(self.table_file)
            if folder:
                os.makedirs(folder, exist_ok=True)
            # A fresh exclusively created temporary (never a fixed ``.tmp`` name, which would
            # follow a symlink planted there), renamed over the table in one step.
            data = (text + "\n").encode()
            replace_atomically(self.table_file, lambda f: f.write(data))

    def pre_tune(self, task_scheduler, task_id):
        self._show(task_scheduler, task_id)

    def finish(self, task_scheduler):
        self._show(task_scheduler, None)


class LogEstimatedLatency(TaskSchedulerCallback):
    """Append ``ElapsedTime(s) <t> EstimatedLatency(ms) <l> Trials <n>`` (tab-separated)
    to ``log_file`` after every round; an existing file is replaced when this callback is
    made (as TVM does)."""

    def __init__(self, log_file: str | os.PathLike):
        self.log_file = os.fspath(log_file)
        if os.path.exists(self.log_file):
            os.remove(self.log_file)

    def post_tune(self, task_scheduler, task_id):
        ts = task_scheduler
        if all(c < FAILED_COST for c in ts.best_costs):
            total = f"{ts.cur_score * 1e3:.3f}"
        else:
            total = "N/A"
        with open(self.log_file, "a") as f:
            f.write(f"ElapsedTime(s)\t{time.time() - ts.tic:.0f}\tEstimatedLatency(ms)\t"
                    f"{total}\tTrials\t{ts.ct}\n")


__all__ = ["FAILED_COST", "LogEstimatedLatency", "PrintTableInfo", "TaskSchedulerCallback",
           "format_table"]
