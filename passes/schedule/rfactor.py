"""rfactor: split a reduction into a partial reduction indexed by one reduce loop, and a
final reduction over that loop (which can then be bound to threads: a cross-thread
reduction, or computed by many blocks)."""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.expr import (
    COMBINER_OF_OP,
    Load,
    Var,
    conjuncts,
    logical_and,
    reducer_identity,
    substitute,
)
from ...ir.stmt import Block, BlockVar, Buffer, For, If, PrimFunc, Store
from ...ir.traversal import enclosing_loops, replace_at
from ..params import Ref, positional
from ..registry import register_pass
from .cache_read import top_level_index, wrap_allocs
from .common import ScheduleError, SchedulePass, find_loop, on_main
from .compute_at import output_buffer
from .names import rfactor_name


def _reduction_parts(block: Block, out: Buffer):
    """(combiner, source expr) of ``out[s] = out[s] <op> source``."""
    st = block.body
    if not isinstance(st, Store) or st.buffer is not out:
        raise ScheduleError(f"rfactor {block.name}: its body is not a single reduction store")
    v = st.value
    from ...ir.expr import Bin

    if not (isinstance(v, Bin) and v.op in COMBINER_OF_OP):
        raise ScheduleError(f"rfactor {block.name}: unknown reduction combiner in {v}")
    for acc, src in ((v.a, v.b), (v.b, v.a)):
        if isinstance(acc, Load) and acc.buffer is out and all(
                a is b for a, b in zip(acc.indices, st.indices)):
            return COMBINER_OF_OP[v.op], src
    raise ScheduleError(f"rfactor {block.name}: the store is not of the form out = out op x")


def rfactor(func: PrimFunc, loop: str, factor_axis: int = 0) -> PrimFunc:
    lpath, stage = find_loop(func, loop)
    target: For = lpath[-1]
    from ...ir.traversal import block_paths

    bpath = block_paths(func.body)[stage]
    block: Block = bpath[-1]
    if block.init is None:
        raise ScheduleError(f"rfactor {loop}: stage {stage} is not a reduction")
    out = output_buffer(block)
    s_bind = [(iv, b) for iv, b in zip(block.iter_vars, block.bindings) if iv.kind == "S"]
    r_bind = [(iv, b) for iv, b in zip(block.iter_vars, block.bindings) if iv.kind == "R"]
    from ...ir.expr import free_vars

    s_loops = set()
    for _, b in s_bind:
        free_vars(b, s_loops)
    r_loops = set()
    for _, b in r_bind:
        free_vars(b, r_loops)
    if target.var not in r_loops or target.var in s_loops:
        raise ScheduleError(f"rfactor {loop}: it is not a reduction loop of {stage}")
    if not 0 <= factor_axis <= len(s_bind):
        raise ScheduleError(f"rfactor {loop}: factor_axis {factor_axis} out of range")
    loops = enclosing_loops(bpath)
    red_loops = [n for n in loops if n.var in r_loops]
    combiner, source = _reduction_parts(block, out)
    # the partial reduction: out indexed additionally by the rfactor loop
    rf_shape = list(out.shape)
    rf_shape.insert(factor_axis, target.extent)
    rf = Buffer(rfactor_name(out.name), out.dtype, rf_shape, "global")
    v_new = BlockVar(Var("v" + target.var.name.replace(".", "_")), target.extent, "S")
    r_vars = []
    loop_to_blockvar = {target.var: v_new.var}
    for n in red_loops:
        if n is target:
            continue
        bv = BlockVar(Var("v" + n.var.name.replace(".", "_")), n.extent, "R")
        r_vars.append((bv, n.var))
        loop_to_blockvar[n.var] = bv.var
    # B's reduce iteration vars in terms of the partial block's vars
    rmap = {iv.var: substitute(b, loop_to_blockvar) for iv, b in r_bind}
    s_vars = [iv for iv, _ in s_bind]
    idx = [iv.var for iv in s_vars]
    idx.insert(factor_axis, v_new.var)
    rf_src = substitute(source, rmap)
    from ...ir.expr import reducer_combine

    rf_body = Store(rf, idx, reducer_combine(combiner, Load(rf, tuple(idx)), rf_src))
    # guards on the reduce loops (uneven splits) move into the body, in block vars, so
    # they survive a later compute_at of the partial stage; the rest stay a predicate
    keep, guard = [], []
    for c in conjuncts(block.predicate):
        (guard if free_vars(c) <= set(loop_to_blockvar) else keep).append(c)
    for c in guard:
        rf_body = If(substitute(c, loop_to_blockvar), rf_body)
    pred = None
    for c in keep:
        pred = c if pred is None else logical_and(pred, c)
    rf_init = Store(rf, idx, reducer_identity(combiner, out.dtype))
    ivs = list(s_vars)
    ivs.insert(factor_axis, v_new)
    binds = [b for _, b in s_bind]
    binds.insert(factor_axis, target.var)
    rf_block = Block(rfactor_name(stage), ivs + [bv for bv, _ in r_vars],
                     binds + [lv for _, lv in r_vars], rf_body, rf_init, pred,
                     block.annotations)
    body = replace_at(bpath, rf_block)
    # the final reduction over the rfactor loop, in a new loop nest after the partial one
    fin_s = [BlockVar(Var(iv.var.name), iv.extent, "S") for iv in s_vars]
    fin_r = BlockVar(Var("v" + target.var.name.replace(".", "_")), target.extent, "R")
    fin_idx = [bv.var for bv in fin_s]
    rf_idx = list(fin_idx)
    rf_idx.insert(factor_axis, fin_r.var)
    fin_body = Store(out, fin_idx, reducer_combine(combiner, Load(out, tuple(fin_idx)),
                                                   Load(rf, tuple(rf_idx))))
    fin_init = Store(out, fin_idx, reducer_identity(combiner, out.dtype))
    s_loop_vars = [Var(iv.var.name[1:] if iv.var.name.startswith("v") else iv.var.name)
                   for iv in s_vars]
    r_loop_var = Var(target.var.name)
    fin_block = Block(stage, fin_s + [fin_r], s_loop_vars + [r_loop_var], fin_body, fin_init)
    nest = For(r_loop_var, target.extent, fin_block)
    for lv, bv in reversed(list(zip(s_loop_vars, fin_s))):
        nest = For(lv, bv.extent, nest)
    stmts, k, allocs = top_level_index(body, rfactor_name(stage))
    stmts.insert(k + 1, nest)
    return func.replace(body=wrap_allocs(stmts, allocs + [rf]))


@register_pass
@dataclass(frozen=True)
class RFactor(SchedulePass):
    """Factor a reduction: a partial-result stage (:func:`~.names.rfactor_name`) indexed
    by the reduce loop ``loop`` (at dimension ``factor_axis``), and the stage itself
    reducing over it.

    Parameters:
        loop: a reduce loop of the stage, ``<stage>.<loop>``.
        factor_axis: where the new dimension goes in the partial-result buffer.
    """

    name = "rfactor"
    loop: Ref = positional()
    factor_axis: int = 0

    def apply(self, module, ctx):
        return on_main(module, lambda f: rfactor(f, self.loop, self.factor_axis))

