"""SketchPolicy: evolutionary search over the states of a task's sketches, guided by a cost
model, as Ansor's sketch policy does.

One round: sample random valid states (plus the best measured ones; draws are checked
without their features, and refused ones repaired where valid ones are rare:
autosched/repair.py), evolve them for a few generations (mutation of tile sizes, unroll
steps and vector widths; crossover of states of one sketch; selection in proportion to the
cost model's score; invalid states dropped), then pick the best-scored states not yet
measured, mixed with a few random ones (epsilon-greedy). Nothing is lowered here: validity
and features come from the states.
"""

from __future__ import annotations

import numpy as np

from .evolution import crossover, first_rows, mutate, random_population, row_keys, unique_rows
from .repair import repair_population, repairable

DEFAULT_PARAMS = {
    "eps_greedy": 0.05,
    "sample_init_min_population": 50,
    "sample_init_use_measured_ratio": 0.2,
    "evolutionary_search_population": 2048,
    "evolutionary_search_num_iters": 4,
    "evolutionary_search_mutation_prob": 0.85,
    "max_sample_tries": 8,
    "per_sketch_picks": 2,
    "repair_below": 0.01,
}

DRAW_COUNTS = ("drawn", "refused", "repaired", "children", "children_refused", "refills")
"""The counters of :attr:`SketchPolicy.draw_counts`: random states drawn, those of them the
kernel model refused as drawn, those of the refused that were repaired (the rest were
dropped), mutated or crossed children checked, those of them refused (dropped), and
generations refilled with fresh random states."""


class SearchCallback:
    """Called with the policy before the search starts (see PreloadMeasuredStates)."""

    def callback(self, policy: SketchPolicy) -> None:
        """Act on ``policy``."""


class PreloadMeasuredStates(SearchCallback):
    """Mark the states measured in a record file as measured (they are not measured
    again) and seed the search with the best of them. Where the file holds a record of the
    task's default schedule, failed or not, the policy's ``default_recorded`` is set: a
    resumed run does not measure the default again (``TuningOptions.measure_default``).
    A default that only timed out is not settled
    (:func:`~ptxforge.autosched.default_candidate.default_settled`): it is measured once
    more, its state (where the default is one) not marked measured."""

    def __init__(self, filename: str):
        self.filename = filename

    def callback(self, policy: SketchPolicy) -> None:
        from .default_candidate import default_settled, is_default_payload
        from .records import records_of_task, state_rows

        records = records_of_task(policy.task, self.filename)
        policy.default_recorded = default_settled(records)
        if not policy.default_recorded:  # its timeouts teach nothing; its retry measures it
            records = [(i, r) for i, r in records if not is_default_payload(i.payload)]
        rows, results = state_rows(policy.task, records)
        if len(rows):
            policy.add_measured(rows, results, update_model=False)


class SketchPolicy:
    """Evolutionary search over the task's sketches with ``program_cost_model``.

    ``params`` overrides :data:`DEFAULT_PARAMS`; ``seed`` makes the search reproducible;
    ``init_search_callbacks`` run once now (e.g. :class:`PreloadMeasuredStates`).
    ``repair_below``: a tile sketch's random draws are repaired (not drawn again) where
    fewer than this share of them pass as drawn (0: never, 1: always; see
    :mod:`~ptxforge.autosched.repair`). :attr:`draw_counts` counts the draws and refusals
    (:data:`DRAW_COUNTS`).
    """

    def __init__(self, task, program_cost_model=None, params: dict | None = None,
                 seed: int = 0, verbose: int = 1, init_search_callbacks=None):
        from .cost_model import XGBModel

        self.task = task
        self.cost_model = program_cost_model if program_cost_model is not None else XGBModel()
        unknown = set(params or {}) - set(DEFAULT_PARAMS)
        if unknown:
            raise ValueError(f"unknown SketchPolicy params {sorted(unknown)}; known: "
                             f"{sorted(DEFAULT_PARAMS)}")
        self.params = {**DEFAULT_PARAMS, **(params or {})}
        self.rng = np.random.default_rng(seed)
        self.verbose = verbose
        self.measured: set = set()
        self.measured_rows: list = []
        self.measured_tput: list = []
        self.draw_counts = dict.fromkeys(DRAW_COUNTS, 0)
        # whether a record file this policy was seeded from settles the task's default
        # schedule (PreloadMeasuredStates sets it; the tuner then does not measure it again)
        self.default_recorded = False
        for cb in init_search_callbacks or ():
            cb.callback(self)

    def _count(self, **counts) -> None:
        for key, v in counts.items():
            self.draw_counts[key] += v

    # -- measurements ---------------------------------------------------------------------
    def add_measured(self, rows: np.ndarray, results, update_model: bool = True) -> None:
        """Record measurements of ``rows`` (states already measured are not picked again)."""
        from .cost_model import throughputs

        rows = np.asarray(rows, dtype=np.int64).reshape(len(rows), self.task.state_width)
        self.measured.update(row_keys(rows))
        self.measured_rows.append(rows)
        self.measured_tput.append(throughputs(self.task, results))
        if update_model:
            self.cost_model.update(self.task, rows, results)

    def mark_in_flight(self, rows: np.ndarray) -> None:
        """Never pick ``rows`` again: they are being measured (their results come later
        through :meth:`add_measured`)."""
        rows = np.asarray(rows, dtype=np.int64).reshape(len(rows), self.task.state_width)
        self.measured.update(row_keys(rows))

    def best_measured(self, k: int) -> np.ndarray:
        """The ``k`` fastest measured states (successful ones only)."""
        if not self.measured_rows:
            return np.zeros((0, self.task.state_width), dtype=np.int64)
        rows = np.concatenate(self.measured_rows)
        tp = np.concatenate(self.measured_tput)
        order = np.argsort(-tp, kind="stable")
        order = order[tp[order] > 0][:k]
        return rows[order]

    # -- sampling -------------------------------------------------------------------------
    def _valid(self, pop: np.ndarray) -> tuple:
        feats, valid, est = self.task.features(pop)
        return pop[valid], feats[valid], est[valid]

    def _not_measured(self, pop: np.ndarray) -> np.ndarray:
        if not self.measured or not len(pop):
            return np.ones(len(pop), dtype=bool)
        return np.array([k not in self.measured for k in row_keys(pop)], dtype=bool)

    def sample_initial_population(self, n: int) -> np.ndarray:
        """Up to ``n`` distinct valid random states (fewer only if the space is small or
        valid states are very rare).

        Sketches get shares of the population that grow with the square root of their
        space (so a sketch of 25 states is covered without crowding out the others), and
        are drawn in proportion to share over observed validity rate. Draws are checked
        with the kernel model's validity alone (their features are computed later, for the
        kept ones), and a tile sketch's refused draws are repaired where fewer than
        ``repair_below`` of them pass (:func:`~ptxforge.autosched.repair.repair_population`).
        """
        pop = np.zeros((0, self.task.state_width), dtype=np.int64)
        k = len(self.task.sketches)
        space = np.array([float(np.prod(sk.sizes.astype(float))) for sk in self.task.sketches])
        share = np.sqrt(np.minimum(space, 4.0 * n))
        share = share / share.sum()
        # where every refused tile draw is repaired, nearly all of them count
        below = self.params["repair_below"]
        rate = np.array([0.9 if below >= 1 and repairable(m) else 0.5 for m in self.task.models])
        for _ in range(self.params["max_sample_tries"]):
            weights = share / rate
            expected = float((weights / weights.sum() * rate).sum())
            want = min(int((n - len(pop)) / max(expected, 0.01) * 1.3) + 16, 64 * n + 64)
            cand = random_population(self.task, want, self.rng, weights)
            drawn = np.bincount(cand[:, 0], minlength=k)
            fixed = repair_population(self.task, cand, self.rng, repair_below=below)
            self._count(drawn=len(cand), refused=int((~fixed.valid).sum() + fixed.repaired.sum()),
                        repaired=int(fixed.repaired.sum()))
            cand = fixed.rows[fixed.valid]
            valid = np.bincount(cand[:, 0], minlength=k)
            rate = np.where(drawn > 0, np.maximum(valid / np.maximum(drawn, 1), 1e-3), rate)
            pop = unique_rows(np.concatenate([pop, cand]))
            if len(pop) >= n:
                break
        return pop[:n]

    # -- one round ------------------------------------------------------------------------
    def search_one_round(self, num_measure: int) -> np.ndarray:
        """The states to measure next: ``[k, state_width]``, ``k <= num_measure``.

        The picks are the best-scored unmeasured states, except that every sketch gets
        its best ``per_sketch_picks`` (so the model keeps learning about structures it
        currently ranks low), states the model cannot tell apart (equal features) are
        picked once, and ``eps_greedy`` of the picks are random valid states.
        """
        p = self.params
        size = p["evolutionary_search_population"]
        init = self.sample_initial_population(max(size, p["sample_init_min_population"]))
        best = self.best_measured(int(size * p["sample_init_use_measured_ratio"]))
        pop = unique_rows(np.concatenate([best, init])) if len(best) else init
        pool, scores = self._evolve(pop, num_measure)
        n_random = int(round(num_measure * p["eps_greedy"]))
        picked = self._pick(pool, scores, num_measure - n_random)
        chosen = set(row_keys(picked))
        rand = init[self._not_measured(init)]
        rand = rand[self.rng.permutation(len(rand))]
        extra = [r for r, k in zip(rand, row_keys(rand)) if k not in chosen]
        extra = extra[: num_measure - len(picked)]
        return np.concatenate([picked, np.array(extra, dtype=np.int64).reshape(
            len(extra), self.task.state_width)])

    def _pick(self, pool: np.ndarray, scores: np.ndarray, n: int) -> np.ndarray:
        if not len(pool) or n <= 0:
            return pool[:0]
        order = np.argsort(-scores, kind="stable")
        pool = pool[order]
        feats, _, _ = self.task.features(pool)
        fkeys = row_keys(np.round(feats, 4))
        take: list = []
        per = self.params["per_sketch_picks"] if n >= 4 * len(self.task.sketches) else 0
        for s in range(len(self.task.sketches)):
            take.extend(np.nonzero(pool[:, 0] == s)[0][:per].tolist())
        seen = {fkeys[i] for i in take}
        for i in range(len(pool)):
            if len(take) >= n:
                break
            if i not in take and fkeys[i] not in seen:
                take.append(i)
                seen.add(fkeys[i])
        # few distinguishable states: the rest by score
        for i in range(len(pool)):
            if len(take) >= n:
                break
            if i not in take:
                take.append(i)
        take = sorted(take[:n])
        return pool[take]

    def _evolve(self, pop: np.ndarray, num_measure: int) -> tuple:
        """Run the generations; return the best unmeasured states seen (overall, and per
        sketch), with their scores."""
        p = self.params
        size = p["evolutionary_search_population"]
        pool = np.zeros((0, self.task.state_width), dtype=np.int64)
        pool_scores = np.zeros(0)
        keep = max(4 * num_measure, 64)
        per_sketch = max(4 * p["per_sketch_picks"], 8)
        if not len(pop):
            return pool, pool_scores
        pop, feats, est = self._valid(pop)
        for it in range(p["evolutionary_search_num_iters"] + 1):
            if not len(pop):
                break
            scores = np.asarray(self.cost_model.predict(self.task, pop, feats, est), dtype=float)
            fresh = self._not_measured(pop)
            pool = np.concatenate([pool, pop[fresh]])
            pool_scores = np.concatenate([pool_scores, scores[fresh]])
            if len(pool):
                first = first_rows(pool)  # the rows in lexicographic order, as np.unique
                pool, pool_scores = pool[first], pool_scores[first]
            order = np.argsort(-pool_scores, kind="stable")
            keep_idx = set(order[:keep].tolist())
            for s in range(len(self.task.sketches)):
                mine = order[pool[order, 0] == s]
                keep_idx.update(mine[:per_sketch].tolist())
            idx = np.array(sorted(keep_idx, key=lambda i: (-pool_scores[i], i)), dtype=np.int64)
            pool, pool_scores = pool[idx], pool_scores[idx]
            if it == p["evolutionary_search_num_iters"]:
                break
            pop, feats, est = self._next_generation(pop, scores, size)
        return pool, pool_scores

    def _next_generation(self, pop: np.ndarray, scores: np.ndarray, size: int) -> tuple:
        rng = self.rng
        w = scores - scores.min()
        w = w + 1e-3 * (w.max() + 1e-12)
        prob = w / w.sum()
        a = pop[rng.choice(len(pop), size=size, p=prob)]
        b = pop[rng.choice(len(pop), size=size, p=prob)]
        use_mut = rng.random(size) < self.params["evolutionary_search_mutation_prob"]
        children = np.where(use_mut[:, None], mutate(self.task, a, rng),
                            crossover(a, b, rng))
        children = unique_rows(children)
        checked = len(children)
        children, feats, est = self._valid(children)
        self._count(children=checked, children_refused=checked - len(children))
        if len(children) < size // 4:
            self._count(refills=1)
            # the population collapsed (small space or few valid neighbours): refill
            extra = self.sample_initial_population(size // 2)
            merged = unique_rows(np.concatenate([children, extra]))
            children, feats, est = self._valid(merged)
        return children, feats, est
