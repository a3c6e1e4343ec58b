"""The tuning loop every tuner shares.

A tuner proposes configs (:meth:`Tuner.next_batch`), the loop instantiates the template for
each (a config the template rejects is recorded as an instantiation error, never sent to
the builder), measures the batch through the builder and runner of ``measure_option``,
logs every trial and hands the results back to the tuner (:meth:`Tuner.update`) and to
the callbacks. Invalid configs cost their trial and tuning goes on.
"""

from __future__ import annotations

import abc
import logging
import os
import time

import numpy as np

from ...measure.measure import measure_batch
from ...measure.result import MeasureErrorNo, MeasureResult, error_result
from ..task import MeasureInput, Task

logger = logging.getLogger("autotvm")

ERROR_STREAK_WARNING = 150


def default_seed(seed: int | None) -> int | None:
    """``seed``, or when it is None the integer in the ``PTXFORGE_SEED`` environment
    variable (unset: None, a fresh random seed): makes the tuners of a script that
    passes no seed (such as TVM's tutorials) reproducible without editing it."""
    if seed is not None:
        return seed
    env = os.environ.get("PTXFORGE_SEED", "").strip()
    if not env:
        return None
    try:
        return int(env)
    except ValueError:
        raise ValueError(f"PTXFORGE_SEED={env!r} is not an integer; set it to a whole number "
                         "or unset it") from None


class Tuner(abc.ABC):
    """Base class of the tuners. ``seed`` makes proposals reproducible."""

    def __init__(self, task: Task, seed: int | None = None, **kwargs):
        if task.config_space is None:
            raise ValueError("the task has no config space: make it with autotvm.task.create")
        self.param = kwargs
        self.task = task
        self.space = task.config_space
        self.rng = np.random.default_rng(default_seed(seed))
        self.best_config = None
        self.best_flops = 0.0
        self.best_measure_pair = None
        self.best_iter = 0
        self.ttl = None
        self.n_trial = None
        self.early_stopping = None
        self.visited: set = set()
        self.timing: dict = {"instantiate": 0.0, "measure": 0.0, "propose": 0.0,
                             "update": 0.0}

    @abc.abstractmethod
    def has_next(self) -> bool:
        """Whether the tuner has configs left to propose."""

    @abc.abstractmethod
    def next_batch(self, batch_size: int) -> list:
        """Up to ``batch_size`` configs not proposed before."""

    def update(self, inputs, results) -> None:
        """Learn from measured configs (default: nothing)."""
        return None

    def load_history(self, data_set, min_seed_records: int = 500) -> None:
        """Resume from earlier records (``autotvm.record.load_from_file(log)``): every
        config of this task (same workload and target) in ``data_set`` is marked visited,
        so it is never proposed again, and the best of them becomes the best so far.
        Model-based tuners also learn from them (and from other tasks' records, transfer
        learning, once there are ``min_seed_records``)."""
        self._resume(self._own_records(data_set))

    def _own_records(self, data_set) -> list:
        """The ``(input, result)`` pairs of ``data_set`` that are configs of this task's
        space, each as the config of the space it denotes: a record written before knobs
        were appended to the space counts as the config with those knobs at their first
        candidate (:func:`~ptxforge.autotvm.config_match.config_in_space`); a config whose
        knobs no longer match the space is left out."""
        from ..config_match import config_in_space
        from ..dispatch import _target_name

        key, target = self.task.workload_key, _target_name(self.task.target)
        own = []
        for inp, res in data_set:
            if inp.task.workload_key != key or _target_name(inp.target) != target:
                continue
            config = config_in_space(self.space, inp.config)
            if config is None:
                continue
            own.append((MeasureInput(inp.target, self.task, config, inp.pipeline_text), res))
        return own

    def _resume(self, own: list) -> None:
        for inp, res in own:
            self._mark_logged(inp.config.index)
            if self._beats_best(res):
                self.best_flops = flops_of(inp, res)
                self.best_config = inp.config
                self.best_measure_pair = (inp, res)
        if own:
            logger.debug("resumed from %d records: their configs are not proposed again",
                         len(own))

    def _beats_best(self, res) -> bool:
        """Whether a result replaces the best so far, by the one rule for "best" that
        :class:`~ptxforge.autotvm.ApplyHistoryBest` also follows (measured beats estimated,
        then the lower cost, then the earlier timestamp), so that the tuner and its log
        agree on ties whatever order results arrived in."""
        from ...measure.record import rank

        if res.error_no != MeasureErrorNo.NO_ERROR:
            return False
        return self.best_measure_pair is None or rank(res) < rank(self.best_measure_pair[1])

    def _mark_logged(self, index: int) -> None:
        """Never propose config ``index``: it was measured in an earlier run."""
        self.visited.add(index)

    # -- the loop ----------------------------------------------------------------------------

    def tune(self, n_trial: int, measure_option: dict, early_stopping: int | None = None,
             callbacks=(), si_prefix: str = "G") -> None:
        """Measure up to ``n_trial`` configs; stop early after ``early_stopping`` trials
        without a new best. ``callbacks`` are called as ``cb(tuner, inputs, results)``."""
        builder = measure_option["builder"]
        runner = measure_option["runner"]
        batch = int(measure_option.get("batch_size") or max(
            1, getattr(builder, "n_parallel", 1) or 1))
        scale = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[si_prefix]
        self.n_trial = n_trial
        self.early_stopping = early_stopping
        streak = 0
        warned = False
        i = 0
        first = self._default_first()
        try:
            while i < n_trial and (first or self.has_next()):
                t0 = time.perf_counter()
                want = min(batch, n_trial - i)
                configs, first = first[:want], first[want:]
                if len(configs) < want and self.has_next():
                    configs = configs + self.next_batch(want - len(configs))
                self.timing["propose"] += time.perf_counter() - t0
                if not configs:
                    break
                inputs, results = self._measure(configs, builder, runner, callbacks)
                for k, (inp, res) in enumerate(zip(inputs, results)):
                    flops = inp.task.flop / res.mean if res.error_no == 0 else 0.0
                    if self._beats_best(res):
                        self.best_flops = flops
                        self.best_config = inp.config
                        self.best_measure_pair = (inp, res)
                        self.best_iter = i + k
                    est = " (estimated)" if res.estimated else ""
                    logger.debug("No: %d\t%sFLOPS%s: %.2f/%.2f\tresult: %s\t%s", i + k + 1,
                                 si_prefix, est, flops / scale, self.best_flops / scale, res,
                                 inp.config)
                    streak = 0 if res.error_no == 0 else streak + 1
                i += len(results)
                t0 = time.perf_counter()
                self.update(inputs, results)
                self.timing["update"] += time.perf_counter() - t0
                for cb in callbacks:
                    cb(self, inputs, results)
                if streak >= ERROR_STREAK_WARNING and not warned:
                    warned = True
                    logger.warning("%d trials in a row failed; the last error: %s", streak,
                                   results[-1].error_msg[:500])
                if early_stopping is not None and i >= self.best_iter + early_stopping:
                    logger.debug("Early stopped. Best iter: %d.", self.best_iter)
                    break
        finally:
            builder.close()
            runner.close()
            logger.debug("Tuned %d trials: %s", i, ", ".join(
                f"{k} {v:.2f} s" for k, v in self.timing.items()))

    def _default_first(self) -> list:
        """``[the template's default configuration]`` when the template declares one that
        was not measured yet (it is then marked visited), else ``[]``."""
        getter = getattr(self.task, "default_config", None)
        cfg = getter() if callable(getter) else None
        visited = getattr(self, "visited", None)
        if cfg is None or visited is None or cfg.index in visited:
            return []
        visited.add(cfg.index)
        return [cfg]

    def _measure(self, configs, builder, runner, callbacks=()) -> tuple[list, list]:
        """Instantiate and measure a batch; inputs and results in the order of configs.
        Each candidate goes to the builder as soon as its template is instantiated; those
        of ``callbacks`` with an ``on_result(input, result)`` (e.g.
        :func:`~ptxforge.autotvm.callback.log_to_file`) get each result as it arrives."""
        hooks = [cb.on_result for cb in callbacks if callable(getattr(cb, "on_result", None))]
        inputs: list = []
        results: list = [None] * len(configs)
        todo: list = []

        def candidates():
            for k, cfg in enumerate(configs):
                t = time.perf_counter()
                try:
                    inp = self.task.candidate(cfg)
                except Exception as e:  # any template failure marks the config invalid
                    inp = MeasureInput(self.task.target, self.task, cfg, "")
                    results[k] = error_result(MeasureErrorNo.INSTANTIATION_ERROR,
                                              f"{type(e).__name__}: {e}",
                                              time.perf_counter() - t)
                self.timing["instantiate"] += time.perf_counter() - t
                inputs.append(inp)
                if results[k] is None:
                    todo.append(k)
                    yield inp.to_measure()

        def arrived(i: int, res) -> None:
            for hook in hooks:
                hook(inputs[todo[i]], res)

        t0 = time.perf_counter()
        measured = measure_batch(candidates(), builder, runner, arrived if hooks else None)
        for k, res in zip(todo, measured):
            results[k] = res
        self.timing["measure"] += time.perf_counter() - t0
        return inputs, results

    def reset(self) -> None:
        """Forget the best config and the configs proposed so far."""
        self.best_config = None
        self.best_flops = 0.0
        self.best_measure_pair = None
        self.best_iter = 0
        self.visited = set()


def flops_of(inp: MeasureInput, res: MeasureResult) -> float:
    """Floating-point operations per second of a measurement (0 for a failed one)."""
    return inp.task.flop / res.mean if res.error_no == 0 else 0.0
