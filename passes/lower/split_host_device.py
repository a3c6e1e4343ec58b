"""split_host_device: the lowered function becomes device kernels plus a host function.

Each top-level statement (inside the allocations of global temporaries) is one kernel; its
launch extents come from the thread loops it holds. Global buffers allocated inside a
kernel are hoisted to the host, which allocates them before launching.

A kernel whose block loop carries the ``persistent`` annotation gets a persistent grid
first (:func:`~.persistent_tiles.persistent_tiles`); a ``min_blocks_per_sm`` annotation
(the ``launch_bounds`` schedule pass), or the persistent blocks per SM, becomes the
kernel's launch bound (``KernelAttrs.min_blocks_per_sm``, ``.minnctapersm`` in PTX).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.attrs import FuncAttrs, KernelAttrs, Level
from ...ir.expr import Load
from ...ir.stmt import (
    Alloc,
    For,
    Launch,
    Module,
    PrimFunc,
    Seq,
    Stmt,
    Store,
    map_stmt,
    stmt_exprs,
)
from ...ir.traversal import walk, walk_exprs
from ..base import Pass
from ..registry import register_pass
from .common import lowering_target
from .persistent_tiles import launch_bound, persistent_tiles

GRID_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
BLOCK_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")


def launch_extents(s: Stmt) -> tuple:
    ext: dict = {}
    for x in walk(s):
        if isinstance(x, For) and x.kind == "thread":
            ext[x.thread] = max(ext.get(x.thread, 1), x.extent)
    grid = tuple(ext.get(t, 1) for t in GRID_TAGS)
    block = tuple(ext.get(t, 1) for t in BLOCK_TAGS)
    return grid, block


def _global_buffers(s: Stmt) -> list:
    """Global buffers accessed in ``s`` (first-use order), excluding those allocated in it."""
    seen: dict = {}
    local_allocs = set()
    for x in walk(s):
        if isinstance(x, Alloc):
            local_allocs.add(x.buffer)
        if isinstance(x, Store) and x.buffer.scope == "global":
            seen.setdefault(x.buffer, None)
        for e in stmt_exprs(x):
            for y in walk_exprs(e):
                if isinstance(y, Load) and y.buffer.scope == "global":
                    seen.setdefault(y.buffer, None)
    return [b for b in seen if b not in local_allocs]


def _hoist_global_allocs(s: Stmt, out: list) -> Stmt:
    def fix(x):
        if isinstance(x, Alloc) and x.buffer.scope == "global":
            out.append(x.buffer)
            return x.body
        return None

    return map_stmt(s, fstmt=fix)


def split_host_device(func: PrimFunc, host_params=None, order_params=None,
                      target=None) -> Module:
    """``host_params``: the n-D buffers the host function takes (default: func.params);
    ``order_params``: the flat param buffers of ``func`` matching them one to one;
    ``target``: the one persistent grids are sized for (default: the current one; a
    callable: called only where a kernel is persistent)."""
    host_params = tuple(host_params or func.params)
    flat_params = tuple(order_params or func.params)
    to_host = dict(zip(flat_params, host_params))
    body = func.body
    temps = []
    while isinstance(body, Alloc):
        temps.append(body.buffer)
        body = body.body
    stmts = list(body.stmts) if isinstance(body, Seq) else [body]
    kernels = []
    launches = []
    for k, st in enumerate(stmts):
        hoisted: list = []
        st = _hoist_global_allocs(st, hoisted)
        temps.extend(hoisted)
        name = f"{func.name}_kernel{k}"
        bound = launch_bound(st)
        st = persistent_tiles(st, target, name)
        grid, block = launch_extents(st)
        order = {b: i for i, b in enumerate(flat_params + tuple(temps))}
        args = sorted(_global_buffers(st), key=lambda b: order.get(b, len(order)))
        # buffers are flattened by the next pass; until then the kernel says so
        stages = tuple(dict.fromkeys(
            x.buffer.name for x in walk(st) if isinstance(x, Store)))
        # schedule attributes that lowering reads later, kept for the kernels they concern
        async_bufs = tuple(b for b in func.attrs.async_copy if b in stages)
        swizzles = {b: n for b, n in func.attrs.swizzle.items() if b in stages}
        attrs = FuncAttrs(Level.KERNEL, KernelAttrs(grid, block, stages, flat=False,
                                                    min_blocks_per_sm=bound),
                          async_copy=async_bufs, swizzle=swizzles,
                          software_pipeline=func.attrs.software_pipeline)
        kernels.append(PrimFunc(name, args, st, attrs))
        launches.append(Launch(name, [to_host.get(a, a) for a in args]))
    host_body: Stmt = Seq(launches)
    for t in reversed(temps):
        host_body = Alloc(t, host_body)
    host = PrimFunc(func.name, host_params, host_body, FuncAttrs.host())
    return Module([host] + kernels)


@register_pass
@dataclass(frozen=True)
class SplitHostDevice(Pass):
    """Turn the lowered function into kernels (one per top-level stage nest) and a host
    function that allocates global temporaries and launches them."""

    name = "split_host_device"
    lowering = True
    levels = (Level.PRIM,)

    def apply(self, module, ctx):
        self.check_levels(module)
        funcs = module.at_level(Level.PRIM)
        if len(funcs) != 1:
            from .common import LoweringError

            raise LoweringError(
                f"split_host_device expects one tensor-IR function, found {len(funcs)}")
        out = split_host_device(funcs[0], target=lambda: lowering_target(ctx))
        return Module(list(out.functions.values()), module.attrs)
