"""Reading auto-scheduler records (the measure layer's JSON-lines files)."""

from __future__ import annotations

import os

import numpy as np

from ..target import Target, as_target
from .state import state_from_payload


class RecordToFile:
    """A measure callback appending every measurement to ``filename`` (JSON lines) as it
    arrives, with an ``fsync`` per round (a :class:`~ptxforge.measure.RecordWriter`: a
    second process writing the same file raises
    :class:`~ptxforge.measure.record.RecordFileBusy`)."""

    def __init__(self, filename: str = "auto_scheduler_tuning.json"):
        from ..measure import RecordWriter

        self.filename = os.fspath(filename)
        self._writer = RecordWriter(self.filename)

    def on_result(self, inp, res) -> None:
        """Write one record now (the tuning loops call this as each result arrives)."""
        self._writer.on_result(inp, res)

    def __call__(self, inputs, results) -> None:
        self._writer(inputs, results)

    @property
    def count(self) -> int:
        """Records written so far."""
        return self._writer.count

    def close(self) -> None:
        """Give up the file (see :meth:`ptxforge.measure.RecordWriter.close`)."""
        self._writer.close()

    def __repr__(self):
        return f"RecordToFile({self.filename!r})"


def load_records(filename: str, workload_key: str | None = None) -> list:
    """``[(MeasureInput, MeasureResult)]`` of ``filename``, only those of
    ``workload_key`` when given."""
    from ..measure import load_records as _load

    recs = _load(filename)
    if workload_key is None:
        return recs
    return [(i, r) for i, r in recs if i.task.workload_key == workload_key]


def load_best_record(filename: str, workload_key: str | None = None,
                     target: Target | str | None = None) -> tuple:
    """``(MeasureInput, MeasureResult)`` of the best successful record (of
    ``workload_key`` and ``target`` when given: a string or a Target, matched by its
    record string, so ``"sim"`` finds the ``"cuda"`` records) by the one rule of
    :func:`ptxforge.measure.record.rank` (a GPU measurement beats an estimate, then the
    lowest mean cost); ``(None, None)`` when there is none."""
    from ..measure.record import rank

    if target is not None:
        target = as_target(target).record_spec

    best = (None, None)
    for inp, res in load_records(filename, workload_key):
        if int(res.error_no) != 0:
            continue
        if target is not None and inp.task.target != target:
            continue
        if best[1] is None or rank(res) < rank(best[1]):
            best = (inp, res)
    return best


def records_of_task(task, filename: str) -> list:
    """The ``(input, result)`` records of ``task`` in ``filename`` (none when the file does
    not exist yet: a run that starts its log)."""
    if not os.path.exists(filename):
        return []
    return load_records(filename, task.workload_key)


def state_rows(task, records) -> tuple:
    """``(population rows, results)`` of those of ``records`` (``(input, result)`` pairs of
    ``task``) whose payload is a state of one of its sketches."""
    rows, results = [], []
    for inp, res in records:
        st = state_from_payload(task, inp.payload)
        if st is not None:
            rows.append(st.row(task.state_width))
            results.append(res)
    if not rows:
        return np.zeros((0, task.state_width), dtype=np.int64), []
    return np.array(rows), results
