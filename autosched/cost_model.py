"""Cost models: score states (higher is better) from their features.

:class:`XGBModel` learns normalized throughput (flop per second divided by the best of the
same task) with gradient-boosted trees; until it has enough measurements it ranks by the
analytical estimate of :mod:`~ptxforge.autosched.kernel_model`. :class:`RandomModel`
scores at random, for comparison.
"""

from __future__ import annotations

import abc
import time
import warnings

import numpy as np

from .features import FEATURE_NAMES


def throughputs(task, results) -> np.ndarray:
    """Flop per second of each result (0 for failures)."""
    out = np.zeros(len(results))
    for k, r in enumerate(results):
        if int(r.error_no) == 0 and r.costs:
            t = float(np.mean(r.costs))
            if 0 < t < 1e9:
                out[k] = task.flop_ct / t
    return out


class CostModel(abc.ABC):
    """Scores populations of a task's states; learns from measurements."""

    @abc.abstractmethod
    def predict(self, task, pop: np.ndarray, feats: np.ndarray | None = None,
                est: np.ndarray | None = None) -> np.ndarray:
        """One score per state of ``pop`` (higher is better)."""

    def update(self, task, pop: np.ndarray, results) -> None:  # noqa: B027 (optional)
        """Learn from the measurements ``results`` of the states ``pop`` (models that do
        not learn keep this default, which ignores them)."""

    def update_from_file(self, file_name: str) -> None:
        """Learn from the auto-scheduler records in ``file_name`` (of registered
        workloads)."""
        for task, pop, results in _records_by_task(file_name):
            self.update(task, pop, results)


class RandomModel(CostModel):
    """Random scores (a baseline: the search then only filters invalid states)."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)

    def predict(self, task, pop, feats=None, est=None) -> np.ndarray:
        return self.rng.random(len(pop))


class XGBModel(CostModel):
    """Gradient-boosted trees that correct the analytical estimate, trained incrementally.

    A state's score is its log2 throughput as the analytical model of
    :mod:`~ptxforge.autosched.kernel_model` estimates it (the trees' base margin) plus what
    the trees learned: the log2 ratio of measured to estimated throughput, a quantity that
    does not change when a task finds a new best (so earlier trees stay valid) and that
    carries over between tasks and networks (the features are task-independent).

    Training is incremental: new measurements add ``trees_per_update`` trees fitted to the
    residuals of all samples (boosting continued from the current trees); the trees are
    refitted from scratch (``num_rounds`` trees) only when the samples have grown by
    ``refit_growth`` since the last refit or the trees number more than ``max_trees``, so
    an update costs a few trees however many samples there are, and the amortized cost of
    the refits stays linear in the samples. (Samples of a loaded model do not count in
    that growth: the first samples of this run refit the trees on both.)

    The trees rank a task's states as soon as the model holds ``min_task_samples`` samples
    of the task, or as many of tasks with the same anchor operators (from this run or from
    a loaded model, see :meth:`load`), or ``num_warmup_sample`` samples of this run in all;
    until then the analytical ranking is used. Samples of a loaded model weigh ``transfer_weight``
    (this run's weigh 1) when the trees are trained again, so a task's own measurements win
    over other networks' once there are some. ``max_depth``/``eta``: the trees' parameters;
    ``seed`` fixes the training for reproducible searches.
    """

    def __init__(self, num_warmup_sample: int = 32, seed: int = 0, num_rounds: int = 60,
                 max_depth: int = 6, eta: float = 0.2, nthread: int | None = None,
                 verbose_eval: int = 0, min_task_samples: int = 16,
                 trees_per_update: int = 8, refit_growth: float = 2.0,
                 max_trees: int | None = None, transfer_weight: float = 0.3):
        try:  # fail here, not after the warm-up trials when the first trees are trained
            import xgboost  # noqa: F401
        except ImportError as e:
            raise ImportError(
                f"autosched.XGBModel needs the xgboost package ({e}): install it with "
                "python3 -m pip install xgboost (ptxforge declares it as a dependency), or "
                "search with autosched.RandomModel() instead") from e
        if refit_growth <= 1.0:
            raise ValueError(f"refit_growth must be above 1 (got {refit_growth}): the trees "
                             "are refitted when the samples have grown by this factor")
        if not 0.0 < transfer_weight <= 1.0:
            raise ValueError(f"transfer_weight must be in (0, 1] (got {transfer_weight})")
        if trees_per_update < 1 or num_rounds < 1:
            raise ValueError("num_rounds and trees_per_update must be at least 1")
        self.min_train = num_warmup_sample
        self.min_task_samples = min_task_samples
        self.transfer_weight = transfer_weight
        self.seed = seed
        self.num_rounds = num_rounds
        self.trees_per_update = trees_per_update
        self.refit_growth = refit_growth
        self.max_trees = max_trees if max_trees is not None else 8 * num_rounds
        self.params = {"max_depth": max_depth, "eta": eta, "gamma": 1e-3,
                       "min_child_weight": 1.0, "subsample": 1.0, "lambda": 1.0,
                       "objective": "reg:squarederror", "seed": seed,
                       "nthread": nthread or 1,
                       "tree_method": "hist", "verbosity": 0}
        self.verbose_eval = verbose_eval
        self.samples = SampleSet()
        self.booster = None
        self.num_trees = 0
        self._fitted_n = 0  # samples the trees have seen
        self._loaded_n = 0  # samples added by load()
        self._refit_own = 0  # samples of this run (not loaded) at the last refit
        self.update_seconds: list = []  # CPU seconds of every training step, in order
        self._task_tags: dict = {}

    @property
    def num_samples(self) -> int:
        return len(self.samples)

    def update(self, task, pop, results) -> None:
        if not len(pop):
            return
        feats, _, est = task.features(pop)
        self.samples.add(feats, base_margin(task, est), log_throughputs(task, results, est),
                         task.workload_key, self._tag(task))

    def _tag(self, task) -> str:
        key = task.workload_key
        if key not in self._task_tags:
            self._task_tags[key] = anchor_tag(task)
        return self._task_tags[key]

    # -- training -----------------------------------------------------------------------------
    def train(self) -> None:
        """Bring the trees up to date with the samples: a refit from scratch when due, else
        ``trees_per_update`` more trees on the residuals (nothing when no sample is new)."""
        n = len(self.samples)
        if n == 0 or n == self._fitted_n:
            return
        t0 = time.process_time()  # this process's CPU: the trees train in this thread
        own = n - self._loaded_n  # a loaded model is refitted on the first samples of this run
        if (self.booster is None or own >= self.refit_growth * self._refit_own
                or self.num_trees + self.trees_per_update > self.max_trees):
            self._boost(None, self.num_rounds)
            self._refit_own = own
        else:
            self._boost(self.booster, self.trees_per_update)
        self._fitted_n = n
        self.update_seconds.append(time.process_time() - t0)

    def refit(self) -> None:
        """Refit the trees from scratch on all samples (what :meth:`train` does when a refit
        is due); for comparison with the incremental updates."""
        if len(self.samples):
            self._boost(None, self.num_rounds)
            self._fitted_n = len(self.samples)
            self._refit_own = self._fitted_n - self._loaded_n

    def _boost(self, start, rounds: int) -> None:
        import xgboost as xgb

        s = self.samples
        d = xgb.DMatrix(s.features, label=s.labels, base_margin=s.margins, weight=s.weights,
                        feature_names=list(FEATURE_NAMES), nthread=self.params["nthread"])
        self.booster = xgb.train(self.params, d, num_boost_round=rounds, xgb_model=start)
        self.num_trees = (self.num_trees if start is not None else 0) + rounds

    def uses_trees_for(self, task) -> bool:
        """Whether the trees (rather than the analytical estimate alone) rank ``task``'s
        states now."""
        if self.booster is None and not len(self.samples):
            return False
        if len(self.samples) - self._loaded_n >= max(self.min_train, 1):
            return True  # the warm-up counts this run's samples: loaded ones may not fit
        return (self.samples.count_of(task.workload_key) >= self.min_task_samples
                or self.samples.count_tagged(self._tag(task)) >= self.min_task_samples)

    def predict_log(self, task, feats: np.ndarray, est: np.ndarray) -> np.ndarray:
        """Predicted log2 throughput of states with features ``feats`` and analytical
        estimates ``est`` (the estimate alone where the trees are not used for ``task``)."""
        margin = base_margin(task, est)
        if not len(feats) or not self.uses_trees_for(task):
            return margin
        self.train()
        import xgboost as xgb

        # the matrix is made with the trees' threads: by default xgboost converts it with
        # one OpenMP thread per core, which spin against the builder processes that keep
        # every core busy (48 ms for 2,048 rows on a loaded 2-core machine, 8 with one)
        d = xgb.DMatrix(feats, base_margin=margin, feature_names=list(FEATURE_NAMES),
                        nthread=self.params["nthread"])
        return self.booster.predict(d)

    def predict(self, task, pop, feats=None, est=None) -> np.ndarray:
        if feats is None or est is None:
            feats, _, est = task.features(pop)
        prior = 1.0 / np.maximum(est, 1e-12)
        prior = prior / max(prior.max(), 1e-30)
        if not len(pop) or not self.uses_trees_for(task):
            return prior
        pred = self.predict_log(task, feats, est)
        # scores on the scale of the analytical prior (throughput relative to the best
        # state), so the evolution's selection pressure is the same with or without trees;
        # ties in the trees are broken by the analytical ranking
        return np.exp2(np.minimum(pred - pred.max(), 0.0)) + 1e-3 * prior

    # -- transfer -----------------------------------------------------------------------------
    def save(self, path: str) -> None:
        """Write the samples and the trees to ``path`` (one ``.npz`` file; see
        :mod:`~ptxforge.autosched.model_file`), to seed the search of other networks."""
        from .model_file import save_model

        if not len(self.samples):
            raise ValueError("the model has no samples to save yet: tune (or "
                             "update_from_file) first")
        self.train()
        save_model(path, self)

    def load(self, path: str) -> None:
        """Add the samples and trees saved in ``path`` by :meth:`save` (e.g. of another
        network): tasks with the same anchor operators as the saved ones are ranked by the
        trees at once, and new measurements are learned on top."""
        from .model_file import load_model

        samples, raw, trees = load_model(path)
        self.samples.extend(samples, self.transfer_weight)
        self._loaded_n += len(samples)
        if not self._fitted_n and raw is not None and len(self.samples) == len(samples):
            import xgboost as xgb

            self.booster = xgb.Booster()
            self.booster.load_model(bytearray(raw))
            self.num_trees = trees
            self._fitted_n = len(self.samples)
            self._refit_own = 0
        else:  # samples of this run already: refit on both
            self._fitted_n = 0
            self.booster = None


class SampleSet:
    """The training samples of a model: features, base margins (log2 estimated throughput),
    labels (log2 measured throughput), the task key and anchor tag of every row, and its
    training weight."""

    def __init__(self):
        self._parts: list = []
        self._cat = None
        self._counts: dict = {}
        self._tag_counts: dict = {}

    def __len__(self) -> int:
        return sum(len(p[0]) for p in self._parts)

    def add(self, feats, margins, labels, key: str, tag: str, weights=1.0) -> None:
        n = len(feats)
        self._parts.append((np.asarray(feats, dtype=np.float32),
                            np.asarray(margins, dtype=np.float32),
                            np.asarray(labels, dtype=np.float32),
                            np.full(n, key, dtype=object), np.full(n, tag, dtype=object),
                            np.broadcast_to(np.asarray(weights, dtype=np.float32), (n,))))
        self._cat = None
        self._counts[key] = self._counts.get(key, 0) + n
        self._tag_counts[tag] = self._tag_counts.get(tag, 0) + n

    def extend(self, other: SampleSet, weight: float = 1.0) -> None:
        """Add the samples of ``other``, their weights times ``weight``."""
        for f, m, y, k, t, w in other.parts():
            for key in dict.fromkeys(k.tolist()):
                sel = k == key
                self.add(f[sel], m[sel], y[sel], str(key), str(t[sel][0]), w[sel] * weight)

    def parts(self) -> list:
        return [self._all()] if self._parts else []

    def _all(self) -> tuple:
        if self._cat is None:
            self._cat = tuple(np.concatenate([p[j] for p in self._parts]) for j in range(6))
            self._parts = [self._cat]
        return self._cat

    @property
    def features(self) -> np.ndarray:
        return self._all()[0]

    @property
    def margins(self) -> np.ndarray:
        return self._all()[1]

    @property
    def labels(self) -> np.ndarray:
        return self._all()[2]

    @property
    def weights(self) -> np.ndarray:
        return self._all()[5]

    @property
    def keys(self) -> np.ndarray:
        return self._all()[3]

    @property
    def tags(self) -> np.ndarray:
        return self._all()[4]

    def count_by_task(self) -> dict:
        """``{workload key: samples}``."""
        return dict(self._counts)

    def count_of(self, key: str) -> int:
        """Samples of the task with workload key ``key``."""
        return self._counts.get(key, 0)

    def count_tagged(self, tag: str) -> int:
        """Samples of tasks with anchor tag ``tag`` (none for the empty tag)."""
        return self._tag_counts.get(tag, 0) if tag else 0


FAILED_LOG_PENALTY = 4.0
"""A failed state's label: this many powers of two below its estimated log2 throughput
(what the trees learn of states that do not build or run)."""


def base_margin(task, est: np.ndarray) -> np.ndarray:
    """log2 of the analytical throughput ``flop / est`` (clipped for states that cannot
    run: infinite estimates)."""
    est = np.minimum(np.asarray(est, dtype=np.float64), 1e6)
    return np.log2(max(float(task.flop_ct), 1.0) / np.maximum(est, 1e-12))


def log_throughputs(task, results, est: np.ndarray) -> np.ndarray:
    """The labels of measured states: log2 flop per second; a failed state is labelled
    :data:`FAILED_LOG_PENALTY` below its analytical estimate."""
    tp = throughputs(task, results)
    margin = base_margin(task, est)
    return np.where(tp > 0, np.log2(np.maximum(tp, 1e-30)), margin - FAILED_LOG_PENALTY)


_PATTERN_TAGS = ("elemwise", "broadcast", "injective")


def anchor_tag(task) -> str:
    """The anchor operators of a task (convolution, dense, pooling...: the tags of its
    stages that are not element-wise, broadcast or injective), joined; "" for none. Tasks
    with equal anchor tags share what the trees learn before they have samples of their
    own."""
    tags: dict = {}
    for op in task.compute_dag.ops:
        tag = getattr(op, "tag", "") or ""
        if tag and tag.split(",")[0] not in _PATTERN_TAGS:
            tags[tag] = None
    dtypes = sorted({str(getattr(t, "dtype", "")) for t in task.compute_dag.tensors[:2]})
    return "_".join(tags) + ("@" + ",".join(dtypes) if tags else "")


MAX_EXTENT = 1 << 40
"""Loop extents above this (no GPU holds such a tensor) mark a record's workload as bogus."""

MAX_TILE_CHOICES = 1_000_000
"""An axis with more ways to split it into the deepest tiling than this would make the
sketches of a workload cost seconds and gigabytes to build: such a record is skipped."""

_DEEPEST_TILING = 5  # the levels of a spatial tile slot (steps.py)


def workload_too_large(dag) -> str | None:
    """Why reading records of ``dag`` would take unbounded work (an extent over
    :data:`MAX_EXTENT`, or an axis with more tilings than :data:`MAX_TILE_CHOICES`), or
    None. Checked before anything is built from a workload named in a record file."""
    from ..ir.expr import Reduce

    extents = []
    for op in dag.ops:
        extents += [("shape of " + op.name, e) for e in getattr(op, "shape", ())]
        extents += [(f"{op.name}.{a.var.name}", a.extent) for a in getattr(op, "axis", ())]
        if isinstance(getattr(op, "body", None), Reduce):
            extents += [(f"{op.name}.{a.var.name}", a.extent) for a in op.body.axis]
    for where, e in extents:
        why = extent_too_large(e, _DEEPEST_TILING, MAX_TILE_CHOICES)
        if why:
            return f"{where} {why}"
    return None


def extent_too_large(extent, levels: int, max_choices: int) -> str | None:
    """Why splitting a loop of ``extent`` into ``levels`` loops in every exact way would be
    unbounded work (an extent over :data:`MAX_EXTENT`, or more than ``max_choices``
    splits), or None (also for anything that is not a positive int)."""
    from math import comb

    from .factorization import prime_factors

    if not isinstance(extent, int) or isinstance(extent, bool) or extent < 1:
        return None
    if extent > MAX_EXTENT:
        return f"has extent {extent}, over {MAX_EXTENT}"
    choices = 1
    primes = prime_factors(extent)
    for p in set(primes):
        choices *= comb(primes.count(p) + levels - 1, levels - 1)
    if choices > max_choices:
        return f"(extent {extent}) has {choices} tilings into {levels}, over {max_choices}"
    return None


def _records_by_task(file_name: str) -> list:
    """``[(task, population, results)]`` of the auto-scheduler records of ``file_name``,
    one entry per registered workload. A workload too large to read with bounded work
    (:func:`workload_too_large`) is skipped with a warning."""
    from ..measure import load_records
    from .records import state_rows
    from .search_task import SearchTask

    groups: dict = {}
    for inp, res in load_records(file_name):
        groups.setdefault(inp.task.workload_key, []).append((inp, res))
    out = []
    for key, recs in groups.items():
        try:
            task = SearchTask(workload_key=key)
            why = workload_too_large(task.compute_dag)
        except Exception as e:  # noqa: BLE001 - any failure of a logged workload: skip it
            why = f"{type(e).__name__}: {e}"
        if why:
            warnings.warn(f"{file_name}: skipping {len(recs)} record(s) of workload "
                          f"{key[:200]}: {why}", RuntimeWarning, stacklevel=3)
            continue
        rows, results = state_rows(task, recs)
        if len(rows):
            out.append((task, rows, results))
    return out
