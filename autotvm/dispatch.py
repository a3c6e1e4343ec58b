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

from ..target import TargetError, as_target
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
    """The key configs are recorded and looked up under: the target's kind, ``"cuda"`` for
    every architecture and for the simulator (templates query ``"cuda"``)."""
    if target is None:
        return DEFAULT_TARGET
    try:
        return as_target(target).record_spec.split()[0]
    except TargetError:
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

    def query_all(self, target, workload) -> list:
        """The recorded configs to try for ``workload`` on ``target``, best first: this
        context's, then its parent's (empty when there are none: :meth:`query` then gives
        the fallback config). A template tries them in turn until one fits
        (:class:`~ptxforge.autotvm.task.TemplateFunction`)."""
        own = self._query_all_inside(_target_name(target), workload)
        return own + (self._old or _ROOT).query_all(target, workload)

    def _query_all_inside(self, target: str, workload) -> list:
        got = self._query_inside(target, workload)
        return [] if got is None else [got]

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

    def query_all(self, target, workload) -> list:
        # while tuning, a config that does not fit is an error, never replaced
        return [self._query_inside(_target_name(target), workload)]


class ApplyHistoryBest(DispatchContext):
    """Answer with the best recorded config per workload and target.

    ``records``: a record file path, a list of paths, or an iterable of ``(input, result)``
    pairs (``ptxforge.autotvm.record.load_from_file``). Records are ranked by the one rule
    of :func:`ptxforge.measure.record.rank` (measured results beat estimated ones from the
    simulator runner, then the lowest mean cost wins). A template whose best config no
    longer fits tries the next best (:meth:`query_all`). Unknown workloads fall through to
    the enclosing context (by default: a fallback config with a warning).
    """

    MAX_TRIED = 10
    """Recorded configs per workload a template tries before the enclosing context's."""

    def __init__(self, records):
        super().__init__()
        self.best_by_workload: dict = {}
        self.best_results: dict = {}
        self.ranked: dict = {}  # (target, workload key) -> [(rank, config, result)], best first
        self.load(records)

    def load(self, records) -> None:
        """Add records (see the class docstring)."""
        from ..measure.record import rank
        from .record import decode, load_from_file

        if isinstance(records, (str, os.PathLike)):
            records = [records]
        pairs: Iterable = []
        if isinstance(records, list) and all(isinstance(r, (str, os.PathLike)) for r in records):
            pairs = [p for path in records for p in load_from_file(path)]
        else:
            pairs = records
        n = 0
        touched = set()
        for inp, res in pairs:
            n += 1
            if not hasattr(inp, "config"):  # a raw record of the measure layer
                try:
                    got = decode(inp, res)
                except ValueError as e:
                    warnings.warn(f"skipping a record: {e}", RuntimeWarning, stacklevel=2)
                    continue
                if got is None:
                    continue
                inp, res = got
            if res.error_no:
                continue
            key = (_target_name(inp.target), workload_key(inp.task.workload))
            self.ranked.setdefault(key, []).append((rank(res), inp.config, res))
            touched.add(key)
        for key in touched:
            self.ranked[key].sort(key=lambda r: r[0])
            _, self.best_by_workload[key], self.best_results[key] = self.ranked[key][0]
        self.n_records = getattr(self, "n_records", 0) + n

    def _query_inside(self, target: str, workload):
        if workload is None:
            return None
        return self.best_by_workload.get((target, workload_key(workload)))

    def _query_all_inside(self, target: str, workload) -> list:
        if workload is None:
            return []
        got = self.ranked.get((target, workload_key(workload)), ())
        return [cfg for _, cfg, _ in got[: self.MAX_TRIED]]

    def update(self, target, workload, config: ConfigEntity, result) -> None:
        """Remember ``config`` as the best for ``workload`` (if it is)."""
        from ..measure.record import rank

        key = (_target_name(target), workload_key(workload))
        ranked = self.ranked.setdefault(key, [])
        ranked.append((rank(result), config, result))
        ranked.sort(key=lambda r: r[0])
        _, self.best_by_workload[key], self.best_results[key] = ranked[0]


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

    def query_all(self, target, workload) -> list:
        return []


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
