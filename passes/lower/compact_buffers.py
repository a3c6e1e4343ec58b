"""compact_buffers: place each intermediate buffer where it is used and shrink it to the
region used there; infer the scope of intermediate global buffers computed inside thread
loops (local under threadIdx, shared under blockIdx only), as TVM does.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.attrs import Level
from ...ir.expr import IntImm, Load, floordiv, floormod
from ...ir.region import access_region
from ...ir.simplify import simplify
from ...ir.simplify_cache import simplify_cache
from ...ir.stmt import (
    Alloc,
    Buffer,
    For,
    PrimFunc,
    Stmt,
    Store,
    stmt_children,
    stmt_exprs,
    walk_exprs,
)
from ...ir.traversal import replace_at
from ..base import Pass
from ..registry import register_pass
from .buffer_uses import BufferUses, map_stmt_where
from .common import LoweringError, rewrite_loads


def _is_thread(n) -> bool:
    return isinstance(n, For) and n.kind in ("thread", "vthread") and n.thread != "" and not \
        n.thread.startswith("blockIdx")


def _lca_path(root: Stmt, buf, uses: BufferUses) -> list:
    """Path from ``root`` to the deepest statement holding every access of ``buf``."""
    path = [root]
    cur = root
    while True:
        if isinstance(cur, Store) or uses.owns(cur, buf):
            return path
        kids = [c for c in stmt_children(cur) if uses.accesses(c, buf)]
        if len(kids) != 1:
            return path
        cur = kids[0]
        path.append(cur)


def compact_buffers(func: PrimFunc) -> PrimFunc:
    # placing each buffer bounds its accesses and shifts them, asking the simplifier about
    # the same indices again and again
    with simplify_cache():
        return _compact_buffers(func)


def _compact_buffers(func: PrimFunc) -> PrimFunc:
    body = func.body
    # peel the function-level allocations of intermediates
    allocs = []
    while isinstance(body, Alloc):
        allocs.append(body.buffer)
        body = body.body
    aligns = func.attrs.storage_align
    panels = func.attrs.panels
    kept = []
    uses = BufferUses()
    for buf in allocs:
        body, stays = _place(body, buf, aligns.get(buf.name), panels.get(buf.name), uses)
        if stays is not None:
            if aligns.get(stays.name):
                strided = _aligned(stays, aligns[stays.name])
                body = _rebuffer(body, stays, strided)
                stays = strided
            kept.append(stays)
    for b in reversed(kept):
        body = Alloc(b, body)
    return func.replace(body=body)


def _accesses(s: Stmt, buf, uses: BufferUses, reads_only: bool) -> list:
    """``[(index tuple, enclosing loops below s)]`` of every load (and store, unless
    ``reads_only``) of ``buf`` in ``s``, in program order, as
    :func:`~ptxforge.ir.traversal.collect_accesses` lists them; subtrees that do not access
    ``buf`` are skipped."""
    out: list = []

    def visit(x, loops):
        if not uses.accesses(x, buf):
            return
        if isinstance(x, Store) and x.buffer is buf and not reads_only:
            out.append((x.indices, loops))
        for e in stmt_exprs(x):
            if buf in uses.loads(e):
                out.extend((y.indices, loops) for y in walk_exprs(e)
                           if isinstance(y, Load) and y.buffer is buf)
        if isinstance(x, For):
            visit(x.body, loops + (x,))
        else:
            for c in stmt_children(x):
                visit(c, loops)

    visit(s, ())
    visit = None  # it refers to itself: free it (and what it holds) now, not by the collector
    return out


def _aligned(buf: Buffer, aligns) -> Buffer:
    from ..schedule.storage_align import aligned_strides

    return Buffer(buf.name, buf.dtype, buf.shape, buf.scope, aligned_strides(buf.shape, aligns))


def _rebuffer(body: Stmt, old: Buffer, new: Buffer) -> Stmt:
    from ...ir.stmt import replace_buffers

    return replace_buffers(body, {old: new})


def _scope_at(buf: Buffer, loops: list) -> str:
    """The scope a buffer gets when every access sits under ``loops``: an intermediate in
    global memory used under a threadIdx loop only is per thread (local), under a blockIdx
    loop only per block (shared)."""
    if buf.scope == "global":
        if any(_is_thread(n) for n in loops):
            return "local"
        if any(n.kind == "thread" for n in loops):
            return "shared"
    return buf.scope


def placed_scope(body: Stmt, buf: Buffer, uses: BufferUses | None = None) -> str:
    """The scope ``buf`` will have after this pass, for an intermediate allocated in
    ``body``; a buffer nothing in ``body`` accesses keeps its own. ``uses``: the answers
    about ``body`` known so far (pass one to ask about many buffers)."""
    uses = uses or BufferUses()
    if not uses.accesses(body, buf):
        return buf.scope
    return _scope_at(buf, [n for n in _lca_path(body, buf, uses) if isinstance(n, For)])


def _place(body: Stmt, buf: Buffer, aligns, panel: int | None, uses: BufferUses):
    """Put ``buf``'s allocation at its use; returns (body, buffer to keep at top or None).
    With ``panel`` (``layout_panels``) the compacted buffer's last dimension is stored in
    panels of that many elements, the panel index outermost."""
    if not uses.accesses(body, buf):
        return body, None
    path = _lca_path(body, buf, uses)
    loops = [n for n in path if isinstance(n, For)]
    scope = _scope_at(buf, loops)
    if scope == "global":
        if panel:
            raise LoweringError(f"layout_panels {buf.name}: the buffer stays in global "
                                "memory; a panel layout is for a stage placed in shared or "
                                "local memory", stage=buf.name)
        return body, buf
    # which loops are fixed for the region: all enclosing ones, except thread loops
    # (and vthreads) for shared memory, which the block's threads share
    if scope == "shared":
        fixed = [n for n in loops if not _is_thread(n)]
        ranging_above = [n for n in loops if _is_thread(n)]
    else:
        fixed = loops
        ranging_above = []
    lca = path[-1]
    # the region readers demand sizes the buffer (as TVM's bound inference does); a
    # producer computed at a loop writes only that region (its predicate guards overhang)
    accesses = (_accesses(lca, buf, uses, reads_only=True)
                or _accesses(lca, buf, uses, reads_only=False))
    index_sets = []
    inner_ranges: dict = {n.var: (0, n.extent - 1) for n in ranging_above}
    for idx, inner_loops in accesses:
        index_sets.append(idx)
        for n in inner_loops:
            inner_ranges[n.var] = (0, n.extent - 1)
    if isinstance(lca, For):
        # accesses inside the loop's body: the loop var is fixed for the region
        inner_ranges.pop(lca.var, None)
    outer_ranges = {n.var: (0, n.extent - 1) for n in fixed}
    region = access_region(index_sets, buf.shape, inner_ranges, outer_ranges)
    new_shape = tuple(ext for _, ext in region)
    if panel and (not new_shape or new_shape[-1] % panel):
        raise LoweringError(f"layout_panels {buf.name}: the buffer's last extent "
                            f"({new_shape[-1] if new_shape else 'none'}) is not a multiple "
                            f"of the panel width {panel}", stage=buf.name)
    if panel:
        new_shape = (new_shape[-1] // panel,) + new_shape[:-1] + (panel,)
    new_buf = Buffer(buf.name, buf.dtype, new_shape, scope)
    if aligns:
        new_buf = _aligned(new_buf, aligns)
    starts = [s for s, _ in region]

    def shift(idx):
        out = tuple(
            i if (isinstance(s, IntImm) and s.value == 0) else simplify(i - s)
            for i, s in zip(idx, starts)
        )
        if panel:
            n = out[-1]
            out = ((simplify(floordiv(n, panel)),) + out[:-1]
                   + (simplify(floormod(n, panel)),))
        return out

    def fix_expr(e):
        if buf not in uses.loads(e):
            return e

        def load(x):
            if x.buffer is buf:
                return Load(new_buf, shift(x.indices))
            return None

        return rewrite_loads(e, load)

    def fix_stmt(x):
        if isinstance(x, Store) and x.buffer is buf:
            return Store(new_buf, shift(x.indices), x.value)
        return None

    # where the allocation goes: at the LCA, or above the outermost thread loop for shared
    alloc_at = len(path) - 1
    if scope == "shared":
        for k, n in enumerate(path):
            if _is_thread(n):
                alloc_at = k
                break
    target = path[alloc_at]
    def rewrite(x: Stmt) -> Stmt:
        # only the subtrees that access the buffer change
        return map_stmt_where(x, lambda n: uses.accesses(n, buf), fix_stmt, fix_expr)

    if isinstance(target, For) and alloc_at == len(path) - 1:
        new_target = target.replace(body=Alloc(new_buf, rewrite(target.body)))
    else:
        new_target = Alloc(new_buf, rewrite(target))
    return replace_at(path[: alloc_at + 1], new_target), None


@register_pass
@dataclass(frozen=True)
class CompactBuffers(Pass):
    """Allocate intermediates where used, shrunk to the region used; infer their scope."""

    name = "compact_buffers"
    lowering = True
    levels = (Level.PRIM,)

    def apply(self, module, ctx):
        return self.map_functions(module, compact_buffers)
