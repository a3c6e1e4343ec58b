"""The ONNX importer: ``from_onnx(model_or_path, shape_dict) -> (net, params)``.

Float initializers become graph parameters whose values are returned in ``params``, so a
model imported from PyTorch compiles like a zoo network. Values that only describe shapes
(``Shape``, ``Gather``, ``Concat`` of constants, ``Reshape`` targets, ``Pad`` widths, ...)
are evaluated while importing, since every shape is static here. Supported operators:
see :data:`SUPPORTED`; anything else is an error naming the node.
"""

from __future__ import annotations

import os

import numpy as np

from ..ir import dtype as dt
from . import onnx_float8, onnx_functions, onnx_static
from . import opdefs as G
from .ir import Constant, Graph, GraphError, Node, Var
from .onnx_model import (
    ONNX_DTYPES,
    OnnxDataDependentError,
    OnnxImportError,
    check,
    input_var,
    load,
    needed_values,
)


def _attrs(node) -> dict:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _ints(v) -> list[int]:
    return [int(x) for x in v]


class _Importer:
    def weight(self, value: np.ndarray) -> np.ndarray:
        """A float initializer as a weight: float16 and bfloat16 ones (a model exported in
        half precision) keep their dtype, so the network imports as it was saved; others
        become ``dtype``."""
        if dt.from_numpy(value.dtype) in ("float16", "bfloat16"):
            return value
        return value.astype(dt.to_numpy(self.dtype))

    def __init__(self, model, shape_dict: dict, dtype: str, constants: dict | None = None):
        from onnx import numpy_helper

        self.model = model
        self.graph = model.graph
        self.dtype = dtype
        self.opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
                         default=13)
        self.static: dict[str, np.ndarray] = {}
        self.nodes: dict[str, Node] = {}
        self.params: dict[str, np.ndarray] = {}
        self.inputs: list[Var] = []
        self.param_vars: list[Var] = []
        self.initializers = {}
        self.producer: dict[str, object] = {}  # value name -> the ONNX node computing it
        for init in self.graph.initializer:
            try:
                self.initializers[init.name] = numpy_helper.to_array(init)
            except Exception as e:  # noqa: BLE001 - protobuf/numpy: the data is malformed
                raise OnnxImportError(f"initializer {init.name!r}: its data cannot be read "
                                      f"({type(e).__name__}: {e})") from e
        for name, value in self.initializers.items():
            self.static[name] = value
        graph_inputs = [i for i in self.graph.input if i.name not in self.initializers]
        unknown = (set(shape_dict) | set(constants or {})) - {i.name for i in graph_inputs}
        if unknown:
            raise OnnxImportError(
                f"shape_dict / constants name {', '.join(sorted(map(repr, unknown)))}, which "
                f"{'is' if len(unknown) == 1 else 'are'} not an input of the model; inputs: "
                f"{', '.join(i.name for i in graph_inputs) or 'none'}")
        for inp in graph_inputs:
            if constants and inp.name in constants:
                # an input fixed to a value: a constant of the input's dtype
                var = input_var(inp, np.shape(constants[inp.name]), dtype)
                self.static[inp.name] = (
                    onnx_float8.static_value(constants[inp.name], var.dtype)
                    if onnx_float8.is_float8(var.dtype)
                    else np.asarray(constants[inp.name], dtype=dt.to_numpy(var.dtype)))
                continue
            var = input_var(inp, shape_dict.get(inp.name), dtype)
            self.inputs.append(var)
            self.nodes[inp.name] = var

    # -- values -----------------------------------------------------------------------------

    def is_static(self, name: str) -> bool:
        # a known value that a converter has also taken as a graph constant stays known
        # (a weight made a parameter does not: the graph may be given other weights)
        return name in self.static and (name not in self.nodes
                                        or isinstance(self.nodes[name], Constant))

    def tensor(self, name: str) -> Node:
        """The graph node of value ``name`` (initializers become parameters, other known
        values constants)."""
        if name in self.nodes:
            return self.nodes[name]
        if name not in self.static:
            raise OnnxImportError(f"value {name!r} is used before it is defined")
        value = self.static[name]
        fp8 = onnx_float8.is_float8(value.dtype.name)  # ml_dtypes: kind "f" or "V"
        if name in self.initializers and value.dtype.kind == "f" and not fp8:
            value = self.weight(value)
            var = Var(name, value.shape, dt.from_numpy(value.dtype))
            self.params[name] = value
            self.param_vars.append(var)
            node: Node = var
        else:
            if value.dtype == np.float64 and self.dtype != "float64":
                value = value.astype(self.dtype)
            # the dtype given: an int64 scalar stays int64 (ONNX's shapes and sizes are)
            node = (onnx_float8.constant(value, name) if fp8
                    else Constant(value, name, dt.from_numpy(value.dtype)))
        self.nodes[name] = node
        return node

    def value(self, name: str, what: str) -> np.ndarray:
        """The import-time value of ``name`` (a shape, axes, pads, bounds ...): a constant,
        or computed from constants and shapes. A value that depends on the data of the
        graph's inputs is an error naming them."""
        if name in self.static:
            return self.static[name]
        text, inputs = self._depends_on(name)
        raise OnnxDataDependentError(
            f"{what} ({name!r}) must be known at import time, but it {text}; ptxforge "
            "compiles networks of static shapes: shapes, axes and bounds may come from "
            "constants and from Shape, not from tensor data (or give the inputs' values: "
            "from_onnx(..., constants={name: value}))", inputs)

    def _depends_on(self, name: str) -> tuple[str, list]:
        """Which graph inputs' data ``name`` is computed from: a phrase for error messages,
        and their names."""
        seen, stack, found, via = set(), [name], [], ""
        while stack:
            v = stack.pop()
            if v in seen or not v:
                continue
            seen.add(v)
            if any(v == i.name for i in self.inputs):
                found.append(v)
                continue
            node = self.producer.get(v)
            if node is None or node.op_type in ("Shape", "Size"):
                continue
            via = via or f"{node.op_type} node {node.name or node.output[0]!r}"
            stack.extend(node.input)
        if not found:
            return "is not computable while importing", []
        return (f"depends on the data of graph input{'s' if len(found) > 1 else ''} "
                f"{', '.join(map(repr, sorted(found)))}" + (f" (through {via})" if via else ""),
                sorted(found))

    def shape(self, name: str) -> tuple:
        if name in self.nodes:
            return self.nodes[name].shape
        return tuple(self.value(name, "a shape").shape)

    # -- translation ------------------------------------------------------------------------

    def run(self) -> tuple[Graph, dict]:
        needed = needed_values(self.graph)
        for node in self.graph.node:
            if not any(o in needed for o in node.output if o):
                continue  # nothing the outputs depend on: never evaluated, never compiled
            self._translate_named(node)
        missing = [o.name for o in self.graph.output
                   if o.name not in self.nodes and o.name not in self.static]
        if missing:
            raise OnnxImportError(f"graph output(s) {', '.join(map(repr, missing))} are "
                                  "computed by no node")
        outputs = [self.tensor(o.name) for o in self.graph.output]
        net = Graph(self.inputs + self.param_vars, outputs)
        return net, self.params

    def _translate_named(self, node) -> None:
        where = f"node {node.name or node.output[0]!r} ({node.op_type})"
        try:
            self._translate(node)
        except OnnxImportError as e:
            if str(e).startswith("node "):
                raise
            raise e.prefixed(f"{where}: ") from e
        except Exception as e:  # noqa: BLE001 - numpy, protobuf, a missing attribute
            raise OnnxImportError(f"{where}: {type(e).__name__}: {e}") from e

    def _translate(self, node) -> None:
        for o in node.output:
            self.producer[o] = node
        if node.domain not in ("", "ai.onnx"):
            raise OnnxImportError(f"node {node.name or node.output[0]!r}: operator domain "
                                  f"{node.domain!r} ({node.op_type}) is not supported; only "
                                  "the default ONNX domain is")
        if self._evaluate(node):
            return
        handler = _HANDLERS.get(node.op_type) or _FALLBACK.get(node.op_type)
        if handler is None:
            if self._expand(node):
                return
            raise OnnxImportError(
                f"node {node.name or node.output[0]!r}: ONNX operator {node.op_type} is "
                f"not supported; supported: {', '.join(sorted(SUPPORTED))}")
        try:
            outs = handler(self, node, _attrs(node))
        except GraphError as e:
            if isinstance(e, OnnxImportError):
                raise
            raise OnnxImportError(f"node {node.name or node.output[0]!r} "
                                  f"({node.op_type}): {e}") from e
        if isinstance(outs, Node):
            outs = [outs]
        for name, out in zip(node.output, outs):
            if name:
                if out.ty.size == 0 and not isinstance(out, Constant):
                    # an empty tensor needs no computing (and no kernel): a constant
                    out = Constant(np.zeros(out.shape, dt.to_numpy(out.dtype)), name,
                                   out.dtype)
                self.nodes[name] = out

    def _evaluate(self, node) -> bool:
        """Compute ``node`` now if it can be: a ``Constant``; ``Shape`` and ``Size`` (shapes
        are static); any operator whose inputs are all known now, unless its result would
        be large (:data:`onnx_static.MAX_ELEMENTS`: then the graph computes it)."""
        a = _attrs(node)
        op = node.op_type
        if op == "Constant":
            outs = [onnx_static.constant_value(a)]
        elif op == "CastLike" and self.is_static(node.input[0]):
            # a constant cast to a tensor's dtype (function bodies write this for scalars)
            like = self.tensor(node.input[1]).dtype
            value = self.static[node.input[0]]
            outs = [onnx_float8.static_cast(value, like, bool(a.get("saturate", 1)))
                    if onnx_float8.is_float8(like) else value.astype(dt.to_numpy(like))]
        elif op in ("Shape", "Size"):
            shape = self.shape(node.input[0])
            outs = [onnx_static.shape_of(shape, a) if op == "Shape"
                    else np.array(int(np.prod(shape)), dtype=np.int64)]
        else:
            ins = [i for i in node.input]
            if (not any(ins) or op in onnx_static.NEVER_EVALUATED
                    or not all(i == "" or self.is_static(i) for i in ins)):
                return False
            values = [self.static[i] if i else None for i in ins]
            size = onnx_static.estimated_size(op, values, a)
            if size > max(onnx_static.MAX_ELEMENTS, sum(int(np.size(v)) for v in values
                                                        if v is not None)):
                return False  # larger than its inputs and the cap: the graph computes it
            try:
                if op in _STATIC:
                    outs = _STATIC[op](self, node, a)
                else:
                    outs = onnx_static.evaluate(node, values, a, self.opset)
            except Exception as e:  # noqa: BLE001 - leave it to the converter, if any
                if op in _HANDLERS:
                    return False
                raise OnnxImportError(f"cannot evaluate it on its constant inputs "
                                      f"({type(e).__name__}: {e})") from e
        for name, val in zip(node.output, outs):
            if name:
                self.static[name] = np.asarray(val)
        return True

    def _expand(self, node) -> bool:
        """Import ``node`` as the nodes of its operator's ONNX function body, if it has one
        (for operators without a converter here)."""
        types = [self._type_proto(i) for i in node.input]
        body = onnx_functions.function_body(node, self.opset, types)
        if body is None:
            return False
        nodes, body_opset = body
        outer, self.opset = self.opset, body_opset
        try:
            for inner in nodes:
                self._translate_named(inner)
        finally:
            self.opset = outer
        return True

    def _type_proto(self, name: str):
        from onnx import helper

        if not name:
            return None
        if name in self.nodes:
            n = self.nodes[name]
            shape, dtype = n.shape, n.dtype
        elif name in self.static:
            v = self.static[name]
            shape, dtype = v.shape, dt.from_numpy(v.dtype)
        else:
            return None
        elem = helper.np_dtype_to_tensor_dtype(dt.to_numpy(dtype))
        return helper.make_tensor_type_proto(elem, list(shape))


# -- handlers: (importer, node, attrs) -> node(s) ---------------------------------------------


def _unary(fn):
    return lambda im, node, a: fn(im.tensor(node.input[0]))


def _reshape_target(im, node, a, in_shape):
    if im.opset < 5:
        target = _ints(a["shape"])
    else:
        target = _ints(im.value(node.input[1], "the Reshape target shape"))
    if a.get("allowzero", 0):
        return target
    return [in_shape[k] if s == 0 else s for k, s in enumerate(target)]


def _reshape(im, node, a):
    x = im.tensor(node.input[0])
    return G.reshape(x, _reshape_target(im, node, a, x.shape))


def _flatten(im, node, a):
    x = im.tensor(node.input[0])
    axis = int(a.get("axis", 1))
    if not -x.ndim <= axis <= x.ndim:
        raise OnnxImportError(f"Flatten axis {axis} is outside [-{x.ndim}, {x.ndim}]")
    # axis == rank is legal: everything in the first dimension ([1, 8] -> [8, 1])
    axis = axis + x.ndim if axis < 0 else axis
    if axis == 1 and x.ndim >= 2:
        return G.batch_flatten(x)
    return G.reshape(x, (int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:]))))


def _transpose(im, node, a):
    x = im.tensor(node.input[0])
    return G.transpose(x, _ints(a["perm"]) if "perm" in a else None)


def _concat(im, node, a):
    return G.concatenate([im.tensor(i) for i in node.input], int(a["axis"]))


def _identity(im, node, a):
    return im.tensor(node.input[0])


def _axes(im, node, a, what: str, index: int = 1):
    if "axes" in a:
        return _ints(a["axes"])
    if len(node.input) > index and node.input[index]:
        return _ints(im.value(node.input[index], what))
    return None


def _unsqueeze(im, node, a):
    x = im.tensor(node.input[0])
    axes = _axes(im, node, a, "the Unsqueeze axes")
    n = x.ndim + len(axes)
    axes = sorted(ax % n for ax in axes)
    shape = list(x.shape)
    for ax in axes:
        shape.insert(ax, 1)
    return G.reshape(x, shape)


def _squeeze(im, node, a):
    x = im.tensor(node.input[0])
    return G.squeeze(x, _axes(im, node, a, "the Squeeze axes"))


def _cast(im, node, a):
    x = im.tensor(node.input[0])
    to = ONNX_DTYPES.get(int(a["to"]))
    if to is None:
        from onnx import TensorProto

        raise OnnxImportError(
            f"Cast {node.name!r} to ONNX type {int(a['to'])} "
            f"({TensorProto.DataType.Name(int(a['to']))}) is not supported; supported: "
            f"{', '.join(sorted(set(ONNX_DTYPES.values())))}")
    return onnx_float8.cast(x, to, bool(a.get("saturate", 1)), node.name or node.output[0])


_HANDLERS = {
    "Reshape": _reshape,
    "Flatten": _flatten,
    "Transpose": _transpose,
    "Concat": _concat,
    "Constant": lambda im, node, a: None,
    "Identity": _identity,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Cast": _cast,
    "Shape": lambda im, node, a: _static_only(node),
}


def _static_only(node):
    raise OnnxImportError(f"{node.op_type} {node.name!r} is supported only on values known "
                          "at import time (shapes and constants)")


# -- converters reading import-time values ---------------------------------------------------


def _s(im, node, k=0):
    return im.static[node.input[k]]


def _cast_like(im, node, a):
    x = im.tensor(node.input[0])
    to = im.tensor(node.input[1]).dtype
    return onnx_float8.cast(x, to, bool(a.get("saturate", 1)), node.name or node.output[0])


_FALLBACK = {"CastLike": _cast_like}
"""Converters used when no converter of that operator is registered."""

_STATIC: dict = {}
"""Import-time evaluators registered with :func:`register_converter` (``static=``); other
operators are evaluated by :mod:`ptxforge.graph.onnx_static`."""


def register_converter(op_type: str, static=None):
    """Register the translation of ONNX operator ``op_type``: the decorated function takes
    ``(importer, node, attrs)`` and returns the graph node (or nodes) of its outputs.
    ``static``, when given, evaluates the node at import time (``(importer, node, attrs) ->
    list of numpy arrays``) when all its inputs are known then (shapes and constants).
    The converters of ``graph/onnx_ops/`` register themselves this way."""

    def wrap(fn):
        if op_type in _HANDLERS:
            raise ValueError(f"an ONNX converter for {op_type} is already registered")
        _HANDLERS[op_type] = fn
        if static is not None:
            _STATIC[op_type] = static
        return fn

    return wrap


from . import onnx_ops as _onnx_ops  # noqa: E402,F401  (registers the converters there)

SUPPORTED = frozenset(_HANDLERS) | frozenset(_FALLBACK)
"""The ONNX operator types the importer translates."""


def from_onnx(model, shape_dict: dict | None = None, dtype: str = "float32", *,
              constants: dict | None = None) -> tuple[Graph, dict]:
    """Import an ONNX model (a ``ModelProto`` or a path to a ``.onnx`` file).

    ``shape_dict`` maps input names to shapes (needed where the model's inputs have
    dynamic dimensions). ``constants`` maps input names to values the network is imported
    for: those inputs become constants (a model taking a Reshape target or Resize scales
    as an input; :class:`OnnxDataDependentError` names the inputs that need it). Returns
    the network graph (inputs first, then one parameter per weight) and the weights by
    parameter name.
    """
    try:
        import onnx
    except ImportError as e:
        raise OnnxImportError("the onnx package is needed to import ONNX models "
                              "(pip install onnx)") from e
    source = ""
    if isinstance(model, (str, os.PathLike)):
        source = os.fspath(model)
        model = load(onnx, source)
    if not isinstance(model, onnx.ModelProto):
        raise OnnxImportError(f"from_onnx takes an onnx.ModelProto or a path, got "
                              f"{type(model).__name__}")
    prefix = f"{source}: " if source else ""
    check(onnx, model, source, prefix)
    try:
        model = onnx_functions.inline_local_functions(model)
        return _Importer(model, shape_dict or {}, dtype, constants).run()
    except OnnxImportError as e:
        if not prefix:
            raise
        raise e.prefixed(prefix) from e
    except Exception as e:  # noqa: BLE001 - reading the model's inputs (protobuf, numpy)
        raise OnnxImportError(f"{prefix}{type(e).__name__}: {e}") from e
