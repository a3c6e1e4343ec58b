"""inject_wgmma_sync: the asynchronous protocol around the wgmma nests of a kernel.

A *batch* is a statement whose tensorized nests are all wgmmas and which holds nothing else
that touches memory or registers (typically the unrolled k16 loop of one ``block_k`` step,
or a single wgmma nest). Each batch becomes::

    wgmma_fence            # the warpgroup's register accesses so far are ordered before
    <batch>                # the wgmmas (issued asynchronously)
    wgmma_commit           # one group per batch
    wgmma_wait(n)

and a ``fence_proxy_async`` makes the generic-proxy writes of the tiles (stores, and
cp.async copies landed by their wait) visible to the async proxy wgmma reads through: every
thread runs it after its writes and before the barrier that publishes them (the last
barrier before the batch in its sequence), or, without such a barrier, right before the
``wgmma_fence``.

with ``n = 0`` (the accumulators and tiles are free again when the batch is done), or, in
a loop annotated ``wgmma_in_flight = 1`` (the ``pragma`` of that name), ``n = 1``: the
batch of iteration ``i`` still runs while iteration ``i + 1`` waits for its tiles and issues
copies, and a ``wgmma_wait(0)`` after the loop drains it before the accumulators are read.
Overwriting a tile that a group still in flight reads is the schedule's to avoid (the
software pipeline then fetches ``stages - 2`` tiles ahead); the simulator checks it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.attrs import Level
from ...ir.intrin import ANNOTATION
from ...ir.stmt import (
    AsyncCopy,
    AsyncWait,
    Barrier,
    For,
    PrimFunc,
    Seq,
    Stmt,
    Store,
    WgmmaSync,
    stmt_children,
    walk,
)
from ...ir.traversal import replace_child
from ..base import Pass
from ..registry import register_pass
from .common import LoweringError, is_wgmma_loop

IN_FLIGHT = "wgmma_in_flight"
"""The loop annotation (a pragma) with the wgmma groups left running across iterations."""


def _is_batch(s: Stmt) -> bool:
    """Whether every tensorized nest under ``s`` is a wgmma and nothing else in it touches
    memory, registers or the other protocols."""
    found = False
    stack = [s]
    while stack:
        x = stack.pop()
        if is_wgmma_loop(x):
            found = True
            continue
        if isinstance(x, For) and ANNOTATION in x.annotations:
            return False
        if isinstance(x, (Store, AsyncCopy, AsyncWait, Barrier, WgmmaSync)):
            return False
        stack.extend(stmt_children(x))
    return found


def _has_wgmma(s: Stmt) -> bool:
    return any(is_wgmma_loop(x) for x in walk(s))


class _Injector:
    def __init__(self, func: PrimFunc):
        self.func = func

    def wrap(self, s: Stmt, pending: int) -> Stmt:
        return Seq([WgmmaSync("fence"), s, WgmmaSync("commit"), WgmmaSync("wait", pending)])

    def go(self, s: Stmt, pending: int) -> Stmt:
        if not _has_wgmma(s):
            return s
        if _is_batch(s):
            return self.wrap(s, pending)
        if isinstance(s, For):
            n = s.annotations.get(IN_FLIGHT)
            if n is not None:
                if n not in (0, 1):
                    raise LoweringError(
                        f"kernel {self.func.name}: loop {s.var.name} asks for {n} wgmma groups "
                        "in flight; 0 or 1 are supported", axis=s.var.name)
                body = self.go(s.body, int(n))
                return Seq([s.replace(body=body), WgmmaSync("wait", 0)]) if n else \
                    s.replace(body=body)
        out = s
        for c in stmt_children(s):
            nc = self.go(c, pending)
            if nc is not c:
                out = replace_child(out, c, nc)
        return out


def _fence_proxy(body: Stmt) -> Stmt:
    """``fence_proxy_async`` before the barrier that publishes each batch's tiles (the
    last barrier before its ``wgmma_fence`` in the same sequence: every thread fences its
    own writes, landed by the cp.async wait before that barrier), or right before the
    ``wgmma_fence`` where no barrier precedes it in its sequence."""
    covered: set = set()

    def fences(s: Stmt) -> list:
        """The batches ``s`` starts outside loops (a loop's body has its own barriers)."""
        out, stack = [], [s]
        while stack:
            x = stack.pop()
            if isinstance(x, WgmmaSync) and x.op == "fence":
                out.append(x)
            elif not isinstance(x, For):
                stack.extend(stmt_children(x))
        return out

    def seq(x):
        if not isinstance(x, Seq):
            return None
        out, changed = [], False
        for k, c in enumerate(x.stmts):
            if isinstance(c, Barrier):
                interval = []
                for d in x.stmts[k + 1:]:
                    if isinstance(d, Barrier):
                        break
                    interval += fences(d)
                if interval:
                    covered.update(id(f) for f in interval)
                    out.append(WgmmaSync("fence_proxy_async"))
                    changed = True
            out.append(c)
        return Seq(out) if changed else None

    from ...ir.stmt import map_stmt

    body = map_stmt(body, fstmt=seq)

    def rest(x):
        if not isinstance(x, Seq):
            return None
        out, changed = [], False
        for c in x.stmts:
            if isinstance(c, WgmmaSync) and c.op == "fence" and id(c) not in covered:
                out.append(WgmmaSync("fence_proxy_async"))
                changed = True
            out.append(c)
        return Seq(out) if changed else None

    return map_stmt(body, fstmt=rest)


def inject_wgmma_sync(func: PrimFunc) -> PrimFunc:
    if not any(is_wgmma_loop(x) for x in walk(func.body)):
        return func
    if any(isinstance(x, WgmmaSync) for x in walk(func.body)):
        return func  # already placed (by hand, or by an earlier run)
    body = _Injector(func).go(func.body, 0)
    return func.replace(body=_fence_proxy(body))


@register_pass
@dataclass(frozen=True)
class InjectWgmmaSync(Pass):
    """Place wgmma's fences, commit groups and waits around the wgmma nests of kernels (see
    the module's documentation)."""

    name = "inject_wgmma_sync"
    lowering = True
    levels = (Level.KERNEL,)

    def apply(self, module, ctx):
        return self.map_functions(module, inject_wgmma_sync)


__all__ = ["IN_FLIGHT", "InjectWgmmaSync", "inject_wgmma_sync"]
