"""``default_schedule``: a hand-written GPU schedule for any DAG of the operator library.

1. Every injective stage that is not an output is inlined into its readers (padding into
   the shared-memory fetch of the convolution that reads it, bias and batch-norm
   arithmetic into the epilogue, softmax's exponential into its sum and normalization),
   except a tuple compute: it computes several outputs in one stage, which stays a stage
   (scheduled flat as an injective stage) and is never an epilogue.
2. A reduction whose only reader is an element-wise stage of the same shape, reading it
   at its own index, is fused with it: that epilogue stage is tiled and the reduction is
   computed per thread (conv2d + bias + relu is one kernel). A tensor-core matrix
   product's only reader may also be a stage that stores it in another layout (a
   transpose or reshape whose loops, split at the product's extents, are the product's:
   :mod:`~ptxforge.ops.schedules.remap`): the product stores each element there itself.
3. Every other stage gets the schedule registered for its tag
   (:func:`~ptxforge.ops.schedules.registry.default_schedule_for`): tiled with
   shared-memory staging for convolutions and matrix products, one output per thread for
   pooling and other reductions, flat over the elements for injective stages.
"""

from __future__ import annotations

from ...ir.te import ComputeOp, Operation, Tensor
from ...passes.schedule.schedule import Schedule, create_schedule
from ...target import Target, as_target
from .analysis import DagPlan, plan_dag
from .registry import default_schedule_for


def _as_tensors(outputs) -> list[Tensor]:
    outs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    tensors = []
    for o in outs:
        t = o.output(0) if isinstance(o, Operation) else o
        if not isinstance(t, Tensor) or not isinstance(t.op, ComputeOp):
            raise TypeError(f"default_schedule takes computed te tensors (or a list of them), "
                            f"got {o!r}")
        # an op (or any output of a tuple compute) stands for all its outputs
        for k in range(t.op.num_outputs):
            if t.op.output(k) not in tensors:
                tensors.append(t.op.output(k))
    if not tensors:
        raise ValueError("default_schedule needs at least one output tensor")
    return tensors


def _stores_through_remap(op: ComputeOp, target: Target) -> bool:
    """Whether the default schedule of reduction ``op`` can store its result through a
    remapped epilogue (:mod:`.remap`): the tensor-core GEMM's can, where its tiles divide
    the product (no zero padding)."""
    from .gemm.chooser import remap_config
    from .gemm.forms import GEMM_TAGS, gemm_form

    if op.tag not in GEMM_TAGS:
        return False
    form = gemm_form(op, target)
    return form is not None and remap_config(form, target) is not None


def _row_epilogue(compute_ops: list, tensors: list, target: Target):
    """The :class:`~.gemm_rows.RowEpilogue` of the DAG when its tensor-core product has a
    tile covering whole rows on ``target`` (:func:`~.gemm_rows.choose_row_config`), else
    None."""
    from .gemm.forms import gemm_form
    from .gemm_rows import choose_row_config, row_epilogue

    rows = row_epilogue(compute_ops, tensors)
    if rows is None:
        return None
    form = gemm_form(rows.product, target)
    if form is None or choose_row_config(form, target) is None:
        return None
    return rows


def plan(outputs) -> DagPlan:
    """How :func:`default_schedule` would treat each stage of the DAG of ``outputs``."""
    tensors = _as_tensors(outputs)
    s = create_schedule(tensors)
    return plan_dag([op for op in s.dag.ops if isinstance(op, ComputeOp)], tensors)


def default_schedule(outputs, target: Target | str | None = None) -> Schedule:
    """A schedule of the computation of ``outputs`` (a tensor or a list of tensors) that is
    valid on ``target`` (a string such as ``"cuda -arch=sm_80"`` or a
    :class:`~ptxforge.target.Target`; default: the current target) and reasonably fast."""
    target = as_target(target)
    tensors = _as_tensors(outputs)
    s = create_schedule(tensors)
    compute_ops = [op for op in s.dag.ops if isinstance(op, ComputeOp)]
    rows = _row_epilogue(compute_ops, tensors, target)
    if rows is not None:
        from .gemm_rows import schedule_gemm_rows

        schedule_gemm_rows(s, rows, target)
        return s
    p = plan_dag(compute_ops, tensors, lambda op: _stores_through_remap(op, target))
    # a stage a reduction reads directly (its padding) is inlined only after the stage
    # schedules ran: a tiled reduction first caches it in shared memory, and the copy then
    # computes it. The others go first, so that epilogues are single stages.
    read_by_reduction = {id(t.op) for op in compute_ops if op.reduce_axis
                         for t in op.input_tensors}
    early = [op for op in compute_ops
             if id(op) in p.inlined and id(op) not in read_by_reduction]
    late = [op for op in compute_ops
            if id(op) in p.inlined and id(op) in read_by_reduction]
    for op in reversed(early):
        s[op].compute_inline()
    fused = p.fused_consumers
    for op in reversed(compute_ops):
        if id(op) in p.inlined or id(op) in fused:
            continue
        default_schedule_for(op.tag)(s, op, p.epilogue.get(id(op)), target=target)
    for op in reversed(late):
        s[op].compute_inline()
    return s
