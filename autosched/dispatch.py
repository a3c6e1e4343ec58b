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


class ApplyHistoryBest:
    """The best record per workload key of ``records``, applied when networks are built.

    ``records``: a record file, a list of record files, or an iterable of
    ``(MeasureInput, MeasureResult)`` pairs. A measured result beats an estimated one (from
    the simulator runner), then the lowest mean cost wins; failed measurements are ignored.

    Attributes:
        best: ``{workload_key: (MeasureInput, MeasureResult)}``.
        applied: ``{workload_key: pipeline text}`` of the schedules this context handed
            out, in the order they were asked for.
    """

    def __init__(self, records):
        self.best: dict = {}
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
        for inp, res in pairs:
            if int(res.error_no) != 0:
                continue
            key = inp.task.workload_key
            old = self.best.get(key)
            if old is None or rank(res) < rank(old[1]):
                self.best[key] = (inp, res)

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
        pipeline no longer applies to the function is reported with a warning and treated
        as missing."""
        from ..ir.compute_dag import ComputeDAG
        from .printer import schedule_from_pipeline
        from .search_task import SearchTask

        key = func.workload_key
        got = self.query(key)
        if got is None:
            return None
        inp, _ = got
        task = SearchTask(compute_dag=ComputeDAG(func.build_tensors()), workload_key=key,
                          desc=getattr(func, "name", ""))
        try:
            sch = schedule_from_pipeline(task, inp.pipeline)
        except Exception as e:  # noqa: BLE001 - any failure means the record is unusable
            warnings.warn(f"{getattr(func, 'name', key)}: the best record's schedule does not "
                          f"apply ({type(e).__name__}: {e}); ignoring it", RuntimeWarning,
                          stacklevel=2)
            return None
        self.applied[key] = inp.pipeline
        return sch, list(task.tensors)

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
