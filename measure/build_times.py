"""How long a candidate will take to build, estimated from the candidates of the same run
that came back: what a measure stream needs to start the slowest builds first.

Build times differ far more between sketches than between the candidates of one sketch
(BERT fp16 on the 16-core H200 machine: a ``tile`` or ``split_k`` sketch of a dense layer
builds in 0.6-1.0 s, median, its tensor-core sketches in 0.3 s, a softmax in 0.08 s), so
the estimate is the mean of the candidates of the same task and sketch; for a sketch not
seen yet, the task's mean scaled by how the sketch's rule (the sketch name up to its
``(``) compares with the mean of every candidate; then the rule's mean, the task's, and
the mean of everything. Times are a result's ``all_cost`` (its build plus its run, the
run being a few milliseconds beside the build).
"""

from __future__ import annotations

from dataclasses import dataclass, field


def sketch_of(inp) -> str | None:
    """The sketch name of a measure input's payload (``None`` without one)."""
    payload = getattr(inp, "payload", None)
    if isinstance(payload, dict):
        sketch = payload.get("sketch")
        if isinstance(sketch, str):
            return sketch
    return None


def rule_of(sketch: str | None) -> str | None:
    """The sketch rule of a sketch name: ``"tile(T_matmul_NT)"`` -> ``"tile"``."""
    return sketch.split("(", 1)[0] if sketch else None


@dataclass
class _Mean:
    total: float = 0.0
    count: int = 0

    def add(self, value: float) -> None:
        self.total += value
        self.count += 1

    @property
    def value(self) -> float | None:
        return self.total / self.count if self.count else None


@dataclass
class BuildTimes:
    """Running means of the build times that came back, by task and sketch, by sketch rule,
    by task and overall; :meth:`estimate` says how long a candidate not built yet will
    take (0 while nothing came back)."""

    _by_sketch: dict = field(default_factory=dict)
    _by_rule: dict = field(default_factory=dict)
    _by_task: dict = field(default_factory=dict)
    _all: _Mean = field(default_factory=_Mean)

    def add(self, inp, seconds: float) -> None:
        """A candidate (a :class:`~ptxforge.measure.MeasureInput`) took ``seconds``."""
        try:
            seconds = float(seconds)
        except (TypeError, ValueError):  # a result without a time
            return
        if not seconds >= 0.0:  # NaN or negative: no time either
            return
        task = inp.task.workload_key
        sketch = sketch_of(inp)
        self._by_sketch.setdefault((task, sketch), _Mean()).add(seconds)
        self._by_task.setdefault(task, _Mean()).add(seconds)
        rule = rule_of(sketch)
        if rule is not None:
            self._by_rule.setdefault(rule, _Mean()).add(seconds)
        self._all.add(seconds)

    @property
    def samples(self) -> int:
        """Build times added so far."""
        return self._all.count

    def estimate(self, inp) -> float:
        """The expected build time of ``inp`` in seconds."""
        task = inp.task.workload_key
        sketch = sketch_of(inp)
        exact = self._by_sketch.get((task, sketch))
        if exact is not None:
            return exact.value
        overall = self._all.value
        if overall is None:
            return 0.0
        by_task = self._by_task.get(task)
        by_rule = self._by_rule.get(rule_of(sketch))
        if by_task is not None and by_rule is not None and overall > 0.0:
            # the task's size times the sketch rule's cost relative to every other build
            return by_task.value * by_rule.value / overall
        if by_rule is not None:
            return by_rule.value
        if by_task is not None:
            return by_task.value
        return overall


__all__ = ["BuildTimes", "rule_of", "sketch_of"]
