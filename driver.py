"""``ptxforge.lower`` and ``ptxforge.build``: from a schedule (or a DAG) to device IR and
to a module that runs on the simulator or a GPU."""

from __future__ import annotations

import numpy as np

from .ir.compute_dag import ComputeDAG
from .ir.stmt import Module, PrimFunc
from .ir.te import Tensor
from .ir.to_ir import to_ir
from .nd import SimArray, SimDevice
from .target import Target, as_target


def _order_params(module: Module, args) -> Module:
    """Reorder ``main``'s parameters to match ``args`` (tensors or schedule tensors)."""
    if args is None:
        return module
    func = module.main
    by_name = {b.name: b for b in func.params}
    names = []
    for a in args:
        name = a.name if hasattr(a, "name") else str(a)
        if name not in by_name:
            raise ValueError(
                f"argument {name} is not a parameter of the computation; parameters are "
                f"{', '.join(by_name)}"
            )
        names.append(name)
    if sorted(names) != sorted(by_name):
        missing = set(by_name) - set(names)
        raise ValueError(f"arguments are missing {', '.join(sorted(missing))}")
    params = tuple(by_name[n] for n in names)
    return module.with_function(func.replace(params=params))


def scheduled_module(sch_or_dag, args=None) -> Module:
    """The scheduled tensor IR of a schedule, a DAG, a list of tensors, or a module."""
    from .passes.schedule.schedule import Schedule

    if isinstance(sch_or_dag, Schedule):
        module = sch_or_dag.module
        if args is None:
            return module
        return _fix_param_names(module, sch_or_dag, args)
    elif isinstance(sch_or_dag, Module):
        module = sch_or_dag
    elif isinstance(sch_or_dag, PrimFunc):
        module = Module([sch_or_dag])
    elif isinstance(sch_or_dag, ComputeDAG):
        module = to_ir(sch_or_dag)
    elif isinstance(sch_or_dag, (list, tuple)) and all(isinstance(t, Tensor) for t in sch_or_dag):
        module = to_ir(list(sch_or_dag))
        args = None
    else:
        raise TypeError(
            f"expected a Schedule, ComputeDAG, Module or list of tensors, got {sch_or_dag!r}"
        )
    return _order_params(module, args)


def _fix_param_names(module, sch, args):
    # schedule tensors are named by their stage; te tensors by the unique buffer name
    out = []
    for a in args:
        if isinstance(a, Tensor):
            from .passes.schedule.schedule import _param_or_stage_name

            out.append(_param_or_stage_name(sch, a))
        else:
            out.append(a)
    return _order_params(module, [_Named(n) if isinstance(n, str) else n for n in out])


class _Named:
    def __init__(self, name):
        self.name = name


def lower(sch_or_dag, args=None, ctx=None) -> Module:
    """Lower to device IR (kernels and a host function). Print the result to read it."""
    from .passes import PassContext
    from .passes.lower import lowering_pipeline

    module = scheduled_module(sch_or_dag, args)
    ctx = ctx or PassContext.current()
    return lowering_pipeline()(module, ctx)


class BuiltModule:
    """A compiled computation: call it with simulator arrays or GPU arrays."""

    entry_name = "main"

    def __init__(self, device_module: Module, target: Target | str = "cuda",
                 name: str = "main"):
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"build(name={name!r}): the function name must be a Python-style "
                             "identifier (letters, digits, underscores)")
        self.entry_name = name
        self.device_module = device_module
        self.target = as_target(target)
        self._ptx = None
        self._loaded: dict = {}
        if not self.target.is_sim:
            self._compile()

    def _compile(self):
        if self._ptx is None:
            from .backend_ptx import compile_module

            # the simulator models an sm_90 GPU: its PTX is that GPU's
            self._ptx = compile_module(self.device_module, self.target)
        return self._ptx

    @property
    def params(self):
        return self.device_module.main.params

    def __call__(self, *arrays):
        params = self.params
        if len(arrays) != len(params):
            raise TypeError(
                f"the module takes {len(params)} arrays ({', '.join(p.name for p in params)}), "
                f"got {len(arrays)}"
            )
        if all(isinstance(a, (SimArray, np.ndarray)) for a in arrays):
            from . import backend_sim

            backend_sim.run(self.device_module, [
                a.host_view if isinstance(a, SimArray) else a for a in arrays])
            return
        dev = arrays[0].device
        key = repr(dev)
        if key not in self._loaded:
            self._loaded[key] = self._compile().load(dev)
        self._loaded[key](*arrays)

    def get_source(self, fmt: str = "ir") -> str:
        """``"ir"`` (device IR), ``"llvm"``, ``"llvm_opt"`` or ``"ptx"``."""
        if fmt == "ir":
            return str(self.device_module)
        return self._compile().get_source(fmt)

    def export_library(self, path, archs=None) -> str:
        """Write this module to ``path`` as one file of data (device IR, and each kernel's
        PTX, cubin and launch for each of ``archs``: default the cuda target's architecture,
        none for a ``"sim"`` target), loadable without the compiler by
        :func:`ptxforge.runtime.load_module`; returns the path."""
        from .runtime import export_kernel_module

        return export_kernel_module(self, path, archs)

    def get_function(self, name: str) -> BuiltModule:
        """The module's one function by its name (``build(name=)``; ``module[name]``)."""
        if name != self.entry_name:
            raise KeyError(f"the module has one function, {self.entry_name!r}, not {name!r}")
        return self

    __getitem__ = get_function

    def time_evaluator(self, func_name: str, dev, number: int = 10, repeat: int = 1,
                       min_repeat_ms: float = 0):
        """A function timing the module on ``dev``: CUDA events on a GPU; on the simulator
        one checked run, then the analytical estimate of the GPU time, labelled as such."""
        self.get_function(func_name)
        if isinstance(dev, SimDevice):
            return _sim_timer(self, number, repeat)
        key = repr(dev)
        if key not in self._loaded:
            self._loaded[key] = self._compile().load(dev)
        return self._loaded[key].time_evaluator(number=number, repeat=repeat,
                                                min_repeat_ms=min_repeat_ms)


class ProfileResult:
    """Times in seconds, as TVM's: ``results`` per repeat, ``mean``, ``median``."""

    def __init__(self, results, kind: str):
        self.results = tuple(results)
        self.kind = kind

    @property
    def mean(self) -> float:
        return float(np.mean(self.results))

    @property
    def median(self) -> float:
        return float(np.median(self.results))

    def __repr__(self):
        return f"ProfileResult(mean={self.mean:.6g} s, {self.kind})"


def _sim_timer(mod: BuiltModule, number: int, repeat: int):
    """On the simulator: one run (its outputs are the module's results, as on a GPU), then the
    analytical estimate of the GPU time for every repeat, labelled as such; simulating
    ``number`` x ``repeat`` runs would take long and say nothing about a GPU."""
    def run(*arrays):
        from .measure.estimate import module_seconds
        from .measure.kernel_stats import analyze_module

        mod(*arrays)
        target = None if mod.target.is_sim else mod.target
        est = module_seconds(analyze_module(mod.device_module), target=target)
        return ProfileResult([est] * repeat,
                             "estimated GPU time (analytical model; simulator, not measured)")

    return run


def build(sch_or_dag, args=None, target: Target | str = "cuda", ctx=None,
          name: str = "main") -> BuiltModule:
    """Lower and compile for ``target``: a string (``"cuda"``, ``"cuda -arch=sm_80"``,
    ``"sim"``) or a :class:`~ptxforge.target.Target`. A cuda target also generates PTX for
    its architecture (no GPU needed for that); ``"sim"`` only lowers. Lowering runs with
    the target current, so what checks limits checks the target's. Both run on the
    simulator when given simulator arrays."""
    target = as_target(target)
    with target:
        return BuiltModule(lower(sch_or_dag, args, ctx), target, name)


def build_attention(out: Tensor, target: Target | str = "cuda", config=None,
                    name: str = "main") -> BuiltModule:
    """Compile an :func:`ptxforge.ops.attention.attention` output as the fused attention
    kernel: a module called with ``(q, k, v[, mask], out)`` on simulator or GPU arrays.
    ``config`` (an :class:`~ptxforge.ops.schedules.attention.AttentionConfig`) None takes
    :func:`~ptxforge.ops.schedules.attention.choose_attention_config`'s. Raises
    :class:`AttentionError` where the kernel cannot run the problem (then schedule the
    stages instead, e.g. ``default_schedule``)."""
    from .ops.attention import attention_workload
    from .ops.schedules.attention import (
        attention_module,
        check_attention_config,
        choose_attention_config,
    )

    t = as_target(target)
    w = attention_workload(out)
    # the simulator runs what a GPU of its arch runs: check the config against that GPU
    limits = as_target(f"cuda -arch={t.arch}") if t.is_sim else t
    cfg = config if config is not None else choose_attention_config(w, limits)
    check_attention_config(w, cfg, limits)
    return BuiltModule(attention_module(w, cfg), t, name)
