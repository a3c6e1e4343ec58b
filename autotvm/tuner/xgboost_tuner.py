"""XGBTuner: model-based tuning with an XGBoost cost model and simulated annealing."""

from __future__ import annotations

from .model_based_tuner import ModelBasedTuner
from .sa_model_optimizer import SimulatedAnnealingOptimizer
from .xgboost_cost_model import XGBoostCostModel

LOWERED_FEATURE_SA = {"parallel_size": 32, "n_iter": 80, "early_stop": 20}
"""Annealing settings with ``itervar``/``curve`` features, where every new config the
annealer scores costs an instantiation and a lowering (in worker processes)."""


class XGBTuner(ModelBasedTuner):
    """Tune with an XGBoost cost model (TVM's XGBTuner).

    ``plan_size``: configs measured between two fits of the model (and proposed per
    plan). ``feature_type``: ``"knob"`` (default: cheap, so the annealer can score
    thousands of configs per plan), ``"itervar"`` or ``"curve"`` (from the lowered loop
    structure, computed in worker processes: better for transfer between tasks, each
    scored config costs an instantiation and a lowering). ``loss_type``: ``"rank"`` or
    ``"reg"``. ``num_threads``: XGBoost threads. ``optimizer``: ``"sa"`` or a model
    optimizer object with ``find_maximums(model, num, exclusive)``.
    ``diversity_filter_ratio``: see :class:`ModelBasedTuner`. ``sa_options``: keyword
    arguments of :class:`SimulatedAnnealingOptimizer` (``n_iter``, ``parallel_size``,
    ``early_stop``, ...; TVM's defaults with knob features, a smaller search with the
    lowered features, :data:`LOWERED_FEATURE_SA`). ``seed``: reproducible proposals.
    ``num_threads`` defaults to 1: the training sets are small.
    """

    def __init__(self, task, plan_size: int = 64, feature_type: str = "knob",
                 loss_type: str = "rank", num_threads: int | None = None, optimizer="sa",
                 diversity_filter_ratio: float | None = None, log_interval: int = 50,
                 seed: int | None = None, sa_options: dict | None = None):
        import numpy as np

        from .tuner import default_seed

        seed = default_seed(seed)
        rng = np.random.default_rng(seed)
        model = XGBoostCostModel(task, feature_type, loss_type, num_threads,
                                 seed=int(rng.integers(2**31)))
        if optimizer == "sa":
            base = LOWERED_FEATURE_SA if feature_type != "knob" else {}
            opts = {"log_interval": log_interval, **base, **(sa_options or {})}
            optimizer = SimulatedAnnealingOptimizer(task.config_space, rng=rng, **opts)
        elif isinstance(optimizer, str):
            raise ValueError(f"unknown optimizer {optimizer!r}; use 'sa' or an optimizer object")
        super().__init__(task, model, optimizer, plan_size, diversity_filter_ratio, seed=seed)

    def tune(self, *args, **kwargs) -> None:
        try:
            super().tune(*args, **kwargs)
        finally:
            self.cost_model.close()
