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
from .torch_options import (
    BackendError,
    UnsupportedOperatorsWarning,
    is_simulator,
    resolve_target,
)


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
    if conv is None or not conv.available or _uncomputed_reads(node, conv):
        return False
    outs = _used_vals(node)
    ins = [v for a in node.all_input_nodes for v in _used_vals(a)]
    return all(_tensor_ok(v) for v in outs + ins)


def _uncomputed_reads(node, conv) -> list[int]:
    """The positions of ``node``'s results that the graph reads but ``conv`` does not
    compute (a fused attention's log-sum-exp, which only training reads)."""
    if conv.computes is None:
        return []
    used = {u.args[1] for u in node.users if u.target is operator.getitem}
    return sorted(k for k in used if k not in conv.computes)


def _used_vals(node) -> list:
    """The tensors of ``node``'s value that something reads: of a tuple (batch norm's saved
    statistics, often empty), only the entries a ``getitem`` takes."""
    val = node.meta.get("val") if hasattr(node, "meta") else None
    if not isinstance(val, (list, tuple)):
        return _vals(node)
    used = {u.args[1] for u in node.users if u.target is operator.getitem}
    return [v for k, v in enumerate(val) if k in used and hasattr(v, "shape")]


def describe(node) -> str:
    name = overload_name(node.target) if node.op == "call_function" else node.op
    why = why_unsupported(node)
    return f"{name} (node {node.name} at {source_line(node)}{': ' + why if why else ''})"


def why_unsupported(node) -> str:
    """Why ptxforge does not run ``node``: no converter, a tensor of a dtype it has no
    kernels for (complex, float8), or a size known only at run time; "" when none of these
    (a converter rejected the node's arguments)."""
    if node.op != "call_function" or not hasattr(node.target, "_schema"):
        return "not an ATen operator"
    conv = lookup(overload_name(node.target))
    if conv is None:
        return "no converter"
    if not conv.available:
        return "needs graph op(s) " + ", ".join(conv.missing_ops())
    unread = _uncomputed_reads(node, conv)
    if unread:
        returns = node.target._schema.returns
        names = ", ".join(returns[k].name or f"result {k}" for k in unread)
        return f"the graph reads its {names}, which ptxforge does not compute"
    for v in _used_vals(node) + [v for a in node.all_input_nodes for v in _used_vals(a)]:
        try:
            graph_dtype(v.dtype)
        except TorchImportError as e:
            return str(e).split(";")[0]
        if not _tensor_ok(v):
            return f"a tensor of shape {list(v.shape)} (sizes known only at run time, or empty)"
    return ""


class CompiledPartition:
    """A partition built by ptxforge, called with the partition's torch tensors.

    The build waits for the first call: the inputs that are the model's parameters and
    buffers (AOT autograd's static inputs, ``static``) are then bound as weights, so the
    graph passes fold and re-lay them out once and later calls pass only the activations.
    Like PyTorch's CUDA graphs, this assumes the weights do not change after that call.

    Attributes:
        net: the imported graph of the partition.
        lib: the :class:`~ptxforge.graph.GraphLibrary` built from it (after the first call).
    """

    def __init__(self, net, target: str, opts, static: frozenset = frozenset()):
        self.__name__ = net.name  # how the captured graph's code calls it (fused_0)
        self.net = net
        self.target = target
        self.opts = opts
        self.names = [p.name for p in net.params]
        self.static = static
        self.module = None
        self.used: list[bool] = []
        self._gpu_call = None  # the per-call path on the GPU (torch_call.GpuCall)

    def _build(self, tensors) -> None:
        from . import graph

        opts, net, target = self.opts, self.net, self.target
        params = {name: _host(t) for name, t in zip(self.names, tensors) if name in self.static}
        if opts.trials:
            from .torch_tuning import tune_graph

            tune_graph(net, params, opts.trials, opts.log, precision=opts.precision,
                       target="sim" if is_simulator(target) else "cuda",
                       fused_attention=opts.fused_attention)
        kw = {"precision": _precision(opts)}
        if opts.fused_attention is not None:
            kw["fused_attention"] = opts.fused_attention
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", graph.NoTuningRecordWarning)
            if opts.log:
                from . import autosched

                with autosched.ApplyHistoryBest(opts.log):
                    self.lib = graph.build(net, target=target, params=params, **kw)
            else:
                self.lib = graph.build(net, target=target, params=params, **kw)
        from .runtime.zero_copy import ZeroCopyGraphModule

        if is_simulator(target):
            self.module = ZeroCopyGraphModule(self.lib)
        else:
            import ptxforge

            self.module = ZeroCopyGraphModule(self.lib, ptxforge.cuda(0),
                                              use_cuda_graph=opts.cuda_graph)
        # weights (bound now) and inputs the build found unused are not passed again
        self.used = [name in self.lib.plan.inputs for name in self.names]
        plan = self.lib.plan
        self.out_types = [plan.slots[k].ty for k in plan.outputs]
        if not is_simulator(target):
            from .torch_call import GpuCall

            self._gpu_call = GpuCall(self.module, self.names, self.used,
                                     lambda tensors: self._check_devices(tensors, self.used))
        if opts.on_build is not None:
            opts.on_build(self)

    def __call__(self, *tensors):
        if self.module is None:
            # the weights are copied to the host while building, wherever they are
            self._check_devices(tensors, [name not in self.static for name in self.names])
            self._build(tensors)
            outs = self._run(tensors)
            self._report_once()
        elif self._gpu_call is not None:
            outs = self._gpu_call(tensors)
        else:
            outs = self._run(tensors)
        return outs if len(outs) != 1 else outs[0]

    def report(self):
        """What this partition compiled and how it runs: a
        :class:`~ptxforge.torch_report.PartitionReport` (functions tuned k of n and the
        ones that fell back to the default schedule, launches per run, CUDA graph)."""
        from .torch_report import PartitionReport, function_reports, library_launches

        if self.module is None:
            raise BackendError(f"partition {self.net.name} is built at its first call; "
                               "call the compiled model first")
        lib = self.lib
        return PartitionReport(
            name=self.net.name, functions=function_reports(lib),
            steps=sum(k is not None for k in lib.call_keys), launches=library_launches(lib),
            inputs=tuple(n for n, u in zip(self.names, self.used) if u),
            weights=sum(n in self.static for n in self.names), cuda_graph=self._graph_state())

    def _graph_state(self) -> str:
        if is_simulator(self.target):
            return "simulator"
        if not self.opts.cuda_graph:
            return "off"
        if self.module.bound_graph_error:
            return f"failed: {self.module.bound_graph_error}"
        return "captured" if self.module._patched is not None else "not run yet"

    def _report_once(self) -> None:
        """The ``report`` option, after the first call (the capture has been tried)."""
        show = self.opts.report
        if not show:
            return
        rep = self.report()
        if callable(show):
            show(rep)
        else:
            print(rep.summary(), flush=True)

    def _check_devices(self, tensors, used) -> None:
        """A GPU build takes CUDA tensors only: a CPU tensor is refused (before the first
        build, and before any launch) with what to do about it."""
        if is_simulator(self.target):
            return
        for name, use, t in zip(self.names, used, tensors):
            if use and getattr(t, "device", None) is not None and t.device.type != "cuda":
                raise BackendError(
                    f"input {name} is on {t.device}, but this graph was compiled for the GPU "
                    f"({self.target}); move the model and its inputs to CUDA (model.cuda(), "
                    "x.cuda()) or compile with options={'target': 'sim'}")

    def _run(self, tensors) -> tuple:
        """Run on the tensors themselves: inputs wrapped without a copy, outputs allocated
        by PyTorch (``torch.empty`` on the inputs' device) and written by the kernels in
        place; on a GPU, on PyTorch's current stream. (The first call on a GPU, which
        captures the CUDA graph; later ones take the pointer path of
        :class:`~ptxforge.torch_call.GpuCall`.)"""
        import torch

        on_gpu = not is_simulator(self.target)
        device = next((t.device for t in tensors if hasattr(t, "device")),
                      torch.device("cuda" if on_gpu else "cpu"))
        self._check_devices(tensors, self.used)
        inputs = {}
        for name, used, t in zip(self.names, self.used, tensors):
            if used:
                inputs[name] = self._wrap(t, name)
        if not on_gpu:
            device = torch.device("cpu")  # the simulator runs on host memory
        outs = tuple(torch.empty(ty.shape, dtype=getattr(torch, ty.dtype), device=device)
                     for ty in self.out_types)
        stream = torch.cuda.current_stream(device).cuda_stream if on_gpu else 0
        self.module.run_bound(inputs, [self._wrap(o, f"output {k}")
                                       for k, o in enumerate(outs)], stream)
        if not on_gpu and tensors and tensors[0].device.type != "cpu":
            return tuple(o.to(tensors[0].device) for o in outs)
        return outs

    def _wrap(self, t, what: str):
        from .nd import DLPackError, wrap_tensor

        t = t.detach()
        if is_simulator(self.target) and t.device.type != "cpu":
            t = t.cpu()  # a GPU tensor given to a simulator build: one copy to the host
        try:
            return wrap_tensor(t, self.module.device, what)
        except DLPackError:
            # a strided view or one at an unaligned offset: PyTorch makes it compact (the one
            # copy of this input), then it is shared as the others are
            return wrap_tensor(t.clone(memory_format=_contiguous()), self.module.device, what)


def _contiguous():
    import torch

    return torch.contiguous_format


def _precision(opts) -> str | None:
    return None if opts.precision == "float32" else opts.precision


def _host(t) -> np.ndarray:
    import torch

    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        from .ir import dtype as dt

        return dt.to_bfloat16(t.float().numpy())
    return t.contiguous().numpy()


_warned_unsupported: set[tuple[str, ...]] = set()


def compile_partitioned(gm, example_inputs, opts, fullgraph: bool = False):
    """``gm`` (an ATen FX graph from AOT autograd) with its supported regions replaced by
    compiled partitions; returns a callable of the graph's inputs."""
    if _has_symbolic_shapes(gm):
        return _PerShape(gm, opts, fullgraph)
    _drop_empty_cat_inputs(gm)
    target = resolve_target(opts.target)
    rejected: set[str] = set()
    while True:
        unsupported = [n for n in gm.graph.nodes if n.op == "call_function"
                       and not node_supported(n, rejected) and not _takes_from(n, rejected)]
        if unsupported and fullgraph:
            raise BackendError("fullgraph=True, but ptxforge cannot run "
                               + "; ".join(describe(n) for n in unsupported[:5])
                               + (f" and {len(unsupported) - 5} more" if len(unsupported) > 5
                                  else ""))
        try:
            compiled = _partition_and_build(gm, rejected, target, opts, _static_inputs(gm))
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


def _drop_empty_cat_inputs(gm) -> None:
    """Remove, in place, the empty 1-D tensors a ``cat`` concatenates (which ``torch.cat``
    skips): a key/value cache starts as ``torch.tensor([])`` (Hugging Face's
    ``DynamicCache``), and an empty tensor would keep the ``cat``, and so the graph around
    it, out of the compiled partitions."""
    import torch

    changed = False
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is not torch.ops.aten.cat.default:
            continue
        tensors = node.args[0]
        out = node.meta.get("val")
        # an empty input of another dtype takes part in the type promotion: it stays
        kept = [t for t in tensors
                if not (_empty_1d(t) and t.meta["val"].dtype == getattr(out, "dtype", None))]
        if kept and len(kept) < len(tensors):
            node.args = (kept,) + tuple(node.args[1:])
            changed = True
    if changed:
        gm.graph.eliminate_dead_code()
        gm.recompile()


def _empty_1d(node) -> bool:
    val = node.meta.get("val") if hasattr(node, "meta") else None
    return hasattr(val, "shape") and tuple(val.shape) == (0,)


def _takes_from(node, rejected: set[str]) -> bool:
    """``node`` is a ``getitem`` of an unsupported node, which is listed instead."""
    if node.target is not operator.getitem:
        return False
    src = node.args[0]
    return hasattr(src, "op") and not node_supported(src, rejected)


class _RejectNode(Exception):
    def __init__(self, node_name: str, error: Exception):
        super().__init__(str(error))
        self.node_name = node_name
        self.error = error


def _static_inputs(gm) -> set[str]:
    """The placeholders AOT autograd marks static: the model's parameters and buffers."""
    try:
        import torch

        meta = torch._guards.TracingContext.try_get().fw_metadata
        indices = set(meta.static_input_indices or ())
    except AttributeError:
        return set()
    places = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    return {places[i] for i in indices if i < len(places)}


def _partition_and_build(gm, rejected: set[str], target: str, opts, static: set[str]):
    import copy

    import torch
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase

    class Support(OperatorSupportBase):
        def is_node_supported(self, submodules, node) -> bool:
            return node_supported(node, rejected)

    # a copy of the graph only: the module's tensor attributes (constants AOT autograd
    # lifted, such as GPT-2's causal mask) are shared, since copying them under the fake
    # tensor mode AOT autograd has active fails
    work = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    partitioner = CapabilityBasedPartitioner(work, Support(), allows_single_node_partition=True)
    partitions = partitioner.propose_partitions()
    fused = partitioner.fuse_partitions(partitions)
    for node in list(fused.graph.nodes):
        if node.op != "call_module":
            continue
        sub = getattr(fused, node.target)
        placeholders = {}
        frozen = set()
        for ph, arg in zip([n for n in sub.graph.nodes if n.op == "placeholder"], node.args):
            val = arg.meta.get("val")
            if not hasattr(val, "shape"):
                raise _RejectNode(arg.name, TorchImportError(
                    f"{arg.name} is not a tensor ({val!r})"))
            if arg.op == "placeholder" and arg.name in static:
                frozen.add(ph.name)
            placeholders[ph.name] = Var(ph.name, tuple(static_int(s) for s in val.shape),
                                        graph_dtype(val.dtype))
        try:
            net = import_graph(sub.graph, placeholders, name=node.target)
        except TorchImportError as e:
            bad = _failing_node(sub, e)
            raise _RejectNode(bad, e) from e
        compiled = CompiledPartition(net, target, opts, frozenset(frozen))
        # called as a function, not as a submodule: no nn.Module dispatch per call
        with fused.graph.inserting_before(node):
            call = fused.graph.call_function(compiled, tuple(node.args), dict(node.kwargs))
        call.meta = dict(node.meta)
        node.replace_all_uses_with(call)
        fused.graph.erase_node(node)
        delattr(fused, node.target)
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
