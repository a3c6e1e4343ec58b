"""What the ``torch.compile`` backend compiled, per captured graph: its functions, which of
them a tuning record scheduled and which fell back to the default schedule, the kernel
launches of one call and whether the calls replay a CUDA graph.

``CompiledPartition.report()`` (:mod:`ptxforge.torch_partition`) builds a
:class:`PartitionReport`; the backend option ``report=True`` prints it after each compiled
graph's first call (when the CUDA graph capture has been tried), and ``on_build`` receives
the partition, so a benchmark reads the same figures.
"""

from __future__ import annotations

from dataclasses import dataclass

TUNED = "tuned"
DEFAULT = "default"
COPY = "copy"


@dataclass(frozen=True)
class FunctionReport:
    """One distinct compiled function of a partition.

    Attributes:
        name: the function's task name (``vm_mod_fused_nn_conv2d_add_nn_relu``).
        workload_key: the key its tuning records are stored under.
        calls: how many times one run calls it.
        kernels: the kernels one call of it launches (a split-K product launches two).
        schedule: ``"tuned"`` (a record of the log scheduled it), ``"default"`` (a tuning
            task without a record: the default schedule, a fallback) or ``"copy"`` (a
            reshape that runs as a copy, which tuning makes no task of).
        pipeline: the schedule's pass pipeline, as records store it.
    """

    name: str
    workload_key: str
    calls: int
    kernels: int
    schedule: str
    pipeline: str


@dataclass(frozen=True)
class PartitionReport:
    """One compiled partition (a region of a captured graph ptxforge runs).

    Attributes:
        name: the partition's submodule name in the captured graph (``fused_0``).
        functions: its distinct functions, in the order of their first call.
        steps: the function calls of one run (views that run no kernel left out).
        launches: the kernel launches of one run.
        inputs: the inputs passed at every call (the weights are bound at the first).
        weights: how many inputs were bound once as weights.
        cuda_graph: ``"captured"`` (each call replays one CUDA graph), ``"off"`` (option
            ``cuda_graph=False``), ``"simulator"``, ``"not run yet"``, or
            ``"failed: <why>"`` (each call launches the kernels one by one).
    """

    name: str
    functions: tuple[FunctionReport, ...]
    steps: int
    launches: int
    inputs: tuple[str, ...]
    weights: int
    cuda_graph: str

    @property
    def tuned(self) -> int:
        """Functions a tuning record scheduled."""
        return sum(f.schedule == TUNED for f in self.functions)

    @property
    def tunable(self) -> int:
        """Functions tuning makes a task of (all but the copies)."""
        return sum(f.schedule != COPY for f in self.functions)

    @property
    def fallbacks(self) -> tuple[str, ...]:
        """The tuning tasks compiled with the default schedule for want of a record."""
        return tuple(f.name for f in self.functions if f.schedule == DEFAULT)

    def summary(self) -> str:
        """A few lines: the counts, then the functions that fell back to defaults."""
        copies = len(self.functions) - self.tunable
        lines = [f"ptxforge partition {self.name}: {self.tuned} of {self.tunable} functions "
                 f"tuned" + (f" (+{copies} reshape copies, no tuning task)" if copies else "")
                 + f"; {self.steps} calls, {self.launches} kernel launches per run; "
                 f"CUDA graph: {self.cuda_graph}; {len(self.inputs)} inputs per call, "
                 f"{self.weights} weights bound"]
        for f in self.functions:
            if f.schedule == DEFAULT:
                lines.append(f"  default schedule (no record): {f.name} x{f.calls} "
                             f"{f.workload_key}")
        return "\n".join(lines)


def function_reports(lib) -> tuple[FunctionReport, ...]:
    """The :class:`FunctionReport` of each compiled function of ``lib`` (a
    :class:`~ptxforge.graph.GraphLibrary`), with its calls counted from the run's steps."""
    calls: dict[str, int] = {}
    for key in lib.call_keys:
        if key is not None:
            calls[key] = calls.get(key, 0) + 1
    out = []
    for key, f in lib.functions.items():
        if f.tuned:
            kind = TUNED
        elif f.func.is_view:
            kind = COPY
        else:
            kind = DEFAULT
        out.append(FunctionReport(f.func.name, key, calls.get(key, 0),
                                  kernel_launches(f.device_module), kind, f.pipeline_text))
    return tuple(out)


def kernel_launches(device_module) -> int:
    """The kernels one run of a compiled function's device module launches (its host
    function's launches; one kernel when it has no host function)."""
    from .ir.stmt import Launch

    host = getattr(device_module, "host", None)
    if host is None:
        return max(1, len(device_module.kernels()))
    count = 0

    def visit(s) -> None:
        nonlocal count
        if isinstance(s, Launch):
            count += 1
        for child in _children(s):
            visit(child)

    visit(host.body)
    return count


def _children(s) -> list:
    body = getattr(s, "body", None)
    stmts = getattr(s, "stmts", None)
    out = list(stmts) if stmts is not None else []
    if body is not None:
        out.append(body)
    return out


def library_launches(lib) -> int:
    """The kernel launches of one run of ``lib``."""
    per = {key: kernel_launches(f.device_module) for key, f in lib.functions.items()}
    return sum(per[k] for k in lib.call_keys if k is not None)
