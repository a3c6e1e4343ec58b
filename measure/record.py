"""Record files: one JSON object per line and per measurement, flushed as written.

A record holds the task's identity, the schedule as pass text, the tuner's payload and the
result. Files are only ever appended to, so a run that dies leaves at worst a truncated last
line, which :func:`load_records` skips with a warning (as it does any corrupt line), naming
the file and the line.

The task's module text is not stored (it is large and the tuner that reads a record knows
its task); a loaded record carries a :class:`TaskSpec` with an empty ``module_text``.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable, Iterator

from .result import MeasureErrorNo, MeasureInput, MeasureResult, TaskSpec

FORMAT_VERSION = 1


def encode(inp: MeasureInput, res: MeasureResult) -> str:
    """One record as a JSON line (without the newline)."""
    return json.dumps({"v": FORMAT_VERSION, "task": inp.task.to_json(),
                       "pipeline": inp.pipeline, "payload": inp.payload,
                       "result": res.to_json()}, separators=(",", ":"))


def decode(line: str) -> tuple[MeasureInput, MeasureResult]:
    """The inverse of :func:`encode`; ``ValueError`` (or ``KeyError``/``TypeError``) for a
    malformed line."""
    d = json.loads(line)
    if not isinstance(d, dict) or d.get("v") != FORMAT_VERSION:
        raise ValueError(f"not a version-{FORMAT_VERSION} record")
    t = d["task"]
    task = TaskSpec(workload_key=str(t["key"]), target=str(t["target"]), module_text="",
                    flop=float(t.get("flop", 0.0)), name=str(t.get("name", "")))
    payload = d.get("payload")
    if payload is not None and not isinstance(payload, dict):
        raise ValueError("the payload must be an object")
    return (MeasureInput(task, str(d["pipeline"]), payload),
            MeasureResult.from_json(d["result"]))


class RecordWriter:
    """A tuning callback ``(inputs, results)`` appending every measurement to ``path``."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        folder = os.path.dirname(self.path)
        if folder:
            os.makedirs(folder, exist_ok=True)

    def __call__(self, inputs, results) -> None:
        save_records(self.path, inputs, results)


def save_records(path: str | os.PathLike, inputs, results) -> None:
    """Append records to ``path``, each line flushed as it is written."""
    with open(path, "a") as f:
        for inp, res in zip(inputs, results):
            f.write(encode(inp, res) + "\n")
            f.flush()


def iter_records(path: str | os.PathLike) -> Iterator[tuple[MeasureInput, MeasureResult]]:
    """The records of ``path`` in file order, skipping (with a warning) lines that do not
    parse."""
    path = os.fspath(path)
    with open(path) as f:
        for n, line in enumerate(f, 1):
            text = line.strip()
            if not text:
                continue
            try:
                yield decode(text)
            except (ValueError, KeyError, TypeError) as e:
                what = "truncated" if not line.endswith("\n") else "corrupt"
                warnings.warn(f"{path}:{n}: skipping a {what} record ({type(e).__name__}: "
                              f"{e})", RuntimeWarning, stacklevel=2)


def load_records(path: str | os.PathLike) -> list[tuple[MeasureInput, MeasureResult]]:
    """Every readable record of ``path`` (see :func:`iter_records`)."""
    return list(iter_records(path))


def _records(source) -> Iterable:
    if isinstance(source, (str, os.PathLike)):
        return iter_records(source)
    return source


def best_records(source, key=None) -> dict:
    """The fastest successful record per workload key (and target): ``{(key, target):
    (input, result)}``. A measured result beats an estimated one (simulator runner), then
    the lowest mean cost wins. ``source`` is a path or an iterable of records; ``key``
    optionally maps a record to the grouping key instead."""
    best: dict = {}
    for inp, res in _records(source):
        if res.error_no != MeasureErrorNo.NO_ERROR:
            continue
        k = key(inp, res) if key else (inp.task.workload_key, inp.task.target)
        if k not in best or rank(res) < rank(best[k][1]):
            best[k] = (inp, res)
    return best


def rank(res: MeasureResult) -> tuple:
    """Sort key of successful results: measured before estimated, then by mean cost."""
    return (bool(res.estimated), res.mean)


def distill(in_path: str | os.PathLike, out_path: str | os.PathLike) -> int:
    """Write the best record per workload of ``in_path`` to ``out_path`` (replacing it);
    return how many were written."""
    best = best_records(in_path)
    tmp = os.fspath(out_path) + ".tmp"
    with open(tmp, "w") as f:
        for inp, res in best.values():
            f.write(encode(inp, res) + "\n")
    os.replace(tmp, out_path)
    return len(best)
