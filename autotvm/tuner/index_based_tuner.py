"""Tuners that walk config indices: grid search and random sampling."""

from __future__ import annotations

from .tuner import Tuner


class IndexBaseTuner(Tuner):
    """A tuner over the index range ``range_idx`` (inclusive ``(start, end)``; default: the
    whole space)."""

    def __init__(self, task, range_idx: tuple[int, int] | None = None, seed=None, **kwargs):
        super().__init__(task, seed=seed, **kwargs)
        n = len(self.space)
        start, end = range_idx if range_idx is not None else (0, n - 1)
        if not 0 <= start <= end < n:
            raise ValueError(f"range_idx {range_idx} is outside the space (len={n})")
        self.range_begin = start
        self.range_length = end - start + 1

    def has_next(self) -> bool:
        return len(self.visited) < self.range_length

    def _in_range(self, index: int) -> bool:
        return self.range_begin <= index < self.range_begin + self.range_length

    def _mark_logged(self, index: int) -> None:
        if self._in_range(index):
            self.visited.add(index)

    def _default_first(self) -> list:
        # the template's default is measured first only where it lies in the range: a
        # tuner given a range measures nothing outside it (and counts only what is inside)
        getter = getattr(self.task, "default_config", None)
        cfg = getter() if callable(getter) else None
        if cfg is None or not self._in_range(cfg.index):
            return []
        return super()._default_first()


class GridSearchTuner(IndexBaseTuner):
    """Configs in index order."""

    def __init__(self, task, range_idx=None, **kwargs):
        super().__init__(task, range_idx, **kwargs)
        self.counter = 0

    def next_batch(self, batch_size: int) -> list:
        out = []
        while len(out) < batch_size and self.counter < self.range_length:
            index = self.range_begin + self.counter
            self.counter += 1
            if index in self.visited:  # measured in an earlier run (load_history)
                continue
            self.visited.add(index)
            out.append(self.space.get(index))
        return out


class RandomTuner(IndexBaseTuner):
    """Configs drawn at random, never the same twice."""

    def next_batch(self, batch_size: int) -> list:
        out = []
        while len(out) < batch_size and self.has_next():
            left = self.range_length - len(self.visited)
            if left * 4 < self.range_length:
                # few left: draw among the unvisited directly instead of by rejection
                rest = [i for i in range(self.range_begin, self.range_begin + self.range_length)
                        if i not in self.visited]
                index = rest[int(self.rng.integers(len(rest)))]
            else:
                index = self.range_begin + int(self.rng.integers(self.range_length))
                while index in self.visited:
                    index = self.range_begin + int(self.rng.integers(self.range_length))
            self.visited.add(index)
            out.append(self.space.get(index))
        return out
