"""TaskScheduler: tune the tasks of a network together, spending each round of measurements
where it shrinks the network's estimated latency the most (the task scheduler of the Ansor
paper, with the interface of TVM's ``auto_scheduler.TaskScheduler``).

The objective is ``f(best_costs)``, by default ``sum(weight[t] * best_cost[t])``, the
network's latency estimated from its tasks. After a warm-up round per task, the
``"gradient"`` strategy picks the task with the most negative

    df/dg_t * (alpha * backward_t + (1 - alpha) * forward_t)

where ``backward_t`` is how much the task's best cost fell over its last
``backward_window_size`` rounds (per round), and ``forward_t`` how much one more round may
gain: at most a fraction ``1 / rounds`` of the current cost, and no more than it would take
to run the task at ``1 / beta`` of the best speed (flop/s) of similar tasks (tasks with the
same anchor operators and a similar flop count: the similar-task speed bound). A task whose
search space is exhausted, or that has not improved for ``per_task_early_stopping`` trials,
or none of whose candidates succeeded in its first rounds, is dead: it gets no more rounds.
The whole tuning stops early when the objective has not improved for
``tuning_options.early_stopping`` trials.

Progress is reported by callbacks: :class:`PrintTableInfo` prints the per-task table before
every round (and writes it to a file), :class:`LogEstimatedLatency` appends the estimated
total latency to a TSV file.
"""

from __future__ import annotations

import importlib.util
import math
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent import futures

import numpy as np

from ..measure.stream import MeasureStream
from ..stages import stage
from .scheduler_callbacks import (
    FAILED_COST,
    LogEstimatedLatency,
    PrintTableInfo,
    TaskSchedulerCallback,
    format_table,
)
from .state import state_from_payload
from .time_budget import TimeBudget, budget_is_short, warm_up_round_size
from .tuner import PendingRound, can_search_ahead, start_round

_PATTERN_TAGS = ("elemwise", "broadcast", "injective")
MAX_ROUNDS_WITHOUT_SUCCESS = 3
"""Rounds a task may spend without one successful candidate before it is declared dead."""
BACKLOG_PER_WORKER = 8
"""Candidates per build worker queued or in a build below which the warm-up searches its
next round without waiting for the oldest round in flight. A round's search is 0.37 s on
average on the 16-core H100 machine (ResNet-18 fp16, a build 0.31-0.36 s), but searches
vary (a task's first makes its sketches, the cost model refits when its samples double):
with 3 per worker, `bench/tune_pool_sim.py --search-jitter 0.8` left the 16 builders
9.2 worker-s idle between rounds in 19 rounds of 42 (the H100 run: 20.2), with 8 0.1."""
_ROOM_POLL_S = 0.02  # how often a waiting warm-up looks at the builders' backlog again
MAX_ROUNDS_IN_FLIGHT = 16
"""The most rounds a scheduler that keeps the builders busy (``keep_builders_busy``) has in
flight after its warm-up: enough for a build of ~10 s (the slowest seen on the H200
machine, BERT fp16) while 16 workers build 64-candidate rounds of 0.3 s builds."""


def builder_low_water(builder) -> int:
    """The backlog (candidates queued or being built) below which ``builder``'s workers
    are about to run out of work: :data:`BACKLOG_PER_WORKER` per worker (``n_parallel``,
    else one per CPU)."""
    workers = getattr(builder, "n_parallel", None) or os.cpu_count() or 1
    return BACKLOG_PER_WORKER * max(int(workers), 1)


def derive_similarity_tag(task_or_dag, log_base: float = 1.618) -> str:
    """The similarity tag of a task: its anchor stages' tags (convolution, dense, pooling,
    softmax...; not element-wise, broadcast or injective ones) and the logarithm of its flop
    count in base ``log_base``; "" for a task without anchor stages. Tasks with equal tags
    are expected to reach similar speeds."""
    dag = getattr(task_or_dag, "compute_dag", task_or_dag)
    anchors: dict = {}
    for op in dag.ops:
        tag = getattr(op, "tag", "") or ""
        if tag and tag.split(",")[0] not in _PATTERN_TAGS:
            anchors[tag] = None
    if not anchors:
        return ""
    flop = getattr(task_or_dag, "flop_ct", None)
    if flop is None:
        flop = dag.flop_count()
    return "_".join(anchors) + f"_{int(math.log(flop + 1, log_base))}"


def _beats(res, estimated: bool, cost: float) -> bool:
    """Whether the successful result ``res`` is better than a best of ``cost`` (estimated or
    not): a measured result beats an estimated one, then the lower cost wins (as
    :func:`ptxforge.measure.best_records` ranks them)."""
    if cost >= FAILED_COST:
        return True
    return (bool(res.estimated), res.mean) < (bool(estimated), float(cost))


def _record_target(task) -> str:
    # the search task's measure spec says "cuda" for the simulator too
    return task.target.record_spec


def make_search_policies(search_policy, search_policy_params, tasks, num_measures_per_round,
                         verbose: int, load_model_file: str | None = None,
                         records: dict | None = None, seed: int = 0) -> list:
    """One search policy per task, sharing one cost model.

    ``search_policy``: ``"default"`` (= ``"sketch.xgb"``), ``"sketch.xgb"``,
    ``"sketch.random"``, or a list of policies (one per task). The XGBoost model waits for
    one round of every task before it replaces the analytical ranking; it is loaded from
    ``load_model_file`` if that exists, else trained on ``records`` (``{task index:
    (rows, results)}``), whose states are also marked measured in each task's policy. A
    model with neither is made in the background
    (:class:`~ptxforge.autosched.deferred_model.DeferredModel`) while the first rounds are
    searched.
    """
    from .cost_model import RandomModel, XGBModel
    from .deferred_model import DeferredModel
    from .search_policy import SketchPolicy

    records = records or {}
    if isinstance(search_policy, (list, tuple)):
        if len(search_policy) != len(tasks):
            raise ValueError(f"got {len(search_policy)} search policies for {len(tasks)} tasks")
        policies = list(search_policy)
    else:
        name = "sketch.xgb" if search_policy == "default" else search_policy
        if not isinstance(name, str) or name.count(".") != 1:
            raise ValueError(f"search_policy must be 'default', 'sketch.xgb', 'sketch.random' "
                             f"or a list of policies; got {search_policy!r}")
        policy_type, model_type = name.split(".")
        if policy_type != "sketch":
            raise ValueError(f"unknown search policy type {policy_type!r}; use 'sketch'")
        if model_type == "xgb":
            warmup = len(tasks) * num_measures_per_round
            loading = bool(load_model_file and os.path.isfile(load_model_file))
            if not loading and not records and importlib.util.find_spec("xgboost"):
                # importing xgboost (and the scikit-learn and scipy it imports) takes
                # seconds: made beside the first rounds' searches, which a model with no
                # samples scores by the analytical estimate anyway
                model = DeferredModel(lambda: XGBModel(num_warmup_sample=warmup, seed=seed))
            else:
                model = XGBModel(num_warmup_sample=warmup, seed=seed)
            if loading:
                model.load(load_model_file)
            else:
                for idx, (rows, results) in records.items():
                    model.update(tasks[idx], rows, results)
        elif model_type == "random":
            model = RandomModel(seed=seed)
        else:
            raise ValueError(f"unknown cost model {model_type!r}; use 'xgb' or 'random'")
        policies = [SketchPolicy(task, model, search_policy_params, seed=seed + k,
                                 verbose=verbose) for k, task in enumerate(tasks)]
    for idx, (rows, results) in records.items():
        policies[idx].add_measured(rows, results, update_model=False)
    return policies


class TaskScheduler:
    """Allocate measurement rounds among the tasks of a network.

    Args:
        tasks: the search tasks (e.g. from :func:`~ptxforge.autosched.extract_tasks`).
        task_weights: how often the network runs each task (default: once).
        objective_func: ``f(best_costs) -> float`` to minimize (default: the weighted sum of
            the tasks' best costs, the network's estimated latency).
        strategy: ``"gradient"`` (see the module docstring) or ``"round-robin"``.
        load_model_file: a saved XGBoost cost model to start from.
        load_log_file: a record file of an earlier run: each task's measured states are
            marked measured (never measured again), its best cost and rounds restored, the
            cost model trained on it, and the tuning continues from there.
        alpha: the weight of the backward gradient against the forward estimate.
        beta: a task is expected to reach ``1 / beta`` of the best speed of similar tasks.
        backward_window_size: rounds the backward gradient looks back over.
        callbacks: :class:`TaskSchedulerCallback` s (default: :class:`PrintTableInfo` and
            ``LogEstimatedLatency("total_latency.tsv")``).
        seed: seeds the search policies and the tie-breaking, for reproducible runs.
        keep_builders_busy: after the warm-up too, search the next round whenever the
            builders are about to run out of work, not only once the oldest round in
            flight is measured (one slow build then holds back nothing). Each choice sees
            the rounds measured by then, so the rounds taken depend on the timing: a seeded
            run is no longer reproducible (on a GPU its measurements vary from run to run
            anyway). Off by default: every choice sees the same rounds run after run.
    """

    def __init__(self, tasks: Sequence, task_weights: Sequence | None = None,
                 objective_func: Callable | None = None, strategy: str = "gradient",
                 load_model_file: str | None = None, load_log_file: str | None = None,
                 alpha: float = 0.2, beta: float = 2, backward_window_size: int = 3,
                 callbacks: Sequence | None = None, seed: int = 0,
                 keep_builders_busy: bool = False):
        self.tasks = list(tasks)
        if not self.tasks:
            raise ValueError("TaskScheduler needs at least one task")
        if strategy not in ("gradient", "round-robin"):
            raise ValueError(f"unknown strategy {strategy!r}; use 'gradient' or 'round-robin'")
        if task_weights is not None and len(task_weights) != len(self.tasks):
            raise ValueError(f"got {len(task_weights)} weights for {len(self.tasks)} tasks")
        if objective_func is not None:
            self.objective_func = objective_func
        elif task_weights is not None:
            weights = [float(w) for w in task_weights]
            self.objective_func = lambda costs: sum(c * w for c, w in zip(costs, weights))
        else:
            self.objective_func = sum
        self.task_weights = list(task_weights) if task_weights is not None else None
        self.strategy = strategy
        self.load_model_file = load_model_file
        self.load_log_file = load_log_file
        self.alpha = alpha
        self.beta = beta
        self.backward_window_size = backward_window_size
        self.callbacks = (list(callbacks) if callbacks is not None
                          else [PrintTableInfo(), LogEstimatedLatency("total_latency.tsv")])
        self.seed = seed
        self.keep_builders_busy = bool(keep_builders_busy)
        self._rng = np.random.default_rng(seed)

        n = len(self.tasks)
        self.task_cts = [0] * n  # rounds each task was tuned
        self.task_best_cts = [0] * n  # the round each task found its best
        self.task_costs_history: list = [[] for _ in range(n)]  # best cost after each round
        self.task_trials = [0] * n  # measured candidates per task (loaded ones included)
        self.best_costs = np.full(n, FAILED_COST)
        self.best_estimated = [False] * n
        self.dead_tasks: set = set()
        self.cur_score = self._compute_score(self.best_costs)
        self.tune_option = None
        self.search_policies: list = []
        self.num_measures_per_round = 0
        self.ct = self.best_ct = 0
        self.best_score = self.cur_score
        self.tic: float | None = None
        self.loaded_trials = 0
        self.early_stopping_task = math.inf
        self._restored = False
        self._builder = self._runner = None
        self.measure_times = None  # when the last run's first candidate was built, measured
        self.task_seconds = [0.0] * n  # build and run seconds of each task's candidates
        self.stopped_by_budget = False  # whether the last run ended at its time budget
        self._budget = None
        # tasks whose default schedule was measured (in this run, or settled by the loaded
        # log), and the results of the loaded log's default records that are no state row
        self.default_measured: set = set()
        self._logged_defaults: dict = {}

        # similarity groups: tasks with the same tag share a speed bound
        self.task_tags: list = []
        self.tag_to_group_id: dict = {}
        self.group_task_ids: list = []
        self.flop_cts = [float(t.flop_ct) for t in self.tasks]
        for i, task in enumerate(self.tasks):
            tag = derive_similarity_tag(task)
            self.task_tags.append(tag)
            if not tag:
                continue
            if tag not in self.tag_to_group_id:
                self.tag_to_group_id[tag] = len(self.tag_to_group_id)
                self.group_task_ids.append([])
            self.group_task_ids[self.tag_to_group_id[tag]].append(i)

    # -- the tuning loop ----------------------------------------------------------------------
    def tune(self, tune_option, search_policy="default", search_policy_params: dict | None = None,
             per_task_early_stopping: int | None = None) -> None:
        """Tune the tasks for ``tune_option.num_measure_trials`` trials in all.

        Every round measures ``min(num_measures_per_round, num_measure_trials //
        len(tasks))`` candidates of one task, so the warm-up (one round per task not yet
        tuned) fits the budget. ``search_policy``: see :func:`make_search_policies`;
        ``search_policy_params`` override :data:`~ptxforge.autosched.search_policy.DEFAULT_PARAMS`;
        ``per_task_early_stopping``: trials without improvement after which a task is
        dead (default: never). Records go to ``tune_option.measure_callbacks`` (e.g.
        :class:`~ptxforge.autosched.RecordToFile`).

        With ``tune_option.time_budget_s``, no round is searched once the budget would be
        overrun (:class:`~ptxforge.autosched.time_budget.TimeBudget`; the rounds searched
        are measured and recorded, and :attr:`stopped_by_budget` says the run ended there),
        and after the warm-up the gradient of each task is taken per second of its
        measuring (builds and runs), so the budget goes where it buys the most.

        Rounds are measured in the background: with ``tune_option.search_ahead = k``, up
        to ``k`` rounds are still being measured while the next one is searched. The
        warm-up rounds do not depend on each other: with ``k >= 1`` the next one is also
        searched, whatever the rounds in flight, whenever the builders are about to run out
        of work (:func:`builder_low_water`), so they never wait for the slowest build of an
        earlier round. The warm-up's last ``k`` rounds stay in flight into the gradient
        phase, whose first ``k`` rounds go to the heaviest tasks (weight times flop); after
        that, the next task is chosen from the rounds finished so far. With
        ``keep_builders_busy`` (and ``k >= 1``) the gradient phase, too, searches its next
        round whenever the builders run low (up to :data:`MAX_ROUNDS_IN_FLIGHT` rounds),
        choosing from the rounds taken in by then and counting the rounds of each task
        still in flight as given. Whatever the mode, rounds are taken in (recorded, passed
        to the callbacks and the cost model) in the order they were searched, and once the
        last round is searched the candidates still waiting are built slowest first
        (:meth:`~ptxforge.measure.stream.MeasureStream.build_longest_first`). Under a time budget
        too short for a full warm-up, the rounds left shrink so that every task gets one.
        (A warm-up whose cost model is trained already, from loaded records or a saved
        model, may see different rounds finished from one run to the next.)
        """
        n_tasks = len(self.tasks)
        trials = tune_option.num_measure_trials
        if trials < n_tasks:
            raise ValueError(f"num_measure_trials ({trials}) is too small: every one of the "
                             f"{n_tasks} tasks needs at least one trial")
        self.tune_option = tune_option
        es = tune_option.early_stopping
        early_stopping_all = math.inf if es is None or es < 0 else es
        self.early_stopping_task = (math.inf if per_task_early_stopping is None
                                    else per_task_early_stopping)
        self.num_measures_per_round = min(tune_option.num_measures_per_round,
                                          trials // n_tasks)
        self.ct = self.best_ct = 0
        self.tic = time.time()
        self.stopped_by_budget = False
        self._budget = TimeBudget(getattr(tune_option, "time_budget_s", None))

        records = {}
        if self.load_log_file and os.path.exists(self.load_log_file):
            records = self._read_log(self.load_log_file)
            if not self._restored:
                self._restore_status(records)
        self.search_policies = make_search_policies(
            search_policy, search_policy_params, self.tasks, self.num_measures_per_round,
            tune_option.verbose, self.load_model_file, records, self.seed)

        self._builder = tune_option.make_builder()
        self._runner = tune_option.make_runner()
        own = (self._builder is not tune_option.builder, self._runner is not tune_option.runner)
        stream = MeasureStream(self._builder, self._runner)
        ahead = (tune_option.search_ahead
                 if all(can_search_ahead(p) for p in self.search_policies) else 0)
        inflight: deque = deque()
        planned = self.ct
        low_water = builder_low_water(self._builder)
        try:
            # warm-up: one round for every task not tuned yet. These rounds do not depend on
            # each other's results, so besides the ``search_ahead`` rounds that may be in
            # flight anyway, the next one is searched whenever the builders are about to
            # run out of queued candidates: a round with one slow build (or a timeout) no
            # longer holds back the rounds behind it, and the rounds of small tasks (6-30
            # candidates) follow each other without a gap.
            dead_before = set(self.dead_tasks)
            warm = [idx for idx in range(n_tasks)
                    if not self.task_cts[idx] and idx not in self.dead_tasks]
            for pos, idx in enumerate(warm):
                if planned >= trials:
                    break
                # under a budget too short for full rounds, the small rounds of the tasks
                # left are searched at once, while the builders drain the full ones
                hurry = budget_is_short(self._budget, stream, len(warm) - pos,
                                        self.num_measures_per_round)
                self._make_room(inflight, stream, ahead, len(warm) if ahead else 0,
                                math.inf if hurry else low_water)
                if not (self._budget.allows_another_round(stream)
                        or self._budget.allows_warm_up_round()):
                    break
                size = warm_up_round_size(self._budget, stream, len(warm) - pos,
                                          self.num_measures_per_round)
                inflight.append(self._start_round(idx, stream, planned) if size is None
                                else self._start_round(idx, stream, planned, size))
                planned += inflight[-1].trials
            if planned >= trials:
                stream.build_longest_first()
            busy_mode = self.keep_builders_busy and ahead > 0
            # the last ``ahead`` warm-up rounds stay in flight into the gradient phase
            # (taken in there, in order, like its own rounds): draining them all first left
            # every builder idle while their stragglers were built and the next round was
            # searched, a second tail in the middle of the run (or, when the warm-up takes
            # nearly all the trials, as in 800-1,000 trial network runs, most of the tail).
            # Kept busy, the gradient phase takes them in as they come.
            while len(inflight) > ahead and not busy_mode:
                self._finish_round(inflight.popleft())
            self.best_ct = self.ct
            self.best_score = self.cur_score
            # the first ``ahead`` gradient rounds are chosen while warm-up rounds may still
            # be out: by the tasks' weighted flop, not by results whose arrival depends on
            # timing, so a seeded run takes the same rounds (every later choice sees all
            # the warm-up and the gradient rounds up to ``ahead`` before it)
            handover = self._heaviest(ahead, dead_before) if warm and ahead else []

            task_idx = -1
            stop = False
            while (not stop and planned < trials and len(self.dead_tasks) < n_tasks
                   and self._budget.allows_another_round(stream)):
                if self.strategy == "round-robin":
                    task_idx = (task_idx + 1) % n_tasks
                    while task_idx in self.dead_tasks:
                        task_idx = (task_idx + 1) % n_tasks
                else:
                    # a warm-up cut short by the budget's early answer: the tasks it left
                    # come first once the budget allows rounds again
                    busy = {r.task_idx for r in inflight}
                    untuned = [i for i in range(n_tasks) if not self.task_cts[i]
                               and i not in self.dead_tasks and i not in busy]
                    if untuned:
                        task_idx = untuned[0]
                    elif handover:
                        task_idx = handover.pop(0)
                    elif busy_mode:
                        task_idx = self._next_while_busy(inflight)
                        if task_idx is None:  # every live task's last search came back empty
                            stop = self._take_in(inflight, early_stopping_all, wait=True)
                            continue
                    else:
                        task_idx = self._next_by_gradient()
                inflight.append(self._start_round(task_idx, stream, planned))
                planned += inflight[-1].trials
                if planned >= trials:
                    stream.build_longest_first()
                if busy_mode and planned < trials:
                    stop = self._room_while_busy(inflight, stream, ahead, low_water,
                                                 early_stopping_all)
                    continue
                while inflight and (len(inflight) > ahead or planned >= trials or stop):
                    stop = self._finish_tuning_round(inflight.popleft(),
                                                     early_stopping_all) or stop
            # no more rounds: what is still waiting for a build is built slowest first
            stream.build_longest_first()
            while inflight:  # every task died with a round still being measured
                self._finish_tuning_round(inflight.popleft(), early_stopping_all)
        finally:
            stream.close()
            self.measure_times = stream.times
            self.stopped_by_budget = self._budget.spent
            if own[0]:
                self._builder.close()
            if own[1]:
                self._runner.close()
            self._builder = self._runner = None
        for cb in self.callbacks:
            cb.finish(self)

    def _make_room(self, inflight: deque, stream: MeasureStream, ahead: int, limit: int,
                   low_water: int) -> None:
        """Take in the rounds at the head of ``inflight`` that are measured, and wait until
        another round may be searched: while at most ``ahead`` rounds are in flight, or,
        up to ``limit`` rounds, while fewer than ``low_water`` candidates wait for or are
        in a build (the builders would soon idle). Rounds are taken in the order they were
        searched, so records, callbacks and the cost model see them in that order."""
        while True:
            while inflight and inflight[0].future.done():
                self._finish_round(inflight.popleft())
            if len(inflight) <= ahead:
                return
            if len(inflight) < limit and stream.unbuilt < low_water:
                return
            with stage("measure"):
                futures.wait([inflight[0].future], timeout=_ROOM_POLL_S)

    def _take_in(self, inflight: deque, early_stopping_all: float, wait: bool) -> bool:
        """Take in the measured rounds at the head of ``inflight`` (waiting for the first
        one with ``wait``); True when the run should stop early."""
        stop = False
        while inflight and (wait or inflight[0].future.done()):
            stop = self._finish_tuning_round(inflight.popleft(), early_stopping_all) or stop
            wait = False
        return stop

    def _room_while_busy(self, inflight: deque, stream: MeasureStream, ahead: int,
                         low_water: int, early_stopping_all: float) -> bool:
        """The gradient phase's wait under ``keep_builders_busy``: take in the measured
        rounds at the head of ``inflight`` until another round may be searched (at most
        ``ahead`` in flight, or, up to :data:`MAX_ROUNDS_IN_FLIGHT`, fewer than
        ``low_water`` candidates left to build); True when the run should stop early."""
        stop = False
        while True:
            stop = self._take_in(inflight, early_stopping_all, wait=False) or stop
            if stop or len(inflight) <= ahead:
                return stop
            if len(inflight) < MAX_ROUNDS_IN_FLIGHT and stream.unbuilt < low_water:
                return stop
            with stage("measure"):
                futures.wait([inflight[0].future], timeout=_ROOM_POLL_S)

    def _next_while_busy(self, inflight: deque) -> int | None:
        """The next task by gradient while ``inflight`` rounds are out: a round in flight
        counts as given (one more round of the task is expected to gain less), a task whose
        warm-up round is still out is not first in line, and a task whose last search
        came back empty (its space is spent: it dies when that round is taken in) is left
        out. None when no task is left."""
        pending: dict = {}
        spent = set()
        for r in inflight:
            pending[r.task_idx] = pending.get(r.task_idx, 0) + 1
            if r.spent:
                spent.add(r.task_idx)
        grads = self.gradients(pending)
        alive = [i for i in range(len(self.tasks))
                 if i not in self.dead_tasks and i not in spent]
        if not alive:
            return None
        return self._pick(alive, grads)

    def _finish_tuning_round(self, rnd: PendingRound, early_stopping_all: float) -> bool:
        """Take in a round of the gradient phase; True when the run should stop early."""
        self._finish_round(rnd)
        self._adjust_similarity_group(rnd.task_idx)
        if self.cur_score < self.best_score:
            self.best_score = self.cur_score
            self.best_ct = self.ct
        elif (self.ct - self.best_ct >= early_stopping_all
              and all(c < FAILED_COST for c in self.best_costs)):
            if self.tune_option.verbose >= 1:
                print(f"Stop early since no performance improvement in the last "
                      f"{early_stopping_all} measurement trials.")
            return True
        return False

    def tasks_tuned(self) -> int:
        """Tasks with at least one successful measurement (loaded records included)."""
        return sum(1 for c in self.best_costs if c < FAILED_COST)

    def _start_round(self, task_idx: int, stream: MeasureStream, planned: int,
                     size: int | None = None) -> PendingRound:
        """Search one round of ``task_idx`` (``size`` candidates, default a full round)
        and hand it to ``stream``; the first round of a task whose default schedule was
        not measured yet measures it too, as one of its candidates
        (``tune_option.measure_default``)."""
        for cb in self.callbacks:
            cb.pre_tune(self, task_idx)
        full = self.num_measures_per_round if size is None else size
        n = min(full, self.tune_option.num_measure_trials - planned)
        default = (bool(getattr(self.tune_option, "measure_default", False))
                   and task_idx not in self.default_measured)
        if default:
            self.default_measured.add(task_idx)
        rnd = start_round(self.tasks[task_idx], self.search_policies[task_idx], max(n, 1),
                          stream, task_idx, self.tune_option.measure_callbacks, default)
        if self._budget is not None:
            self._budget.searched(rnd.search_s)
        return rnd

    def _finish_round(self, rnd: PendingRound) -> None:
        """Wait for a round's results; record them, update its task's best cost and the
        objective."""
        task_idx, rows = rnd.task_idx, rnd.rows
        with stage("measure"):
            results = rnd.future.result()
        if rnd.trials:
            rnd.report_default(results)
            with stage("learn"):
                for cb in self.tune_option.measure_callbacks:
                    cb(rnd.inputs, results)
                if len(rows):
                    self.search_policies[task_idx].add_measured(rows,
                                                                rnd.state_results(results))

        self.task_cts[task_idx] += 1
        self.task_seconds[task_idx] += sum(float(r.all_cost) for r in results)
        for res in results:
            if int(res.error_no) != 0:
                continue
            if _beats(res, self.best_estimated[task_idx], self.best_costs[task_idx]):
                self.best_costs[task_idx] = res.mean
                self.best_estimated[task_idx] = bool(res.estimated)
                self.task_best_cts[task_idx] = self.task_cts[task_idx]

        no_change_trials = ((self.task_cts[task_idx] - self.task_best_cts[task_idx])
                            * self.num_measures_per_round)
        never_succeeded = (self.best_costs[task_idx] >= FAILED_COST
                           and self.task_cts[task_idx] >= MAX_ROUNDS_WITHOUT_SUCCESS)
        if rnd.spent or no_change_trials > self.early_stopping_task or never_succeeded:
            self.dead_tasks.add(task_idx)
        self.task_costs_history[task_idx].append(self.best_costs[task_idx])
        self.ct += rnd.trials
        self.task_trials[task_idx] += rnd.trials
        self.cur_score = self._compute_score(self.best_costs)
        for cb in self.callbacks:
            cb.post_tune(self, task_idx)

    def _compute_score(self, costs) -> float:
        return float(self.objective_func(list(costs)))

    def gradients(self, pending: dict | None = None) -> list[float]:
        """The gradient of every task (0 for dead ones): the estimated change of the
        objective from one more round of the task; the most negative one is tuned next.
        ``pending``: rounds of each task already searched and not taken in yet, counted as
        given (a task never tuned with a round pending gets 0, not first place)."""
        pending = pending or {}
        out = []
        base = self._compute_score(self.best_costs)
        for i in range(len(self.tasks)):
            if i in self.dead_tasks:
                out.append(0.0)
                continue
            if self.task_cts[i] == 0:
                # never tuned: first in line, unless its first round is out already
                out.append(0.0 if pending.get(i) else -math.inf)
                continue
            # df/dg_i by a finite difference (the objective may be any function)
            delta = 1e-4 * max(self.best_costs[i], 1e-9)
            costs = list(self.best_costs)
            costs[i] -= delta
            chain_grad = (base - self._compute_score(costs)) / delta

            # backward: the recent slope of the task's best cost, per round
            hist = self.task_costs_history[i]
            k = self.task_cts[i] - 1
            w = self.backward_window_size
            if k < len(hist) and k - w >= 0:
                backward_grad = (hist[k] - hist[k - w]) / w
            else:
                backward_grad = 0.0

            # forward: one more round gains at most 1/rounds of the cost, and no more than
            # running at 1/beta of the best speed of similar tasks
            cost = self.best_costs[i]
            g_next_1 = cost - cost / (self.task_cts[i] + pending.get(i, 0))
            g_next_2 = self.beta * 1e30
            group_id = self.tag_to_group_id.get(self.task_tags[i])
            if group_id is not None and len(self.group_task_ids[group_id]) > 1:
                best_flops = max(self.flop_cts[j] / self.best_costs[j]
                                 for j in self.group_task_ids[group_id])
                g_next_2 = self.beta * self.flop_cts[i] / best_flops
            forward_grad = min(g_next_1, g_next_2) - cost

            out.append(chain_grad * (self.alpha * backward_grad
                                     + (1 - self.alpha) * forward_grad))
        return out

    def round_seconds(self) -> list[float]:
        """Each task's mean build and run seconds per candidate so far (the mean of the
        tasks measured for one not measured yet; 0 when nothing is known)."""
        per = [self.task_seconds[i] / self.task_trials[i] if self.task_trials[i]
               and self.task_seconds[i] > 0 else 0.0 for i in range(len(self.tasks))]
        known = [p for p in per if p > 0]
        mean = sum(known) / len(known) if known else 0.0
        return [p if p > 0 else mean for p in per]

    def _heaviest(self, k: int, dead: set) -> list[int]:
        """``k`` tasks not in ``dead`` by weighted flop count, the heaviest first (cycling
        when there are fewer)."""
        weights = self.task_weights or [1] * len(self.tasks)
        order = sorted((i for i in range(len(self.tasks)) if i not in dead),
                       key=lambda i: (-float(weights[i]) * self.flop_cts[i], i))
        return [order[j % len(order)] for j in range(k)] if order else []

    def _next_by_gradient(self) -> int:
        grads = self.gradients()
        alive = [i for i in range(len(self.tasks)) if i not in self.dead_tasks]
        return self._pick(alive, grads)

    def _pick(self, alive: list, grads: list) -> int:
        """The task of ``alive`` with the most negative gradient (per second of measuring
        under a time budget of seconds); a random one when they are all equal."""
        values = [grads[i] for i in alive]
        if self._budget is not None and self._budget.seconds is not None:
            # a budget of seconds: the gain of a round per second it takes to measure
            cost = self.round_seconds()
            if all(cost[i] > 0 for i in alive):
                values = [grads[i] / cost[i] for i in alive]
        if max(values) == min(values):
            return int(alive[self._rng.integers(len(alive))])
        return int(alive[int(np.argmin(values))])

    def _adjust_similarity_group(self, task_idx: int) -> None:
        """Drop ``task_idx`` from its similarity group when, after many more rounds than
        the others, it still runs far slower than the group's best: it is not similar to
        them after all (e.g. a Winograd convolution tagged like a direct one)."""
        group_id = self.tag_to_group_id.get(self.task_tags[task_idx])
        if group_id is None or len(self.group_task_ids[group_id]) <= 1:
            return
        ids = self.group_task_ids[group_id]
        best_group_flops = max(self.flop_cts[j] / self.best_costs[j] for j in ids)
        cur_flops = self.flop_cts[task_idx] / self.best_costs[task_idx]
        if (cur_flops < best_group_flops / self.beta
                and self.task_cts[task_idx] > 5 + max(self.task_cts[j] for j in ids
                                                      if j != task_idx)):
            self.task_tags[task_idx] = None
            ids.remove(task_idx)

    # -- resuming -----------------------------------------------------------------------------
    def _read_log(self, log_file: str) -> dict:
        """``{task index: (rows, results)}`` of the records of this scheduler's tasks in
        ``log_file`` whose payload is a state of the task (file order). The results of
        the tasks' default records that are no state to mark measured go to
        ``_logged_defaults``: those of defaults without a state, and those of a default
        the log does not settle (it only timed out,
        :func:`~ptxforge.autosched.default_candidate.default_settled`: measured once more,
        its state too). Tasks whose default the log settles, failed or not, do not measure
        it again."""
        from ..measure import iter_records
        from .default_candidate import DEFAULT_KIND, default_settled, is_default_payload

        by_key: dict = {}
        for i, t in enumerate(self.tasks):
            by_key.setdefault((t.workload_key, _record_target(t)), i)
        grouped: dict = {}
        for inp, res in iter_records(log_file):
            idx = by_key.get((inp.task.workload_key, inp.task.target))
            if idx is not None:
                grouped.setdefault(idx, []).append((inp, res))
        out = {}
        self._logged_defaults = {}
        for idx, recs in grouped.items():
            task = self.tasks[idx]
            rows, results = [], []
            settled = default_settled(recs)
            if settled:
                self.default_measured.add(idx)
            for inp, res in recs:
                if is_default_payload(inp.payload) and (
                        not settled or inp.payload.get("kind") == DEFAULT_KIND):
                    self._logged_defaults.setdefault(idx, []).append(res)
                    continue
                st = state_from_payload(task, inp.payload)
                if st is not None:
                    rows.append(st.row(task.state_width))
                    results.append(res)
            if rows:
                out[idx] = (np.array(rows, dtype=np.int64), results)
        return out

    def _restore_status(self, records: dict) -> None:
        """Restore rounds, best costs and dead tasks from loaded records (rounds are
        estimated as records / trials per round), the default records of the log
        included."""
        n = max(self.num_measures_per_round, 1)
        for idx in sorted(set(records) | set(self._logged_defaults)):
            results = list(self._logged_defaults.get(idx, ()))
            if idx in records:
                results += list(records[idx][1])
            count = best_at = 0
            for res in results:
                count += 1
                if int(res.error_no) == 0 and _beats(res, self.best_estimated[idx],
                                                     self.best_costs[idx]):
                    self.best_costs[idx] = res.mean
                    self.best_estimated[idx] = bool(res.estimated)
                    best_at = count
            if count - best_at > self.early_stopping_task:
                self.dead_tasks.add(idx)
            self.task_cts[idx] = int(count / n + 0.5)
            self.task_best_cts[idx] = int(best_at / n + 0.5)
            self.task_costs_history[idx].append(self.best_costs[idx])
            self.task_trials[idx] = count
            self.loaded_trials += count
        self.cur_score = self._compute_score(self.best_costs)
        self._restored = True


__all__ = ["LogEstimatedLatency", "PrintTableInfo", "TaskScheduler", "TaskSchedulerCallback",
           "builder_low_water", "derive_similarity_tag", "format_table", "make_search_policies"]
