"""A schedule (a pass pipeline) as a ptxforge te schedule, and as Python schedule code in
the style of the tutorial's "Equivalent python schedule".

The printed code expects two names: ``te`` (``ptxforge.te``) and ``tensors`` (the task's
tensors, inputs then outputs); it defines ``s``, the schedule. Executing it replays the
same passes in the same order, so ``s.module`` is the IR the pipeline gives.

The printer dispatches on pass classes, and every string it writes into the code (stage,
loop and thread names, pragma keys, scopes) is written with ``repr``; variable names are
sanitized identifiers. A record's pipeline is data, so nothing in it can become code.
"""

from __future__ import annotations

import keyword

from ..passes.base import Pass
from ..passes.pipeline import Pipeline, SchedulePipeline
from ..passes.schedule import (
    AsyncCopy,
    Bind,
    CacheRead,
    CacheWrite,
    ComputeAt,
    ComputeInline,
    Fuse,
    LayoutPanels,
    Pragma,
    Reorder,
    RFactor,
    SoftwarePipeline,
    Split,
    StorageAlign,
    Swizzle,
    Tensorize,
    Unroll,
    Vectorize,
)
from ..passes.schedule.names import (
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
from ..te import create_schedule

# names the printed code itself uses; a stage or loop never takes one of them
_RESERVED = {"s", "te", "tensors"}


def _as_pipeline(pipeline: Pipeline | str) -> Pipeline:
    return SchedulePipeline.of(pipeline)


def schedule_from_pipeline(task, pipeline: Pipeline | str):
    """A te schedule of ``task`` with the passes of ``pipeline`` (a Pipeline, or its text as
    a record holds it) applied and recorded in ``s.pipeline``."""
    sch = create_schedule([t.op for t in task.ir_dag.outputs])
    want = set(task.analysis.stages) | set(task.analysis.placeholders)
    got = set(sch._names.values())
    if want != got:
        raise ValueError(
            f"the schedule's stage names {sorted(got)} differ from the task's {sorted(want)}; "
            "give the task's tensors as inputs then outputs, in the workload's order")
    sch.apply(_as_pipeline(pipeline))
    return sch


def _var(name: str) -> str:
    v = python_identifier(name)
    return "_" + v if keyword.iskeyword(v) or v in _RESERVED else v


class _Printer:
    def __init__(self, task):
        self.task = task
        an = task.analysis
        self.lines: list = []
        self.stages = set(an.stages) | set(an.placeholders)
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
        an = self.task.analysis
        args = [an.names[id(t.op)] for t in self.task.tensors]
        outs = [an.names[id(t.op)] for t in self.task.ir_dag.outputs]
        self.lines.append(f"{', '.join(_var(a) for a in args)}"
                          f"{',' if len(args) == 1 else ''} = tensors")
        self.lines.append(f"s = te.create_schedule([{', '.join(_var(o) + '.op' for o in outs)}])")
        inner = [n for n in an.order() if n not in args]
        if inner:
            comma = "," if len(inner) == 1 else ""
            names = ", ".join(repr(n) for n in inner)
            lhs = ", ".join(_var(n) for n in inner)
            self.lines.append(f"{lhs}{comma} = (s[n].op.output(0) for n in ({names}{comma}))")
        for n in an.order():
            st = an.stages[n]
            self.axes(n, [a for a, _ in st.spatial], [a for a, _ in st.reduce])

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
        an = self.task.analysis
        if name in self.ndims:
            return self.ndims[name]
        if name in an.stages:
            return len(an.stages[name].shape)
        return len(an.placeholders[name].shape)


_HANDLERS = {Split: _Printer.split, Fuse: _Printer.fuse, Reorder: _Printer.reorder,
             Bind: _Printer.bind, Unroll: _Printer.unroll, Vectorize: _Printer.vectorize,
             Pragma: _Printer.pragma, ComputeAt: _Printer.compute_at,
             ComputeInline: _Printer.compute_inline, CacheRead: _Printer.cache_read,
             CacheWrite: _Printer.cache_write, RFactor: _Printer.rfactor,
             AsyncCopy: _Printer.async_copy, SoftwarePipeline: _Printer.software_pipeline,
             StorageAlign: _Printer.storage_align, Swizzle: _Printer.swizzle,
             LayoutPanels: _Printer.layout_panels,
             Tensorize: _Printer.tensorize}


def python_schedule_code(task, pipeline: Pipeline | str) -> str:
    """``pipeline`` (a Pipeline, or its text as a record holds it) as Python te schedule
    code (see the module docstring)."""
    pr = _Printer(task)
    pr.prelude()
    for p in _as_pipeline(pipeline):
        pr.emit(p)
    return "\n".join(pr.lines) + "\n"
