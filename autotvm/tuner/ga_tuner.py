"""A genetic algorithm over configs: genes are knob indices."""

from __future__ import annotations

import numpy as np

from .tuner import Tuner, flops_of


class GATuner(Tuner):
    """Each generation of ``pop_size`` configs is measured; the next one is bred from it by
    fitness-proportional selection, one-point crossover and per-knob mutation (probability
    ``mutation_prob``), keeping ``elite_num`` best genes. No config is proposed twice."""

    def __init__(self, task, pop_size: int = 100, elite_num: int = 3,
                 mutation_prob: float = 0.1, seed=None):
        super().__init__(task, seed=seed)
        self.dims = self.space.dims
        self.pop_size = min(pop_size, len(self.space))
        self.elite_num = min(self.pop_size, elite_num)
        self.mutation_prob = mutation_prob
        self.genes: list = []
        self.scores: list = []
        self.elites: list = []
        self.elite_scores: list = []
        self.trial_pt = 0
        for _ in range(self.pop_size):
            gene = self._random_gene()
            while self._point(gene) in self.visited:
                gene = self._random_gene()
            self.genes.append(gene)
            self.visited.add(self._point(gene))

    def _mark_logged(self, index: int) -> None:
        self.visited.add(index)
        # a gene planned but not measured yet that an earlier run measured: draw a new one
        for k in range(self.trial_pt, len(self.genes)):
            if self._point(self.genes[k]) != index or len(self.visited) >= len(self.space):
                continue
            gene = self._random_gene()
            while self._point(gene) in self.visited:
                gene = self._random_gene()
            self.genes[k] = gene
            self.visited.add(self._point(gene))

    def _random_gene(self) -> list:
        return [int(self.rng.integers(d)) for d in self.dims]

    def _point(self, gene) -> int:
        return self.space.knob2point(gene)

    def has_next(self) -> bool:
        return self.trial_pt < len(self.genes) or len(self.visited) < len(self.space)

    def next_batch(self, batch_size: int) -> list:
        out = []
        while len(out) < batch_size and self.trial_pt < len(self.genes):
            out.append(self.space.get(self._point(self.genes[self.trial_pt])))
            self.trial_pt += 1
        return out

    def update(self, inputs, results) -> None:
        for inp, res in zip(inputs, results):
            self.scores.append(flops_of(inp, res))
        if len(self.scores) < len(self.genes) or len(self.visited) >= len(self.space):
            return
        genes = self.genes + self.elites
        scores = np.array(self.scores[:len(self.genes)] + self.elite_scores, dtype=float)
        order = np.argsort(-scores, kind="stable")[:self.elite_num]
        self.elites = [list(genes[i]) for i in order]
        self.elite_scores = [float(scores[i]) for i in order]
        probs = scores + 1e-8
        probs /= probs.sum()
        children = []
        for _ in range(self.pop_size):
            if len(genes) > 1:
                a, b = self.rng.choice(len(genes), size=2, replace=False, p=probs)
            else:
                a = b = 0
            point = int(self.rng.integers(len(self.dims))) if len(self.dims) else 0
            children.append(list(genes[a][:point]) + list(genes[b][point:]))
        next_genes = []
        for gene in children:
            for j, d in enumerate(self.dims):
                if self.rng.random() < self.mutation_prob:
                    gene[j] = int(self.rng.integers(d))
            if len(self.visited) >= len(self.space):
                break
            while self._point(gene) in self.visited:
                j = int(self.rng.integers(len(self.dims)))
                gene[j] = int(self.rng.integers(self.dims[j]))
            self.visited.add(self._point(gene))
            next_genes.append(gene)
        self.genes = next_genes
        self.trial_pt = 0
        self.scores = []
