"""``ApplyHistoryBest``: compile a network with the best schedules of a record file.

Inside ``with autosched.ApplyHistoryBest(log_file):``, :func:`ptxforge.graph.build` asks the
context for the schedule of each distinct fused function (by workload key, as
:func:`~ptxforge.autosched.relay_integration.extract_tasks` made the tasks): the best
record's pass pipeline, applied to the function's tensors. A function without a record gets
its default schedule, with ``graph.build``'s ``NoTuningRecordWarning``. The context's
:meth:`ApplyHistoryBest.schedule_fn` can also be passed explicitly:
``graph.build(net, "cuda", params, schedule_fn=ctx.schedule_fn)``.

Contexts nest: a key the innermost context has no record of is looked up in the enclosing
one.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable, Iterable

_local = threading.local()

MAX_TRIED = 10
"""Records of one workload tried, best first, before a function gets no record."""


class ApplyHistoryBest:
    """The best record per workload key of ``records``, applied when networks are built.

    ``records``: a record file, a list of record files, or an iterable of
    ``(MeasureInput, MeasureResult)`` pairs. Records are ranked by the one rule of
    :func:`ptxforge.measure.record.rank` (a measured result beats an estimated one from the
    simulator runner, then the lowest mean cost wins); failed measurements are ignored. When
    the best record's schedule no longer applies to a function, the next best is used.

    Attributes:
        best: ``{workload_key: (MeasureInput, MeasureResult)}``.
        ranked: ``{workload_key: [(MeasureInput, MeasureResult), ...]}``, best first.
        applied: ``{workload_key: pipeline text}`` of the schedules this context handed
            out, in the order they were asked for.
    """

    def __init__(self, records):
        self.best: dict = {}
        self.ranked: dict = {}
        self.applied: dict[str, str] = {}
        self._outer: ApplyHistoryBest | None = None
        self.load(records)

    def load(self, records) -> None:
        """Add records (a path, a list of paths, or ``(input, result)`` pairs)."""
        from ..measure import load_records
        from ..measure.record import rank

        if isinstance(records, (str, os.PathLike)):
            records = [records]
        records = list(records)
        pairs: Iterable
        if all(isinstance(r, (str, os.PathLike)) for r in records):
            missing = [os.fspath(r) for r in records if not os.path.exists(r)]
            if missing:
                raise FileNotFoundError(f"no record file {', '.join(missing)}; tune first "
                                        "(TaskScheduler.tune with RecordToFile)")
            pairs = [p for path in records for p in load_records(path)]
        else:
            pairs = records
        touched = set()
        for inp, res in pairs:
            if int(res.error_no) != 0:
                continue
            key = inp.task.workload_key
            self.ranked.setdefault(key, []).append((inp, res))
            touched.add(key)
        for key in touched:
            self.ranked[key].sort(key=lambda p: rank(p[1]))
            self.best[key] = self.ranked[key][0]

    def query_ranked(self, workload_key: str) -> list:
        """Every successful record of ``workload_key``, best first: this context's, then
        an enclosing one's."""
        got = list(self.ranked.get(workload_key, ()))
        if self._outer is not None:
            got += self._outer.query_ranked(workload_key)
        return got

    def query(self, workload_key: str) -> tuple | None:
        """``(MeasureInput, MeasureResult)`` of the best record of ``workload_key`` here or
        in an enclosing context; None if there is none."""
        got = self.best.get(workload_key)
        if got is None and self._outer is not None:
            return self._outer.query(workload_key)
        return got

    def schedule_fn(self, func) -> tuple | None:
        """``(Schedule, args)`` of a fused function (a
        :class:`ptxforge.graph.FusedFunction`) from its best record, or None when there is
        none (``graph.build`` then uses the default schedule and warns). A record whose
        pipeline no longer applies to the function is reported with a warning and the next
        best is tried; with none left, the function is treated as having no record."""
        from ..ir.compute_dag import ComputeDAG
        from ..passes.lower.check_coverage import check_coverage
        from .printer import schedule_from_pipeline
        from .search_task import SearchTask

        key = func.workload_key
        ranked = self.query_ranked(key)[:MAX_TRIED]
        if not ranked:
            return None
        # the tensors the function's key was hashed from (a FusedFunction lowers its
        # graph to te once), not a second lowering
        tensors = getattr(func, "tensors", None)
        tensors = list(tensors) if tensors is not None else func.build_tensors()
        task = SearchTask(compute_dag=ComputeDAG(tensors), workload_key=key,
                          desc=getattr(func, "name", ""))
        name = getattr(func, "name", key)
        for n, (inp, _) in enumerate(ranked):
            try:
                sch = schedule_from_pipeline(task, inp.pipeline_text)
                # records are not re-measured here: one whose schedule cannot compute each
                # output once (claiming a tiny cost, say) is refused like one that does not
                # apply
                check_coverage(sch.module.main)
            except Exception as e:  # noqa: BLE001 - any failure means the record is unusable
                then = ("trying the next best" if n + 1 < len(ranked)
                        else "no record is left; ignoring them")
                warnings.warn(f"{name}: the {'best' if n == 0 else f'#{n + 1}'} record's "
                              f"schedule does not apply ({type(e).__name__}: {e}); {then}",
                              RuntimeWarning, stacklevel=2)
                continue
            self.applied[key] = inp.pipeline_text
            return sch, list(task.tensors)
        return None

    def __enter__(self) -> ApplyHistoryBest:
        self._outer = current()
        _local.current = self
        return self

    def __exit__(self, *exc) -> None:
        _local.current = self._outer
        self._outer = None

    def __repr__(self):
        return f"ApplyHistoryBest({len(self.best)} workloads)"


def current() -> ApplyHistoryBest | None:
    """The innermost active :class:`ApplyHistoryBest` of this thread, or None."""
    return getattr(_local, "current", None)


def current_schedule_fn() -> Callable | None:
    """The ``schedule_fn`` of the active context (what ``graph.build`` uses when it is given
    none), or None outside any context."""
    ctx = current()
    return ctx.schedule_fn if ctx is not None else None


__all__ = ["ApplyHistoryBest", "current", "current_schedule_fn"]
