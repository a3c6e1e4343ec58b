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
from . import opdefs as G
from .ir import Constant, Graph, GraphError, Node, Var

_ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 5: "int16", 6: "int32", 7: "int64",
                9: "bool", 10: "float16", 11: "float64", 16: "bfloat16"}


class OnnxImportError(GraphError):
    """An ONNX model this importer cannot read or translate: a file that cannot be read or
    parsed, a model the ONNX checker rejects, or a node it cannot translate (the message
    names the file and the node)."""


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

    def __init__(self, model, shape_dict: dict, dtype: str):
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
        for init in self.graph.initializer:
            try:
                self.initializers[init.name] = numpy_helper.to_array(init)
            except Exception as e:  # noqa: BLE001 - protobuf/numpy: the data is malformed
                raise OnnxImportError(f"initializer {init.name!r}: its data cannot be read "
                                      f"({type(e).__name__}: {e})") from e
        for name, value in self.initializers.items():
            self.static[name] = value
        for inp in self.graph.input:
            if inp.name in self.initializers:
                continue
            shape = shape_dict.get(inp.name) if shape_dict else None
            ttype = inp.type.tensor_type
            if shape is None:
                dims = [d.dim_value if d.HasField("dim_value") else None
                        for d in ttype.shape.dim]
                if any(d is None or d <= 0 for d in dims):
                    raise OnnxImportError(
                        f"input {inp.name!r} has dynamic dimensions {dims}; give its shape in "
                        "shape_dict")
                shape = dims
            if ttype.elem_type and ttype.elem_type not in _ONNX_DTYPES:
                from onnx import TensorProto

                raise OnnxImportError(
                    f"input {inp.name!r} has element type "
                    f"{TensorProto.DataType.Name(ttype.elem_type)}, which is not supported; "
                    f"supported: {', '.join(sorted(set(_ONNX_DTYPES.values())))}")
            in_dtype = _ONNX_DTYPES.get(ttype.elem_type, dtype)
            var = Var(inp.name, tuple(int(s) for s in shape), in_dtype)
            self.inputs.append(var)
            self.nodes[inp.name] = var

    # -- values -----------------------------------------------------------------------------

    def is_static(self, name: str) -> bool:
        return name in self.static and name not in self.nodes

    def tensor(self, name: str) -> Node:
        """The graph node of value ``name`` (initializers become parameters, other known
        values constants)."""
        if name in self.nodes:
            return self.nodes[name]
        if name not in self.static:
            raise OnnxImportError(f"value {name!r} is used before it is defined")
        value = self.static[name]
        if name in self.initializers and value.dtype.kind == "f":
            value = self.weight(value)
            var = Var(name, value.shape, dt.from_numpy(value.dtype))
            self.params[name] = value
            self.param_vars.append(var)
            node: Node = var
        else:
            if value.dtype == np.float64:
                value = value.astype(self.dtype)
            node = Constant(value, name)
        self.nodes[name] = node
        return node

    def value(self, name: str, what: str) -> np.ndarray:
        """The import-time value of ``name`` (a shape, axes, pads, ...)."""
        if name in self.static:
            return self.static[name]
        raise OnnxImportError(f"{what} ({name!r}) must be a constant known at import time")

    def shape(self, name: str) -> tuple:
        if name in self.nodes:
            return self.nodes[name].shape
        return tuple(self.value(name, "a shape").shape)

    # -- translation ------------------------------------------------------------------------

    def run(self) -> tuple[Graph, dict]:
        for node in self.graph.node:
            where = f"node {node.name or node.output[0]!r} ({node.op_type})"
            try:
                self._translate(node)
            except OnnxImportError as e:
                if str(e).startswith("node "):
                    raise
                raise OnnxImportError(f"{where}: {e}") from e
            except Exception as e:  # noqa: BLE001 - numpy, protobuf, a missing attribute
                raise OnnxImportError(f"{where}: {type(e).__name__}: {e}") from e
        outputs = [self.tensor(o.name) for o in self.graph.output]
        net = Graph(self.inputs + self.param_vars, outputs)
        return net, self.params

    def _translate(self, node) -> None:
        if node.domain not in ("", "ai.onnx"):
            raise OnnxImportError(f"node {node.name!r}: operator domain {node.domain!r} is "
                                  "not supported")
        handler = _HANDLERS.get(node.op_type)
        if handler is None:
            raise OnnxImportError(
                f"node {node.name or node.output[0]!r}: ONNX operator {node.op_type} is "
                f"not supported; supported: {', '.join(sorted(SUPPORTED))}")
        ins = [i for i in node.input]
        static = all(i == "" or self.is_static(i) for i in ins)
        if node.op_type == "Shape" or (static and node.op_type in _STATIC):
            outs = _STATIC[node.op_type](self, node, _attrs(node))
            for name, val in zip(node.output, outs):
                self.static[name] = np.asarray(val)
            return
        try:
            outs = handler(self, node, _attrs(node))
        except GraphError as e:
            raise OnnxImportError(f"node {node.name or node.output[0]!r} "
                                  f"({node.op_type}): {e}") from e
        if isinstance(outs, Node):
            outs = [outs]
        for name, out in zip(node.output, outs):
            if name:
                self.nodes[name] = out


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
    axis = int(a.get("axis", 1)) % max(x.ndim, 1)
    if axis == 1:
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
    to = _ONNX_DTYPES.get(int(a["to"]))
    if to is None:
        raise OnnxImportError(f"Cast {node.name!r} to ONNX type {int(a['to'])} is not supported")
    return x if to == x.dtype else G.cast(x, to)


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


# -- import-time evaluation of constant subgraphs ---------------------------------------------


def _constant_value(im, node, a):
    from onnx import numpy_helper

    if "value" in a:
        return [numpy_helper.to_array(a["value"])]
    for key, dtype in (("value_float", np.float32), ("value_int", np.int64)):
        if key in a:
            return [np.array(a[key], dtype=dtype)]
    for key, dtype in (("value_floats", np.float32), ("value_ints", np.int64)):
        if key in a:
            return [np.array(list(a[key]), dtype=dtype)]
    raise OnnxImportError(f"Constant {node.name!r}: unsupported value attribute "
                          f"{sorted(a)}")


def _s(im, node, k=0):
    return im.static[node.input[k]]


def _static_unsqueeze(im, node, a):
    x = _s(im, node)
    axes = _ints(a["axes"]) if "axes" in a else _ints(_s(im, node, 1))
    n = x.ndim + len(axes)
    for ax in sorted(ax % n for ax in axes):
        x = np.expand_dims(x, ax)
    return [x]


def _static_squeeze(im, node, a):
    x = _s(im, node)
    axes = _ints(a["axes"]) if "axes" in a else (
        _ints(_s(im, node, 1)) if len(node.input) > 1 and node.input[1] else None)
    return [np.squeeze(x, axis=None if axes is None else tuple(axes))]


def _static_cast(im, node, a):
    from onnx import helper

    return [_s(im, node).astype(helper.tensor_dtype_to_np_dtype(int(a["to"])))]


def _static_reshape(im, node, a):
    x = _s(im, node)
    return [x.reshape(_reshape_target(im, node, a, x.shape))]


_STATIC = {
    "Constant": _constant_value,
    "Shape": lambda im, node, a: [np.array(im.shape(node.input[0]), dtype=np.int64)],
    "Unsqueeze": _static_unsqueeze,
    "Squeeze": _static_squeeze,
    "Concat": lambda im, node, a: [np.concatenate([im.static[i] for i in node.input],
                                                  axis=int(a["axis"]))],
    "Cast": _static_cast,
    "Reshape": _static_reshape,
    "Identity": lambda im, node, a: [_s(im, node)],
}



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

SUPPORTED = frozenset(_HANDLERS)
"""The ONNX operator types the importer translates."""


def from_onnx(model, shape_dict: dict | None = None, dtype: str = "float32"
              ) -> tuple[Graph, dict]:
    """Import an ONNX model (a ``ModelProto`` or a path to a ``.onnx`` file).

    ``shape_dict`` maps input names to shapes (needed where the model's inputs have
    dynamic dimensions). Returns the network graph (inputs first, then one parameter per
    weight) and the weights by parameter name.
    """
    try:
        import onnx
    except ImportError as e:
        raise OnnxImportError("the onnx package is needed to import ONNX models "
                              "(pip install onnx)") from e
    source = ""
    if isinstance(model, (str, os.PathLike)):
        source = os.fspath(model)
        model = _load(onnx, source)
    if not isinstance(model, onnx.ModelProto):
        raise OnnxImportError(f"from_onnx takes an onnx.ModelProto or a path, got "
                              f"{type(model).__name__}")
    prefix = f"{source}: " if source else ""
    _check(onnx, model, source, prefix)
    try:
        return _Importer(model, shape_dict or {}, dtype).run()
    except OnnxImportError as e:
        if not prefix:
            raise
        raise OnnxImportError(f"{prefix}{e}") from e
    except Exception as e:  # noqa: BLE001 - reading the model's inputs (protobuf, numpy)
        raise OnnxImportError(f"{prefix}{type(e).__name__}: {e}") from e


def _load(onnx, path: str):
    try:
        return onnx.load(path)
    except OSError as e:
        raise OnnxImportError(f"{path}: cannot read the model ({e.strerror or e})") from e
    except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and friends
        raise OnnxImportError(f"{path}: not a readable ONNX model, truncated or corrupt "
                              f"({type(e).__name__}: {e})") from e


def _check(onnx, model, source: str, prefix: str) -> None:
    """Reject what the ONNX checker rejects, and a model that declares no opset (a file cut
    short can parse as one: it must not be imported as some default opset)."""
    if not model.opset_import or not model.HasField("graph"):
        what = "a truncated or corrupt file?" if source else "an incomplete ModelProto"
        raise OnnxImportError(f"{prefix}the model has no graph or declares no opset ({what})")
    try:
        onnx.checker.check_model(source if source else model)
    except Exception as e:  # noqa: BLE001 - ValidationError, or protobuf on a bad file
        first = str(e).strip().splitlines()
        raise OnnxImportError(f"{prefix}the ONNX checker rejects the model: "
                              f"{' '.join(x.strip() for x in first[:4])}") from e
