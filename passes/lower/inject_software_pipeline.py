"""inject_software_pipeline: rewrite loops annotated ``software_pipeline`` (k stages) into a
prologue, a multi-buffered steady state and a guarded tail.

The loop body must be: statements that load shared buffers (the *fetch*: stores or
cp.async copies into them, reading no such buffer), then statements that read them (the
*compute*, writing none of them); barriers, commits and waits between them are dropped
and placed anew. Each buffer loaded in the loop gets ``k`` slots; iteration ``i`` loads
slot ``(i + k - 1) % k`` and reads slot ``i % k``::

    barrier
    fetch(0) -> slot 0; commit ... fetch(k-2) -> slot k-2; commit
    for i in [0, n):
        async_wait(k - 2)        # iteration i's copies have landed (this thread's)
        barrier                  # ... every thread's; and slot (i - 1) % k is free
        if i + k - 1 < n: fetch(i + k - 1) -> slot (i + k - 1) % k
        commit                   # (an empty group at the tail keeps the count uniform)
        compute(i) from slot i % k
    async_wait(0)

A loop also annotated ``wgmma_in_flight = 1`` (its wgmma group of iteration ``i`` still
reads slot ``i % k`` during iteration ``i + 1``, see ``inject_wgmma_sync``) loads
``k - 2`` iterations ahead instead: the slot a fetch overwrites was read by iteration
``i - 2``, whose group every warpgroup waited for before the barrier.

The pass runs after ``insert_barriers``; the barrier before the prologue takes the place
of the one that opened the loop body, which an enclosing loop's next iteration relied on.

In a persistent kernel (the tile loop of ``persistent_tiles``) the pipeline runs across
tiles: the prologue runs for a block's first tile only, and each tile issues the next
tile's prologue right after its own loop, before its epilogue
(:mod:`.cross_tile_prologue`); the pass context's option ``cross_tile_prologue = False``
keeps each tile's prologue in the tile (to measure what the overlap gains).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...ir import dtype as dt
from ...ir.attrs import Level
from ...ir.expr import IntImm, Load, floormod, substitute
from ...ir.simplify import simplify_stmt
from ...ir.simplify_cache import simplify_cache
from ...ir.stmt import (
    Alloc,
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    Barrier,
    Block,
    Buffer,
    For,
    If,
    Let,
    PrimFunc,
    Seq,
    Stmt,
    Store,
    map_stmt,
    stmt_exprs,
    substitute_stmt,
)
from ...ir.traversal import reads_buffer, walk
from ..base import Pass
from ..registry import register_pass
from ..schedule.software_pipeline import ANNOTATION
from .common import LoweringError, fresh_copy, rewrite_loads
from .cross_tile_prologue import across_tiles, tile_loop
from .inject_wgmma_sync import IN_FLIGHT

SLOT_ALIGN_BYTES = 16
"""Each slot of a multi-buffered stage starts 16-byte aligned (the widest cp.async)."""


def _writes(s: Stmt) -> set:
    """Shared buffers ``s`` stores or copies into."""
    out = set()
    for x in walk(s):
        if isinstance(x, Store) and x.buffer.scope == "shared":
            out.add(x.buffer)
        elif isinstance(x, AsyncCopy):
            out.add(x.dst)
    return out


def _reads_any(s: Stmt, bufs) -> set:
    return {b for x in walk(s) for e in stmt_exprs(x) for b in bufs if reads_buffer(e, b)}


def _peel_lets(body: Stmt) -> Stmt:
    """Substitute the lets that wrap the loop body (from cse) into it."""
    while isinstance(body, Let):
        inner = body.body
        body = map_stmt(inner, fexpr=lambda e, v=body.var, x=body.value: substitute(e, {v: x}))
    return body


def _retarget(s: Stmt, slots: dict, slot) -> Stmt:
    """Every access of a multi-buffered stage in ``s`` moved to slot ``slot``."""

    def fe(e):
        def load(x):
            if x.buffer in slots:
                new, stride = slots[x.buffer]
                return Load(new, (x.indices[0] + slot * stride,))
            return None

        return rewrite_loads(e, load)

    def fs(x):
        if isinstance(x, Store) and x.buffer in slots:
            new, stride = slots[x.buffer]
            return Store(new, (x.indices[0] + slot * stride,), x.value)
        if isinstance(x, AsyncCopy) and x.dst in slots:
            new, stride = slots[x.dst]
            return x.replace(dst=new, dst_index=x.dst_index + slot * stride)
        return None

    return map_stmt(s, fstmt=fs, fexpr=fe)


def _binders(s: Stmt) -> tuple:
    """The vars and buffers ``s`` itself binds."""
    if isinstance(s, (For, Let)):
        return (s.var,)
    if isinstance(s, Alloc):
        return (s.buffer,)
    if isinstance(s, Block):
        return tuple(iv.var for iv in s.iter_vars)
    return ()


def _rebind_copies(s: Stmt) -> Stmt:
    """``s`` in SSA form again: a subtree that binds a var or buffer already bound earlier
    (in program order) is replaced by a fresh copy of itself."""
    seen: set = set()

    def go(x: Stmt) -> Stmt:
        own = _binders(x)
        if any(b in seen for b in own):
            return fresh_copy(x)
        seen.update(own)
        if isinstance(x, Seq):
            kids = [go(c) for c in x.stmts]
            return x if all(a is b for a, b in zip(kids, x.stmts)) else Seq(kids)
        if isinstance(x, (For, Alloc, Let)):
            body = go(x.body)
            if body is x.body:
                return x
            return Let(x.var, x.value, body) if isinstance(x, Let) else x.replace(body=body)
        if isinstance(x, If):
            then = go(x.then)
            else_ = None if x.else_ is None else go(x.else_)
            return x if (then is x.then and else_ is x.else_) else If(x.cond, then, else_)
        if isinstance(x, Block):
            init = None if x.init is None else go(x.init)
            body = go(x.body)
            return x if (init is x.init and body is x.body) else x.replace(init=init, body=body)
        return x

    try:
        return go(s)
    finally:
        go = None  # it calls itself: a cycle left to the collector otherwise


CROSS_TILE_OPTION = "cross_tile_prologue"
"""The pass-context option (default True) that lets a persistent kernel's pipeline run
across its tiles."""


class _Pipeliner:
    def __init__(self, func: PrimFunc, across_tiles: bool = True):
        self.func = func
        self.slots: dict = {}  # old buffer -> (multi-buffered buffer, slot stride)
        self.pipelined = 0
        # a persistent kernel's tiles (None: not persistent, or the prologue stays per tile)
        self.tiles = tile_loop(func.body) if across_tiles else None

    def fail(self, loop: For, why: str):
        raise LoweringError(f"software_pipeline of loop {loop.var.name} in kernel "
                            f"{self.func.name}: {why}", axis=loop.var.name)

    def run(self) -> PrimFunc:
        body = self.visit(self.func.body)
        if not self.pipelined:
            return self.func

        def realloc(x):
            if isinstance(x, Alloc) and x.buffer in self.slots:
                return Alloc(self.slots[x.buffer][0], x.body)
            return None

        body = map_stmt(body, fstmt=realloc)
        self.check_shared(body)
        return self.func.replace(body=body)

    def check_shared(self, body: Stmt) -> None:
        from ...target import current_target

        limit = current_target().max_shared_memory_per_block_optin
        total = sum(x.buffer.size * dt.nbytes(x.buffer.dtype) for x in walk(body)
                    if isinstance(x, Alloc) and x.buffer.scope == "shared")
        if total > limit:
            names = ", ".join(f"{b.name} x{new.size // max(stride, 1)}"
                              for b, (new, stride) in self.slots.items())
            raise LoweringError(
                f"software_pipeline in kernel {self.func.name}: the multi-buffered stages "
                f"({names}) need {total} bytes of shared memory per block; the target allows "
                f"{limit}. Use fewer stages or smaller tiles",
                limit=f"max_shared_memory_per_block_optin={limit}")

    def visit(self, s: Stmt) -> Stmt:
        def f(x):
            if isinstance(x, For) and ANNOTATION in x.annotations:
                return self.pipeline(x)
            return None

        return map_stmt(s, fstmt=f)

    def pipeline(self, loop: For) -> Stmt:
        k = int(loop.annotations[ANNOTATION])
        if any(isinstance(x, For) and ANNOTATION in x.annotations and x is not loop
               for x in walk(loop.body)):
            self.fail(loop, "it holds another pipelined loop; pipeline one loop of a nest")
        body = _peel_lets(loop.body)
        stmts = [c for c in (body.stmts if isinstance(body, Seq) else (body,))
                 if not isinstance(c, (Barrier, AsyncCommit, AsyncWait))]
        loaded = set().union(*(_writes(c) for c in stmts)) if stmts else set()
        if not loaded:
            self.fail(loop, "the loop loads no shared-memory stage; pipeline the loop that "
                            "the shared stages are computed at (compute_at), around their "
                            "loads and the computation that reads them")
        for b in loaded:
            if b in self.slots:
                self.fail(loop, f"{b.name} is loaded in another pipelined loop too")
        fetch, compute = [], []
        for c in stmts:
            w = _writes(c)
            r = _reads_any(c, loaded)
            if w and (r or compute):
                what = "reads the stages it loads" if r else "comes after the computation"
                self.fail(loop, f"a statement that loads {', '.join(sorted(b.name for b in w))}"
                                f" {what}; the loop body must load its shared stages first, "
                                "then compute from them")
            if w and any(isinstance(x, Barrier) for x in walk(c)):
                self.fail(loop, "the loads of the shared stages hold a barrier")
            (fetch if w else compute).append(c)
        if not compute:
            self.fail(loop, "nothing in the loop reads the shared stages it loads")
        for b in loaded:
            stride = -(-b.size * dt.nbytes(b.dtype) // SLOT_ALIGN_BYTES) * SLOT_ALIGN_BYTES
            stride //= dt.nbytes(b.dtype)
            self.slots[b] = (Buffer(b.name, b.dtype, (stride * k,), "shared"), stride)
        self.pipelined += 1
        v, n = loop.var, loop.extent
        ty = v.dtype
        fetch_s = Seq(fetch)

        def fetch_at(it, slot):
            # the copies share the fetch's own vars until they are simplified (below)
            return _retarget(substitute_stmt(fetch_s, {v: it}), self.slots, slot)

        # plain shared stages are multi-buffered alike, without groups to commit or wait for
        copies = any(isinstance(x, AsyncCopy) for x in walk(fetch_s))

        def commit():
            return [AsyncCommit()] if copies else []

        # loads run ``dist`` iterations ahead: k - 1, or k - 2 when the computation of an
        # iteration still runs asynchronously during the next (a wgmma group in flight)
        # and so reads its slot until then
        dist = k - 1 - int(loop.annotations.get(IN_FLIGHT, 0))
        if dist < 1:
            self.fail(loop, f"{k} stages with {k - 1 - dist} wgmma group in flight leave no "
                            "stage to load ahead; use 3 stages or more")
        # the old loop's first barrier guarded its loads; the prologue now comes before it
        # (an enclosing loop's last iteration may still be reading the slots)
        prologue: list = [Barrier()]
        for s in range(dist):
            if s < n:
                prologue.append(fetch_at(IntImm(s, ty), IntImm(s, ty)))
            prologue += commit()
        ahead = v + IntImm(dist, ty)
        steady = ([AsyncWait(dist - 1)] if copies else []) + [Barrier()]
        if n > dist:
            steady.append(If(ahead < IntImm(n, ty), fetch_at(ahead, floormod(ahead, k))))
        steady += commit()
        steady.append(_retarget(Seq(compute), self.slots, floormod(v, IntImm(k, ty))))
        ann = {a: b for a, b in loop.annotations.items() if a != ANNOTATION}
        new_loop = loop.replace(body=Seq(steady), annotations=ann)
        tail = [AsyncWait(0)] if copies else []
        if self.tiles is not None:
            # the next tile's prologue before this tile's epilogue (simplified there)
            out = Seq(across_tiles(prologue, new_loop, tail, self.tiles))
        else:
            out = Seq(prologue + [new_loop] + tail)
        # the copies of the fetch hold the same expressions wherever the loop var is not in
        # them: simplified once, with the cache; then each copy gets vars of its own
        with simplify_cache():
            out = simplify_stmt(out, unwrap_unit_loops=False)
        return _rebind_copies(out)


def inject_software_pipeline(func: PrimFunc, across_tiles: bool = True) -> PrimFunc:
    """``func`` with its pipelined loops rewritten (see the module's documentation);
    ``across_tiles``: a persistent kernel's pipeline runs across its tiles."""
    if not func.attrs.software_pipeline or not any(
            isinstance(x, For) and ANNOTATION in x.annotations for x in walk(func.body)):
        return func
    return _Pipeliner(func, across_tiles).run()


@register_pass
@dataclass(frozen=True)
class InjectSoftwarePipeline(Pass):
    """Rewrite loops annotated by ``software_pipeline`` into a prologue and a multi-buffered
    steady state whose loads run ``stages - 1`` iterations ahead."""

    name = "inject_software_pipeline"
    lowering = True
    levels = (Level.KERNEL,)

    def apply(self, module, ctx):
        across = ctx is None or bool(ctx.config.get(CROSS_TILE_OPTION, True))
        return self.map_functions(module, lambda f: inject_software_pipeline(f, across))


__all__ = ["CROSS_TILE_OPTION", "InjectSoftwarePipeline", "inject_software_pipeline"]
