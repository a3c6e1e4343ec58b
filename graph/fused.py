"""Fused functions as te computations, and their extraction from a network.

Each primitive function that ``fuse_ops`` makes becomes one :class:`FusedFunction`: a
builder of its te tensors (one placeholder per parameter, named ``p0, p1, ...``, then the
output), a stable workload key, a readable name and the number of times the network calls
it. :func:`extract_fused_functions` lists the distinct ones of a network, which is what a
tuner's ``extract_tasks`` wraps into search tasks.
"""

from __future__ import annotations

import json
from functools import cached_property

import numpy as np

from ..ir import te
from ..ir.compute_dag import ComputeDAG
from ..ir.expr import const
from ..network_reader import install_network_reader
from .ir import Call, Constant, Graph, GraphError, Var, post_order
from .op import get_op


def lower_function(func: Graph) -> list:
    """Fresh te tensors of a primitive function: placeholders for its params, then its
    output."""
    if len(func.outputs) != 1:
        raise GraphError(f"{func.name}: a fused function has one output, got "
                         f"{len(func.outputs)}")
    values: dict[int, object] = {}
    placeholders = []
    for p in func.params:
        t = te.placeholder(p.shape, p.dtype, name=p.name)
        values[id(p)] = t
        placeholders.append(t)
    for node in post_order(func.outputs):
        if isinstance(node, Var):
            if id(node) not in values:
                raise GraphError(f"{func.name} uses %{node.name}, which is not a parameter")
        elif isinstance(node, Constant):
            if node.value.size != 1:
                raise GraphError(f"{func.name} holds a constant of shape {list(node.shape)}; "
                                 "only one-element constants can be immediates (make it a "
                                 "parameter)")
            values[id(node)] = const(_immediate(node, func.name), node.dtype)
        elif isinstance(node, Call):
            if isinstance(node.op, Graph):
                raise GraphError(f"{func.name} calls another function; fused functions are flat")
            args = [values[id(a)] for a in node.args]
            try:
                values[id(node)] = get_op(node.op).lower(args, node.attrs)
            except Exception as e:
                raise GraphError(f"{func.name}: lowering {node.op} failed: {e}") from e
    out = values[id(func.outputs[0])]
    if not isinstance(out, te.Tensor) or any(out is p for p in placeholders):
        raise GraphError(f"{func.name} computes nothing (it returns a parameter)")
    return placeholders + [out]


class FusedFunction:
    """One distinct fused function of a network.

    Attributes:
        func: the primitive :class:`~ptxforge.graph.ir.Graph`.
        name: a readable task name, ``vm_mod_fused_nn_conv2d_add_nn_relu`` (made unique
            within a network by a suffix).
        count: how many times the network calls it (the task weight).
    """

    def __init__(self, func: Graph, name: str | None = None, count: int = 1):
        self.func = func
        self.name = name or f"vm_mod_{func.name}"
        self.count = count

    @property
    def is_view(self) -> bool:
        """True for a function of reshapes only, which needs no kernel."""
        return bool(self.func.attrs.get("view"))

    def build_tensors(self) -> list:
        """Fresh te tensors: the inputs (``p0, p1, ...``) then the output."""
        return lower_function(self.func)

    @cached_property
    def tensors(self) -> list:
        """The te tensors of :meth:`build_tensors`, built once."""
        return self.build_tensors()

    @property
    def inputs(self) -> list:
        return self.tensors[:-1]

    @property
    def output(self):
        return self.tensors[-1]

    @cached_property
    def compute_dag(self) -> ComputeDAG:
        return ComputeDAG(self.tensors)

    @cached_property
    def workload_key(self) -> str:
        """``["<hash of the DAG>", [input shapes...], [output shape]]`` as JSON: equal
        computations have equal keys, across networks and runs."""
        shapes = [list(t.shape) for t in self.tensors]
        return json.dumps([self.compute_dag.structural_hash()] + shapes)

    def flop_count(self) -> float:
        return self.compute_dag.flop_count()

    def register_workload(self) -> str:
        """Register this function in the auto-scheduler's workload registry under its DAG
        hash, so :func:`ptxforge.autosched.workload_registry.workload_tensors` rebuilds its
        tensors from :attr:`workload_key` (whose form ``[hash, shapes...]`` is that of a
        registered workload's key). Returns the key."""
        from ..autosched.workload_registry import register_workload

        def build(*shapes):
            return self.build_tensors()

        register_workload(self.compute_dag.structural_hash(), build, override=True)
        return self.workload_key

    def __repr__(self):
        return f"<FusedFunction {self.name} x{self.count} {self.workload_key}>"


def fused_calls(fused_graph: Graph) -> list[Call]:
    """The calls of fused functions in a fused main graph, in execution order."""
    calls = [n for n in fused_graph.nodes() if isinstance(n, Call)]
    for c in calls:
        if not isinstance(c.op, Graph):
            raise GraphError(f"the graph is not fused: it calls {c.op} directly; run fuse_ops "
                             "first")
    return calls


def distinct_functions(fused_graph: Graph, include_views: bool = False
                       ) -> tuple[list[FusedFunction], dict[int, FusedFunction]]:
    """The distinct fused functions of ``fused_graph`` (by workload key, in order of first
    call, with counts), and the function of each call (by the call's id)."""
    by_key: dict[str, FusedFunction] = {}
    of_call: dict[int, FusedFunction] = {}
    used_names: dict[str, int] = {}
    calls = fused_calls(fused_graph)
    # kernels first, so their names do not depend on include_views
    ordered = [c for c in calls if not c.op.attrs.get("view")]
    if include_views:
        ordered += [c for c in calls if c.op.attrs.get("view")]
    for call in ordered:
        fn = call.op
        probe = FusedFunction(fn)
        key = probe.workload_key
        found = by_key.get(key)
        if found is None:
            base = probe.name
            k = used_names.get(base, 0)
            used_names[base] = k + 1
            probe.name = base if k == 0 else f"{base}_{k}"
            by_key[key] = found = probe
        else:
            found.count += 1
        of_call[id(call)] = found
    return list(by_key.values()), of_call


def extract_fused_functions(net: Graph, params: dict | None = None, *,
                            layout: str | None = None, winograd: bool = False,
                            include_views: bool = False,
                            precision: str | None = None,
                            pad_channels: int | None = None) -> list[FusedFunction]:
    """The distinct fused functions of a network with their counts, as the network would be
    compiled by :func:`ptxforge.graph.build` with the same options."""
    from .build_module import optimize

    fused = optimize(net, params, layout=layout, winograd=winograd, precision=precision,
                     pad_channels=pad_channels)
    funcs, _ = distinct_functions(fused, include_views)
    return funcs


# the tuners' extract_tasks reads networks through this layer's extraction (they stand
# below the graph layer and do not import it)
install_network_reader(extract_fused_functions)


def _immediate(node: Constant, where: str):
    """The value of one-element constant ``node`` as an immediate: fp8 bit patterns decoded
    (an immediate is converted like a cast, which saturates: an fp8 infinity is refused)."""
    value = node.value.reshape(()).item()
    if not node.dtype.startswith("float8"):
        return value
    from ..ir.float8 import float8_from_bits

    decoded = float(float8_from_bits(np.uint8(value), node.dtype))
    if np.isinf(decoded):
        raise GraphError(f"{where}: the {node.dtype} constant {node.name or ''} is an "
                         "infinity, which an immediate cannot hold (fp8 conversions "
                         "saturate); make it a constant of more than one element")
    return decoded
