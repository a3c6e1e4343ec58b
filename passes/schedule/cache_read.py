"""cache_read: copy a buffer into shared or local memory for some of its readers."""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.expr import Load, Var
from ...ir.stmt import (
    Alloc,
    Block,
    BlockVar,
    Buffer,
    For,
    PrimFunc,
    Seq,
    Store,
    map_stmt,
    seq,
    walk,
)
from ...ir.traversal import block_names, replace_at, rewrite_loads
from ..params import Ref, positional
from ..registry import register_pass
from .common import ScheduleError, SchedulePass, on_main, paths_of
from .compute_at import reads_any
from .names import cache_name, copy_axes, fresh_name


def find_buffer(func: PrimFunc, name: str):
    for b in func.params:
        if b.name == name:
            return b
    stack = [func.body]
    while stack:
        n = stack.pop()
        if isinstance(n, Alloc):
            if n.buffer.name == name:
                return n.buffer
        from ...ir.stmt import stmt_children

        stack.extend(stmt_children(n))
    raise ScheduleError(f"no buffer named {name!r}")


def copy_block(name: str, src, dst):
    """A loop nest copying ``src`` to ``dst`` element-wise (same shape); lists of buffers
    (a tuple compute's outputs) copy pairwise in one block."""
    srcs = list(src) if isinstance(src, (list, tuple)) else [src]
    dsts = list(dst) if isinstance(dst, (list, tuple)) else [dst]
    src = srcs[0]
    loop_vars = [Var(n) for n in copy_axes(src.ndim)]
    ivs = [BlockVar(Var(f"v{k}"), e, "S") for k, e in enumerate(src.shape)]
    idx = tuple(iv.var for iv in ivs)
    blk = Block(name, ivs, loop_vars,
                seq(*[Store(d, idx, Load(s, idx)) for s, d in zip(srcs, dsts)]))
    stmt = blk
    for v, e in reversed(list(zip(loop_vars, src.shape))):
        stmt = For(v, e, stmt)
    return stmt


def redirect_loads(s, old: Buffer, new: Buffer):
    def fix(e):
        def load(x):
            if x.buffer is old:
                return Load(new, x.indices)
            return None

        return rewrite_loads(e, load)

    return map_stmt(s, fexpr=fix)


def top_level_index(body, block_name: str) -> tuple:
    """``(list of top-level statements, index of the one holding the block)``."""
    stmts, wrap = unwrap_allocs(body)
    for k, s in enumerate(stmts):
        if any(isinstance(n, Block) and n.name == block_name for n in walk(s)):
            return stmts, k, wrap
    raise ScheduleError(f"stage {block_name} not found at top level")


def unwrap_allocs(body):
    """Peel the function-level Allocs: ``(top-level statements, list of alloc buffers)``."""
    allocs = []
    while isinstance(body, Alloc):
        allocs.append(body.buffer)
        body = body.body
    stmts = list(body.stmts) if isinstance(body, Seq) else [body]
    return stmts, allocs


def wrap_allocs(stmts, allocs):
    body = Seq(stmts) if len(stmts) != 1 else stmts[0]
    for b in reversed(allocs):
        body = Alloc(b, body)
    return body


def cache_read(func: PrimFunc, buffer: str, scope: str, readers) -> PrimFunc:
    """Readers ``readers`` (stage names) read ``buffer`` through a copy in ``scope`` named
    by :func:`~.names.cache_name` (made fresh if that stage exists); the copy stage has
    that name too."""
    if scope not in ("shared", "local", "warp"):
        raise ScheduleError(f"cache_read {buffer}: scope must be shared, local or warp (a "
                            f"matrix fragment), got {scope!r}")
    src = find_buffer(func, buffer)
    readers = list(readers)
    if not readers:
        raise ScheduleError(f"cache_read {buffer}: give at least one reader stage")
    paths = paths_of(func.body)
    for r in readers:
        if r not in paths:
            raise ScheduleError(
                f"cache_read {buffer}: no stage {r!r}; stages: {', '.join(block_names(func.body))}"
            )
        if not reads_any(paths[r][-1], (src,)):
            raise ScheduleError(f"cache_read {buffer}: stage {r} does not read {buffer}")
    name = fresh_name(cache_name(buffer, scope), set(paths))
    dst = Buffer(name, src.dtype, src.shape, scope)
    body = func.body
    for r in readers:
        p = paths_of(body)[r]
        body = replace_at(p, redirect_loads(p[-1], src, dst))
    stmts, first, allocs = top_level_index(body, readers[0])
    for r in readers[1:]:
        _, k, _ = top_level_index(body, r)
        first = min(first, k)
    stmts.insert(first, copy_block(name, src, dst))
    return func.replace(body=wrap_allocs(stmts, allocs + [dst]))


@register_pass
@dataclass(frozen=True)
class CacheRead(SchedulePass):
    """Readers read a buffer through a copy in shared or local memory.

    Parameters:
        buffer: the buffer to cache.
        scope: ``"shared"`` or ``"local"``.
        readers: the stages that read through the copy.
    """

    name = "cache_read"
    buffer: Ref = positional()
    scope: str = positional()
    readers: tuple[Ref, ...] = positional()

    def apply(self, module, ctx):
        return on_main(module, lambda f: cache_read(f, self.buffer, self.scope, self.readers))
