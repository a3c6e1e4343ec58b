"""What the default schedules need to know about a DAG before scheduling it.

* which stages are inlined (every injective stage that is not an output and has one
  output: a tuple compute cannot be inlined, it gets a stage of its own),
* which reduction is fused into which element-wise consumer (its epilogue),
* for a reduction, how each input is indexed by the output and reduce axes, so the tile
  chooser can estimate shared-memory footprints and per-thread loads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...ir.arith import affine_in
from ...ir.expr import Expr, Reduce, TensorRead, children, free_vars, substitute
from ...ir.simplify import simplify
from ...ir.te import ComputeOp, Tensor


def is_reduction(op) -> bool:
    """True for a compute stage with reduce axes."""
    return isinstance(op, ComputeOp) and bool(op.reduce_axis)


def tensor_reads(expr: Expr) -> list[TensorRead]:
    """Every tensor read in ``expr``, depth first, left to right."""
    # an explicit stack, not a closure calling itself: that closure is a reference cycle
    # the collector must find (builders keep it paused through a candidate's build)
    out: list[TensorRead] = []
    stack = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, TensorRead):
            out.append(e)
        stack.extend(reversed(children(e)))
    return out


def reads_through(op: ComputeOp, inlined: set) -> list[tuple[Tensor, tuple]]:
    """``(tensor, indices)`` of every read of a stage that is not inlined, seen from
    ``op``'s body with the inlined stages (ids in ``inlined``) substituted in; indices are
    expressions of ``op``'s axis and reduce vars."""
    out: list = []

    def visit(expr: Expr):
        for r in tensor_reads(expr):
            t = r.tensor
            if id(t.op) in inlined and isinstance(t.op, ComputeOp):
                body = t.op.bodies[t.value_index]
                inner = body.source if isinstance(body, Reduce) else body
                vmap = {a.var: i for a, i in zip(t.op.axis, r.indices)}
                visit(substitute(inner, vmap))
            else:
                out.append((t, r.indices))

    for body in op.bodies:
        visit(body)
    visit = None  # noqa: F841 - the closure refers to itself: break that cycle
    return out


@dataclass
class DagPlan:
    """How :func:`ptxforge.ops.schedules.default_schedule` treats each stage.

    Attributes:
        ops: the compute stages in topological order.
        outputs: ids of the stages whose tensors are outputs.
        inlined: ids of the stages inlined into their readers.
        epilogue: ``{id(reduction): consumer}``: the consumer's loops are tiled and the
            reduction is computed at its thread loop.
    """

    ops: list
    outputs: set
    inlined: set
    epilogue: dict

    @property
    def fused_consumers(self) -> set:
        """Ids of the stages a reduction is fused into."""
        return {id(c) for c in self.epilogue.values()}


def plan_dag(compute_ops: list, outputs: list, remap_ok=None) -> DagPlan:
    """Decide inlining and epilogue fusion for the stages ``compute_ops`` (topological
    order) computing ``outputs``.

    ``remap_ok(op)``, where given, says whether reduction ``op``'s schedule stores through
    an epilogue that reads it at permuted digits of its own axes
    (:func:`~ptxforge.ops.schedules.remap.output_remap`: a transpose or reshape of the
    product, such as an attention's head transpose back); such a consumer then is its
    epilogue too."""
    out_ids = {id(t.op) for t in outputs}
    inlined = {id(op) for op in compute_ops
               if id(op) not in out_ids and not op.reduce_axis and op.num_outputs == 1}
    readers: dict = {id(op): [] for op in compute_ops}
    for op in compute_ops:
        if id(op) in inlined:
            continue
        seen = set()
        for t, _ in reads_through(op, inlined):
            if id(t.op) in readers and id(t.op) not in seen:
                seen.add(id(t.op))
                readers[id(t.op)].append(op)
    epilogue: dict = {}
    claimed: set = set()
    for op in compute_ops:
        if not op.reduce_axis or id(op) in out_ids:
            continue
        consumers = readers[id(op)]
        if len(consumers) != 1:
            continue
        c = consumers[0]
        if id(c) in claimed:
            continue
        if not is_epilogue_of(c, op, inlined):
            if remap_ok is None or not remap_ok(op):
                continue
            from .remap import output_remap

            if output_remap(c, op, inlined) is None:
                continue
        epilogue[id(op)] = c
        claimed.add(id(c))
    return DagPlan(list(compute_ops), out_ids, inlined, epilogue)


def is_epilogue_of(consumer: ComputeOp, producer: ComputeOp, inlined: set) -> bool:
    """True when ``consumer`` is element-wise in ``producer``: same shape, no reduction, and
    every read of ``producer`` (through inlined stages) is at the consumer's own index, so
    computing the producer per consumer element recomputes nothing."""
    if consumer.reduce_axis or tuple(consumer.shape) != tuple(producer.shape):
        return False
    if consumer.num_outputs != 1:
        return False  # a tuple compute is scheduled on its own (flat over its elements)
    axis_vars = [a.var for a in consumer.axis]
    found = False
    for t, indices in reads_through(consumer, inlined):
        if t.op is not producer:
            continue
        found = True
        if len(indices) != len(axis_vars):
            return False
        for idx, v in zip(indices, axis_vars):
            if simplify(idx) is not v:
                return False
    return found


# ---------------------------------------------------------------------------------------
# access patterns of a reduction


@dataclass(frozen=True)
class IndexDim:
    """One index of a read: ``sum(coeffs[v] * v) + const`` when ``affine``, else just the
    vars it depends on (``coeffs`` maps each to 1)."""

    coeffs: dict
    affine: bool
    extent: int


@dataclass(frozen=True)
class InputAccess:
    """How a reduction reads one input tensor.

    Attributes:
        tensor: the tensor read.
        dims: one :class:`IndexDim` per dimension of the tensor.
        contiguous_in_reduce: the innermost index moves with the innermost reduce loop only
            (so consecutive reduction steps read consecutive elements: vector loads).
    """

    tensor: Tensor
    dims: tuple
    contiguous_in_reduce: bool


def affine_coeffs(e: Expr, variables: set) -> dict | None:
    """``{var: coefficient}`` (nonzero ones) when ``e`` is affine in ``variables`` (other
    vars or constants only as additive terms), else None; see :func:`ir.arith.affine_in`."""
    form = affine_in(e, variables, others=True)
    return None if form is None else {v: c for v, c in form[0].items() if c != 0}


def input_accesses(op: ComputeOp, inlined: set = frozenset()) -> list[InputAccess]:
    """The reads of reduction ``op``'s direct inputs (one entry per read)."""
    variables = {a.var for a in op.axis} | {a.var for a in op.reduce_axis}
    reduce_vars = [a.var for a in op.reduce_axis]
    innermost = reduce_vars[-1] if reduce_vars else None
    out = []
    for r in tensor_reads(op.body):
        dims = []
        for idx, extent in zip(r.indices, r.tensor.shape):
            c = affine_coeffs(idx, variables)
            if c is None:
                dims.append(IndexDim({v: 1 for v in free_vars(idx) & variables}, False, extent))
            else:
                dims.append(IndexDim(c, True, extent))
        last = dims[-1] if dims else None
        contiguous = bool(last is not None and last.affine and last.coeffs == {innermost: 1})
        out.append(InputAccess(r.tensor, tuple(dims), contiguous))
    return out


def footprint(access: InputAccess, tile: dict):
    """Elements of ``access.tensor`` one tile touches; ``tile`` maps each var to the extent
    it ranges over (scalars or numpy arrays of candidates; absent vars are fixed)."""
    total = 1
    for d in access.dims:
        if d.affine:
            span = 1
            for v, c in d.coeffs.items():
                span = span + abs(c) * (tile.get(v, 1) - 1)
        else:
            span = 1
            for v in d.coeffs:
                span = span * tile.get(v, 1)
        total = total * np.minimum(span, d.extent)
    return total
