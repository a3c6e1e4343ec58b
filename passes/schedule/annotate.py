"""Shared body of bind, unroll, vectorize and pragma: change a loop's kind or annotations."""

from __future__ import annotations

from ...ir.stmt import PrimFunc
from ...ir.traversal import replace_at
from .common import ScheduleError, find_loop


def set_loop(func: PrimFunc, loop: str, kind: str | None = None, thread: str = "",
             annotations: dict | None = None, what: str = "") -> PrimFunc:
    path, _ = find_loop(func, loop)
    node = path[-1]
    if kind is not None and node.kind != "serial" and node.kind != kind:
        raise ScheduleError(f"{what} {loop}: the loop is already {node.kind}")
    ann = dict(node.annotations)
    if annotations:
        ann.update(annotations)
    new = node.replace(kind=kind or node.kind, thread=thread if kind else node.thread,
                       annotations=ann)
    return func.replace(body=replace_at(path, new))
