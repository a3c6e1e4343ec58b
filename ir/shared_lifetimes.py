"""Live ranges of a kernel's shared buffers, and the proof that one is dead where another
is first written (so the two may share bytes of dynamic shared memory).

The kernel body is cut into *steps*: the statements of its block-level sequences, reached
from the root through sequences, allocations, lets and thread loops that span the whole
block dimension (every thread of a block runs every step, once, in order). Any other
statement (a serial loop, a condition, a loop nest) is one step, taken as a whole. A
buffer's live range is its first and last step.

Buffer ``a`` is *dead before* step ``p`` when a block barrier sits at a step ``q`` with
``last(a) < q < p`` at which no asynchronous copy and no wgmma is pending in any thread:

* every cp.async issued so far was committed and waited for (``async_wait(0)``), so no copy
  still lands in ``a``'s bytes;
* every wgmma issued so far was committed and waited for (``wgmma_wait(0)``), so none still
  reads ``a``'s bytes;
* and the barrier orders every thread's last access of ``a`` (and the waits) before any
  thread's step ``p``.

The pending state is a may-analysis over the steps, loops included (a loop's body taken to
its fixed point, a condition's branches joined), so a copy or wgmma in flight on any path
keeps the barrier from counting.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .expr import Load
from .intrin.wgmma import is_wgmma_loop
from .stmt import (
    Alloc,
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    Barrier,
    For,
    If,
    Let,
    PrimFunc,
    Seq,
    Stmt,
    Store,
    WgmmaSync,
    stmt_children,
    stmt_exprs,
    walk,
    walk_exprs,
)

# the pending state: (uncommitted copies, committed copy groups, wgmmas not yet in a group,
# wgmma groups)
_CLEAN = (False, False, False, False)


@dataclass
class Lifetimes:
    """The steps of a kernel and the live range of each shared buffer accessed in them."""

    steps: list[Stmt] = field(default_factory=list)
    first: dict[int, int] = field(default_factory=dict)  # id(buffer) -> first step
    last: dict[int, int] = field(default_factory=dict)  # id(buffer) -> last step
    clean_barriers: list[int] = field(default_factory=list)  # steps: barrier, nothing pending
    pending_before: list[tuple] = field(default_factory=list)  # state on entering each step

    def dead_before(self, a, p: int) -> str | None:
        """None when buffer ``a`` is provably dead before step ``p``; else why not."""
        if id(a) not in self.last:
            return f"{a.name} is never accessed in a block-level step"
        la = self.last[id(a)]
        if la >= p:
            return f"{a.name} is still accessed at step {la} (>= {p})"
        if any(la < q < p for q in self.clean_barriers):
            return None
        if self.pending_before[p] != _CLEAN:
            return (f"no barrier with every cp.async and wgmma waited for lies between "
                    f"{a.name}'s last access (step {la}) and step {p}; copies or wgmmas "
                    "are still pending there")
        return (f"no block barrier between {a.name}'s last access (step {la}) and step {p}")

    def disjoint(self, a, b) -> bool:
        """Whether ``a`` and ``b`` may share bytes: one is dead before the other's first
        step."""
        fa, fb = self.first.get(id(a)), self.first.get(id(b))
        if fa is None or fb is None:
            return False
        return self.dead_before(a, fb) is None or self.dead_before(b, fa) is None


def _block_dims(func: PrimFunc) -> dict[str, int]:
    block = tuple(func.launch.block) + (1, 1, 1)
    return {f"threadIdx.{c}": block[i] for i, c in enumerate("xyz")}


def step_buffers(s: Stmt) -> set:
    """The shared buffers ``s`` (and its sub-statements) access."""
    out = {}
    for x in walk(s):
        if isinstance(x, Store) and x.buffer.scope == "shared":
            out[id(x.buffer)] = x.buffer
        elif isinstance(x, AsyncCopy):
            for b in (x.dst, x.src):
                if b.scope == "shared":
                    out[id(b)] = b
        for e in stmt_exprs(x):
            for y in walk_exprs(e):
                if isinstance(y, Load) and y.buffer.scope == "shared":
                    out[id(y.buffer)] = y.buffer
    return set(out.values())


def _transfer(s: Stmt, st: tuple) -> tuple:
    """The pending state after ``s`` run from ``st`` (a may-analysis)."""
    unc, com, wunc, wcom = st
    if isinstance(s, AsyncCopy):
        return (True, com, wunc, wcom)
    if isinstance(s, AsyncCommit):
        return (False, com or unc, wunc, wcom)
    if isinstance(s, AsyncWait):
        return (unc, com and s.pending > 0, wunc, wcom)
    if isinstance(s, WgmmaSync):
        if s.op == "commit":
            return (unc, com, False, wcom or wunc)
        if s.op == "wait":
            return (unc, com, wunc, wcom and s.pending > 0)
        return st
    if is_wgmma_loop(s):
        return (unc, com, True, wcom)
    if isinstance(s, If):
        a = _transfer(s.then, st)
        b = st if s.else_ is None else _transfer(s.else_, st)
        return tuple(x or y for x, y in zip(a, b))
    if isinstance(s, For):
        # the flags are gen/kill, so two passes reach the body's fixed point; a loop that
        # may not run keeps its entry state too
        once = _transfer(s.body, st)
        twice = _transfer(s.body, once)
        out = tuple(x or y for x, y in zip(once, twice))
        return out if s.extent >= 1 else tuple(x or y for x, y in zip(out, st))
    if isinstance(s, Seq):
        for x in s.stmts:
            st = _transfer(x, st)
        return st
    for x in stmt_children(s):
        st = _transfer(x, st)
    return st


def shared_lifetimes(func: PrimFunc) -> Lifetimes:
    """The steps of ``func``'s body and its shared buffers' live ranges over them."""
    dims = _block_dims(func)
    out = Lifetimes()
    state = [_CLEAN]

    def visit(s: Stmt) -> None:
        if isinstance(s, Seq):
            for x in s.stmts:
                visit(x)
            return
        if isinstance(s, (Alloc, Let)):
            visit(s.body)
            return
        if isinstance(s, For) and s.kind == "thread" and (
                s.thread.startswith("blockIdx") or dims.get(s.thread) == s.extent):
            visit(s.body)
            return
        i = len(out.steps)
        out.steps.append(s)
        out.pending_before.append(state[0])
        if isinstance(s, Barrier) and state[0] == _CLEAN:
            out.clean_barriers.append(i)
        for b in step_buffers(s):
            out.first.setdefault(id(b), i)
            out.last[id(b)] = i
        state[0] = _transfer(s, state[0])

    visit(func.body)
    visit = None  # it calls itself: a cycle left to the collector otherwise
    return out
