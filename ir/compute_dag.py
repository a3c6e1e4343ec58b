"""ComputeDAG: the operations of a computation in topological order.

Built from the input and output tensors of a compute declaration, it prints the text users
know from TVM's tutorials, counts floating-point work and gives a stable hash for workload keys.
What TVM's ``auto_scheduler.ComputeDAG`` adds about schedules (the initial state, a state
printed as te code) needs the schedule passes: :class:`ptxforge.passes.schedule.dag.ScheduleDAG`
has it, a floor above.
"""

from __future__ import annotations

import hashlib

from .expr import Bin, Call, Cast, Cmp, Expr, Load, Not, Reduce, Select, TensorRead, children
from .exprprint import expr_str
from .te import ComputeOp, PlaceholderOp, TEError, Tensor


class ComputeDAG:
    """The DAG of operations reachable from ``tensors`` (inputs and outputs of a workload)."""

    def __init__(self, tensors):
        tensors = list(tensors)
        if not tensors:
            raise TEError("ComputeDAG needs at least one tensor")
        for t in tensors:
            if not isinstance(t, Tensor):
                raise TEError(f"ComputeDAG takes te tensors, got {t!r}")
        self.tensors = tensors
        outputs = [t for t in tensors if isinstance(t.op, ComputeOp)]
        if not outputs:
            raise TEError("ComputeDAG: none of the tensors is computed; pass the outputs too")
        self.ops = self._topo_order(tensors)
        consumers = {id(op): [] for op in self.ops}
        for op in self.ops:
            for t in op.input_tensors:
                # a reader of several outputs of a tuple compute is one consumer of it
                if not any(c is op for c in consumers[id(t.op)]):
                    consumers[id(t.op)].append(op)
        self._consumers = consumers
        # outputs: computed tensors among the arguments that nothing else inside reads,
        # plus any computed argument explicitly listed
        self.outputs = outputs
        for t in tensors:
            if isinstance(t.op, PlaceholderOp) and t.op not in self.ops:
                raise TEError(f"placeholder {t.name} is listed but not used by any output")

    @staticmethod
    def _topo_order(tensors) -> list:
        order: list = []
        seen: set = set()

        def visit(op):
            if id(op) in seen:
                return
            seen.add(id(op))
            for t in op.input_tensors:
                visit(t.op)
            order.append(op)

        for t in tensors:
            if isinstance(t.op, ComputeOp):
                visit(t.op)
        visit = None  # it calls itself: a cycle left to the collector otherwise
        for t in tensors:  # placeholders listed but unreachable are caught by the caller
            if isinstance(t.op, PlaceholderOp) and id(t.op) not in seen:
                pass
        return order

    # ------------------------------------------------------------------------------------
    @property
    def placeholders(self) -> list:
        return [op for op in self.ops if isinstance(op, PlaceholderOp)]

    @property
    def compute_ops(self) -> list:
        return [op for op in self.ops if isinstance(op, ComputeOp)]

    def consumers(self, op) -> list:
        return list(self._consumers[id(op)])

    def __str__(self) -> str:
        lines = []
        for op in self.ops:
            if isinstance(op, PlaceholderOp):
                lines.append(f"{op.name} = PLACEHOLDER {list(op.shape)}")
                continue
            axes = ", ".join(a.var.name for a in op.axis)
            for k, body in enumerate(op.bodies):
                # a tuple compute prints one line per output, named as its tensor (B.v0)
                lhs = op.output(k).name
                if isinstance(body, Reduce):
                    assign = {"sum": "+=", "max": "max=", "min": "min="}[body.combiner]
                    text = f"{lhs}({axes}) {assign} {expr_str(body.source)}"
                    if body.where is not None:
                        text += f" where {expr_str(body.where)}"
                else:
                    text = f"{lhs}({axes}) = {expr_str(body)}"
                lines.append(text)
        return "\n".join(lines) + "\n"

    __repr__ = __str__

    def flop_count(self) -> float:
        """Floating-point (and integer value) operations, not counting index arithmetic."""
        total = 0.0
        for op in self.compute_ops:
            n = 1
            for a in op.axis:
                n *= a.extent
            for body in op.bodies:
                if isinstance(body, Reduce):
                    r = 1
                    for a in body.axis:
                        r *= a.extent
                    per = 1 + _count_ops(body.source)
                    if body.where is not None:
                        per += _count_ops(body.where)
                    total += n * r * per
                else:
                    total += n * _count_ops(body)
        return float(total)

    def structural_hash(self) -> str:
        """A hash of the DAG text plus every shape and dtype: equal DAGs hash equal."""
        parts = [str(self)]
        for op in self.ops:
            dts = op.dtype if len(op.dtypes) == 1 else ",".join(op.dtypes)
            parts.append(f"{op.name}:{list(op.shape)}:{dts}:{op.tag}")
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]

    def workload_key(self) -> str:
        return f'["{self.structural_hash()}"]'


def _count_ops(e: Expr) -> int:
    if isinstance(e, (TensorRead, Load)):
        return 0  # index arithmetic is not counted
    if isinstance(e, Select):
        return _count_ops(e.cond) + max(_count_ops(e.t), _count_ops(e.f))
    own = 1 if isinstance(e, (Bin, Cmp, Not, Call)) else 0
    if isinstance(e, Cast):
        own = 0
    return own + sum(_count_ops(c) for c in children(e))
