"""The graph IR: a typed dataflow graph of tensor operators.

A network is a :class:`Graph` (Relay's ``Function``): parameters (:class:`Var`), and
output expressions built from :class:`Call` nodes (an operator applied to arguments with
attributes) over vars and :class:`Constant` nodes. Every node carries its
:class:`TensorType` (shape and dtype), inferred when the node is built, so a wrong shape is
reported where the offending operator is created.

Weights are held apart from the graph, as in Relay: a model is ``(graph, params)`` where
``params`` maps names of the graph's parameters to numpy arrays;
:func:`~ptxforge.graph.ir.bind_params` turns those parameters into constants.

Operator fusion makes :class:`Graph` objects with ``attrs["primitive"] = True`` (fused
functions) and calls them from the main graph: ``Call(op=<Graph>, args)``.

Nodes are immutable and compared by identity; passes build new graphs.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ir import dtype as dt
from ..runtime import GraphError  # defined with the runtime, which raises it too


def _extent(s) -> int:
    """``s`` as a dimension extent, or raise ``ValueError``: an int (numpy's too) or an
    integral float such as ``4.0``; never a bool, a fraction, a string or a negative."""
    if isinstance(s, (bool, np.bool_)):
        raise ValueError("a bool is not an extent")
    if isinstance(s, (float, np.floating)):
        # int() would truncate 1.5 to 1 and build a tensor of the wrong size.
        if not float(s).is_integer():
            raise ValueError("not integral")
        n = int(s)
    else:
        try:
            n = operator.index(s)
        except TypeError:
            raise ValueError("not an integer") from None
    if n < 0:
        raise ValueError("negative")
    return n


def check_shape(shape, what: str = "a shape") -> tuple[int, ...]:
    """``shape`` as a tuple of non-negative ints; raises :class:`GraphError` naming the
    offending extent (``what`` names the shape in the message, e.g. ``"shape_dict['x']"``).
    Integral floats (``4.0``) and numpy integers are accepted; ``1.5``, bools, strings and
    negative extents are not."""
    try:
        dims = tuple(shape)
    except TypeError:
        raise GraphError(f"{what} is a tuple of ints, got {shape!r}") from None
    out = []
    for axis, s in enumerate(dims):
        try:
            out.append(_extent(s))
        except ValueError as e:
            raise GraphError(
                f"{what} {dims!r} has extent {s!r} at axis {axis} ({e}); each extent is a "
                "non-negative integer") from None
    return tuple(out)


@dataclass(frozen=True)
class TensorType:
    """The type of a tensor: a static shape and a dtype."""

    shape: tuple[int, ...]
    dtype: str = "float32"

    def __post_init__(self):
        object.__setattr__(self, "shape", check_shape(self.shape))
        try:
            dt.check(self.dtype)
        except dt.DTypeError as e:
            raise GraphError(str(e)) from None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.size * dt.nbytes(self.dtype)

    def __str__(self) -> str:
        dims = ", ".join(str(s) for s in self.shape)
        if len(self.shape) == 1:
            dims += ","
        return f"Tensor[({dims}), {self.dtype}]"


class Node:
    """A value of the graph; ``ty`` is its :class:`TensorType`."""

    __slots__ = ("ty", "__weakref__")

    ty: TensorType

    @property
    def shape(self) -> tuple[int, ...]:
        return self.ty.shape

    @property
    def dtype(self) -> str:
        return self.ty.dtype

    @property
    def ndim(self) -> int:
        return self.ty.ndim

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other

    def __repr__(self):
        from .printer import node_summary

        return node_summary(self)


class Var(Node):
    """A parameter of a graph: a network input or a weight bound later from ``params``."""

    __slots__ = ("name",)

    def __init__(self, name: str, shape: Sequence[int] | TensorType, dtype: str = "float32"):
        if not isinstance(name, str) or not name:
            raise GraphError(f"a var needs a non-empty name, got {name!r}")
        self.name = name
        self.ty = (shape if isinstance(shape, TensorType)
                   else TensorType(check_shape(shape, f"the shape of var {name!r}"), dtype))


class Constant(Node):
    """A constant tensor (a bound weight or a folded value); ``name`` is a hint for
    printing and for naming the parameter the compiled network uploads."""

    __slots__ = ("value", "name")

    def __init__(self, value, name: str = "", dtype: str | None = None):
        arr = np.asarray(value)
        if arr.dtype.name.startswith("float8") and dtype is None:
            dtype = arr.dtype.name  # an ml_dtypes fp8 array
        if dtype is not None and dtype.startswith("float8"):
            # fp8 values are held as their uint8 bit patterns, as fp8 host arrays are
            self.value = _float8_bits(arr, dtype, name)
            self.value.setflags(write=False)
            self.name = name
            self.ty = TensorType(self.value.shape, dtype)
            return
        if dtype is not None:
            arr = arr.astype(dt.to_numpy(dtype))
        elif arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        elif arr.dtype == np.int64 and arr.ndim == 0:
            arr = arr.astype(np.int32)
        # np.ascontiguousarray would make a 0-d array 1-d (a scalar's type is shape ())
        self.value = arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)
        self.value.setflags(write=False)
        self.name = name
        self.ty = TensorType(self.value.shape, dt.from_numpy(self.value.dtype))

    @property
    def is_scalar(self) -> bool:
        """True for a constant of one element (folded into expressions as an immediate)."""
        return self.value.size == 1


def _float8_bits(arr: np.ndarray, dtype: str, name: str) -> np.ndarray:
    """The uint8 bit patterns of an fp8 constant of ``dtype`` given as bit patterns (uint8)
    or as an ml_dtypes array of that format."""
    if arr.dtype == np.uint8:
        return np.ascontiguousarray(arr)
    if arr.dtype.name == dtype:
        return np.ascontiguousarray(arr).view(np.uint8)
    raise GraphError(f"constant {name!r} of dtype {dtype}: give its uint8 bit patterns or an "
                     f"ml_dtypes {dtype} array, not {arr.dtype.name} data")


class Call(Node):
    """``op(*args, **attrs)``: ``op`` is an operator name (``"nn.conv2d"``) or a primitive
    :class:`Graph` made by operator fusion. The type is inferred on construction."""

    __slots__ = ("op", "args", "attrs")

    def __init__(self, op: str | Graph, args: Sequence[Node], attrs: dict | None = None):
        args = tuple(args)
        for k, a in enumerate(args):
            if not isinstance(a, Node):
                raise GraphError(
                    f"{_op_name(op)}: argument {k} is a {type(a).__name__}, not a graph node; "
                    "wrap numpy arrays with graph.const(...)")
        self.op = op
        self.args = args
        self.attrs = dict(attrs or {})
        if isinstance(op, Graph):
            self.ty = _infer_function_call(op, args)
        else:
            from .op import get_op

            opdef = get_op(op)
            self.attrs = opdef.normalize_attrs(self.attrs)
            self.ty = opdef.infer_type([a.ty for a in args], self.attrs)

    @property
    def op_name(self) -> str:
        return _op_name(self.op)


def _op_name(op) -> str:
    return op.name if isinstance(op, Graph) else str(op)


def _infer_function_call(fn: Graph, args: tuple) -> TensorType:
    if len(args) != len(fn.params):
        raise GraphError(f"{fn.name} takes {len(fn.params)} arguments, got {len(args)}")
    for k, (p, a) in enumerate(zip(fn.params, args)):
        if p.ty != a.ty:
            raise GraphError(f"{fn.name}: argument {k} ({p.name}) needs {p.ty}, got {a.ty}")
    if len(fn.outputs) != 1:
        raise GraphError(f"{fn.name} has {len(fn.outputs)} outputs; only single-output "
                         "functions can be called")
    return fn.outputs[0].ty


class Graph:
    """A function of tensors: ``params`` (vars), ``outputs`` (nodes), a ``name`` and
    ``attrs`` (``primitive=True`` for a fused function).

    The main graph of a network is called ``main``. Vars used by the outputs must all be
    params; :meth:`check` verifies that and re-infers every type.
    """

    def __init__(self, params: Sequence[Var], outputs: Node | Sequence[Node], name: str = "main",
                 attrs: dict | None = None):
        self.params = list(params)
        self.outputs = [outputs] if isinstance(outputs, Node) else list(outputs)
        self.name = name
        self.attrs = dict(attrs or {})
        if not self.outputs:
            raise GraphError(f"graph {name} has no outputs")
        for p in self.params:
            if not isinstance(p, Var):
                raise GraphError(f"graph {name}: params must be Vars, got {p!r}")
        names = [p.name for p in self.params]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise GraphError(f"graph {name}: parameter names repeat: {sorted(dup)}")
        for o in self.outputs:
            if not isinstance(o, Node):
                raise GraphError(f"graph {name}: outputs must be nodes, got {o!r}")

    @property
    def is_primitive(self) -> bool:
        return bool(self.attrs.get("primitive"))

    @property
    def output_types(self) -> list[TensorType]:
        return [o.ty for o in self.outputs]

    def param(self, name: str) -> Var:
        """The parameter called ``name``."""
        for p in self.params:
            if p.name == name:
                return p
        raise GraphError(f"graph {self.name} has no parameter {name!r}; parameters: "
                         f"{', '.join(p.name for p in self.params)}")

    def nodes(self) -> list[Node]:
        """Every node reachable from the outputs, producers before consumers."""
        return post_order(self.outputs)

    def calls(self) -> list[Call]:
        return [n for n in self.nodes() if isinstance(n, Call)]

    def check(self) -> Graph:
        """Raise :class:`GraphError` if a var is not a parameter or a stored type is stale."""
        params = set(map(id, self.params))
        for n in self.nodes():
            if isinstance(n, Var) and id(n) not in params:
                raise GraphError(f"graph {self.name} uses var %{n.name}, which is not one of "
                                 "its parameters")
            if isinstance(n, Call):
                if isinstance(n.op, Graph):
                    n.op.check()
                    ty = _infer_function_call(n.op, n.args)
                else:
                    from .op import get_op

                    ty = get_op(n.op).infer_type([a.ty for a in n.args], n.attrs)
                if ty != n.ty:
                    raise GraphError(f"{n.op_name}: the stored type {n.ty} differs from the "
                                     f"inferred type {ty}")
        return self

    def __str__(self) -> str:
        from .printer import print_graph

        return print_graph(self)

    def __repr__(self) -> str:
        return f"<Graph {self.name}: {len(self.params)} params, {len(self.calls())} calls>"


def post_order(roots: Iterable[Node]) -> list[Node]:
    """Nodes reachable from ``roots`` (through call arguments), each after its arguments."""
    order: list[Node] = []
    seen: set[int] = set()
    for root in roots:
        if id(root) in seen:
            continue
        stack: list[tuple[Node, int]] = [(root, 0)]
        while stack:
            node, k = stack.pop()
            args = node.args if isinstance(node, Call) else ()
            if k < len(args):
                stack.append((node, k + 1))
                child = args[k]
                if id(child) not in seen:
                    stack.append((child, 0))
                continue
            if id(node) not in seen:
                seen.add(id(node))
                order.append(node)
    return order


def consumers(nodes: Sequence[Node]) -> dict[int, list[Call]]:
    """For each node (by id), the calls that use it (a call using it twice is listed once)."""
    out: dict[int, list[Call]] = {id(n): [] for n in nodes}
    for n in nodes:
        if isinstance(n, Call):
            for a in dict.fromkeys(map(id, n.args)):
                out.setdefault(a, []).append(n)
    return out


def rewrite(graph: Graph, fn: Callable[[Call, tuple], Node | None]) -> Graph:
    """A copy of ``graph`` in which each call is rebuilt bottom-up.

    ``fn(call, new_args)`` sees the original call and its already rewritten arguments and
    returns a replacement node, or None to keep the call (rebuilt only if an argument
    changed).
    """
    memo: dict[int, Node] = {}
    for node in graph.nodes():
        if not isinstance(node, Call):
            memo[id(node)] = node
            continue
        args = tuple(memo[id(a)] for a in node.args)
        out = fn(node, args)
        if out is None:
            changed = any(a is not b for a, b in zip(args, node.args))
            out = Call(node.op, args, node.attrs) if changed else node
        memo[id(node)] = out
    outputs = [memo[id(o)] for o in graph.outputs]
    if all(a is b for a, b in zip(outputs, graph.outputs)):
        return graph
    return Graph(graph.params, outputs, graph.name, graph.attrs)


def free_vars(nodes: Iterable[Node]) -> list[Var]:
    """The vars reachable from ``nodes``, in order of first use."""
    return [n for n in post_order(nodes) if isinstance(n, Var)]


def bind_params(graph: Graph, params: dict | None) -> Graph:
    """``graph`` with the parameters named in ``params`` replaced by constants.

    Arrays must match the parameters' shapes and dtypes; names that are not parameters are
    an error (a misspelled weight name must not be ignored).
    """
    if not params:
        return graph
    by_name = {p.name: p for p in graph.params}
    unknown = sorted(set(params) - set(by_name))
    if unknown:
        raise GraphError(f"params {unknown} are not parameters of graph {graph.name}; its "
                         f"parameters are {', '.join(by_name)}")
    consts: dict[int, Constant] = {}
    for name, value in params.items():
        var = by_name[name]
        arr = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
        # an fp8 parameter takes its uint8 bit patterns (or an ml_dtypes array)
        fp8 = var.dtype.startswith("float8") and arr.dtype.name in ("uint8", var.dtype)
        if tuple(arr.shape) != var.shape or (not fp8 and dt.from_numpy(arr.dtype) != var.dtype):
            raise GraphError(
                f"param {name}: the graph expects {var.ty}, got an array of shape "
                f"{list(arr.shape)} and dtype {arr.dtype}")
        consts[id(var)] = Constant(arr, name, var.dtype if fp8 else None)
    memo: dict[int, Node] = {}
    for node in graph.nodes():
        if isinstance(node, Var):
            memo[id(node)] = consts.get(id(node), node)
        elif isinstance(node, Call):
            args = tuple(memo[id(a)] for a in node.args)
            changed = any(a is not b for a, b in zip(args, node.args))
            memo[id(node)] = Call(node.op, args, node.attrs) if changed else node
        else:
            memo[id(node)] = node
    kept = [p for p in graph.params if id(p) not in consts]
    return Graph(kept, [memo[id(o)] for o in graph.outputs], graph.name, graph.attrs)


def graph_from_outputs(outputs: Node | Sequence[Node], name: str = "main",
                       inputs: Sequence[Var] | None = None) -> Graph:
    """A graph over ``outputs`` whose params are ``inputs`` (default: every free var, in
    order of first use)."""
    outs = [outputs] if isinstance(outputs, Node) else list(outputs)
    params = list(inputs) if inputs is not None else free_vars(outs)
    return Graph(params, outs, name)


def attr_text(value: Any) -> str:
    """An attribute value as the printer writes it."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:g}f"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(attr_text(v) for v in value) + "]"
    return str(value)
