"""Simulated annealing over a config space, guided by a cost model."""

from __future__ import annotations

import heapq
import logging
import time

import numpy as np

logger = logging.getLogger("autotvm")


class SimulatedAnnealingOptimizer:
    """Find the configs a model scores highest.

    ``parallel_size`` walkers start at random configs (or where the last search ended, with
    ``persistent``) and each step moves every walker to a neighbour (one knob changed),
    accepting a worse one with probability ``exp((new - old) / t)``; the temperature falls
    linearly over ``n_iter`` steps from ``temp[0]`` to ``temp[1]``. The search stops after
    ``early_stop`` steps without a new entry in the top list.
    """

    def __init__(self, space, n_iter: int = 500, temp=(1, 0), persistent: bool = True,
                 parallel_size: int = 128, early_stop: int = 50, log_interval: int = 50,
                 rng: np.random.Generator | None = None):
        self.space = space
        self.dims = np.array(space.dims, dtype=np.int64)
        if len(space) >= 2**62:
            raise ValueError(f"the config space has {len(space)} points; simulated annealing "
                             "indexes configs with 64-bit integers")
        self.n_iter = n_iter
        self.temp = temp
        self.persistent = persistent
        self.parallel_size = min(parallel_size, len(space))
        self.early_stop = early_stop or 10**9
        self.log_interval = log_interval
        self.rng = rng or np.random.default_rng()
        self.points: np.ndarray | None = None
        self._movable = np.nonzero(self.dims > 1)[0]

    def random_points(self, n: int) -> np.ndarray:
        return self.rng.integers(0, len(self.space), size=n, dtype=np.int64)

    def neighbours(self, points: np.ndarray) -> np.ndarray:
        """Each point with one randomly chosen knob moved to another random value."""
        if len(self._movable) == 0:
            return points.copy()
        p = points.copy()
        knobs = np.empty((len(p), len(self.dims)), dtype=np.int64)
        for j, d in enumerate(self.dims):
            knobs[:, j] = p % d
            p //= d
        rows = np.arange(len(points))
        which = self._movable[self.rng.integers(0, len(self._movable), size=len(points))]
        size = self.dims[which]
        cur = knobs[rows, which]
        r = self.rng.integers(0, size - 1)
        knobs[rows, which] = r + (r >= cur)
        out = np.zeros(len(points), dtype=np.int64)
        stride = 1
        for j, d in enumerate(self.dims):
            out += knobs[:, j] * stride
            stride *= int(d)
        return out

    def find_maximums(self, model, num: int, exclusive) -> list[int]:
        """Up to ``num`` config indices not in ``exclusive`` with the highest scores."""
        tic = time.time()
        if self.persistent and self.points is not None:
            points = self.points
        else:
            points = self.random_points(self.parallel_size)
        scores = model.predict(points)
        heap = [(float("-inf"), -1 - i) for i in range(num)]
        heapq.heapify(heap)
        in_heap = set(int(x) for x in exclusive) | {x[1] for x in heap}

        def offer(s: float, p: int) -> bool:
            if s > heap[0][0] and p not in in_heap:
                old = heapq.heapreplace(heap, (s, p))
                in_heap.discard(old[1])
                in_heap.add(p)
                return True
            return False

        for s, p in zip(scores, points):
            offer(float(s), int(p))
        t0, t1 = (self.temp if isinstance(self.temp, (tuple, list)) else (self.temp,
                                                                             self.temp))
        cool = (t0 - t1) / (self.n_iter + 1)
        t = t0
        k = last = 0
        while k < self.n_iter and k < last + self.early_stop:
            new_points = self.neighbours(points)
            new_scores = model.predict(new_points)
            accept = np.exp(np.minimum((new_scores - scores) / (t + 1e-5), 1.0))
            take = self.rng.random(len(accept)) < accept
            points = np.where(take, new_points, points)
            scores = np.where(take, new_scores, scores)
            for s, p in zip(new_scores, new_points):
                if offer(float(s), int(p)):
                    last = k
            k += 1
            t -= cool
            if self.log_interval and k % self.log_interval == 0:
                logger.debug("SA iter: %d\tlast_update: %d\tmax-0: %.2f\tmax-1: %.2f\telapsed:"
                             " %.2f", k, last, heap[-1][0] if heap else 0,
                             max(x[0] for x in heap), time.time() - tic)
        heap.sort(key=lambda x: -x[0])
        found = [p for s, p in heap if p >= 0 and s > float("-inf")]
        logger.debug("SA iter: %d\tlast_update: %d\telapsed: %.2f", k, last, time.time() - tic)
        if self.persistent:
            self.points = points
        return found
