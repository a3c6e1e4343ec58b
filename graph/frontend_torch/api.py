"""``from_exported_program`` and ``from_torch``: a PyTorch program as ``(graph, params)``."""

from __future__ import annotations

import numpy as np

from ..ir import Constant, Graph, Var
from .importer import (
    TorchImportError,
    graph_dtype,
    import_graph,
    overload_name,
    static_int,
    to_numpy,
)
from .registry import lookup

ATTENTION_OVERLOADS = (
    "scaled_dot_product_attention.default",
    "_scaled_dot_product_flash_attention.default",
    "_scaled_dot_product_flash_attention_for_cpu.default",
    "_scaled_dot_product_efficient_attention.default",
    "_scaled_dot_product_cudnn_attention.default",
    "_scaled_dot_product_fused_attention_overrideable.default",
)
"""The attention overloads (of ``torch.ops.aten``) kept whole: each becomes one
``nn.attention`` (:mod:`.convert_attention`)."""


def keep_attention(table: dict) -> dict:
    """``table`` (a decomposition table) without the :data:`ATTENTION_OVERLOADS`: torch
    decomposes the fused kernels' overloads into products and a softmax (the CPU one even
    returns the attention weights in place of its log-sum-exp)."""
    import torch

    for name in ATTENTION_OVERLOADS:
        packet, overload = name.split(".")
        op = getattr(getattr(torch.ops.aten, packet, None), overload, None)
        if op is not None:
            table.pop(op, None)
    return table


def decomposition_table() -> dict:
    """torch.export's default decompositions (to Core ATen), except that attention
    (``scaled_dot_product_attention`` and the fused kernels' overloads) stays whole, to
    become ``nn.attention``."""
    import torch

    return keep_attention(torch.export.default_decompositions())


def _needs_decomposition(ep) -> bool:
    return any(n.op == "call_function" and hasattr(n.target, "_schema")
               and lookup(overload_name(n.target)) is None for n in ep.graph.nodes)


def from_exported_program(ep, *, decompose: bool = True) -> tuple[Graph, dict]:
    """Translate a ``torch.export.ExportedProgram`` into ``(graph, params)``.

    Parameters, buffers and lifted constants become graph parameters named by their
    state-dict names (``"layer1.0.conv1.weight"``) with their values in ``params``; user
    inputs keep their placeholder names and dtypes (token ids stay int64, masks bool).
    With ``decompose``, a program holding operators outside Core ATen is first run through
    :func:`decomposition_table`. Symbolic dimensions are specialized to the example's sizes
    (with a warning). Raises :class:`TorchImportError` naming the first operator it cannot
    translate and its source line.
    """
    from torch.export.graph_signature import InputKind, OutputKind

    if decompose and _needs_decomposition(ep):
        ep = ep.run_decompositions(decomposition_table())
    sig = ep.graph_signature
    placeholders: dict = {}
    params: dict = {}
    inputs: list[Var] = []
    weights: list[Var] = []
    for spec in sig.input_specs:
        name = spec.arg.name
        if spec.kind == InputKind.USER_INPUT:
            node = _placeholder(ep, name)
            val = node.meta.get("val")
            if val is None or not hasattr(val, "shape"):
                raise TorchImportError(f"input {name} is not a tensor ({val!r}); only tensor "
                                       "inputs are supported")
            shape = tuple(static_int(s, f"a dimension of input {name}") for s in val.shape)
            var = Var(name, shape, graph_dtype(val.dtype))
            inputs.append(var)
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            value = ep.state_dict.get(spec.target)
            if value is None:
                value = ep.constants.get(spec.target)
            if value is None:
                raise TorchImportError(f"{spec.kind.name.lower()} {spec.target} has no value in "
                                       "the program")
            arr = to_numpy(value)
            from ...ir import dtype as dt

            if spec.kind == InputKind.CONSTANT_TENSOR and arr.dtype == np.bool_:
                # a constant mask stays a constant: indexing by it is then known while
                # importing (its true positions), not a data-dependent shape
                placeholders[name] = Constant(arr, spec.target)
                continue
            var = Var(spec.target, arr.shape, dt.from_numpy(arr.dtype))
            params[spec.target] = arr
            weights.append(var)
        else:
            raise TorchImportError(f"input {name} is a {spec.kind.name}, which is not supported")
        placeholders[name] = var
    user_outputs = []
    for k, spec in enumerate(sig.output_specs):
        if spec.kind == OutputKind.USER_OUTPUT:
            user_outputs.append(k)
        elif spec.kind in (OutputKind.BUFFER_MUTATION, OutputKind.USER_INPUT_MUTATION):
            raise TorchImportError(
                f"the program mutates {spec.target or spec.arg.name} ({spec.kind.name}); the "
                "importer takes inference programs: call module.eval() before exporting, and "
                "do not write to inputs or buffers in forward")
    net = import_graph(ep.graph, placeholders, outputs=user_outputs)
    used = {id(p) for p in net.params}
    ordered = inputs + [w for w in weights if id(w) in used]
    net = Graph([p for p in ordered if id(p) in used or p in inputs], net.outputs, net.name)
    params = {k: v for k, v in params.items() if any(p.name == k for p in net.params)}
    return net, params


def _placeholder(ep, name: str):
    for n in ep.graph.nodes:
        if n.op == "placeholder" and n.name == name:
            return n
    raise TorchImportError(f"the program has no placeholder {name}")


def from_torch(module, example_args, kwargs: dict | None = None) -> tuple[Graph, dict]:
    """Export ``module`` with ``torch.export.export(module, example_args, kwargs)``,
    decompose it to Core ATen (attention kept whole) and translate it
    (:func:`from_exported_program`). A module torch.export cannot trace is a
    :class:`TorchImportError` carrying torch's reason."""
    import torch

    if not isinstance(example_args, tuple):
        example_args = tuple(example_args) if isinstance(example_args, list) else (example_args,)
    try:
        ep = torch.export.export(module, example_args, kwargs=kwargs)
    except Exception as e:  # noqa: BLE001 - torch raises many kinds; all mean "cannot trace"
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise TorchImportError(f"torch.export cannot trace {type(module).__name__}: "
                               f"{type(e).__name__}: {first}") from e
    return from_exported_program(ep.run_decompositions(decomposition_table()), decompose=False)
