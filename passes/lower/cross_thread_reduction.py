"""cross_thread_reduction: a reduction whose reduce loop is bound to threadIdx becomes a
per-thread partial reduction followed by a tree reduction in shared memory.

Each thread accumulates its share into a local register, writes it to shared memory, and
the block combines the values in log2(n) steps separated by barriers; thread 0 writes the
result. The reduction's spatial indices must not depend on loops inside the thread loop
(one reduction per execution of the thread loop's body), and every reduce loop must be at
or inside the thread loop.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.attrs import Level
from ...ir.expr import (
    COMBINER_OF_OP,
    Bin,
    IntImm,
    Load,
    conjuncts,
    const,
    free_vars,
    reducer_identity,
    substitute,
)
from ...ir.stmt import Alloc, Barrier, Block, Buffer, For, If, PrimFunc, Seq, Store, stmt_children
from ...ir.traversal import follow_path, replace_at
from ..base import Pass
from ..registry import register_pass
from .common import LoweringError


def _find(s, path):
    if isinstance(s, Block) and s.init is not None and not s.annotations.get(
            "cross_thread_partial"):
        loops = [n for n in path if isinstance(n, For)]
        rv = set()
        for iv, b in zip(s.iter_vars, s.bindings):
            if iv.kind == "R":
                free_vars(b, rv)
        if any(n.kind == "thread" and n.thread.startswith("threadIdx") and n.var in rv
               for n in loops):
            return path + [s]
    for c in stmt_children(s):
        r = _find(c, path + [s])
        if r is not None:
            return r
    return None


def cross_thread_reduction(func: PrimFunc) -> PrimFunc:
    body = func.body
    while True:
        path = _find(body, [])
        if path is None:
            return func.replace(body=body)
        body = _rewrite(path)


def _rewrite(path):
    block: Block = path[-1]
    loops = [(k, n) for k, n in enumerate(path) if isinstance(n, For)]
    rv, sv = set(), set()
    for iv, b in zip(block.iter_vars, block.bindings):
        free_vars(b, rv if iv.kind == "R" else sv)
    tk, tloop = next((k, n) for k, n in loops if n.kind == "thread" and
                     n.thread.startswith("threadIdx") and n.var in rv)
    inner = {n.var for k, n in loops if k > tk}
    outer_red = [n for k, n in loops if k < tk and n.var in rv]
    if outer_red:
        raise LoweringError(
            f"cross-thread reduction {block.name}: reduce loop {outer_red[0].var.name} is "
            f"outside the thread loop {tloop.var.name}; put every reduce loop at or inside it",
            stage=block.name, axis=outer_red[0].var.name)
    if sv & inner:
        raise LoweringError(
            f"cross-thread reduction {block.name}: its output index depends on loops inside "
            f"the thread loop {tloop.var.name}; make the thread loop the innermost spatial "
            "loop's parent", stage=block.name, axis=tloop.var.name)
    st = block.body
    if not (isinstance(st, Store) and isinstance(st.value, Bin)
            and st.value.op in COMBINER_OF_OP):
        raise LoweringError(f"cross-thread reduction {block.name}: not a simple reduction",
                            stage=block.name)
    out = st.buffer
    combiner = COMBINER_OF_OP[st.value.op]
    acc_load, src = st.value.a, st.value.b
    if not (isinstance(acc_load, Load) and acc_load.buffer is out):
        acc_load, src = src, acc_load
    n = tloop.extent
    # other thread loops around the reduction: each of their indices is its own group
    groups = [nd for k, nd in loops if nd.kind == "thread" and nd.thread.startswith(
        "threadIdx") and nd is not tloop and k < tk]
    gsize = 1
    gidx = IntImm(0)
    for g in groups:
        gidx = gidx * IntImm(g.extent) + g.var
        gsize *= g.extent
    part = Buffer(f"{block.name}.red_local", out.dtype, (1,), "local")
    red = Buffer(f"{block.name}.red_shared", out.dtype, (gsize * n,), "shared")
    zero = (IntImm(0),)
    # per-thread partial: a reduction block into the local register
    pblock = Block(
        f"{block.name}.partial", block.iter_vars, block.bindings,
        Store(part, zero, Bin(st.value.op, Load(part, zero), src)),
        Store(part, zero, reducer_identity(combiner, out.dtype)), block.predicate,
        {**block.annotations, "cross_thread_partial": True})
    body = replace_at(path, pblock)
    # the tree reduction at the end of the thread loop's body
    tid = tloop.var
    base = gidx * IntImm(n)
    steps = [Store(red, (base + tid,), Load(part, zero)), Barrier()]
    p = 1
    while p < n:
        p *= 2
    stride = p // 2
    while stride >= 1:
        cond = (tid < const(stride)) & ((tid + IntImm(stride)) < const(n))
        upd = Store(red, (base + tid,), Bin(st.value.op, Load(red, (base + tid,)),
                                             Load(red, (base + tid + IntImm(stride),))))
        steps += [If(cond, upd), Barrier()]
        stride //= 2
    vmap = {iv.var: b for iv, b in zip(block.iter_vars, block.bindings) if iv.kind == "S"}
    out_idx = tuple(substitute(i, vmap) for i in st.indices)
    # the block's guards on loops outside the thread loop (a non-dividing split of a
    # spatial axis) also guard the write-back; those on reduce loops guarded the partials
    outside = {n.var for k, n in loops if k < tk}
    write = If(tid == const(0), Store(out, out_idx, Load(red, (base,))))
    for term in conjuncts(block.predicate):
        if free_vars(term) <= outside:
            write = If(term, write)
    steps.append(write)
    # rebuild: find the thread loop in the new tree by following the old path positions
    tpath = follow_path(body, path, tk)
    t_new = tpath[-1]
    # the register is declared around the thread loop: decompose_reduction puts the
    # partial reduction's init just before that loop
    new_t = Alloc(part, t_new.replace(body=Seq([t_new.body] + steps)))
    body = replace_at(tpath, new_t)
    # the shared buffer lives above the thread loops of the block
    first_thread = next(k for k, nd in loops if nd.kind == "thread" and
                        nd.thread.startswith("threadIdx"))
    apath = follow_path(body, path, first_thread)
    return replace_at(apath, Alloc(red, apath[-1]))


@register_pass
@dataclass(frozen=True)
class CrossThreadReduction(Pass):
    """Lower reductions over a threadIdx-bound loop to a shared-memory tree reduction."""

    name = "cross_thread_reduction"
    levels = (Level.PRIM,)

    def apply(self, module, ctx):
        return self.map_functions(module, cross_thread_reduction)
