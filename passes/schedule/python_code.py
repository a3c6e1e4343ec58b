"""A schedule (a pass pipeline) as Python te schedule code, in the style of the tutorial's
"Equivalent python schedule".

The printed code expects two names: ``te`` (``ptxforge.te``) and ``tensors`` (the
computation's tensors, inputs then outputs); it defines ``s``, the schedule. Executing it
replays the same passes in the same order, so ``s.module`` is the IR the pipeline gives.

The printer dispatches on pass classes, and every string it writes into the code (stage,
loop and thread names, pragma keys, scopes) is written with ``repr``; variable names are
sanitized identifiers. A record's pipeline is data, so nothing in it can become code.

It is the inverse of the te schedule API (:mod:`.schedule`), so it lives beside it: the
auto-scheduler (``print_best``), ``ComputeDAG.print_python_code_from_state`` and anything
else that holds a pipeline print through :func:`schedule_python_code`.
"""

from __future__ import annotations

import keyword
from collections.abc import Mapping
from dataclasses import dataclass

from ...ir.compute_dag import ComputeDAG
from ...ir.te import ComputeOp, PlaceholderOp
from ...ir.to_ir import to_ir_with_names
from ...ir.traversal import block_paths, enclosing_loops
from ..base import Pass
from ..pipeline import Pipeline, SchedulePipeline
from .async_copy import AsyncCopy
from .bind import Bind
from .cache_read import CacheRead
from .cache_write import CacheWrite
from .compute_at import ComputeAt
from .compute_inline import ComputeInline
from .fuse import Fuse
from .layout_panels import LayoutPanels
from .names import (
    cache_name,
    copy_axes,
    fresh_name,
    fused_name,
    loop_ref,
    python_identifier,
    resolve_ref,
    rfactor_name,
    split_inner,
    split_outer,
)
from .pragma import Pragma
from .reorder import Reorder
from .rfactor import RFactor
from .software_pipeline import SoftwarePipeline
from .split import Split
from .storage_align import StorageAlign
from .swizzle import Swizzle
from .tensorize import Tensorize
from .unroll import Unroll
from .vectorize import Vectorize

# names the printed code itself uses; a stage or loop never takes one of them
_RESERVED = {"s", "te", "tensors"}


@dataclass(frozen=True)
class StageTable:
    """The names the printed code starts from, as the tensor IR gives them.

    ``args``: the stages of the tensors the code receives (inputs, then outputs);
    ``outputs``: the stages the schedule is created for; ``order``: every compute stage, in
    topological order; ``axes``: a compute stage's spatial and reduce loop names;
    ``ndim``: the dimensions of every stage and placeholder."""

    args: tuple[str, ...]
    outputs: tuple[str, ...]
    order: tuple[str, ...]
    axes: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]]
    ndim: Mapping[str, int]

    @classmethod
    def of_dag(cls, dag: ComputeDAG) -> StageTable:
        """The table of ``dag``'s tensor IR (the unique stage and loop names of ``to_ir``)."""
        module, names = to_ir_with_names(dag)
        paths = block_paths(module.main.body)
        axes: dict = {}
        ndim: dict = {}
        for op in dag.ops:
            name = names[id(op)]
            if isinstance(op, PlaceholderOp):
                ndim[name] = len(op.shape)
            elif isinstance(op, ComputeOp):
                ndim[name] = len(op.axis)
                loops = [n.var.name for n in enclosing_loops(paths[name])]
                n_axis = len(op.axis)
                axes[name] = (tuple(loops[:n_axis]),
                              tuple(loops[n_axis:n_axis + len(op.reduce_axis)]))
        return cls(args=tuple(names[id(t.op)] for t in dag.tensors),
                   outputs=tuple(names[id(t.op)] for t in dag.outputs),
                   order=tuple(names[id(op)] for op in dag.ops if isinstance(op, ComputeOp)),
                   axes=axes, ndim=ndim)


def _as_pipeline(pipeline: Pipeline | str) -> Pipeline:
    return SchedulePipeline.of(pipeline)


def _var(name: str) -> str:
    v = python_identifier(name)
    return "_" + v if keyword.iskeyword(v) or v in _RESERVED else v


class _Printer:
    def __init__(self, table: StageTable):
        self.table = table
        self.lines: list = []
        self.stages = set(table.ndim)
        self.loops: dict = {}
        self.axis_names: dict = {}
        self.ndims: dict = {}

    def split_ref(self, ref: str) -> tuple:
        got = resolve_ref(ref, self.stages)
        if got is None:
            raise ValueError(f"loop reference {ref!r} names no known stage")
        return got

    def loop(self, ref: str) -> str:
        stage, name = self.split_ref(ref)
        key = (stage, name)
        if key not in self.loops:
            v = _var(ref)
            self.lines.append(f"{v} = te.LoopHandle({stage!r}, {name!r})")
            self.loops[key] = v
        return self.loops[key]

    def forget(self, stage: str) -> None:
        for key in [k for k in self.loops if k[0] == stage]:
            del self.loops[key]
        self.axis_names.pop(stage, None)

    def define(self, stage: str, name: str) -> str:
        v = _var(loop_ref(stage, name))
        self.loops[(stage, name)] = v
        return v

    def axes(self, stage: str, axis_names, reduce_names=()) -> None:
        self.axis_names[stage] = (list(axis_names), list(reduce_names))
        vs = [self.define(stage, a) for a in list(axis_names) + list(reduce_names)]
        if not vs:
            return
        sv = _var(stage)
        rhs = f"tuple(s[{sv}].op.axis)"
        if reduce_names:
            rhs += f" + tuple(s[{sv}].op.reduce_axis)"
        self.lines.append(f"{', '.join(vs)}{',' if len(vs) == 1 else ''} = {rhs}")

    def prelude(self) -> None:
        table = self.table
        args, outs = list(table.args), list(table.outputs)
        self.lines.append(f"{', '.join(_var(a) for a in args)}"
                          f"{',' if len(args) == 1 else ''} = tensors")
        self.lines.append(f"s = te.create_schedule([{', '.join(_var(o) + '.op' for o in outs)}])")
        inner = [n for n in table.order if n not in args]
        if inner:
            comma = "," if len(inner) == 1 else ""
            names = ", ".join(repr(n) for n in inner)
            lhs = ", ".join(_var(n) for n in inner)
            self.lines.append(f"{lhs}{comma} = (s[n].op.output(0) for n in ({names}{comma}))")
        for n in table.order:
            self.axes(n, *table.axes[n])

    # -- one method per pass class ---------------------------------------------------------
    def emit(self, p: Pass) -> None:
        handler = _HANDLERS.get(type(p))
        if handler is None or not handler(self, p):
            # a pass without a te-schedule method: apply it by its pass text
            self.lines.append(f"s.apply({p.text!r})")

    def split(self, p: Split) -> bool:
        if p.nparts is None and len(p.factors) != 1:
            return False
        stage, loop = self.split_ref(p.loop)
        h = self.loop(p.loop)
        o, i = self.define(stage, split_outer(loop)), self.define(stage, split_inner(loop))
        arg = f"nparts={p.nparts!r}" if p.nparts is not None else f"factor={p.factors[0]!r}"
        self.lines.append(f"{o}, {i} = s[{_var(stage)}].split({h}, {arg})")
        return True

    def fuse(self, p: Fuse) -> bool:
        refs = list(p.loops)
        stage, _ = self.split_ref(refs[0])
        hs = [self.loop(r) for r in refs]
        if len(refs) > 1:
            v = self.define(stage, fused_name([self.split_ref(r)[1] for r in refs]))
            self.lines.append(f"{v} = s[{_var(stage)}].fuse({', '.join(hs)})")
        return True

    def reorder(self, p: Reorder) -> bool:
        stage, _ = self.split_ref(p.order[0])
        self.lines.append(
            f"s[{_var(stage)}].reorder({', '.join(self.loop(r) for r in p.order)})")
        return True

    def bind(self, p: Bind) -> bool:
        stage, _ = self.split_ref(p.loop)
        self.lines.append(
            f"s[{_var(stage)}].bind({self.loop(p.loop)}, te.thread_axis({p.thread!r}))")
        return True

    def unroll(self, p: Unroll) -> bool:
        stage, _ = self.split_ref(p.loop)
        self.lines.append(f"s[{_var(stage)}].unroll({self.loop(p.loop)})")
        return True

    def vectorize(self, p: Vectorize) -> bool:
        stage, _ = self.split_ref(p.loop)
        self.lines.append(f"s[{_var(stage)}].vectorize({self.loop(p.loop)})")
        return True

    def pragma(self, p: Pragma) -> bool:
        stage, _ = self.split_ref(p.loop)
        self.lines.append(
            f"s[{_var(stage)}].pragma({self.loop(p.loop)}, {p.key!r}, {p.value!r})")
        return True

    def compute_at(self, p: ComputeAt) -> bool:
        target, _ = self.split_ref(p.loop)
        self.lines.append(f"s[{_var(p.stage)}].compute_at(s[{_var(target)}], "
                          f"{self.loop(p.loop)})")
        return True

    def compute_inline(self, p: ComputeInline) -> bool:
        self.lines.append(f"s[{_var(p.stage)}].compute_inline()")
        return True

    def cache_read(self, p: CacheRead) -> bool:
        new = fresh_name(cache_name(p.buffer, p.scope), set(self.stages))
        readers = ", ".join(_var(r) for r in p.readers)
        self.lines.append(f"{_var(new)} = s.cache_read({_var(p.buffer)}, {p.scope!r}, "
                          f"[{readers}])")
        self.stages.add(new)
        self.ndims[new] = self._ndim(p.buffer)
        self.axes(new, copy_axes(self.ndims[new]))
        return True

    def cache_write(self, p: CacheWrite) -> bool:
        stage = p.stage
        new = cache_name(stage, p.scope)
        self.lines.append(f"{_var(new)} = s.cache_write({_var(stage)}, {p.scope!r})")
        self.stages.add(new)
        # the cache stage takes the stage's axes; the stage becomes a copy with ax0..
        self.forget(stage)
        if stage in self.axis_names:
            self.axes(new, *self.axis_names[stage])
        self.ndims[new] = self._ndim(stage)
        self.axes(stage, copy_axes(self.ndims[new]))
        return True

    def rfactor(self, p: RFactor) -> bool:
        stage, _ = self.split_ref(p.loop)
        new = rfactor_name(stage)
        self.lines.append(f"{_var(new)} = s.rfactor({_var(stage)}, {self.loop(p.loop)}, "
                          f"factor_axis={p.factor_axis!r})")
        self.stages.add(new)
        self.ndims[new] = self._ndim(stage) + 1
        # both stages now have loops the printed code names on first use
        self.forget(stage)
        return True

    def async_copy(self, p: AsyncCopy) -> bool:
        self.lines.append(f"s[{_var(p.stage)}].async_copy()")
        return True

    def software_pipeline(self, p: SoftwarePipeline) -> bool:
        stage, _ = self.split_ref(p.loop)
        self.lines.append(f"s[{_var(stage)}].pipeline({self.loop(p.loop)}, {p.stages!r})")
        return True

    def storage_align(self, p: StorageAlign) -> bool:
        self.lines.append(f"s[{_var(p.stage)}].storage_align({p.axis!r}, {p.factor!r}, "
                          f"{p.offset!r})")
        return True

    def layout_panels(self, p: LayoutPanels) -> bool:
        self.lines.append(f"s[{_var(p.stage)}].layout_panels({p.width!r})")
        return True

    def swizzle(self, p: Swizzle) -> bool:
        self.lines.append(f"s[{_var(p.stage)}].swizzle({p.bits!r})")
        return True

    def tensorize(self, p: Tensorize) -> bool:
        stage, _ = self.split_ref(p.loop)
        self.lines.append(f"s[{_var(stage)}].tensorize({self.loop(p.loop)}, {p.intrin!r})")
        return True

    def _ndim(self, name: str) -> int:
        return self.ndims[name] if name in self.ndims else self.table.ndim[name]


_HANDLERS = {Split: _Printer.split, Fuse: _Printer.fuse, Reorder: _Printer.reorder,
             Bind: _Printer.bind, Unroll: _Printer.unroll, Vectorize: _Printer.vectorize,
             Pragma: _Printer.pragma, ComputeAt: _Printer.compute_at,
             ComputeInline: _Printer.compute_inline, CacheRead: _Printer.cache_read,
             CacheWrite: _Printer.cache_write, RFactor: _Printer.rfactor,
             AsyncCopy: _Printer.async_copy, SoftwarePipeline: _Printer.software_pipeline,
             StorageAlign: _Printer.storage_align, Swizzle: _Printer.swizzle,
             LayoutPanels: _Printer.layout_panels,
             Tensorize: _Printer.tensorize}


def schedule_python_code(table: StageTable, pipeline: Pipeline | str) -> str:
    """``pipeline`` (a Pipeline, or its text as a record holds it) as Python te schedule
    code for the stages of ``table`` (see the module docstring)."""
    pr = _Printer(table)
    pr.prelude()
    for p in _as_pipeline(pipeline):
        pr.emit(p)
    return "\n".join(pr.lines) + "\n"
