"""``autotvm.measure_option``: the builder and runner a tuner measures with."""

from __future__ import annotations

from ..measure.build import LocalBuilder
from ..measure.measure import Builder, Runner
from ..measure.runner_gpu import LocalRunner
from ..measure.runner_sim import SimRunner

RUNNERS = {"local": LocalRunner, "gpu": LocalRunner, "sim": SimRunner}


def measure_option(builder="local", runner="local", batch_size: int | None = None) -> dict:
    """How to measure candidates.

    ``builder``: ``"local"`` or a :class:`~ptxforge.measure.LocalBuilder` (or any
    :class:`~ptxforge.measure.Builder`). ``runner``: ``"local"``/``"gpu"`` (a
    :class:`~ptxforge.measure.LocalRunner`), ``"sim"`` (a
    :class:`~ptxforge.measure.SimRunner`: no GPU, estimated times) or a runner object.
    ``batch_size``: candidates per measurement round (default: the builder's worker
    count).

    With the simulator runner and ``builder="local"`` the builder stops after lowering when
    ptxas is not installed (the simulator needs no cubin; with one, the assembler's
    register counts sharpen the estimate).
    """
    if isinstance(runner, str):
        if runner not in RUNNERS:
            raise ValueError(f"unknown runner {runner!r}; use one of {sorted(RUNNERS)} or a "
                             "Runner object")
        runner = RUNNERS[runner]()
    if not isinstance(runner, Runner):
        raise TypeError(f"runner must be a name or a Runner, got {runner!r}")
    if isinstance(builder, str):
        if builder != "local":
            raise ValueError(f"unknown builder {builder!r}; use 'local' or a Builder object")
        compile_to = "cubin"
        if isinstance(runner, SimRunner):
            from ..backend_ptx.assemble import find_ptxas

            compile_to = "cubin" if find_ptxas() else "ir"
        builder = LocalBuilder(compile_to=compile_to)
    if not isinstance(builder, Builder):
        raise TypeError(f"builder must be 'local' or a Builder, got {builder!r}")
    if batch_size is None:
        batch_size = max(1, getattr(builder, "n_parallel", 1) or 1)
    return {"builder": builder, "runner": runner, "batch_size": int(batch_size)}


__all__ = ["LocalBuilder", "LocalRunner", "SimRunner", "measure_option"]
