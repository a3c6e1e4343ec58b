"""A gradient-boosted-trees cost model of configs (XGBoost).

The model predicts a score per config index, higher for faster configs, from the features
of :mod:`ptxforge.autotvm.feature`. Throughputs are normalized by the best seen so far, so
the model sees values in [0, 1]; failed configs count as 0. ``loss_type`` is ``"reg"``
(squared error on the normalized throughput) or ``"rank"`` (pairwise ranking). A model
trained on earlier records (:meth:`fit_log`) can serve as the base of a new one: its
predictions become the new model's starting margin (transfer learning).
"""

from __future__ import annotations

import logging
import warnings

import numpy as np

from ..feature import FeatureCache

logger = logging.getLogger("autotvm")

MAX_SPLIT_CHOICES = 20_000
"""A template argument with more 4-way splits than this makes rebuilding its config space
(transfer learning from another task's records) take minutes: such records are skipped."""


def _args_too_large(args) -> str | None:
    """Why the template arguments ``args`` (numbers, nested tuples) name a workload too large
    to rebuild with bounded work, or None."""
    from ...autosched.cost_model import extent_too_large

    stack = list(args)
    while stack:
        a = stack.pop()
        if isinstance(a, (list, tuple)):
            stack.extend(a)
            continue
        why = extent_too_large(a, 4, MAX_SPLIT_CHOICES)
        if why:
            return f"argument {a}: {why}"
    return None

INVALID_SCORE = -1e9


class XGBoostCostModel:
    """``fit(indices, flops)``, ``predict(indices)`` for one task."""

    def __init__(self, task, feature_type: str = "knob", loss_type: str = "rank",
                 num_threads: int | None = None, num_boost_round: int = 200,
                 seed: int | None = None, features: FeatureCache | None = None):
        import xgboost  # noqa: F401  (fail early, with the import error, if it is missing)

        if loss_type not in ("reg", "rank"):
            raise ValueError(f"loss_type must be 'reg' or 'rank', got {loss_type!r}")
        self.task = task
        self.feature_type = feature_type
        self.loss_type = loss_type
        self.num_threads = num_threads
        self.num_boost_round = num_boost_round
        self.seed = 0 if seed is None else int(seed)
        self.features = features or FeatureCache(task, feature_type)
        self.params = {
            "max_depth": 3, "gamma": 1e-4, "min_child_weight": 1, "subsample": 1.0,
            "eta": 0.3, "lambda": 1.0, "alpha": 0.0, "verbosity": 0, "seed": self.seed,
            "objective": "reg:squarederror" if loss_type == "reg" else "rank:pairwise",
        }
        # the training sets are tiny: threads cost more in synchronization than they save
        self.params["nthread"] = int(num_threads) if num_threads else 1
        self.bst = None
        self.base_model: XGBoostCostModel | None = None

    # -- training ----------------------------------------------------------------------------

    def _train(self, x: np.ndarray, y: np.ndarray, base_margin=None) -> None:
        import xgboost as xgb

        rng = np.random.default_rng(self.seed)
        order = rng.permutation(len(x))
        d = xgb.DMatrix(x[order], label=y[order])
        if base_margin is not None:
            d.set_base_margin(base_margin[order])
        if self.loss_type == "rank":
            d.set_group([len(x)])
        self.bst = xgb.train(self.params, d, num_boost_round=self.num_boost_round)

    def fit(self, xs, ys, plan_size: int = 64) -> None:
        """Train on config indices ``xs`` and their throughputs ``ys`` (0: failed)."""
        x, _ = self.features.get(xs)
        y = np.asarray(ys, dtype=np.float64)
        top = y.max() if len(y) else 0.0
        y = y / top if top > 0 else y
        margin = self.base_model.predict(xs, output_margin=True) if self.base_model else None
        self._train(x, y, margin)

    def fit_log(self, records, plan_size: int = 64, min_seed_records: int = 500) -> bool:
        """Train on earlier records (``(input, result)`` pairs, possibly of other tasks):
        with ``knob`` features only records of this task's template and space count;
        with ``itervar``/``curve`` features any task whose template is registered. Returns
        False when fewer than ``min_seed_records`` records could be used."""
        from ..task import create

        groups: dict = {}
        for inp, res in records:
            groups.setdefault((inp.task.name, repr(inp.task.args), inp.target), []).append(
                (inp, res))
        xs, ys = [], []
        for (name, _, target), pairs in groups.items():
            if self.feature_type == "knob":
                if name != self.task.name:
                    continue
                space = self.task.config_space
                rows, flops = [], []
                for inp, res in pairs:
                    try:
                        index = space.index_of(inp.config._entity_map)
                    except (ValueError, KeyError):
                        continue
                    rows.append(self.features.get([index])[0][0])
                    flops.append(inp.task.flop / res.mean if res.error_no == 0 else 0.0)
            else:
                why = _args_too_large(pairs[0][0].task.args)
                if why:
                    warnings.warn(f"skipping {len(pairs)} record(s) of {name}"
                                  f"{pairs[0][0].task.args}: the workload is too large to "
                                  f"rebuild with bounded work ({why})", RuntimeWarning,
                                  stacklevel=2)
                    continue
                try:
                    task = create(name, pairs[0][0].task.args, target)
                except Exception as e:  # a template we cannot rebuild: skip its records
                    logger.debug("skipping records of %s: %s", name, e)
                    continue
                cache = FeatureCache(task, self.feature_type,
                                     n_parallel=self.features.n_parallel)
                indices, flops = [], []
                for inp, res in pairs:
                    try:
                        indices.append(task.config_space.index_of(inp.config._entity_map))
                    except (ValueError, KeyError):
                        continue
                    flops.append(task.flop / res.mean if res.error_no == 0 else 0.0)
                feats, valid = cache.get(indices)
                cache.close()
                rows = [f for f, ok in zip(feats, valid) if ok]
                flops = [y for y, ok in zip(flops, valid) if ok]
            if not rows:
                continue
            top = max(flops) or 1.0
            xs += list(rows)
            ys += [f / top for f in flops]
        if len(xs) < min_seed_records:
            return False
        self._train(np.asarray(xs, dtype=np.float32), np.asarray(ys))
        return True

    # -- prediction --------------------------------------------------------------------------

    def predict(self, xs, output_margin: bool = False) -> np.ndarray:
        """Scores of config indices (invalid configs: a very low score)."""
        x, valid = self.features.get(xs)
        if self.bst is None:
            out = np.zeros(len(x))
        else:
            margin = None
            if self.base_model is not None:
                margin = self.base_model.predict(xs, output_margin=True)
            out = self.bst.inplace_predict(x, predict_type="margin" if output_margin else
                                           "value", base_margin=margin)
        out = np.asarray(out, dtype=np.float64)
        if not output_margin:
            out[~valid] = INVALID_SCORE
        return out

    def spawn_base_model(self) -> XGBoostCostModel:
        """A fresh model of the same kind (to train on history)."""
        return XGBoostCostModel(self.task, self.feature_type, self.loss_type, self.num_threads,
                                self.num_boost_round, self.seed, self.features)

    def load_basemodel(self, base_model: XGBoostCostModel) -> None:
        self.base_model = base_model

    def close(self) -> None:
        self.features.close()
