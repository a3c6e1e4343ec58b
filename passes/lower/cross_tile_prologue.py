"""The software pipeline across the tiles of a persistent kernel (used by
``inject_software_pipeline``; the tile loop comes from :mod:`.persistent_tiles`).

In a persistent kernel each block runs tiles ``t = b + w * G`` (``w`` the tile loop's
var). A pipelined loop of tile ``t`` is a prologue (a barrier, then the copies of its first
``dist`` stages, each committed), the loop and a final ``async_wait(0)``. Here the prologue
runs only for a block's first tile; every tile issues the next tile's prologue right after
its own loop, before whatever follows the loop in the tile (its epilogue: the accumulators
stored, the C tile's round trip), so the next tile's first copies land while this tile's
epilogue runs::

    if w == 0: <prologue of tile t>
    for i in [0, n): ...                  # (inject_wgmma_sync: then wgmma_wait(0))
    async_wait(0)
    barrier                               # every warpgroup's last wgmma retired, every
                                          # thread's last read of the stages done
    if b + (w + 1) * G < T: <prologue of tile t + G, without its barrier>
    <the epilogue of tile t>

The stages the next prologue fills are free: their last readers (the wgmma groups) were
waited for in every warpgroup before the barrier. The epilogue must not touch them: the
tile loop is one step of :mod:`ptxforge.ir.shared_lifetimes`, so ``plan_dynamic_shared``
never places the C tile over them, and the ``persistent`` knob's rule counts the C tile
beside them (:func:`~ptxforge.ops.schedules.gemm.rules.persistent_rules`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.expr import IntImm, Var, free_vars, substitute
from ...ir.simplify import simplify_stmt
from ...ir.stmt import AsyncWait, Barrier, For, If, Let, Seq, Stmt, map_stmt, stmt_exprs
from ...ir.traversal import walk
from ..schedule.software_pipeline import ANNOTATION as PIPELINE
from .persistent_tiles import TILE_LOOP


@dataclass(frozen=True)
class TileLoop:
    """The persistent grid of a kernel: block var ``block`` of ``grid`` blocks, tile loop
    var ``tile`` over ``tiles`` tiles, and the lets bound inside the tile loop (var ->
    value), which a prologue copied to the next tile must see with that tile's index."""

    block: Var
    grid: int
    tile: Var
    tiles: int
    lets: dict


def tile_loop(body: Stmt) -> TileLoop | None:
    """The persistent grid of kernel body ``body`` where it has one tile loop holding one
    pipelined loop (the only case whose prologue crosses tiles), else None."""
    blocks = [x for x in walk(body) if isinstance(x, For) and x.kind == "thread"
              and x.thread == "blockIdx.x"]
    loops = [x for x in walk(body) if isinstance(x, For) and TILE_LOOP in x.annotations]
    if len(blocks) != 1 or len(loops) != 1:
        return None
    loop = loops[0]
    if sum(isinstance(x, For) and PIPELINE in x.annotations for x in walk(loop.body)) != 1:
        return None
    lets = {x.var: x.value for x in walk(loop.body) if isinstance(x, Let)}
    return TileLoop(blocks[0].var, blocks[0].extent, loop.var, int(loop.annotations[TILE_LOOP]),
                    lets)


def _bound_vars(s: Stmt) -> set:
    return {x.var for x in walk(s) if isinstance(x, (For, Let))}


def next_tile(stmts: list, t: TileLoop) -> Stmt:
    """``stmts`` (a prologue) as they run for the block's next tile: the lets of the tile
    they read substituted (their values may depend on the tile), then ``w`` by ``w + 1``."""
    s = Seq(list(stmts))
    inner = _bound_vars(s)
    for _ in range(len(t.lets) + 1):
        used = {v for x in walk(s) for e in stmt_exprs(x) for v in free_vars(e)}
        outer = {v: t.lets[v] for v in used if v in t.lets and v not in inner}
        if not outer:
            break
        s = _subst(s, outer)
    ty = t.tile.dtype
    return _subst(s, {t.tile: t.tile + IntImm(1, ty)})


def _subst(s: Stmt, vmap: dict) -> Stmt:
    return map_stmt(s, fexpr=lambda e: substitute(e, vmap))


def across_tiles(prologue: list, loop: Stmt, tail: list, t: TileLoop) -> list:
    """The statements of a pipelined loop whose prologue crosses tiles (see the module's
    documentation): ``prologue`` (a barrier first), ``loop``, ``tail`` (its final waits)."""
    ty = t.tile.dtype
    first = If(t.tile == IntImm(0, ty), Seq(list(prologue)))
    later = [x for x in prologue if not isinstance(x, Barrier)]
    nxt = t.block + (t.tile + IntImm(1, ty)) * IntImm(t.grid, ty) < IntImm(t.tiles, ty)
    ahead = If(nxt, simplify_stmt(next_tile(later, t), unwrap_unit_loops=False))
    waits = tail or [AsyncWait(0)]
    return [first, loop, *waits, Barrier(), ahead]


__all__ = ["TileLoop", "across_tiles", "next_tile", "tile_loop"]
