"""``to_ir``: the unscheduled tensor IR of a ComputeDAG.

Every stage becomes one loop nest (a serial loop per spatial axis, then per reduce axis)
around a ``Block`` whose iteration vars are bound to those loops. Parameters are the DAG's
argument tensors in order; every other stage is an intermediate global buffer allocated
around the whole body. Stage names are made unique (``compute``, ``compute_1``) because loop
references in pass text are ``<stage>.<loop>``.
"""

from __future__ import annotations

from .attrs import FuncAttrs
from .compute_dag import ComputeDAG
from .expr import (
    Expr,
    IRError,
    Load,
    Reduce,
    TensorRead,
    Var,
    children,
    rebuild,
    reducer_combine,
    reducer_identity,
)
from .stmt import Alloc, Block, BlockVar, Buffer, For, If, Module, PrimFunc, Store, seq
from .te import ComputeOp, PlaceholderOp


def unique_name(name: str, taken: set) -> str:
    """``name`` if free, else ``name_1``, ``name_2``, ...; records the result in ``taken``."""
    out = name
    k = 1
    while out in taken:
        out = f"{name}_{k}"
        k += 1
    taken.add(out)
    return out


def to_ir(dag_or_tensors, name: str = "main") -> Module:
    """Lower a ComputeDAG (or the list of its argument tensors) to unscheduled tensor IR."""
    return to_ir_with_names(dag_or_tensors, name)[0]


def to_ir_with_names(dag_or_tensors, name: str = "main") -> tuple:
    """``(module, {id(op): stage name})``: :func:`to_ir` plus the unique stage names."""
    dag = dag_or_tensors if isinstance(dag_or_tensors, ComputeDAG) else ComputeDAG(
        dag_or_tensors)
    taken: set = set()
    stage_names: dict = {}
    buffers: dict = {}
    # arguments keep their names; an intermediate that shares one gets a suffix
    for t in dag.tensors:
        if id(t.op) not in stage_names:
            stage_names[id(t.op)] = unique_name(t.op.name, taken)
    for op in dag.ops:
        if id(op) not in stage_names:
            stage_names[id(op)] = unique_name(op.name, taken)
    params = []
    for t in dag.tensors:
        if id(t.op) in buffers:
            raise IRError(f"tensor {t.name} is listed twice among the arguments")
        b = Buffer(stage_names[id(t.op)], t.dtype, t.shape, "global")
        buffers[id(t.op)] = b
        params.append(b)
    temps = []
    for op in dag.ops:
        if id(op) not in buffers:
            if isinstance(op, PlaceholderOp):
                raise IRError(
                    f"placeholder {op.name} is read but not among the arguments; add it"
                )
            b = Buffer(stage_names[id(op)], op.dtype, op.shape, "global")
            buffers[id(op)] = b
            temps.append(b)
    # loop names are unique in the whole function, so the printed text keeps them and a
    # pipeline written against this module applies to the module parsed from its text
    loop_names: set = set()
    stages = [
        stage_nest(op, stage_names[id(op)], buffers, loop_names) for op in dag.ops
        if isinstance(op, ComputeOp)
    ]
    body = seq(*stages)
    for b in reversed(temps):
        body = Alloc(b, body)
    return Module([PrimFunc(name, params, body, FuncAttrs.prim())]), stage_names


def stage_nest(op: ComputeOp, block_name: str, buffers: dict, loop_names: set | None = None):
    """The loop nest and block of one compute stage (loop names made unique in
    ``loop_names``, which records them)."""
    out = buffers[id(op)]
    axes = list(op.axis) + list(op.reduce_axis)
    taken = set() if loop_names is None else loop_names
    loop_vars = [Var(unique_name(a.var.name, taken)) for a in axes]
    block_vars = [
        BlockVar(Var(unique_name("v" + a.var.name, taken)), a.extent,
                 "S" if a.kind == "spatial" else "R")
        for a in axes
    ]
    vmap = {a.var: bv.var for a, bv in zip(axes, block_vars)}
    spatial_idx = tuple(bv.var for bv in block_vars[: len(op.axis)])

    def convert(e: Expr) -> Expr:
        if isinstance(e, Var):
            return vmap.get(e, e)
        if isinstance(e, TensorRead):
            idx = tuple(convert(i) for i in e.indices)
            return Load(buffers[id(e.tensor.op)], idx)
        if isinstance(e, Reduce):
            raise IRError(f"stage {op.name}: a reduction nested inside an expression")
        kids = children(e)
        if not kids:
            return e
        return rebuild(e, tuple(convert(k) for k in kids))

    body_expr = op.body
    init = None
    if isinstance(body_expr, Reduce):
        src = convert(body_expr.source)
        acc = Load(out, spatial_idx)
        value = reducer_combine(body_expr.combiner, acc, src)
        body = Store(out, spatial_idx, value)
        if body_expr.where is not None:
            body = If(convert(body_expr.where), body)
        init = Store(out, spatial_idx, reducer_identity(body_expr.combiner, out.dtype))
    else:
        body = Store(out, spatial_idx, convert(body_expr))
    stmt = Block(block_name, block_vars, loop_vars, body, init=init)
    for lv, a in reversed(list(zip(loop_vars, axes))):
        stmt = For(lv, a.extent, stmt)
    return stmt
