"""decompose_reduction: move each reduction's init in front of its outermost reduce loop."""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.attrs import Level
from ...ir.expr import Var, conjuncts, free_vars, logical_and, substitute
from ...ir.stmt import Block, BlockVar, For, PrimFunc, Seq, Stmt, stmt_children, substitute_stmt
from ...ir.traversal import follow_path, replace_at
from ..base import Pass
from ..registry import register_pass


def _first_block_with_init(s: Stmt, path: list):
    if isinstance(s, Block) and s.init is not None:
        return path + [s]
    for c in stmt_children(s):
        r = _first_block_with_init(c, path + [s])
        if r is not None:
            return r
    return None


def decompose_reduction(func: PrimFunc) -> PrimFunc:
    body = func.body
    while True:
        found = _first_block_with_init(body, [])
        if found is None:
            return func.replace(body=body)
        body = _decompose(found)


def _decompose(path: list) -> Stmt:
    block: Block = path[-1]
    red_vars = set()
    spatial_vars = set()
    spatial = []
    for iv, b in zip(block.iter_vars, block.bindings):
        if iv.kind == "R":
            red_vars |= free_vars(b)
        else:
            spatial.append((iv, b))
            spatial_vars |= free_vars(b)
    # a loop that also indexes the output (an rfactor'ed axis) is not a reduction loop
    red_vars -= spatial_vars
    loops = [(k, n) for k, n in enumerate(path[:-1]) if isinstance(n, For)]
    top = next((k for k, n in loops if n.var in red_vars), None)
    kept_pred = [c for c in conjuncts(block.predicate) if not (free_vars(c) & red_vars)]
    init_block_vars = [iv for iv, _ in spatial]
    needed = set()
    for _, b in spatial:
        free_vars(b, needed)
    for c in kept_pred:
        free_vars(c, needed)
    no_init = block.replace(init=None)
    if top is None:
        init_blk = _init_block(block, spatial, kept_pred, {}, init_block_vars)
        return replace_at(path, Seq([init_blk, no_init]))
    # copies of the spatial loops between the outermost reduce loop and the block
    vmap = {}
    copies = []
    for k, n in loops:
        if k <= top:
            continue
        if n.var in needed and n.var not in red_vars:
            v = Var(n.var.name + ".init")
            vmap[n.var] = v
            copies.append(n.replace(var=v))
    stmt = _init_block(block, spatial, kept_pred, vmap, init_block_vars)
    for c in reversed(copies):
        stmt = c.replace(body=stmt)
    new_body = replace_at(path, no_init)
    # re-find the top loop in the rebuilt tree (its identity changed) by walking the path
    top_node = path[top]
    parent_path = follow_path(new_body, path, top)
    new_top = parent_path[-1]
    assert new_top.var is top_node.var
    return replace_at(parent_path, Seq([stmt, new_top]))


def _init_block(block, spatial, preds, vmap, ivs):
    bindings = [substitute(b, vmap) for _, b in spatial]
    pred = None
    for c in preds:
        c = substitute(c, vmap)
        pred = c if pred is None else logical_and(pred, c)
    # the init block defines its own iteration vars (SSA: the reduction block keeps its own)
    fresh = [BlockVar(Var(iv.var.name), iv.extent, "S") for iv in ivs]
    init = substitute_stmt(block.init, {o.var: n.var for o, n in zip(ivs, fresh)})
    return Block(block.name + ".init", fresh, bindings, init, None, pred, block.annotations)


@register_pass
@dataclass(frozen=True)
class DecomposeReduction(Pass):
    """Move each reduction init in front of the outermost loop of its reduction."""

    name = "decompose_reduction"
    lowering = True
    levels = (Level.PRIM,)

    def apply(self, module, ctx):
        return self.map_functions(module, decompose_reduction)
