"""Cost models: score states (higher is better) from their features.

:class:`XGBModel` learns normalized throughput (flop per second divided by the best of the
same task) with gradient-boosted trees; until it has enough measurements it ranks by the
analytical estimate of :mod:`~ptxforge.autosched.kernel_model`. :class:`RandomModel`
scores at random, for comparison.
"""

from __future__ import annotations

import abc
import os
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
    """Gradient-boosted trees over the state features, trained on normalized throughput.

    ``min_train``: measurements needed before the trees replace the analytical ranking;
    ``num_rounds``/``max_depth``/``eta``: the boosting parameters; ``seed`` fixes the
    training for reproducible searches.
    """

    def __init__(self, num_warmup_sample: int = 32, seed: int = 0, num_rounds: int = 120,
                 max_depth: int = 8, eta: float = 0.2, nthread: int | None = None,
                 verbose_eval: int = 0):
        try:  # fail here, not after the warm-up trials when the first trees are trained
            import xgboost  # noqa: F401
        except ImportError as e:
            raise ImportError(
                f"autosched.XGBModel needs the xgboost package ({e}): install it with "
                "python3 -m pip install xgboost (ptxforge declares it as a dependency), or "
                "search with autosched.RandomModel() instead") from e
        self.min_train = num_warmup_sample
        self.seed = seed
        self.num_rounds = num_rounds
        self.params = {"max_depth": max_depth, "eta": eta, "gamma": 1e-3,
                       "min_child_weight": 1.0, "subsample": 1.0, "lambda": 1.0,
                       "objective": "reg:squarederror", "seed": seed,
                       "nthread": nthread or min(4, os.cpu_count() or 1),
                       "tree_method": "hist", "verbosity": 0}
        self.verbose_eval = verbose_eval
        self.feats: list = []
        self.tput: list = []
        self.keys: list = []
        self.booster = None
        self._dirty = False

    @property
    def num_samples(self) -> int:
        return sum(len(f) for f in self.feats)

    def update(self, task, pop, results) -> None:
        if not len(pop):
            return
        feats, _, _ = task.features(pop)
        self.feats.append(feats)
        self.tput.append(throughputs(task, results))
        self.keys.append(np.full(len(pop), task.workload_key, dtype=object))
        self._dirty = True

    def _fit(self) -> None:
        import xgboost as xgb

        x = np.concatenate(self.feats)
        tp = np.concatenate(self.tput)
        keys = np.concatenate(self.keys)
        y = np.zeros_like(tp)
        for k in np.unique(keys):
            m = keys == k
            best = tp[m].max()
            if best > 0:
                y[m] = tp[m] / best
        # errors teach the model what fails, good states what wins: weight both
        w = 0.25 + y
        d = xgb.DMatrix(x, label=y, weight=w, feature_names=list(FEATURE_NAMES))
        self.booster = xgb.train(self.params, d, num_boost_round=self.num_rounds)
        self._dirty = False

    def predict(self, task, pop, feats=None, est=None) -> np.ndarray:
        if feats is None or est is None:
            feats, _, est = task.features(pop)
        prior = 1.0 / np.maximum(est, 1e-12)
        prior = prior / max(prior.max(), 1e-30)
        if self.num_samples < self.min_train:
            return prior
        if self._dirty or self.booster is None:
            self._fit()
        import xgboost as xgb

        d = xgb.DMatrix(feats, feature_names=list(FEATURE_NAMES))
        pred = self.booster.predict(d)
        # ties in the trees (unseen regions) are broken by the analytical ranking
        return pred + 1e-3 * prior

    def save(self, path: str) -> None:
        """Save the trees (after training on the samples so far)."""
        if self._dirty or self.booster is None:
            if self.num_samples == 0:
                raise ValueError("the model has no samples to train on yet")
            self._fit()
        self.booster.save_model(path)

    def load(self, path: str) -> None:
        """Load trees saved by :meth:`save` (used until new samples arrive)."""
        import xgboost as xgb

        self.booster = xgb.Booster()
        self.booster.load_model(path)
        self._dirty = False
        self.min_train = 0


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
    from .search_task import SearchTask
    from .state import state_from_payload

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
        rows, results = [], []
        for inp, res in recs:
            st = state_from_payload(task, inp.payload)
            if st is not None:
                rows.append(st.row(task.state_width))
                results.append(res)
        if rows:
            out.append((task, np.array(rows), results))
    return out
