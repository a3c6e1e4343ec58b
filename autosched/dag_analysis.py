"""What the sketch rules need to know about a ComputeDAG: each stage's axes, how it reads
its inputs (affine index maps), who reads it, and which stages are inlined.

Stage names are the unique names the tensor IR uses (``compute``, ``compute_1``), because
pass text refers to stages by them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..ir.arith import affine_in
from ..ir.compute_dag import ComputeDAG
from ..ir.expr import Expr, Reduce, TensorRead, children, substitute
from ..ir.te import ComputeOp, PlaceholderOp
from ..ir.to_ir import to_ir_with_names


@dataclass(frozen=True)
class Access:
    """One read of ``producer`` (a stage or placeholder name) inside a stage.

    ``coef[d, a]`` is the coefficient of the stage's axis ``a`` (spatial axes, then reduce
    axes) in index ``d``; ``affine[d]`` says whether index ``d`` is affine in the axes (when
    it is not, the whole dimension is assumed read).
    """

    producer: str
    shape: tuple
    coef: np.ndarray
    affine: np.ndarray

    def is_identity(self, n_spatial: int) -> bool:
        """Whether the read is ``producer[ax0, ax1, ...]`` at the stage's own spatial axes."""
        if len(self.shape) != n_spatial or not self.affine.all():
            return False
        want = np.zeros_like(self.coef)
        for d in range(n_spatial):
            want[d, d] = 1
        return bool((self.coef == want).all())


@dataclass
class StageInfo:
    """A compute stage of the DAG."""

    name: str
    op: ComputeOp
    spatial: list            # [(axis name, extent)]
    reduce: list             # [(axis name, extent)]
    is_output: bool
    accesses: list = field(default_factory=list)   # direct reads, [Access]
    consumers: list = field(default_factory=list)  # names of the stages reading it
    inlined: bool = False

    @property
    def shape(self) -> tuple:
        return tuple(e for _, e in self.spatial)

    @property
    def space_size(self) -> int:
        return int(np.prod([e for _, e in self.spatial], dtype=np.int64))

    @property
    def reduce_size(self) -> int:
        return int(np.prod([e for _, e in self.reduce], dtype=np.int64))

    @property
    def ordered(self) -> bool:
        """Whether the reduction must run serially, in index order
        (:func:`ptxforge.ops.utils.order_sensitive`): no rule may split it over threads or
        blocks."""
        from ..ops.utils import order_sensitive

        return order_sensitive(self.op)

    @property
    def inputs(self) -> list:
        """Names of the tensors read, in order of first read."""
        out = []
        for a in self.accesses:
            if a.producer not in out:
                out.append(a.producer)
        return out

    def has_reuse(self) -> bool:
        """Whether some input is read without some spatial axis (so a tile of outputs
        shares input elements: Ansor's condition for multi-level tiling)."""
        n = len(self.spatial)
        for a in self.accesses:
            used = np.zeros(n, dtype=bool)
            for d in range(len(a.shape)):
                if not a.affine[d]:
                    used[:] = True
                used |= a.coef[d, :n] != 0
            if not used.all():
                return True
        return False


def affine_coeffs(e: Expr, index: dict) -> tuple | None:
    """``(coefficients by axis position, constant)`` when ``e`` is affine in the vars of
    ``index`` (var -> position), else None; see :func:`ir.arith.affine_in`."""
    form = affine_in(e, index)
    return None if form is None else ({index[v]: c for v, c in form[0].items()}, form[1])


def _reads(e: Expr) -> list:
    out = []
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, TensorRead):
            out.append(x)
        stack.extend(children(x))
    out.reverse()
    return out


class DAGAnalysis:
    """The stages of ``dag`` with their accesses, consumers and inline decisions."""

    def __init__(self, dag: ComputeDAG):
        self.dag = dag
        module, names = to_ir_with_names(dag)
        self.names = names
        # loop names as to_ir gives them (unique in the function: i0, i0_1, ...)
        from ..ir.traversal import block_paths, enclosing_loops

        paths = block_paths(module.main.body)
        outputs = {id(t.op) for t in dag.tensors if isinstance(t.op, ComputeOp)}
        self.placeholders = {names[id(op)]: op for op in dag.ops if isinstance(op, PlaceholderOp)}
        self.stages: dict = {}
        for op in dag.ops:
            if not isinstance(op, ComputeOp):
                continue
            name = names[id(op)]
            loops = [n.var.name for n in enclosing_loops(paths[name])]
            n_axis = len(op.axis)
            st = StageInfo(name, op, [(lp, a.extent) for lp, a in zip(loops, op.axis)],
                           [(lp, a.extent) for lp, a in zip(loops[n_axis:], op.reduce_axis)],
                           id(op) in outputs)
            axes = list(op.axis) + list(op.reduce_axis)
            index = {a.var: k for k, a in enumerate(axes)}
            for r in _reads(op.body):
                st.accesses.append(self._access(r, index, len(axes)))
            self.stages[name] = st
        for st in self.stages.values():
            for p in st.inputs:
                if p in self.stages:
                    self.stages[p].consumers.append(st.name)
        for st in self.stages.values():
            # always inline: element-wise / injective stages that are not outputs
            st.inlined = not st.reduce and not st.is_output and bool(st.consumers)

    def _access(self, r: TensorRead, index: dict, n_axes: int) -> Access:
        name = self.names[id(r.tensor.op)]
        nd = len(r.indices)
        coef = np.zeros((nd, n_axes), dtype=np.int64)
        affine = np.ones(nd, dtype=bool)
        for d, ix in enumerate(r.indices):
            ac = affine_coeffs(ix, index)
            if ac is None:
                affine[d] = False
                continue
            for k, c in ac[0].items():
                coef[d, k] = c
        coef.setflags(write=False)
        affine.setflags(write=False)
        return Access(name, tuple(r.tensor.shape), coef, affine)

    # ------------------------------------------------------------------------------------
    def io_bytes(self, out) -> float:
        """Bytes a kernel of this DAG moves at least: every placeholder read once and the
        output tensor ``out`` written once."""
        from ..ir.dtype import nbytes

        total = sum(float(np.prod(op.shape)) * nbytes(op.dtype)
                    for op in self.placeholders.values())
        return total + float(np.prod(out.shape)) * nbytes(out.dtype)

    def order(self) -> list:
        """Stage names in topological order."""
        return [self.names[id(op)] for op in self.dag.ops if isinstance(op, ComputeOp)]

    def effective_consumers(self, name: str) -> list:
        """The non-inlined stages that read ``name``, directly or through inlined stages."""
        out: list = []
        stack = list(self.stages[name].consumers)
        seen = set()
        while stack:
            c = stack.pop(0)
            if c in seen:
                continue
            seen.add(c)
            if self.stages[c].inlined:
                stack.extend(self.stages[c].consumers)
            elif c not in out:
                out.append(c)
        return out

    def effective_reads(self, consumer: str, producer: str) -> list | None:
        """The index tuples (te exprs in ``consumer``'s axes) at which ``consumer`` reads
        ``producer``, looking through inlined stages; None if some read cannot be traced."""
        op = self.stages[consumer].op
        return self._reads_through(op.body, producer, 0)

    def _reads_through(self, body: Expr, producer: str, depth: int) -> list | None:
        if depth > 64:
            return None
        out: list = []
        for r in _reads(body.source if isinstance(body, Reduce) else body):
            name = self.names[id(r.tensor.op)]
            if name == producer:
                out.append(tuple(r.indices))
                continue
            st = self.stages.get(name)
            if st is None or not st.inlined:
                continue
            vmap = {a.var: ix for a, ix in zip(st.op.axis, r.indices)}
            inner = self._reads_through(st.op.body, producer, depth + 1)
            if inner is None:
                return None
            out.extend(tuple(substitute(i, vmap) for i in idx) for idx in inner)
        return out

    def fusible_consumer(self, name: str) -> str | None:
        """The element-wise consumer that ``name`` can be computed inside of (at its
        thread level), as Ansor fuses a tiled stage with its consumer; None if there is
        none (then the stage writes through a local cache)."""
        st = self.stages[name]
        if st.is_output:
            return None
        cons = self.effective_consumers(name)
        if len(cons) != 1:
            return None
        c = self.stages[cons[0]]
        if c.reduce or c.shape != st.shape:
            return None
        reads = self.effective_reads(c.name, name)
        if not reads:
            return None
        axes = [a.var for a in c.op.axis]
        for idx in reads:
            if len(idx) != len(axes) or any(i is not v for i, v in zip(idx, axes)):
                return None
        return c.name
