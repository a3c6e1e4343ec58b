"""AutoTVM's view of record files (the format of :mod:`ptxforge.measure.record`).

An AutoTVM record's payload holds the template name, its arguments and the config, so a
record turns back into a :class:`~ptxforge.autotvm.task.MeasureInput` without the tuner
that made it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from ..measure import record as raw
from ..measure.result import MeasureResult
from .space import ConfigEntity
from .task import MeasureInput, Task, _as_args


def decode(inp, res) -> tuple[MeasureInput, MeasureResult] | None:
    """An AutoTVM input for a raw record (None when the record is not AutoTVM's);
    ``ValueError`` for a malformed AutoTVM payload."""
    a = (inp.payload or {}).get("autotvm")
    if a is None:
        return None
    try:
        if not isinstance(a, dict):
            raise TypeError("the payload's 'autotvm' must be an object")
        if not isinstance(a["template"], str) or not isinstance(a["args"], list):
            raise TypeError("'template' must be a string and 'args' a list")
        if not isinstance(a["config"], dict) or not isinstance(a["config"]["entity"], list):
            raise TypeError("'config' must be an object with an 'entity' list")
        if not isinstance(a["config"]["index"], int):
            raise TypeError("the config's 'index' must be an integer")
        task = Task(a["template"], _as_args(a["args"]), inp.task.target)
        config = ConfigEntity.from_json_dict(a["config"])
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
        raise ValueError(f"a malformed AutoTVM payload ({type(e).__name__}: {e})") from None
    task.flop = inp.task.flop
    return MeasureInput(inp.task.target, task, config, inp.pipeline_text), res


def load_from_file(path: str | os.PathLike) -> Iterator[tuple[MeasureInput, MeasureResult]]:
    """The AutoTVM records of ``path``; any line that is not a well-formed record (or whose
    AutoTVM payload is malformed) is skipped with a warning naming the file and line."""
    tasks: dict = {}
    for n, inp, res in raw.iter_numbered(path):
        try:
            got = decode(inp, res)
        except ValueError as e:
            raw.skip_line(os.fspath(path), n, "a corrupt record", str(e))
            continue
        if got is None:
            continue
        ainp, res = got
        key = (ainp.task.name, repr(ainp.task.args), ainp.target)
        task = tasks.setdefault(key, ainp.task)
        yield MeasureInput(ainp.target, task, ainp.config, ainp.pipeline_text), res


def save(path: str | os.PathLike, inputs, results) -> None:
    """Append AutoTVM inputs and their results to a record file."""
    raw.save_records(path, [i.to_measure() for i in inputs], results)


def pick_best(in_file: str | os.PathLike, out_file: str | os.PathLike) -> int:
    """Keep the best record per workload (``python -m ptxforge.measure distill`` does the
    same)."""
    return raw.distill(in_file, out_file)
