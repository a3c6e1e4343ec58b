"""Workloads by name: ``@register_workload`` functions that return a computation's tensors,
and workload keys (``["conv2d_layer", 1, 7, 7, ...]``) that rebuild them, so a record file
names its task and another process can recreate it."""

from __future__ import annotations

import json
from collections.abc import Callable

WORKLOADS: dict = {}


def register_workload(func_or_name=None, f: Callable | None = None, override: bool = False):
    """Register a function returning a workload's tensors (inputs then outputs).

    Use as ``@register_workload`` or ``@register_workload("name")``. Registering another
    function under a taken name raises unless ``override``.
    """
    def register(fn: Callable, name: str) -> Callable:
        old = WORKLOADS.get(name)
        if old is not None and old is not fn and not override and \
                getattr(old, "__code__", None) is not getattr(fn, "__code__", None):
            raise ValueError(f"workload {name!r} is already registered "
                             f"({old.__module__}.{old.__qualname__}); pass override=True")
        WORKLOADS[name] = fn
        return fn

    if callable(func_or_name):
        return register(func_or_name, func_or_name.__name__)
    if f is not None:
        return register(f, func_or_name or f.__name__)

    def deco(fn):
        return register(fn, func_or_name or fn.__name__)

    return deco


def _jsonable(x):
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (bool, int, float, str)) or x is None:
        return x
    if hasattr(x, "item"):
        return x.item()
    raise TypeError(f"workload argument {x!r} is not a number, string or list of those")


def _tuples(x):
    return tuple(_tuples(v) for v in x) if isinstance(x, list) else x


def make_workload_key(func, args) -> str:
    """The key of ``func(*args)``: JSON of the registered name and the arguments."""
    name = func if isinstance(func, str) else getattr(func, "__name__", None)
    if name is None:
        raise TypeError(f"expected a workload function or its registered name, got {func!r}")
    return json.dumps([name] + _jsonable(list(args)))


def decode_workload_key(key: str) -> tuple:
    """``(name, args)`` of a key made by :func:`make_workload_key` (lists become tuples)."""
    try:
        obj = json.loads(key)
    except (TypeError, ValueError) as e:
        raise ValueError(f"workload key {key!r} is not JSON") from e
    if not isinstance(obj, list) or not obj or not isinstance(obj[0], str):
        raise ValueError(f"workload key {key!r} is not of the form [name, args...]")
    return obj[0], tuple(_tuples(a) for a in obj[1:])


def workload_tensors(key: str) -> list:
    """The tensors of the registered workload a key names."""
    name, args = decode_workload_key(key)
    if name not in WORKLOADS:
        raise KeyError(
            f"workload {name!r} is not registered in this process; import the module that "
            f"defines it (decorated with @register_workload) first. Registered: "
            f"{', '.join(sorted(WORKLOADS)) or 'none'}")
    return list(WORKLOADS[name](*args))
