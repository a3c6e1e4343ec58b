"""The ``torch.compile`` backend ``"ptxforge"``.

::

    model = torch.compile(model, backend="ptxforge", options={"precision": "float16"})

The package registers the backend through the ``torch_dynamo_backends`` entry point, so no
import is needed. Each graph Dynamo captures goes through AOT autograd with the Core ATen
decompositions, ``scaled_dot_product_attention`` kept whole (rewritten first into an operator
AOT autograd does not dispatch: :mod:`ptxforge.graph.frontend_torch.sdpa_op`). The graph is
partitioned: the regions every node of which has a converter
(:mod:`ptxforge.graph.frontend_torch`) are imported, built and run by ptxforge, and the
other nodes stay with PyTorch (a warning lists them once; with ``fullgraph=True`` an
unsupported node is an error naming it).

Options (``options={...}``): see :class:`BackendOptions`. Without a GPU the compiled
partitions run on the CPU simulator (a one-time warning says so), so the whole path is
testable on any machine.
"""

from __future__ import annotations

from .torch_options import (
    PRECISIONS,
    BackendError,
    BackendOptions,
    SimulatorFallbackWarning,
    UnsupportedOperatorsWarning,
    resolve_target,
)
from .torch_partition import compile_partitioned

__all__ = ["PRECISIONS", "BackendError", "BackendOptions", "SimulatorFallbackWarning",
           "UnsupportedOperatorsWarning", "ptxforge_backend", "resolve_target", "tune_torch"]


def ptxforge_backend(gm, example_inputs, options: dict | None = None):
    """The Dynamo backend: ``torch.compile(model, backend=ptxforge_backend)`` or, through
    the entry point, ``backend="ptxforge"``."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    from .graph.frontend_torch.sdpa_op import keep_attention_whole

    opts = BackendOptions.from_dict(options)
    fullgraph = _fullgraph()
    # before AOT autograd dispatches SDPA into a device's kernel or its math composition
    keep_attention_whole(gm)

    def fw_compiler(fx_module, inputs):
        compiled = compile_partitioned(fx_module, inputs, opts, fullgraph)
        # the graph's generated forward itself: no nn.Module dispatch per call
        return make_boxed_func(getattr(compiled, "forward", compiled))

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
    from torch._decomp import core_aten_decompositions

    from .graph.frontend_torch.api import keep_attention

    return keep_attention(dict(core_aten_decompositions()))


def tune_torch(model, example_args, trials: int, log: str, *, precision: str = "float32",
               target: str = "cuda", kwargs: dict | None = None,
               fused_attention: bool | None = None):
    """Tune the kernels of ``model`` (exported with ``example_args``) with ``trials``
    measurement trials in all, appending records to ``log``, with the CLI's progress bar;
    then ``torch.compile(model, backend="ptxforge", options={"log": log})`` builds with
    them. ``fused_attention`` as the backend option (give both the same value: the tasks
    differ). Returns the number of records written."""
    from .graph.frontend_torch import from_torch
    from .torch_tuning import tune_graph

    if precision not in PRECISIONS:
        raise BackendError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    net, params = from_torch(model.eval() if hasattr(model, "eval") else model,
                             tuple(example_args), kwargs)
    return tune_graph(net, params, trials, log, precision=precision, target=target,
                      fused_attention=fused_attention)
