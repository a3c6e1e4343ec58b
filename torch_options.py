"""What the ``torch.compile`` backend's modules share: its options, its errors and warnings,
and the choice of target.

:mod:`ptxforge.torch_backend` (the Dynamo entry) and :mod:`ptxforge.torch_partition` (the
compiled partitions) both stand on this module, so neither imports the other's caller.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, fields

from .graph.frontend_torch import TorchImportError

PRECISIONS = ("float32", "tf32", "float16", "bfloat16")


class BackendError(TorchImportError):
    """A model the backend cannot compile as asked (an unsupported operator under
    ``fullgraph=True``, a bad option, CPU tensors given to a CUDA build)."""


class SimulatorFallbackWarning(UserWarning):
    """No GPU was found: compiled graphs run on the CPU simulator."""


class UnsupportedOperatorsWarning(UserWarning):
    """Some nodes of a captured graph stay with PyTorch."""


@dataclass(frozen=True)
class BackendOptions:
    """The options of ``torch.compile(..., backend="ptxforge", options={...})``.

    Attributes:
        precision: ``"float32"``, ``"tf32"``, ``"float16"`` or ``"bfloat16"`` (the graph
            build's mixed precision: products and convolutions in that precision; inputs
            and outputs keep their dtypes).
        log: a tuning-record file applied as ``ApplyHistoryBest`` does; functions without a
            record get the default schedules.
        target: ``"auto"`` (the GPU if there is one, else the simulator with a warning),
            ``"sim"`` (``"sim -arch=sm_80"``: the simulator running kernels built for that
            GPU, tensor-core and fused-attention ones included), or a CUDA target string
            (``"cuda"``, ``"cuda -arch=sm_90a"``).
        trials: tune every captured graph from ``log`` (created if missing) with this many
            trials before building it (0: no tuning); needs a GPU.
        cuda_graph: capture each compiled partition in a CUDA graph (one per input shape)
            and replay it on later calls.
        fused_attention: compile each attention (``scaled_dot_product_attention``, kept
            whole as ``nn.attention``) the fused tensor-core kernel can run as that kernel;
            None (default): ``graph.build``'s default.
        on_build: called with each :class:`~ptxforge.torch_partition.CompiledPartition`
            once it is built (its ``net``, its ``lib``: the graph and the library), to
            report what was compiled (a benchmark counts tuned functions and kernels).
        report: after the first call of each compiled partition (its CUDA graph captured
            or refused by then), True prints its
            :class:`~ptxforge.torch_report.PartitionReport` summary (functions tuned k of
            n, the ones that fell back to the default schedule, launches per call, CUDA
            graph or why not); a callable receives the report instead.
    """

    precision: str = "float32"
    log: str | None = None
    target: str = "auto"
    trials: int = 0
    cuda_graph: bool = True
    fused_attention: bool | None = None
    on_build: Callable | None = None
    report: bool | Callable = False

    @classmethod
    def from_dict(cls, options: dict | None) -> BackendOptions:
        options = dict(options or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise BackendError(f"unknown ptxforge option(s) {unknown}; options are "
                               f"{', '.join(sorted(known))}")
        opts = cls(**options)
        if opts.precision not in PRECISIONS:
            raise BackendError(f"precision must be one of {PRECISIONS}, got {opts.precision!r}")
        if not isinstance(opts.trials, int) or opts.trials < 0:
            raise BackendError(f"trials must be a non-negative int, got {opts.trials!r}")
        if opts.fused_attention is not None and not isinstance(opts.fused_attention, bool):
            raise BackendError(f"fused_attention must be True, False or None, got "
                               f"{opts.fused_attention!r}")
        if opts.on_build is not None and not callable(opts.on_build):
            raise BackendError(f"on_build must be callable, got {opts.on_build!r}")
        if not isinstance(opts.report, bool) and not callable(opts.report):
            raise BackendError(f"report must be True, False or a callable, got "
                               f"{opts.report!r}")
        if opts.trials and not opts.log:
            raise BackendError("trials > 0 needs a log file to write the records to "
                               "(options={'trials': N, 'log': 'model.json'})")
        return opts


_warned_sim = False


def is_simulator(target: str) -> bool:
    """Whether ``target`` (``"sim"``, ``"sim -arch=sm_80"``) runs on the CPU simulator."""
    words = str(target).split()
    return bool(words) and words[0] == "sim"


def resolve_target(target: str) -> str:
    """``"auto"`` as ``"cuda"`` when a GPU is usable, else ``"sim"`` (warned once)."""
    global _warned_sim
    if target != "auto":
        return target
    try:
        from .backend_ptx import cuda_driver

        if cuda_driver.device_count() > 0:
            return "cuda"
    except Exception:  # noqa: BLE001 - no driver, no GPU: the simulator runs the graph
        pass
    if not _warned_sim:
        _warned_sim = True
        warnings.warn("ptxforge found no GPU: compiled graphs run on the CPU simulator "
                      "(correct results, slowly); pass options={'target': 'sim'} to say so",
                      SimulatorFallbackWarning, stacklevel=3)
    return "sim"
