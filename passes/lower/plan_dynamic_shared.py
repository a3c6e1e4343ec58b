"""plan_dynamic_shared: a kernel whose shared buffers exceed the static limit gets them as
one dynamic shared-memory array.

A block may declare at most ``target.max_shared_memory_per_block`` (48 KiB) of ``.shared``
memory statically; tensor-core pipelines need more. Above that limit, every shared buffer of
the kernel is given a byte offset (aligned to 16 bytes, or its element size if larger) in the
kernel's dynamic shared memory, and the kernel's ``launch.dynamic_shared_bytes`` records the
total; the backends then address one ``extern .shared`` array and the runtime opts in to that
much shared memory. The total may reach ``target.max_shared_memory_per_block_optin``.

Buffers whose live ranges are provably disjoint share bytes (:mod:`ptxforge.ir.shared_lifetimes`:
one's last access, then a barrier with no cp.async and no wgmma pending, then the other's
first): a GEMM's float32 C tile, written after the main loop, goes over the operand stages.
Where the barrier is the only proof missing (the templates store the C tile right after the
final waits), one is added before that first access. Each buffer takes the lowest aligned
offset (1,024 bytes for a wgmma operand) free of buffers still live there; a kernel where no
two buffers can share keeps the plain placement, in the order of its allocations.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ...ir import dtype as dt
from ...ir.attrs import Level
from ...ir.intrin.wgmma import WGMMA_SHARED_ALIGN, wgmma_operand_buffers
from ...ir.shared_lifetimes import Lifetimes, shared_lifetimes
from ...ir.stmt import Alloc, Barrier, Let, PrimFunc, Seq, map_stmt, shared_memory, walk
from ...ir.verify import DYNAMIC_SHARED_ALIGN
from ...target import Target
from ..base import Pass
from ..registry import register_pass
from .common import LoweringError, lowering_target

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Slot:
    """One buffer to place: its bytes, alignment and first step (None: never accessed)."""

    buffer: object
    nbytes: int
    align: int
    first: int | None


def _slots(func: PrimFunc, life: Lifetimes | None) -> list[_Slot]:
    """The shared buffers still to place, in the order the allocations name them (their
    first steps from ``life``; None without it)."""
    wgmma = {id(b) for b in wgmma_operand_buffers(func.body)}
    out, seen = [], set()
    for s in walk(func.body):
        b = s.buffer if isinstance(s, Alloc) else None
        if b is None or b.scope != "shared" or s.dyn_offset is not None or id(b) in seen:
            continue
        seen.add(id(b))
        align = WGMMA_SHARED_ALIGN if id(b) in wgmma else max(DYNAMIC_SHARED_ALIGN,
                                                               dt.nbytes(b.dtype))
        first = life.first.get(id(b)) if life is not None else None
        out.append(_Slot(b, b.size * dt.nbytes(b.dtype), align, first))
    return out


def _pack(slots: list[_Slot], base: int, life: Lifetimes | None) -> tuple[dict, int]:
    """Offsets for ``slots`` from ``base`` up: each at the lowest aligned offset whose bytes
    hold no buffer still live where it is first accessed (with ``life``; every buffer is
    live throughout without). Returns ``(offsets by buffer id, end)``."""
    order = slots if life is None else sorted(
        slots, key=lambda x: (x.first is None, x.first or 0))
    placed: list[tuple[int, int, _Slot]] = []
    offsets, end = {}, base
    for x in order:
        busy = []
        for lo, hi, other in placed:
            why = "no live ranges" if life is None else (
                "never accessed" if x.first is None else life.dead_before(other.buffer,
                                                                          x.first))
            if why is None:
                continue
            busy.append((lo, hi))
            if life is not None:
                log.debug("%s cannot share bytes with %s: %s", x.buffer.name,
                          other.buffer.name, why)
        off = -(-base // x.align) * x.align
        clash = [hi for lo, hi in busy if off < hi and lo < off + x.nbytes]
        while clash:  # past the live bytes it overlaps, and again
            off = -(-max(clash) // x.align) * x.align
            clash = [hi for lo, hi in busy if off < hi and lo < off + x.nbytes]
        offsets[id(x.buffer)] = off
        placed.append((off, off + x.nbytes, x))
        end = max(end, off + x.nbytes)
    return offsets, end


def _placed_over(slots: list[_Slot], offsets: dict) -> list[_Slot]:
    """The slots placed (at ``offsets``) over bytes of a slot first accessed before them."""
    out = []
    for x in slots:
        lo = offsets[id(x.buffer)]
        if any(y.first is not None and x.first is not None and y.first < x.first
               and offsets[id(y.buffer)] < lo + x.nbytes and lo < offsets[id(y.buffer)]
               + y.nbytes for y in slots):
            out.append(x)
    return out


def _barrier_steps(life: Lifetimes) -> set:
    """Ids of the steps that first access a buffer where an earlier buffer's last access
    lies before them and nothing is pending, but no barrier separates them: a barrier
    there makes the earlier one dead (one per block, outside every loop)."""
    at = set()
    for b_id, p in life.first.items():
        if any(life.pending_before[p]) or p in at:
            continue
        if any(la < p and not any(la < q < p for q in life.clean_barriers)
               for a_id, la in life.last.items() if a_id != b_id):
            at.add(p)
    return {id(life.steps[p]) for p in at}


def _with_barriers(func: PrimFunc, targets: set) -> PrimFunc:
    """``func`` with a block barrier before each step whose id is in ``targets``."""
    if not targets:
        return func

    def insert(x):
        if isinstance(x, Seq) and any(id(c) in targets for c in x.stmts):
            out = []
            for c in x.stmts:
                if id(c) in targets:
                    out.append(Barrier())
                out.append(c)
            return Seq(out)
        body = getattr(x, "body", None)
        if body is not None and id(body) in targets and not isinstance(x, Seq):
            return x.replace(body=Seq([Barrier(), body])) if not isinstance(x, Let) else \
                Let(x.var, x.value, Seq([Barrier(), body]))
        return None

    return func.replace(body=map_stmt(func.body, fstmt=insert))


def _shared_plan(func: PrimFunc, life: Lifetimes, base: int):
    """``(func, offsets, end)`` with buffers of disjoint live ranges sharing bytes (and the
    barriers that proves, before the first access of each buffer placed over another), or
    None where no two buffers can share."""
    targets = _barrier_steps(life)
    fenced = _with_barriers(func, targets)
    fenced_life = shared_lifetimes(fenced) if fenced is not func else life
    slots = _slots(fenced, fenced_life)
    offsets, end = _pack(slots, base, fenced_life)
    over = _placed_over(slots, offsets)
    if not over:
        return None
    # keep only the barriers before a buffer placed over another (the steps are the same
    # statements in both bodies); where that is every one, the plan above stands
    keep = targets & {id(fenced_life.steps[x.first]) for x in over}
    if keep == targets:
        return fenced, offsets, end
    func = _with_barriers(func, keep)
    life = shared_lifetimes(func)
    slots = _slots(func, life)
    offsets, end = _pack(slots, base, life)
    return (func, offsets, end) if _placed_over(slots, offsets) else None


def plan_dynamic_shared(func: PrimFunc, target: Target, alias: bool = True) -> PrimFunc:
    """``func`` with its shared buffers placed in dynamic shared memory when they exceed the
    static limit (unchanged otherwise); with ``alias``, buffers whose live ranges are
    provably disjoint (:mod:`ptxforge.ir.shared_lifetimes`) share bytes, and a block barrier
    is added where that is the only proof missing and it saves bytes."""
    static, placed = shared_memory(func)
    if static <= target.max_shared_memory_per_block:
        return func
    life = shared_lifetimes(func) if alias else None
    offsets, end = _pack(_slots(func, life), placed, None)
    if alias:
        shared = _shared_plan(func, life, placed)
        if shared is not None and shared[2] < end:
            log.debug("kernel %s: aliasing shared buffers takes %d bytes instead of %d",
                      func.name, shared[2], end)
            func, offsets, end = shared
    sizes = [f"{b.name}: {b.size * dt.nbytes(b.dtype)}" for b in
             (s.buffer for s in walk(func.body) if isinstance(s, Alloc))
             if id(b) in offsets]
    dynamic = max(end, func.launch.dynamic_shared_bytes)
    optin = target.max_shared_memory_per_block_optin
    if dynamic > optin:
        stages = ", ".join(func.launch.stages) or func.name
        raise LoweringError(
            f"kernel {func.name} (stages {stages}) needs {dynamic} bytes of shared memory per "
            f"block ({', '.join(sizes)}); {target.arch} allows at most {optin} even as dynamic "
            "shared memory: use smaller tiles", stage=stages,
            limit=f"max_shared_memory_per_block_optin={optin}")

    def place(x):
        if isinstance(x, Alloc) and id(x.buffer) in offsets and x.dyn_offset is None:
            return x.replace(dyn_offset=offsets[id(x.buffer)])
        return None

    body = map_stmt(func.body, fstmt=place)
    return func.replace(body=body, attrs=func.attrs.with_launch(dynamic_shared_bytes=dynamic))


@register_pass
@dataclass(frozen=True)
class PlanDynamicShared(Pass):
    """Place the shared buffers of a kernel over the static shared-memory limit in dynamic
    shared memory (up to the target's opt-in limit); the target is ``ctx.config["target"]``
    or the current one."""

    name = "plan_dynamic_shared"
    lowering = True
    levels = (Level.KERNEL,)

    def apply(self, module, ctx):
        target = lowering_target(ctx)
        return self.map_functions(module, lambda f: plan_dynamic_shared(f, target))
