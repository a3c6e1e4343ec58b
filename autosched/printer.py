"""A schedule (pass pipeline text) as a ptxforge te schedule, and as Python schedule code in
the style of the tutorial's "Equivalent python schedule".

The printed code expects two names: ``te`` (``ptxforge.te``) and ``tensors`` (the task's
tensors, inputs then outputs); it defines ``s``, the schedule. Executing it replays the
same passes in the same order, so ``s.module`` is the IR the pipeline gives.
"""

from __future__ import annotations

import re

from ..passes.pipeline import Pipeline
from ..te import create_schedule


def schedule_from_pipeline(task, pipeline: str):
    """A te schedule of ``task`` with the passes of ``pipeline`` applied (and recorded in
    ``s.pipeline``)."""
    sch = create_schedule([t.op for t in task.ir_dag.outputs])
    want = set(task.analysis.stages) | set(task.analysis.placeholders)
    got = set(sch._names.values())
    if want != got:
        raise ValueError(
            f"the schedule's stage names {sorted(got)} differ from the task's {sorted(want)}; "
            "give the task's tensors as inputs then outputs, in the workload's order")
    sch.apply(pipeline)
    return sch


def _var(name: str) -> str:
    v = name.replace(".outer", "_o").replace(".inner", "_i").replace(".", "_")
    v = re.sub(r"\W", "_", v)
    return v if v.isidentifier() else "_" + v


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
        parts = ref.split(".")
        for k in range(len(parts) - 1, 0, -1):
            stage = ".".join(parts[:k])
            if stage in self.stages:
                return stage, ".".join(parts[k:])
        raise ValueError(f"loop reference {ref!r} names no known stage")

    def loop(self, ref: str) -> str:
        stage, name = self.split_ref(ref)
        key = (stage, name)
        if key not in self.loops:
            v = _var(ref)
            self.lines.append(f'{v} = te.LoopHandle("{stage}", "{name}")')
            self.loops[key] = v
        return self.loops[key]

    def forget(self, stage: str) -> None:
        for key in [k for k in self.loops if k[0] == stage]:
            del self.loops[key]
        self.axis_names.pop(stage, None)

    def define(self, stage: str, name: str) -> str:
        v = _var(f"{stage}.{name}")
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
            names = ", ".join(f'"{n}"' for n in inner)
            lhs = ", ".join(_var(n) for n in inner)
            self.lines.append(f"{lhs}{comma} = (s[n].op.output(0) for n in ({names}{comma}))")
        for n in an.order():
            st = an.stages[n]
            self.axes(n, [a for a, _ in st.spatial], [a for a, _ in st.reduce])

    def emit(self, p) -> None:
        name, a = p.pass_name(), p.params()
        L = self.lines
        if name == "split" and (a["nparts"] is not None or len(a["factors"]) == 1):
            stage, loop = self.split_ref(a["loop"])
            h = self.loop(a["loop"])
            o, i = self.define(stage, loop + ".outer"), self.define(stage, loop + ".inner")
            arg = f"nparts={a['nparts']}" if a["nparts"] is not None else \
                f"factor={a['factors'][0]}"
            L.append(f"{o}, {i} = s[{_var(stage)}].split({h}, {arg})")
        elif name == "fuse":
            refs = list(a["loops"])
            stage, _ = self.split_ref(refs[0])
            hs = [self.loop(r) for r in refs]
            names = [self.split_ref(r)[1] for r in refs]
            if len(refs) > 1:
                v = self.define(stage, ".".join(names) + ".fused")
                L.append(f"{v} = s[{_var(stage)}].fuse({', '.join(hs)})")
        elif name == "reorder":
            refs = list(a["order"])
            stage, _ = self.split_ref(refs[0])
            L.append(f"s[{_var(stage)}].reorder({', '.join(self.loop(r) for r in refs)})")
        elif name == "bind":
            stage, _ = self.split_ref(a["loop"])
            L.append(f'{"s"}[{_var(stage)}].bind({self.loop(a["loop"])}, '
                     f'te.thread_axis("{a["thread"]}"))')
        elif name in ("unroll", "vectorize"):
            stage, _ = self.split_ref(a["loop"])
            L.append(f"s[{_var(stage)}].{name}({self.loop(a['loop'])})")
        elif name == "pragma":
            stage, _ = self.split_ref(a["loop"])
            L.append(f's[{_var(stage)}].pragma({self.loop(a["loop"])}, "{a["key"]}", '
                     f'{a["value"]!r})')
        elif name == "compute_at":
            target, _ = self.split_ref(a["loop"])
            L.append(f"s[{_var(a['stage'])}].compute_at(s[{_var(target)}], "
                     f"{self.loop(a['loop'])})")
        elif name == "compute_inline":
            L.append(f"s[{_var(a['stage'])}].compute_inline()")
        elif name == "cache_read":
            new = self._fresh(f"{a['buffer']}.{a['scope']}")
            readers = ", ".join(_var(r) for r in a["readers"])
            L.append(f'{_var(new)} = s.cache_read({_var(a["buffer"])}, "{a["scope"]}", '
                     f"[{readers}])")
            self.stages.add(new)
            self.ndims[new] = self._ndim(a["buffer"])
            self.axes(new, [f"ax{k}" for k in range(self.ndims[new])])
        elif name == "cache_write":
            stage = a["stage"]
            new = f"{stage}.{a['scope']}"
            L.append(f'{_var(new)} = s.cache_write({_var(stage)}, "{a["scope"]}")')
            self.stages.add(new)
            # the cache stage takes the stage's axes; the stage becomes a copy with ax0..
            self.forget(stage)
            if stage in self.axis_names:
                self.axes(new, *self.axis_names[stage])
            self.ndims[new] = self._ndim(stage)
            self.axes(stage, [f"ax{k}" for k in range(self.ndims[new])])
        elif name == "rfactor":
            stage, _ = self.split_ref(a["loop"])
            new = f"{stage}.rf"
            L.append(f"{_var(new)} = s.rfactor({_var(stage)}, {self.loop(a['loop'])}, "
                     f"factor_axis={a['factor_axis']})")
            self.stages.add(new)
            self.ndims[new] = self._ndim(stage) + 1
            # both stages now have loops the printed code names on first use
            self.forget(stage)
        else:
            # a pass without a te-schedule method: apply it by its pass text
            L.append(f"s.apply({p.text!r})")

    def _fresh(self, name: str) -> str:
        if name not in self.stages:
            return name
        k = 1
        while f"{name}_{k}" in self.stages:
            k += 1
        return f"{name}_{k}"

    def _ndim(self, name: str) -> int:
        an = self.task.analysis
        if name in self.ndims:
            return self.ndims[name]
        if name in an.stages:
            return len(an.stages[name].shape)
        return len(an.placeholders[name].shape)


def python_schedule_code(task, pipeline: str) -> str:
    """``pipeline`` as Python te schedule code (see the module docstring)."""
    pr = _Printer(task)
    pr.prelude()
    for p in Pipeline.parse(pipeline):
        pr.emit(p)
    return "\n".join(pr.lines) + "\n"
