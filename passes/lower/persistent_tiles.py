"""persistent_tiles: a kernel whose block loop carries the ``persistent`` annotation (the
schedule pass of that name) runs its tiles in a persistent grid.

The block loops of the kernel (``blockIdx.x/y/z``, ``T`` tiles in all) become::

    for b in [0, G) thread(blockIdx.x):          # G = min(T, SMs x blocks_per_sm)
        for w in [0, ceil(T / G)) attrs {"persistent_tiles": T}:
            if b + w * G < T:                    # (only where G does not divide T)
                <the body, blockIdx.x/y/z of tile t = b + w * G: x fastest, then y, z>
                barrier                          # the tile's last shared reads, before the
                                                 # next tile's first writes

(with ``G = T``: no tile loop, the tiles on blockIdx.x alone), so consecutive tiles of a
block are those the hardware would have run ``G`` blocks apart,
and the tiles run in the order the original grid's blocks would start (the raster order
is kept). The serial tile loop is one step for :mod:`ptxforge.ir.shared_lifetimes`, so no
shared buffer of the kernel shares bytes with another (a C tile is never placed over the
operand stages the next tile's copies fill). ``inject_software_pipeline`` finds the tile
loop by its annotation and issues the next tile's prologue copies before this tile's
epilogue. It runs inside ``split_host_device`` (which also sets the kernel's launch bound
from the annotation: :func:`launch_bound`), before the grid is read off the loops.
"""

from __future__ import annotations

from ...ir.expr import IntImm, Var, floordiv, floormod
from ...ir.stmt import Barrier, For, If, Seq, Stmt, map_stmt, substitute_stmt
from ...ir.traversal import walk
from ...target import Target, as_target
from ..schedule.launch_bounds import ANNOTATION as BOUND
from ..schedule.persistent import ANNOTATION
from .common import LoweringError

TILE_LOOP = "persistent_tiles"
"""The annotation of the serial tile loop: the kernel's tile count ``T``."""

GRID_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")


def _block_chain(s: Stmt) -> tuple[list[For], Stmt]:
    """The block loops at the top of kernel statement ``s`` (outermost first) and the
    statement inside them."""
    chain = []
    while isinstance(s, For) and s.kind == "thread" and s.thread in GRID_TAGS:
        chain.append(s)
        s = s.body
    return chain, s


def _annotated(s: Stmt) -> tuple[set, list]:
    """The ``persistent`` values and the ``min_blocks_per_sm`` values of the loops in
    ``s`` (one walk)."""
    asked, bounds = set(), []
    for x in walk(s):
        if isinstance(x, For) and x.annotations:
            if ANNOTATION in x.annotations:
                asked.add(int(x.annotations[ANNOTATION]))
            if BOUND in x.annotations:
                bounds.append(int(x.annotations[BOUND]))
    return asked, bounds


def persistent_request(s: Stmt) -> int:
    """Blocks per SM asked for by a ``persistent`` annotation in kernel statement ``s``
    (0: none)."""
    asked, _ = _annotated(s)
    if len(asked) > 1:
        raise LoweringError(f"one kernel asks for {sorted(asked)} persistent blocks per SM; "
                            "annotate one block loop")
    return next(iter(asked)) if asked else 0


def launch_bound(s: Stmt) -> int:
    """The kernel's ``min_blocks_per_sm``: the largest ``min_blocks_per_sm`` annotation,
    or the persistent blocks per SM (0: no bound)."""
    asked, bounds = _annotated(s)
    return max(bounds + sorted(asked) + [0])


def persistent_grid(tiles: int, blocks_per_sm: int, target: Target) -> int:
    """The blocks of a persistent grid: one ``blocks_per_sm`` an SM, at most one a tile."""
    return max(1, min(tiles, target.num_sms * blocks_per_sm))


def persistent_tiles(s: Stmt, target=None, kernel: str = "kernel") -> Stmt:
    """Kernel statement ``s`` with its block loops turned into a persistent grid and a tile
    loop (see the module's documentation); ``s`` itself where nothing asks for it.
    ``target``: a :class:`~ptxforge.target.Target`, a target string, a callable returning
    one (asked only where the grid is made) or None (the current target)."""
    per_sm = persistent_request(s)
    if not per_sm:
        return s
    target = as_target(target() if callable(target) else target)
    chain, body = _block_chain(s)
    where = f"persistent kernel {kernel}"
    if not any(ANNOTATION in x.annotations for x in chain):
        raise LoweringError(f"{where}: the persistent annotation is on a loop that is not "
                            "one of the kernel's outermost block loops; put it on the "
                            "block loop (bound to blockIdx.x, y or z) of the output stage")
    inner = [x for x in walk(body) if isinstance(x, For) and x.kind == "thread"
             and x.thread in GRID_TAGS]
    if inner:
        raise LoweringError(f"{where}: block loop {inner[0].var.name} ({inner[0].thread}) "
                            "lies inside the kernel's outer block loops; a persistent "
                            "kernel needs all its block loops at the top")
    tags = [x.thread for x in chain]
    if len(set(tags)) != len(tags):
        raise LoweringError(f"{where}: two block loops bind {tags}")
    by_tag = {x.thread: x for x in chain}
    tiles = 1
    for x in chain:
        tiles *= x.extent
    grid = persistent_grid(tiles, per_sm, target)
    waves = -(-tiles // grid)
    ty = chain[0].var.dtype
    b = Var("persistent.block", ty)
    w = Var("persistent.tile", ty)
    # one tile a block (as many blocks as tiles): no tile loop, the tiles on blockIdx.x
    t = b if waves == 1 else b + w * IntImm(grid, ty)
    # tile t's block indices, x fastest (the hardware's linear block order)
    vmap, stride = {}, 1
    for tag in GRID_TAGS:
        x = by_tag.get(tag)
        if x is None:
            continue
        q = t if stride == 1 else floordiv(t, IntImm(stride, ty))
        last = stride * x.extent == tiles
        vmap[x.var] = q if last else floormod(q, IntImm(x.extent, ty))
        stride *= x.extent
    body = substitute_stmt(body, vmap)
    body = map_stmt(body, fstmt=_drop)
    if waves == 1:
        return For(b, grid, body, "thread", "blockIdx.x")
    tile = Seq([body, Barrier()])
    if tiles % grid:
        tile = If(t < IntImm(tiles, ty), tile)
    loop = For(w, waves, tile, "serial", annotations={TILE_LOOP: tiles})
    return For(b, grid, loop, "thread", "blockIdx.x")


def _drop(y: Stmt):
    """``y`` without the persistent and launch-bound annotations (read already)."""
    if isinstance(y, For) and (ANNOTATION in y.annotations or BOUND in y.annotations):
        ann = {k: v for k, v in y.annotations.items() if k not in (ANNOTATION, BOUND)}
        return y.replace(annotations=ann)
    return None


__all__ = ["TILE_LOOP", "launch_bound", "persistent_grid", "persistent_request",
           "persistent_tiles"]
