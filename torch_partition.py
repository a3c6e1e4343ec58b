"""Partitioning a captured ATen graph between ptxforge and PyTorch, and running the
compiled partitions.

The supported nodes (a converter whose graph ops are registered, tensors of supported
dtypes) are grouped by torch's capability-based partitioner into submodules; each becomes a
:class:`CompiledPartition` (imported, built by ``graph.build`` and run by a
``GraphModule``); the other nodes run in PyTorch between them. A node whose converter
rejects its arguments leaves the partition and the graph is partitioned again.
"""

from __future__ import annotations

import operator
import warnings

import numpy as np

from .graph.frontend_torch import TorchImportError, graph_dtype, import_graph
from .graph.frontend_torch.importer import overload_name, source_line, static_int
from .graph.frontend_torch.registry import lookup
from .graph.ir import Var
from .torch_backend import BackendError, UnsupportedOperatorsWarning, resolve_target


def _tensor_ok(val) -> bool:
    """A tensor ptxforge can hold: a supported dtype, a shape of known extents (no
    data-dependent size) and at least one element."""
    try:
        graph_dtype(val.dtype)
    except TorchImportError:
        return False
    for s in val.shape:
        if not isinstance(s, int):
            hint = getattr(getattr(s, "node", None), "hint", None)
            if hint is None:
                return False
            s = hint
        if s == 0:
            return False
    return True


def _vals(node) -> list:
    val = node.meta.get("val") if hasattr(node, "meta") else None
    vals = val if isinstance(val, (list, tuple)) else [val]
    return [v for v in vals if hasattr(v, "dtype") and hasattr(v, "shape")]


def node_supported(node, rejected: set[str]) -> bool:
    """Whether ptxforge can run ``node`` of a captured graph."""
    if node.op != "call_function" or node.name in rejected:
        return False
    if node.target is operator.getitem:
        src = node.args[0]
        return hasattr(src, "op") and node_supported(src, rejected)
    if not hasattr(node.target, "_schema"):
        return False
    conv = lookup(overload_name(node.target))
    if conv is None or not conv.available:
        return False
    args = [a for a in node.all_input_nodes]
    return all(_tensor_ok(v) for n in [node, *args] for v in _vals(n))


def describe(node) -> str:
    name = overload_name(node.target) if node.op == "call_function" else node.op
    return f"{name} (node {node.name} at {source_line(node)})"


class CompiledPartition:
    """A partition built by ptxforge, called with the partition's torch tensors."""

    def __init__(self, net, target: str, opts, devices: set[str]):
        from . import graph

        self.net = net
        self.target = target
        self.names = [p.name for p in net.params]
        if opts.trials:
            from .torch_tuning import tune_graph

            tune_graph(net, {}, opts.trials, opts.log, precision=opts.precision,
                       target="sim" if target == "sim" else "cuda")
        if opts.log:
            from . import autosched

            with autosched.ApplyHistoryBest(opts.log), warnings.catch_warnings():
                warnings.simplefilter("ignore", graph.NoTuningRecordWarning)
                self.lib = graph.build(net, target=target, precision=_precision(opts))
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", graph.NoTuningRecordWarning)
                self.lib = graph.build(net, target=target, precision=_precision(opts))
        if target == "sim":
            self.module = graph.GraphModule(self.lib)
        else:
            import ptxforge

            self.module = graph.GraphModule(self.lib, ptxforge.cuda(0),
                                            use_cuda_graph=opts.cuda_graph)
        self.devices = devices
        # parameters the build found unused (a partition's input read by nothing) are skipped
        self.used = [name in self.lib.plan.inputs for name in self.names]

    def __call__(self, *tensors):
        import torch

        if self.target == "sim":
            device = tensors[0].device if tensors else torch.device("cpu")
            for name, used, t in zip(self.names, self.used, tensors):
                if used:
                    self.module.set_input(name, _host(t))
            self.module.run()
            outs = tuple(_from_host(self.module.get_output(k).numpy(), device)
                         for k in range(self.module.get_num_outputs()))
        else:
            outs = self._run_cuda(tensors)
        return outs if len(outs) != 1 else outs[0]

    def _run_cuda(self, tensors):
        import torch

        current = torch.cuda.current_stream()
        # the module's kernels (and its CUDA graph) launch on the legacy default stream:
        # order it after PyTorch's current stream and PyTorch after it, on the GPU
        legacy = torch.cuda.default_stream()
        for name, used, t in zip(self.names, self.used, tensors):
            if not used:
                continue
            if t.device.type != "cuda":
                raise BackendError(
                    f"input {name} is on {t.device}, but this graph was compiled for the GPU; "
                    "move the model and its inputs to CUDA (model.cuda(), x.cuda()) or "
                    "compile with options={'target': 'sim'}")
            # the module's input buffer seen by torch through DLPack: one copy, on the stream
            slot = torch.from_dlpack(self.module.get_input(name))
            slot.copy_(t.reshape(slot.shape))
        if current != legacy:
            legacy.wait_stream(current)
        self.module.run()
        if current != legacy:
            current.wait_stream(legacy)
        # the output buffers are overwritten by the next call: hand PyTorch its own copies
        return tuple(torch.from_dlpack(self.module.get_output(k)).clone()
                     for k in range(self.module.get_num_outputs()))


def _precision(opts) -> str | None:
    return None if opts.precision == "float32" else opts.precision


def _host(t) -> np.ndarray:
    import torch

    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        from .ir import dtype as dt

        return dt.to_bfloat16(t.float().numpy())
    return t.contiguous().numpy()


def _from_host(arr: np.ndarray, device):
    import torch

    from .ir import dtype as dt

    if arr.dtype == dt.BFLOAT16_HOST and dt.BFLOAT16_HOST != np.dtype(np.uint16):
        return torch.from_numpy(arr.astype(np.float32)).to(torch.bfloat16).to(device)
    return torch.from_numpy(np.array(arr)).to(device)


_warned_unsupported: set[tuple[str, ...]] = set()


def compile_partitioned(gm, example_inputs, opts, fullgraph: bool = False):
    """``gm`` (an ATen FX graph from AOT autograd) with its supported regions replaced by
    compiled partitions; returns a callable of the graph's inputs."""
    if _has_symbolic_shapes(gm):
        return _PerShape(gm, opts, fullgraph)
    target = resolve_target(opts.target)
    rejected: set[str] = set()
    while True:
        unsupported = [n for n in gm.graph.nodes if n.op == "call_function"
                       and not node_supported(n, rejected)]
        if unsupported and fullgraph:
            raise BackendError("fullgraph=True, but ptxforge cannot run "
                               + "; ".join(describe(n) for n in unsupported[:5])
                               + (f" and {len(unsupported) - 5} more" if len(unsupported) > 5
                                  else ""))
        try:
            compiled = _partition_and_build(gm, rejected, target, opts)
        except _RejectNode as e:
            if fullgraph:
                raise BackendError(str(e.error)) from e.error
            rejected.add(e.node_name)
            continue
        break
    if unsupported:
        key = tuple(sorted({overload_name(n.target) for n in unsupported}))
        if key not in _warned_unsupported:
            _warned_unsupported.add(key)
            warnings.warn("these operators run in PyTorch, between ptxforge's kernels: "
                          + ", ".join(key), UnsupportedOperatorsWarning, stacklevel=2)
    return compiled


class _RejectNode(Exception):
    def __init__(self, node_name: str, error: Exception):
        super().__init__(str(error))
        self.node_name = node_name
        self.error = error


def _partition_and_build(gm, rejected: set[str], target: str, opts):
    import copy

    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase

    class Support(OperatorSupportBase):
        def is_node_supported(self, submodules, node) -> bool:
            return node_supported(node, rejected)

    work = copy.deepcopy(gm)
    partitioner = CapabilityBasedPartitioner(work, Support(), allows_single_node_partition=True)
    partitions = partitioner.propose_partitions()
    fused = partitioner.fuse_partitions(partitions)
    for node in list(fused.graph.nodes):
        if node.op != "call_module":
            continue
        sub = getattr(fused, node.target)
        placeholders = {}
        devices = set()
        for ph, arg in zip([n for n in sub.graph.nodes if n.op == "placeholder"], node.args):
            val = arg.meta.get("val")
            if not hasattr(val, "shape"):
                raise _RejectNode(arg.name, TorchImportError(
                    f"{arg.name} is not a tensor ({val!r})"))
            devices.add(val.device.type)
            placeholders[ph.name] = Var(ph.name, tuple(static_int(s) for s in val.shape),
                                        graph_dtype(val.dtype))
        try:
            net = import_graph(sub.graph, placeholders, name=node.target)
        except TorchImportError as e:
            bad = _failing_node(sub, e)
            raise _RejectNode(bad, e) from e
        setattr(fused, node.target, _AsModule(CompiledPartition(net, target, opts, devices)))
    fused.recompile()
    return fused


def _failing_node(sub, error) -> str:
    text = str(error)
    names = [n.name for n in sub.graph.nodes if n.op == "call_function"]
    for name in sorted(names, key=len, reverse=True):
        if f"node {name} " in text or f"node {name})" in text:
            return name
    # no node named: reject the whole partition's first computing node
    return names[0] if names else ""


def _AsModule(fn):  # noqa: N802 - makes a torch module of a callable
    import torch

    class Compiled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fn = fn

        def forward(self, *args):
            return self.fn(*args)

    return Compiled()


def _has_symbolic_shapes(gm) -> bool:
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            val = n.meta.get("val")
            if hasattr(val, "shape") and any(not isinstance(s, int) for s in val.shape):
                return True
    return False


class _PerShape:
    """A graph captured with symbolic shapes: specialized and compiled per input shape at
    call time (re-traced with ``make_fx``), the compiled graphs cached by shape."""

    def __init__(self, gm, opts, fullgraph: bool):
        self.gm = gm
        self.opts = opts
        self.fullgraph = fullgraph
        self.cache: dict = {}

    def __call__(self, *args):
        from torch.fx.experimental.proxy_tensor import make_fx

        key = tuple((tuple(a.shape), a.dtype) if hasattr(a, "shape") else a for a in args)
        fn = self.cache.get(key)
        if fn is None:
            static = make_fx(self.gm, tracing_mode="fake")(*args)
            fn = compile_partitioned(static, args, self.opts, self.fullgraph)
            self.cache[key] = fn
        return fn(*args)
