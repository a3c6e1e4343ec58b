"""Tuning guided by a cost model: measure a plan, refit, plan again."""

from __future__ import annotations

import numpy as np

from .tuner import Tuner, flops_of


def submodular_pick(scores, knobs, n_pick: int, knob_weight: float = 1.0) -> list[int]:
    """Pick ``n_pick`` of the candidates greedily by score plus ``knob_weight`` for every
    knob value not yet taken by an earlier pick (so the batch covers the space)."""
    n = len(scores)
    if n == 0:
        return []
    n_knobs = len(knobs[0])
    taken = [set() for _ in range(n_knobs)]
    remain = list(range(n))
    out: list = []
    for _ in range(min(n_pick, n)):
        best, best_gain = -1, -np.inf
        for x in remain:
            gain = float(scores[x]) + knob_weight * sum(
                1 for i in range(n_knobs) if knobs[x][i] not in taken[i])
            if gain > best_gain:
                best, best_gain = x, gain
        out.append(best)
        remain.remove(best)
        for i in range(n_knobs):
            taken[i].add(knobs[best][i])
    return out


class ModelBasedTuner(Tuner):
    """Propose the configs the model's optimizer finds best; refit the model every
    ``plan_size`` measurements. Until the first fit, and for the last 5% of every plan,
    configs are drawn at random (exploration). With ``diversity_filter_ratio`` the
    optimizer returns that many times ``plan_size`` candidates and a diverse subset is
    kept (:func:`submodular_pick`)."""

    def __init__(self, task, cost_model, model_optimizer, plan_size: int,
                 diversity_filter_ratio: float | None = None, seed=None):
        super().__init__(task, seed=seed)
        self.cost_model = cost_model
        self.model_optimizer = model_optimizer
        self.plan_size = plan_size
        self.diversity_filter_ratio = diversity_filter_ratio
        if diversity_filter_ratio is not None and diversity_filter_ratio < 1:
            raise ValueError("diversity_filter_ratio must be at least 1")
        self.trials: list = []
        self.trial_pt = 0
        self.xs: list = []
        self.ys: list = []
        self.flops_max = 0.0
        self.train_ct = 0

    def has_next(self) -> bool:
        return len(self.visited) < len(self.space)

    def _random_unvisited(self) -> int:
        n = len(self.space)
        index = int(self.rng.integers(n))
        while index in self.visited:
            index = int(self.rng.integers(n))
        return index

    def next_batch(self, batch_size: int) -> list:
        out = []
        while len(out) < batch_size and self.has_next():
            while self.trial_pt < len(self.trials) and self.trials[self.trial_pt] in self.visited:
                self.trial_pt += 1
            if self.trial_pt >= len(self.trials) - int(0.05 * self.plan_size):
                index = self._random_unvisited()
            else:
                index = int(self.trials[self.trial_pt])
                self.trial_pt += 1
            self.visited.add(index)
            out.append(self.space.get(index))
        return out

    def update(self, inputs, results) -> None:
        for inp, res in zip(inputs, results):
            flops = flops_of(inp, res)
            self.flops_max = max(self.flops_max, flops)
            self.xs.append(inp.config.index)
            self.ys.append(flops)
        if len(self.xs) >= self.plan_size * (self.train_ct + 1) and self.flops_max > 1e-6:
            self.cost_model.fit(self.xs, self.ys, self.plan_size)
            self.trials = self._plan(self.cost_model)
            self.trial_pt = 0
            self.train_ct += 1

    def _plan(self, model) -> list:
        if self.diversity_filter_ratio:
            n = int(self.plan_size * self.diversity_filter_ratio)
            candidates = self.model_optimizer.find_maximums(model, n, self.visited)
            if not candidates:
                return []
            scores = model.predict(candidates)
            knobs = [self.space.point2knob(c) for c in candidates]
            picked = submodular_pick(0 * scores, knobs, self.plan_size, knob_weight=1.0)
            return [candidates[i] for i in picked]
        return self.model_optimizer.find_maximums(model, self.plan_size, self.visited)

    def load_history(self, data_set, min_seed_records: int = 500) -> None:
        """Resume (see :meth:`Tuner.load_history`): this task's logged configs are never
        proposed again and train the model like fresh measurements; with at least
        ``min_seed_records`` records (of any task) a base model is fitted too (transfer
        learning)."""
        data_set = list(data_set)
        base = self.cost_model.spawn_base_model()
        if base.fit_log(data_set, self.plan_size, min_seed_records):
            if not self.trials:
                self.trials = self._plan(base)
                self.trial_pt = 0
            self.cost_model.load_basemodel(base)
        own = self._own_records(data_set)
        self._resume(own)
        if own:
            self.update([i for i, _ in own], [r for _, r in own])
