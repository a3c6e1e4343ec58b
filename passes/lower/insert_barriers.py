"""insert_barriers: ``__syncthreads()`` between shared-memory writes and reads of
different phases, including across iterations of the loops that hold them."""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.attrs import Level
from ...ir.expr import Load
from ...ir.stmt import (
    AsyncCopy,
    Barrier,
    For,
    If,
    PrimFunc,
    Seq,
    Stmt,
    Store,
    stmt_children,
    stmt_exprs,
)
from ...ir.traversal import replace_child, walk_exprs
from ..base import Pass
from ..registry import register_pass


class _SharedAccess:
    """(shared buffers written, shared buffers read) anywhere in a statement, memoized per
    node: every sequence of a nest asks about its children, whose answers are its own
    children's (a rebuilt sequence shares them), so each node is looked at once."""

    def __init__(self):
        self._memo: dict[int, tuple[Stmt, frozenset, frozenset]] = {}

    def __call__(self, s: Stmt) -> tuple:
        hit = self._memo.get(id(s))
        if hit is not None:
            return hit[1], hit[2]
        w, r = set(), set()
        if isinstance(s, Store) and s.buffer.scope == "shared":
            w.add(s.buffer)
        elif isinstance(s, AsyncCopy):
            w.add(s.dst)  # lands by the wait before the reads, which this barrier follows
        for e in stmt_exprs(s):
            r.update(y.buffer for y in walk_exprs(e)
                     if isinstance(y, Load) and y.buffer.scope == "shared")
        for c in stmt_children(s):
            cw, cr = self(c)
            w |= cw
            r |= cr
        out = (s, frozenset(w), frozenset(r))
        self._memo[id(s)] = out
        return out[1], out[2]


def insert_barriers(func: PrimFunc) -> PrimFunc:
    return func.replace(body=_go(func.body, _SharedAccess()))


def _conflict(pw, pr, w, r) -> bool:
    # read-after-write and write-after-read between different threads; a cooperative fetch
    # writes each element once, so write-after-write needs no barrier
    return bool((pw & r) or (pr & w))


def _sync_seq(stmts: list, loop_carried: bool, rw: _SharedAccess) -> list:
    """Insert barriers between children of a sequence (run twice for loop bodies)."""
    info = [rw(s) for s in stmts]

    def run(pw, pr, emit):
        out = []
        for s, (w, r) in zip(stmts, info):
            if _starts_with_barrier(s):
                pw, pr = set(), set()
            if (w or r) and _conflict(pw, pr, w, r):
                if emit:
                    out.append(Barrier())
                pw, pr = set(), set()
            out.append(s)
            pw, pr = pw | w, pr | r
        return out, pw, pr

    pw, pr = set(), set()
    if loop_carried:
        _, pw, pr = run(set(), set(), False)
    out, _, _ = run(pw, pr, True)
    return out


def _starts_with_barrier(s: Stmt) -> bool:
    """Whether every path into ``s`` meets a barrier before any shared access."""
    while True:
        if isinstance(s, Barrier):
            return True
        if isinstance(s, Seq):
            if not s.stmts:
                return False
            s = s.stmts[0]
        elif isinstance(s, For) and s.kind != "thread":
            s = s.body
        else:
            return False


def _go(s: Stmt, rw: _SharedAccess, in_loop: bool = False) -> Stmt:
    if isinstance(s, Seq):
        kids = [_go(c, rw) for c in s.stmts]
        return Seq(_sync_seq(kids, in_loop, rw))
    if isinstance(s, For) and s.kind != "thread":
        body = s.body
        if not isinstance(body, Seq):
            body = Seq([body])
        nb = _go(body, rw, in_loop=True)
        return s.replace(body=nb)
    out = s
    for c in stmt_children(s):
        nc = _go(c, rw, in_loop if isinstance(s, (For, If)) else False)
        if nc is not c:
            out = replace_child(out, c, nc)
    return out


@register_pass
@dataclass(frozen=True)
class InsertBarriers(Pass):
    """Insert barriers between shared-memory writes and reads."""

    name = "insert_barriers"
    lowering = True
    levels = (Level.KERNEL,)

    def apply(self, module, ctx):
        return self.map_functions(module, insert_barriers)
