"""The ``torch.compile`` backend ``"ptxforge"``.

::

    model = torch.compile(model, backend="ptxforge", options={"precision": "float16"})

The package registers the backend through the ``torch_dynamo_backends`` entry point, so no
import is needed. Each graph Dynamo captures goes through AOT autograd with the Core ATen
decompositions (attention kept whole); the graph is partitioned: the regions every node of
which has a converter (:mod:`ptxforge.graph.frontend_torch`) are imported, built and run
by ptxforge, and the other nodes stay with PyTorch (a warning lists them once; with
``fullgraph=True`` an unsupported node is an error naming it).

Options (``options={...}``): see :class:`BackendOptions`. Without a GPU the compiled
partitions run on the CPU simulator (a one-time warning says so), so the whole path is
testable on any machine.
"""

from __future__ import annotations

import warnings
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
            ``"sim"``, or a CUDA target string (``"cuda"``, ``"cuda -arch=sm_90a"``).
        trials: tune every captured graph from ``log`` (created if missing) with this many
            trials before building it (0: no tuning); needs a GPU.
        cuda_graph: capture each compiled partition in a CUDA graph (one per input shape)
            and replay it on later calls.
    """

    precision: str = "float32"
    log: str | None = None
    target: str = "auto"
    trials: int = 0
    cuda_graph: bool = True

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
        if opts.trials and not opts.log:
            raise BackendError("trials > 0 needs a log file to write the records to "
                               "(options={'trials': N, 'log': 'model.json'})")
        return opts


_warned_sim = False


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


def ptxforge_backend(gm, example_inputs, options: dict | None = None):
    """The Dynamo backend: ``torch.compile(model, backend=ptxforge_backend)`` or, through
    the entry point, ``backend="ptxforge"``."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    from .torch_partition import compile_partitioned

    opts = BackendOptions.from_dict(options)
    fullgraph = _fullgraph()

    def fw_compiler(fx_module, inputs):
        return make_boxed_func(compile_partitioned(fx_module, inputs, opts, fullgraph))

    def bw_compiler(fx_module, inputs):
        return make_boxed_func(fx_module.forward)

    return aot_autograd(fw_compiler=fw_compiler, inference_compiler=fw_compiler,
                        bw_compiler=bw_compiler,
                        decompositions=_decompositions())(gm, example_inputs)


def _fullgraph() -> bool:
    """Whether Dynamo is capturing under ``fullgraph=True``: the translator compiling this
    graph is in one-graph mode (it would rather fail than break the graph)."""
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator

        tx = InstructionTranslator.current_tx()
    except (ImportError, AttributeError, AssertionError, RuntimeError):
        return False
    return bool(getattr(tx, "one_graph", False)
                or getattr(tx, "error_on_graph_break", False))


def _decompositions() -> dict:
    import torch
    from torch._decomp import core_aten_decompositions

    table = dict(core_aten_decompositions())
    table.pop(torch.ops.aten.scaled_dot_product_attention.default, None)
    return table


def tune_torch(model, example_args, trials: int, log: str, *, precision: str = "float32",
               target: str = "cuda", kwargs: dict | None = None):
    """Tune the kernels of ``model`` (exported with ``example_args``) with ``trials``
    measurement trials in all, appending records to ``log``, with the CLI's progress bar;
    then ``torch.compile(model, backend="ptxforge", options={"log": log})`` builds with
    them. Returns the number of records written."""
    from .graph.frontend_torch import from_torch
    from .torch_tuning import tune_graph

    if precision not in PRECISIONS:
        raise BackendError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    net, params = from_torch(model.eval() if hasattr(model, "eval") else model,
                             tuple(example_args), kwargs)
    return tune_graph(net, params, trials, log, precision=precision, target=target)
