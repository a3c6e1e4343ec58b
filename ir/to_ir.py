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
    Bin,
    Expr,
    IntImm,
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


def output_buffer_name(stage: str, op, index: int) -> str:
    """The IR name of output ``index`` of ``op`` computed by stage ``stage``: the stage's
    name for a single output, ``<stage>_v<index>`` for each output of a tuple compute (the
    te tensor is ``<op>.v<index>``, as in TVM; a dot separates stage and loop in pass
    text, so buffers use an underscore)."""
    return stage if op.num_outputs == 1 else f"{stage}_v{index}"


def to_ir_with_names(dag_or_tensors, name: str = "main", buffer_names: dict | None = None
                      ) -> tuple:
    """``(module, {id(op): stage name})``: :func:`to_ir` plus the unique stage names.

    ``buffer_names``, when given, is filled with ``{(id(op), value_index): buffer name}``
    for every tensor (an op's buffer is named as its stage, except a tuple compute's)."""
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
    # the buffers of a tuple compute's outputs are named after its stage
    if buffer_names is None:
        buffer_names = {}
    for op in dag.ops:
        if op.num_outputs > 1:
            for k in range(op.num_outputs):
                buffer_names[(id(op), k)] = unique_name(
                    output_buffer_name(stage_names[id(op)], op, k), taken)
        else:
            buffer_names[(id(op), 0)] = stage_names[id(op)]
    params = []
    for t in dag.tensors:
        key = (id(t.op), t.value_index)
        if key in buffers:
            raise IRError(f"tensor {t.name} is listed twice among the arguments")
        b = Buffer(buffer_names[key], t.dtype, t.shape, "global")
        buffers[key] = b
        params.append(b)
    temps = []
    for op in dag.ops:
        for k in range(op.num_outputs):
            if (id(op), k) in buffers:
                continue
            if isinstance(op, PlaceholderOp):
                raise IRError(
                    f"placeholder {op.name} is read but not among the arguments; add it"
                )
            # an intermediate, or an output of a tuple compute the arguments leave out
            b = Buffer(buffer_names[(id(op), k)], op.dtypes[k], op.shape, "global")
            buffers[(id(op), k)] = b
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


def reads_memory(e: Expr) -> bool:
    """Whether ``e`` contains a load (its value depends on data, not only on loop vars)."""
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, (Load, TensorRead)):
            return True
        stack.extend(children(x))
    return False


def clamp_data_index(index: Expr, extent: int) -> Expr:
    """``index`` clamped into ``[0, extent)`` where it depends on data (an index read from
    another tensor, as an embedding lookup's ``table[ids[i], j]``), else ``index`` itself.

    An out-of-range data index has no defined result (PyTorch and ONNX runtimes leave it
    undefined; numpy references raise); clamping makes it read the nearest edge element
    instead of memory outside the buffer, on the GPU and in the simulator alike. Indices
    built from loop variables alone are left as they are: bound inference and the
    verifier keep those in range.
    """
    if not reads_memory(index):
        return index
    d = index.dtype
    return Bin("min", Bin("max", index, IntImm(0, d), d), IntImm(extent - 1, d), d)


def stage_nest(op: ComputeOp, block_name: str, buffers: dict, loop_names: set | None = None):
    """The loop nest and block of one compute stage (loop names made unique in
    ``loop_names``, which records them). ``buffers`` maps ``(id(op), value_index)`` to the
    buffer of that tensor; a tuple compute's block stores every output, in order."""
    outs = [buffers[(id(op), k)] for k in range(op.num_outputs)]
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
            buf = buffers[(id(e.tensor.op), e.tensor.value_index)]
            idx = tuple(clamp_data_index(convert(i), n) for i, n in zip(e.indices, buf.shape))
            return Load(buf, idx)
        if isinstance(e, Reduce):
            raise IRError(f"stage {op.name}: a reduction nested inside an expression")
        kids = children(e)
        if not kids:
            return e
        return rebuild(e, tuple(convert(k) for k in kids))

    init = None
    if len(op.bodies) == 1 and isinstance(op.bodies[0], Reduce):
        body_expr = op.bodies[0]
        out = outs[0]
        src = convert(body_expr.source)
        acc = Load(out, spatial_idx)
        value = reducer_combine(body_expr.combiner, acc, src)
        body = Store(out, spatial_idx, value)
        if body_expr.where is not None:
            body = If(convert(body_expr.where), body)
        init = Store(out, spatial_idx, reducer_identity(body_expr.combiner, out.dtype))
    else:
        body = seq(*[Store(out, spatial_idx, convert(b)) for out, b in zip(outs, op.bodies)])
    convert = None  # it calls itself: a cycle left to the collector otherwise
    stmt = Block(block_name, block_vars, loop_vars, body, init=init)
    for lv, a in reversed(list(zip(loop_vars, axes))):
        stmt = For(lv, a.extent, stmt)
    return stmt
