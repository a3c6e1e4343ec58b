"""Translating an FX graph of ATen operators into a ptxforge graph.

Both front ends use it: :func:`~.api.from_exported_program` (placeholders are the
program's parameters, buffers, constants and user inputs) and the ``torch.compile`` backend
(placeholders are the captured graph's inputs). Every ``call_function`` node goes through
the converter registered for its overload; values that only describe shapes (sizes,
``sym_size``) are Python values here, since every shape is static.
"""

from __future__ import annotations

import operator
import warnings

import numpy as np

from ...ir import dtype as dt
from ..ir import Constant, Graph, GraphError, Node, Var
from ..op import get_op, list_ops
from .registry import lookup


class TorchImportError(GraphError):
    """A PyTorch program this importer cannot translate: an operator without a converter, an
    argument value a converter rejects, an unsupported dtype, or a program ``torch.export``
    cannot trace. The message names the operator and the source line of the node."""


class SymbolicShapeWarning(UserWarning):
    """A symbolic dimension was specialized to the example's size."""


_DTYPES = {
    "float32": "float32", "float16": "float16", "bfloat16": "bfloat16", "float64": "float64",
    "int64": "int64", "int32": "int32", "int16": "int16", "int8": "int8", "uint8": "uint8",
    "bool": "bool",
}


def graph_dtype(torch_dtype) -> str:
    """The graph dtype of a ``torch.dtype``; complex and float8 types are an error."""
    name = str(torch_dtype).removeprefix("torch.")
    if name in _DTYPES:
        return _DTYPES[name]
    if name.startswith("complex"):
        why = "complex tensors are not supported"
    elif name.startswith("float8"):
        why = "float8 tensors are not supported yet"
    else:
        why = "this dtype is not supported"
    raise TorchImportError(f"{why}: {name}; supported dtypes: {', '.join(sorted(_DTYPES))}")


def to_numpy(t) -> np.ndarray:
    """A CPU copy of a torch tensor as a numpy array of its graph dtype."""
    import torch

    t = t.detach()
    dtype = graph_dtype(t.dtype)
    if t.device.type != "cpu":
        t = t.cpu()
    if dtype == "bfloat16":
        return dt.to_bfloat16(t.float().numpy())
    return np.ascontiguousarray(t.contiguous().numpy()) if t.dtype != torch.bool else \
        t.numpy().astype(np.bool_)


def source_line(node) -> str:
    """Where ``node`` came from in the user's code: the last frame of its stack trace."""
    trace = node.meta.get("stack_trace") or ""
    lines = [ln.strip() for ln in trace.strip().splitlines() if ln.strip()]
    frames = [k for k, ln in enumerate(lines) if ln.startswith("File ")]
    if not frames:
        return "(no source line recorded)"
    k = frames[-1]
    code = lines[k + 1] if k + 1 < len(lines) and not lines[k + 1].startswith("File ") else ""
    return f"{lines[k]}: {code}" if code else lines[k]


def static_int(value, what: str = "a dimension") -> int:
    """``value`` as an int; a symbolic size is specialized to its example value, once with a
    :class:`SymbolicShapeWarning`."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    node = getattr(value, "node", None)
    hint = getattr(node, "hint", None) if node is not None else None
    if hint is None:
        raise TorchImportError(f"{what} is symbolic ({value}) with no example value; export "
                               "with static shapes")
    key = str(value)
    if key not in _warned:
        _warned.add(key)
        warnings.warn(f"symbolic dimension {key} is specialized to {int(hint)}, the example's "
                      "size: the imported graph accepts only that size (dynamic shapes are "
                      "not supported yet)", SymbolicShapeWarning, stacklevel=4)
    return int(hint)


_warned: set[str] = set()


def static_value(value):
    """Python arguments with symbolic ints specialized (lists and tuples recursively)."""
    if isinstance(value, (list, tuple)):
        return type(value)(static_value(v) for v in value)
    if type(value).__name__ in ("SymInt", "SymFloat", "SymBool"):
        hint = getattr(value.node, "hint", None)
        if hint is None:
            raise TorchImportError(f"the value {value} is symbolic with no example value")
        return static_int(value) if type(value).__name__ == "SymInt" else type(hint)(hint)
    return value


class Args:
    """A node's arguments bound to its overload's schema: ``a.self``, ``a.dim``, ..."""

    def __init__(self, values: dict):
        self.__dict__.update(values)

    def __repr__(self):
        return f"Args({self.__dict__})"


def bind(target, args: tuple, kwargs: dict) -> Args:
    """``args`` and ``kwargs`` by the names of ``target``'s schema, defaults filled in."""
    schema = target._schema
    values = {}
    positional = list(args)
    for k, arg in enumerate(schema.arguments):
        name = "self" if arg.name == "self" else arg.name
        if k < len(positional) and not arg.kwarg_only:
            values[name] = positional[k]
        elif arg.name in kwargs:
            values[name] = kwargs[arg.name]
        elif arg.has_default_value():
            values[name] = arg.default_value
        else:
            values[name] = None
    return Args(values)


class ConvertContext:
    """What a converter sees of the node it translates: its output's shape and dtype, and
    ways to make graph calls and constants."""

    def __init__(self, node, overload: str):
        self.node = node
        self.overload = overload

    @property
    def registered(self) -> set[str]:
        """The names of the registered graph operators."""
        return _registered()

    def fail(self, message: str):
        raise TorchImportError(f"{self.overload}: {message} (node {self.node.name} at "
                               f"{source_line(self.node)})")

    def out_val(self, index: int | None = None):
        val = self.node.meta.get("val")
        if index is not None:
            val = val[index]
        return val

    def out_shape(self, index: int | None = None) -> tuple[int, ...]:
        return tuple(static_int(s) for s in self.out_val(index).shape)

    def out_dtype(self, index: int | None = None) -> str:
        return graph_dtype(self.out_val(index).dtype)

    def call(self, op: str, args, attrs: dict | None = None) -> Node:
        """``op(*args, **attrs)`` as a graph call; a graph error names this node."""
        from ..ir import Call

        if op not in _registered():
            self.fail(f"needs the graph operator {op!r}, which this build does not register")
        try:
            return Call(op, args, attrs or {})
        except GraphError as e:
            self.fail(str(e))

    def const(self, value, dtype: str) -> Constant:
        arr = np.asarray(value)
        if dtype == "bfloat16":
            return Constant(dt.to_bfloat16(arr.astype(np.float32)))
        # the dtype is explicit, so a 0-d int64 stays int64 (not the default int32)
        return Constant(arr, dtype=dtype)


def _registered() -> set[str]:
    return set(list_ops())


def import_graph(fx_graph, placeholders: dict, name: str = "main",
                 outputs: list[int] | None = None) -> Graph:
    """Translate ``fx_graph``: ``placeholders`` maps each placeholder node's name to its
    graph node (a :class:`Var` or :class:`Constant`); ``outputs`` picks which of the
    output tuple's entries become graph outputs (default all). Raises
    :class:`TorchImportError` naming the first node it cannot translate."""
    env: dict[str, object] = {}
    params: list[Var] = []
    result = None
    for node in fx_graph.nodes:
        if node.op == "placeholder":
            if node.name not in placeholders:
                raise TorchImportError(f"placeholder {node.name} has no value")
            value = placeholders[node.name]
            env[node.name] = value
            if isinstance(value, Var):
                params.append(value)
        elif node.op == "call_function":
            env[node.name] = _convert(node, env)
        elif node.op == "get_attr":
            raise TorchImportError(f"node {node.name} reads the attribute {node.target}; "
                                   "lift it to a parameter (torch.export does this)")
        elif node.op == "output":
            result = node.args[0]
        else:
            raise TorchImportError(f"node {node.name}: {node.op} nodes are not supported "
                                   f"(at {source_line(node)})")
    outs = _resolve(result, env)
    _check_available(_OutputNode(), outs)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    if outputs is not None:
        outs = [outs[k] for k in outputs]
    for k, o in enumerate(outs):
        if not isinstance(o, Node):
            raise TorchImportError(f"output {k} is a {type(o).__name__} ({o!r}), not a tensor; "
                                   "only tensors can be graph outputs")
    return Graph(params, outs, name)


class _OutputNode:
    name = "output"
    meta: dict = {}


def _resolve(value, env):
    import torch.fx as fx

    return fx.node.map_aggregate(value, lambda v: env[v.name] if isinstance(v, fx.Node) else v)


def overload_name(target) -> str:
    """``"aten.add.Tensor"`` for ``torch.ops.aten.add.Tensor``."""
    return str(target) if not callable(target) or hasattr(target, "_schema") else \
        f"{getattr(target, '__module__', '')}.{getattr(target, '__name__', target)}"


def _convert(node, env):
    args = _resolve(node.args, env)
    kwargs = _resolve(node.kwargs, env)
    if node.target is operator.getitem:
        seq, k = args
        return seq[k]
    _check_available(node, (args, kwargs))
    if not hasattr(node.target, "_schema"):
        return _python_op(node, args)
    name = overload_name(node.target)
    conv = lookup(name)
    if conv is None:
        raise TorchImportError(f"{name} is not supported (node {node.name} at "
                               f"{source_line(node)}); see docs/torch.md for the supported "
                               "operators")
    cx = ConvertContext(node, name)
    missing = conv.missing_ops()
    if missing:
        cx.fail(f"needs the graph operator(s) {missing}, which this build does not register")
    a = bind(node.target, static_value(args), static_value(kwargs))
    return conv.fn(cx, a)


def _check_available(node, values) -> None:
    from .convert_nn import Unavailable

    def visit(v):
        if isinstance(v, Unavailable):
            raise TorchImportError(f"node {node.name} uses {v.what}, which is not computed "
                                   f"(at {source_line(node)})")
        if isinstance(v, (list, tuple)):
            for x in v:
                visit(x)
        elif isinstance(v, dict):
            for x in v.values():
                visit(x)

    visit(values)


_PY_OPS = {operator.add, operator.sub, operator.mul, operator.floordiv, operator.truediv,
           operator.mod, operator.neg, operator.pow,
           # the range checks torch.export writes for a size it could not know (an index by
           # a constant mask), evaluated on the size known here
           operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge}


def _python_op(node, args):
    """Arithmetic on sizes (``sym_size`` products in a reshape): computed here."""
    if node.target in _PY_OPS:
        return node.target(*static_value(args))
    target = getattr(node.target, "__name__", str(node.target))
    if target in ("sym_max", "sym_min", "sym_not", "sym_float", "sym_int", "sym_sqrt"):
        vals = static_value(args)
        return {"sym_max": max, "sym_min": min, "sym_not": lambda x: not x, "sym_float": float,
                "sym_int": int, "sym_sqrt": lambda x: x ** 0.5}[target](*vals)
    raise TorchImportError(f"{target} is not supported (node {node.name} at "
                           f"{source_line(node)})")


def op_exists(name: str) -> bool:
    try:
        get_op(name)
        return True
    except GraphError:
        return False
