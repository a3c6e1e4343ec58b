"""Tuning options and the measurement context, with the tutorial's names."""

from __future__ import annotations


class TuningOptions:
    """How a search measures: the trial budget, trials per round, when to stop early, the
    builder and runner (objects from :mod:`ptxforge.measure`, or ``"local"`` for the
    defaults; ``"sim"`` as runner for the simulator), callbacks ``(inputs, results)`` run
    after every round (e.g. :class:`RecordToFile`), and ``verbose`` (0: quiet, 1: a line per
    round).

    ``search_ahead``: how many rounds may still be in measurement while the next one is
    searched (default 1: the search of round k+1 overlaps the measuring of round k and
    learns from the rounds up to k-1, so builders and GPUs do not wait for the search;
    0: every round waits for the previous round's results, as in TVM). What each round
    learns from does not depend on timing, so a seeded run is reproducible either way.

    ``time_budget_s``: wall-clock seconds the run may take besides its trial budget (None:
    no limit). No round is searched once the budget is spent or once the candidates in
    flight would take the rest of it; the rounds searched are all measured and recorded,
    so the run ends near the budget with every record on disk (see
    :mod:`ptxforge.autosched.time_budget`). The task scheduler spends it where the
    gradient per second of measuring says. A run stopped by it is not reproducible from
    its seed alone (how far it gets depends on the machine).

    ``measure_default``: measure each task's default schedule (what ``graph.build`` runs
    without records) as a candidate of the task's first round, recorded like any other,
    so the best record of a task is never slower than its default (it takes one trial of
    the budget per task; see :mod:`ptxforge.autosched.default_candidate`). Off by default
    here; ``tune_network`` and the command line turn it on for the GPU runner."""

    def __init__(self, num_measure_trials: int = 0, early_stopping: int | None = None,
                 num_measures_per_round: int = 64, verbose: int = 1, builder="local",
                 runner="local", measure_callbacks=None, search_ahead: int = 1,
                 time_budget_s: float | None = None, measure_default: bool = False):
        from .time_budget import check_time_budget

        self.time_budget_s = check_time_budget(time_budget_s)
        if num_measure_trials < 0 or num_measures_per_round < 1:
            raise ValueError("num_measure_trials must be >= 0 and num_measures_per_round >= 1")
        if isinstance(search_ahead, bool) or not isinstance(search_ahead, int) or (
                search_ahead < 0):
            raise ValueError(f"search_ahead must be a whole number >= 0, got {search_ahead!r}")
        self.search_ahead = int(search_ahead)
        self.measure_default = bool(measure_default)
        self.num_measure_trials = int(num_measure_trials)
        self.early_stopping = early_stopping
        self.num_measures_per_round = int(num_measures_per_round)
        self.verbose = int(verbose)
        self.builder = builder
        self.runner = runner
        self.measure_callbacks = list(measure_callbacks or [])

    def make_builder(self):
        from .. import measure

        if isinstance(self.builder, str):
            if self.builder != "local":
                raise ValueError(f"unknown builder {self.builder!r}; use 'local' or a builder")
            return measure.LocalBuilder()
        return self.builder

    def make_runner(self):
        from .. import measure

        if isinstance(self.runner, str):
            if self.runner == "local":
                return measure.LocalRunner()
            if self.runner == "sim":
                return measure.SimRunner()
            raise ValueError(f"unknown runner {self.runner!r}; use 'local', 'sim' or a runner")
        return self.runner


class LocalRPCMeasureContext:
    """The tutorial's measurement context. Measurement already runs in an isolated worker
    process (no RPC is needed): ``runner`` is a :class:`ptxforge.measure.LocalRunner` with
    these settings (``early_stop``: its pilot timing, see :mod:`ptxforge.measure.timing`);
    ``close()`` (or deleting the context) stops its worker."""

    def __init__(self, priority: int = 1, n_parallel: int = 1, timeout: float = 10,
                 number: int = 3, repeat: int = 1, min_repeat_ms: float = 0,
                 cooldown_interval: float = 0.0, enable_cpu_cache_flush: bool = False,
                 device: int = 0, check_correctness: bool | str = "best",
                 enable_cuda_graph: bool = True, early_stop: bool = True):
        from .. import measure

        self.runner = measure.LocalRunner(number=number, repeat=repeat,
                                          min_repeat_ms=min_repeat_ms, timeout=timeout,
                                          check_correctness=check_correctness,
                                          enable_cuda_graph=enable_cuda_graph,
                                          device_id=device, early_stop=early_stop)

    def close(self) -> None:
        runner = getattr(self, "runner", None)
        if runner is not None:
            runner.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the worker dies with the process anyway
            pass
