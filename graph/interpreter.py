"""The reference executor: runs a graph op by op with the numpy references of
:mod:`ptxforge.ops.testing`. It defines what a graph means, so compiled networks, passes
and importers are all checked against it; constant folding uses it too."""

from __future__ import annotations

import numpy as np

from ..ir import dtype as dt
from .ir import Call, Constant, Graph, GraphError, Node, Var, consumers, post_order


def evaluate_call(call: Call, args: list[np.ndarray]) -> np.ndarray:
    """The value of one call on numpy arguments."""
    if isinstance(call.op, Graph):
        return run_graph(call.op, dict(zip((p.name for p in call.op.params), args)))[0]
    from .op import get_op

    if call.op_name == "cast" and (_float8(call.dtype) or _float8(call.args[0].dtype)):
        out = _float8_cast(args[0], call.args[0].dtype, call.dtype)
    else:
        out = get_op(call.op).ref(args, call.attrs)
    out = np.asarray(out)
    want = dt.to_numpy(call.dtype)
    if out.dtype != want:
        out = out.astype(want)
    if tuple(out.shape) != call.shape:
        raise GraphError(f"{call.op_name}: the reference returned shape {list(out.shape)}, the "
                         f"type says {list(call.shape)}")
    return out


def _float8(dtype: str) -> bool:
    return dtype.startswith("float8")


def _float8_cast(x: np.ndarray, src: str, dst: str) -> np.ndarray:
    """A cast from or to an fp8 dtype (host arrays: ``uint8`` bit patterns): fp8 values
    are read exactly, and rounding to fp8 is ``cvt.rn.satfinite``'s, from the source's
    exact value (:mod:`ptxforge.ir.float8`)."""
    from ..ir.float8 import float8_bits, float8_from_bits
    from .opdefs.elemwise import cast_array

    if _float8(src):
        x = float8_from_bits(x, src)
    elif src == "bfloat16":
        x = dt.from_bfloat16(x)
    if _float8(dst):
        return float8_bits(np.asarray(x, dtype=np.float64), dst)
    return cast_array(x, dst)


def run_graph(graph: Graph, inputs: dict | None = None, params: dict | None = None
              ) -> list[np.ndarray]:
    """Evaluate ``graph``: ``inputs`` and ``params`` map parameter names to arrays (every
    parameter needs a value). Returns one array per output."""
    values: dict = {}
    given = dict(params or {})
    given.update(inputs or {})
    for p in graph.params:
        if p.name not in given:
            raise GraphError(f"no value for parameter %{p.name} ({p.ty}) of graph {graph.name}")
        arr = np.asarray(given[p.name].numpy() if hasattr(given[p.name], "numpy")
                         else given[p.name])
        if tuple(arr.shape) != p.shape:
            raise GraphError(f"parameter %{p.name} needs shape {list(p.shape)}, got "
                             f"{list(arr.shape)}")
        if _float8(p.dtype) and arr.dtype != np.uint8:
            # fp8 values (an ml_dtypes array, or floats) rather than bit patterns: encoded
            # as a copy into a device array encodes them
            from ..ir.float8 import float8_bits

            arr = float8_bits(arr.astype(np.float64), p.dtype)
        try:  # float data for an integer parameter, or integers that wrap, are refused
            arr = dt.host_array(arr, p.dtype, f"parameter %{p.name}")
        except dt.DTypeError as e:
            raise GraphError(str(e)) from None
        values[id(p)] = arr.astype(dt.to_numpy(p.dtype), copy=False)
    nodes = post_order(graph.outputs)
    uses = {k: len(v) for k, v in consumers(nodes).items()}
    keep = {id(o) for o in graph.outputs}
    for node in nodes:
        if isinstance(node, Var):
            if id(node) not in values:
                raise GraphError(f"graph {graph.name} uses %{node.name}, which is not a "
                                 "parameter")
        elif isinstance(node, Constant):
            values[id(node)] = node.value
        elif isinstance(node, Call):
            values[id(node)] = evaluate_call(node, [values[id(a)] for a in node.args])
            for a in dict.fromkeys(map(id, node.args)):
                uses[a] -= 1
                if uses[a] == 0 and a not in keep:
                    values.pop(a, None)  # free intermediates early: networks are large
    return [values[id(o)] for o in graph.outputs]


def evaluate(graph: Graph, inputs: dict | None = None, params: dict | None = None
             ) -> np.ndarray | list[np.ndarray]:
    """:func:`run_graph`, returning the array itself for a single-output graph."""
    outs = run_graph(graph, inputs, params)
    return outs[0] if len(outs) == 1 else outs


def fold(node: Node) -> Constant:
    """The value of a node whose leaves are all constants, as a constant."""
    if isinstance(node, Constant):
        return node
    graph = Graph([], [node], "fold")
    (value,) = run_graph(graph)
    return Constant(value, "")
