"""compute_at: compute a producer stage inside a loop of its consumer.

The producer's loop nest moves to the start of the consumer loop's body and shrinks to the
region of the producer's output that one iteration of that loop reads. Where the producer's
loops come from splits and reorders (each loop var in one binding, affinely), they keep
their structure with smaller extents, as TVM's te does; otherwise fresh loops cover the
region. For a shared-memory producer the region covers every thread of the block (thread
and vthread loops above the attach point range over their extents); for any other scope
it is the region of one thread.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.arith import affine_in
from ...ir.expr import (
    Load,
    Var,
    children,
    conjuncts,
    const,
    free_vars,
    logical_and,
    substitute,
)
from ...ir.region import access_region
from ...ir.simplify import const_bounds, prove, simplify
from ...ir.stmt import Block, For, If, PrimFunc, Seq, Store, walk
from ...ir.traversal import blocks_under, replace_at
from ..params import Ref, positional
from ..registry import register_pass
from .common import (
    ScheduleError,
    SchedulePass,
    find_block,
    find_loop,
    loop_names_on_path,
    on_main,
    own_loop_top,
    paths_of,
)
from .names import copy_axis, fresh_name


def output_buffers(block: Block) -> list:
    """The buffers ``block`` stores to, in order of their first store: one for most stages,
    one per output for a tuple compute's stage."""
    out: list = []
    for s in walk(block.body):
        if isinstance(s, Store) and not any(b is s.buffer for b in out):
            out.append(s.buffer)
    if not out:
        raise ScheduleError(f"stage {block.name} stores to no buffer")
    return out


def output_buffer(block: Block, primitive: str = ""):
    """The one buffer ``block`` writes; a clear error for a tuple compute's stage (it
    writes one buffer per output), naming ``primitive`` when given."""
    bufs = output_buffers(block)
    if len(bufs) != 1:
        what = f"{primitive} {block.name}: " if primitive else f"stage {block.name} "
        raise ScheduleError(
            f"{what}{'it ' if primitive else ''}writes {len(bufs)} buffers "
            f"({', '.join(b.name for b in bufs)}), the outputs of a tuple compute; "
            f"{primitive or 'this'} needs a stage that writes a single buffer")
    return bufs[0]


def _read_exprs(block: Block):
    """The expressions of ``block`` whose loads :func:`reads_of` reads: every store's
    indices and value and every condition, in program order."""
    for s in walk(block):
        if isinstance(s, Store):
            yield from s.indices
            yield s.value
        elif hasattr(s, "cond"):
            yield s.cond


def reads_of(block: Block, buf) -> list:
    """Index tuples of every load of ``buf`` in ``block``, in terms of loop vars."""
    vmap = {iv.var: b for iv, b in zip(block.iter_vars, block.bindings)}
    out = []
    for e in _read_exprs(block):
        stack = [e]
        while stack:
            x = stack.pop()
            if isinstance(x, Load) and x.buffer is buf:
                out.append(tuple(substitute(i, vmap) for i in x.indices))
            stack.extend(children(x))
    return out


_loaded: dict = {}  # id(block) -> (block, the buffers its stores and conditions load)


def reads_any(block: Block, bufs) -> bool:
    """Whether :func:`reads_of` finds a load of any of ``bufs`` in ``block`` (without
    making the index tuples). A schedule asks this of every stage after each primitive,
    and most stages are the same (immutable) blocks as before: each block's loaded buffers
    are listed once and remembered (for about the last thousand blocks: a schedule's)."""
    hit = _loaded.get(id(block))
    if hit is None or hit[0] is not block:
        loaded = set()
        for e in _read_exprs(block):
            stack = [e]
            while stack:
                x = stack.pop()
                if isinstance(x, Load):
                    loaded.add(x.buffer)
                stack.extend(children(x))
        if len(_loaded) >= 1024:
            _loaded.clear()
        hit = _loaded[id(block)] = (block, frozenset(loaded))
    return not hit[1].isdisjoint(bufs)


def _affine_coeffs(e, loop_vars: set):
    """``{var: coeff}`` if ``e`` simplifies to a sum of ``coeff * loop var`` terms (no
    constant); see :func:`ir.arith.affine_in`."""
    form = affine_in(simplify(e), loop_vars)
    return None if form is None or form[1] != 0 else form[0]


def compute_at(func: PrimFunc, stage: str, loop: str) -> PrimFunc:
    ppath = find_block(func, stage)
    producer: Block = ppath[-1]
    # a tuple compute's stage writes one buffer per output: its readers are those of any
    bufs = output_buffers(producer)
    names = ", ".join(b.name for b in bufs)
    lpath, _ = find_loop(func, loop)
    target: For = lpath[-1]
    if any(n is producer for n in blocks_under(target)):
        raise ScheduleError(f"compute_at {stage}: it is already inside {loop}")
    if any(n is target for n in ppath):
        raise ScheduleError(f"compute_at {stage}: {loop} is one of its own loops")
    consumers = [
        (name, p[-1]) for name, p in paths_of(func.body).items()
        if name != stage and reads_any(p[-1], bufs)
    ]
    if not consumers:
        raise ScheduleError(f"compute_at {stage}: no stage reads {names}")
    inside = {id(b) for b in blocks_under(target)}
    outside = [name for name, b in consumers if id(b) not in inside]
    if outside:
        raise ScheduleError(
            f"compute_at {stage}: {', '.join(outside)} also read {names} but are not inside "
            f"{loop}; a stage can only be computed inside a loop that holds all its readers"
        )
    # 1. take the producer's own nest out
    top = own_loop_top(ppath)
    own_loops = [n for n in ppath[top:-1] if isinstance(n, For)]
    body = replace_at(ppath[: top + 1], None)
    func1 = func.replace(body=body)
    lpath, _ = find_loop(func1, loop)
    target = lpath[-1]
    # 2. the region one iteration of the target loop reads
    shared = any(b.scope == "shared" for b in bufs)
    fixed_ranges = {}
    for n in lpath:
        if isinstance(n, For):
            if shared and n.kind in ("thread", "vthread") and not n.thread.startswith("block"):
                continue
            fixed_ranges[n.var] = (0, n.extent - 1)
    accesses = []
    inner: dict = {}
    for n in lpath:
        if isinstance(n, For) and n.var not in fixed_ranges:
            inner[n.var] = (0, n.extent - 1)
    cpaths = paths_of(target)
    for name, _ in consumers:
        cp = cpaths[name]
        for n in cp[1:-1]:
            if isinstance(n, For):
                inner[n.var] = (0, n.extent - 1)
        for b in bufs:
            accesses.extend(reads_of(cp[-1], b))
    # every output of a tuple compute has the stage's shape and is stored at its axes: the
    # union of the regions read of each is the region of the stage to compute
    region = access_region(accesses, bufs[0].shape, inner, fixed_ranges)
    # 3. the producer's nest over that region
    taken = loop_names_on_path(lpath) | {
        n.var.name for p in cpaths.values() for n in p if isinstance(n, For)
    }
    nest = _restructure(producer, own_loops, region, taken, fixed_ranges)
    new_target = target.replace(body=Seq([nest, target.body]))
    return func1.replace(body=replace_at(lpath, new_target))


def _stores_at_own_axes(producer: Block, spatial: list) -> bool:
    """Whether the producer's body is its store (a tuple compute: its stores, one per output)
    at its own spatial axes in order, under an optional guard."""
    st = producer.body
    while isinstance(st, If) and st.else_ is None:
        st = st.then
    stores = list(st.stmts) if isinstance(st, Seq) else [st]
    return all(isinstance(x, Store) and len(x.indices) == len(spatial) and all(
        i is iv.var for i, (_, iv) in zip(x.indices, spatial)) for x in stores)


def _restructure(producer: Block, own_loops: list, region: list, taken: set,
                 fixed_ranges: dict):
    loop_vars = {n.var for n in own_loops}
    spatial = [(k, iv) for k, iv in enumerate(producer.iter_vars) if iv.kind == "S"]
    if not _stores_at_own_axes(producer, spatial):
        raise ScheduleError(
            f"compute_at {producer.name}: it must store at its own spatial axes in order"
        )
    coeffs = [_affine_coeffs(producer.bindings[k], loop_vars) for k, _ in spatial]
    used = {}
    keep = all(c is not None for c in coeffs)
    if keep:
        for c in coeffs:
            for v in c:
                if v in used or c[v] <= 0:
                    keep = False
                used[v] = True
    reduce_vars = set()
    for k, iv in enumerate(producer.iter_vars):
        if iv.kind == "R":
            reduce_vars |= free_vars(producer.bindings[k]) & loop_vars
    if keep and any(v in reduce_vars for v in used):
        keep = False
    new_extents = {n.var: n.extent for n in own_loops}
    bindings = list(producer.bindings)
    preds = [c for c in conjuncts(producer.predicate)
             if free_vars(c) <= (reduce_vars | set())]
    ranges = dict(fixed_ranges)
    if keep:
        for (k, iv), c, (start, ext) in zip(spatial, coeffs, region):
            span = 0
            for v, coef in sorted(c.items(), key=lambda t: t[1]):
                e = min(new_extents[v], -(-ext // coef))
                new_extents[v] = e
                span += (e - 1) * coef
            offset = producer.bindings[k]
            bindings[k] = simplify(start + offset)
            if span + 1 > ext:
                preds.append(offset < const(ext))
            _guard_shape(bindings[k], iv, start, ext, ranges, preds, k)
        loops = [(n.var, new_extents[n.var]) for n in own_loops]
        # the reduce loops and the shrunk spatial loops keep their names
    else:
        loops = []
        vmap = {}
        for (k, iv), (start, ext) in zip(spatial, region):
            name = fresh_name(copy_axis(k), taken)
            v = Var(name)
            loops.append((v, ext))
            bindings[k] = simplify(start + v)
            _guard_shape(bindings[k], iv, start, ext, ranges, preds, k)
        for k, iv in enumerate(producer.iter_vars):
            if iv.kind == "R":
                name = fresh_name(iv.var.name.lstrip("v") or "r", taken)
                v = Var(name)
                loops.append((v, iv.extent))
                vmap[iv.var] = v
                bindings[k] = v
        preds = [c for c in preds if not (free_vars(c) & loop_vars)]
    pred = None
    for c in preds:
        pred = c if pred is None else logical_and(pred, c)
    block = producer.replace(bindings=bindings, predicate=pred)
    stmt = block
    old = {n.var: n for n in own_loops}
    for v, e in reversed(loops):
        if v in old:
            stmt = old[v].replace(extent=e, body=stmt)
        else:
            stmt = For(v, e, stmt)
    return stmt


def _guard_shape(binding, iv, start, ext, ranges, preds, k):
    """Add ``binding < extent`` unless the region provably stays inside the axis."""
    limit = iv.extent
    b = const_bounds(simplify(start), ranges)
    if b is not None and b[0] >= 0 and b[1] + ext <= limit:
        return
    cond = binding < const(limit)
    if not prove(cond, ranges):
        preds.append(cond)


@register_pass
@dataclass(frozen=True)
class ComputeAt(SchedulePass):
    """Compute a producer stage inside a loop of its consumer.

    Parameters:
        stage: the producer stage.
        loop: the consumer loop, ``<stage>.<loop>``.
    """

    name = "compute_at"
    stage: Ref = positional()
    loop: Ref = positional()

    def apply(self, module, ctx):
        return on_main(module, lambda f: compute_at(f, self.stage, self.loop))
