"""Which config a template gets: dispatch contexts.

Calling a template function asks the innermost dispatch context for the config of its
workload: :class:`ApplyConfig` answers with one fixed config (used while tuning),
:class:`ApplyHistoryBest` with the best config recorded for the workload, and the root
:class:`FallbackContext` with a default config (every knob at its first candidate) and a
warning. Inside the template, :func:`get_config` returns that config.
"""

from __future__ import annotations

import abc
import json
import os
import threading
import warnings
from collections.abc import Iterable

from .space import ConfigEntity, ConfigSpace, FallbackConfigEntity

DEFAULT_TARGET = "cuda"


def workload_key(workload) -> str:
    """The string key of a workload tuple ``(template name, *args)`` (JSON, tuples as
    lists), as record files store it."""
    if isinstance(workload, str):
        return workload
    return json.dumps(_jsonable(workload), separators=(",", ":"))


def _jsonable(x):
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if hasattr(x, "item") and callable(x.item):  # numpy scalars
        return x.item()
    if isinstance(x, (int, float, str, bool)) or x is None:
        return x
    raise TypeError(f"template arguments must be numbers, strings or tuples of them; got "
                    f"{type(x).__name__} ({x!r})")


def _target_name(target) -> str:
    if target is None:
        return DEFAULT_TARGET
    return str(getattr(target, "kind", target))


class DispatchContext(abc.ABC):
    """Base class of the contexts; use them as ``with`` blocks (they nest)."""

    _local = threading.local()

    def __init__(self):
        self._old = None

    @classmethod
    def current(cls) -> DispatchContext:
        """The innermost active context (the fallback context when none is)."""
        cur = getattr(cls._local, "current", None)
        if cur is None:
            cur = cls._local.current = _ROOT
        return cur

    def query(self, target, workload):
        """The config for ``workload`` on ``target``: this context's answer, else its
        parent's."""
        ret = self._query_inside(_target_name(target), workload)
        if ret is None:
            ret = (self._old or _ROOT).query(target, workload)
        return ret

    @abc.abstractmethod
    def _query_inside(self, target: str, workload):
        """This context's own config for ``workload`` on ``target``, or None."""

    def __enter__(self):
        self._old = DispatchContext.current()
        DispatchContext._local.current = self
        return self

    def __exit__(self, *exc) -> None:
        DispatchContext._local.current = self._old


class ApplyConfig(DispatchContext):
    """Every query gets ``config`` (how a tuner instantiates a template)."""

    def __init__(self, config):
        super().__init__()
        self._config = config
        self.workload = None

    def _query_inside(self, target: str, workload):
        if workload is not None:
            self.workload = workload
        return self._config


class ApplyHistoryBest(DispatchContext):
    """Answer with the best recorded config per workload and target.

    ``records``: a record file path, a list of paths, or an iterable of ``(input, result)``
    pairs (``ptxforge.autotvm.record.load_from_file``). Measured results beat estimated
    ones (from the simulator runner); among equals the lowest mean cost wins. Unknown
    workloads fall through to the enclosing context (by default: a fallback config with a
    warning).
    """

    def __init__(self, records):
        super().__init__()
        self.best_by_workload: dict = {}
        self.best_results: dict = {}
        self.load(records)

    def load(self, records) -> None:
        """Add records (see the class docstring)."""
        from .record import decode, load_from_file

        if isinstance(records, (str, os.PathLike)):
            records = [records]
        pairs: Iterable = []
        if isinstance(records, list) and all(isinstance(r, (str, os.PathLike)) for r in records):
            pairs = [p for path in records for p in load_from_file(path)]
        else:
            pairs = records
        n = 0
        for inp, res in pairs:
            n += 1
            if not hasattr(inp, "config"):  # a raw record of the measure layer
                got = decode(inp, res)
                if got is None:
                    continue
                inp, res = got
            if res.error_no:
                continue
            key = (_target_name(inp.target), workload_key(inp.task.workload))
            rank = (bool(res.estimated), res.mean)
            old = self.best_results.get(key)
            if old is None or rank < (bool(old.estimated), old.mean):
                self.best_by_workload[key] = inp.config
                self.best_results[key] = res
        self.n_records = getattr(self, "n_records", 0) + n

    def _query_inside(self, target: str, workload):
        if workload is None:
            return None
        return self.best_by_workload.get((target, workload_key(workload)))

    def update(self, target, workload, config: ConfigEntity, result) -> None:
        """Remember ``config`` as the best for ``workload`` (if it is)."""
        key = (_target_name(target), workload_key(workload))
        old = self.best_results.get(key)
        if old is None or (bool(result.estimated), result.mean) < (bool(old.estimated),
                                                                   old.mean):
            self.best_by_workload[key] = config
            self.best_results[key] = result


class FallbackContext(DispatchContext):
    """The root context: a default config (first candidate of every knob) per workload,
    with a warning the first time a workload asks."""

    def __init__(self):
        super().__init__()
        self.memory: dict = {}
        self.silent = False

    def _query_inside(self, target: str, workload):
        key = (target, workload_key(workload) if workload is not None else None)
        if key in self.memory:
            return self.memory[key]
        if not self.silent and workload is not None:
            warnings.warn(
                f"Cannot find a tuned config for target={target}, workload={workload!r}. A "
                "fallback configuration is used, which may be much slower: tune the workload "
                "and apply its records with autotvm.apply_history_best(log_file).",
                RuntimeWarning, stacklevel=4)
        cfg = FallbackConfigEntity()
        self.memory[key] = cfg
        return cfg

    def clear_cache(self, target, workload) -> None:
        self.memory.pop((_target_name(target), workload_key(workload)), None)

    def query(self, target, workload):
        return self._query_inside(_target_name(target), workload)


_ROOT = FallbackContext()


def get_config():
    """The config of the template being instantiated (see the module docstring)."""
    return DispatchContext.current().query(None, None)


def apply_history_best(records) -> ApplyHistoryBest:
    """``with autotvm.apply_history_best("conv2d.log"):`` templates called inside get their
    best recorded config; ``.query(target, workload)`` looks one up."""
    return ApplyHistoryBest(records)


__all__ = ["ApplyConfig", "ApplyHistoryBest", "ConfigSpace", "DispatchContext",
           "FallbackContext", "apply_history_best", "get_config", "workload_key"]
