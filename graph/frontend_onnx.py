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
from . import onnx_functions, onnx_static
from . import opdefs as G
from .ir import Constant, Graph, GraphError, Node, Var
from .onnx_model import ONNX_DTYPES, OnnxImportError, check, input_var, load, needed_values


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
        unknown = set(shape_dict) - {i.name for i in graph_inputs}
        if unknown:
            raise OnnxImportError(
                f"shape_dict names {', '.join(sorted(map(repr, unknown)))}, which "
                f"{'is' if len(unknown) == 1 else 'are'} not an input of the model; inputs: "
                f"{', '.join(i.name for i in graph_inputs) or 'none'}")
        for inp in graph_inputs:
            var = input_var(inp, shape_dict.get(inp.name), dtype)
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
            if value.dtype == np.float64 and self.dtype != "float64":
                value = value.astype(self.dtype)
            # the dtype given: an int64 scalar stays int64 (ONNX's shapes and sizes are)
            node = Constant(value, name, dt.from_numpy(value.dtype))
        self.nodes[name] = node
        return node

    def value(self, name: str, what: str) -> np.ndarray:
        """The import-time value of ``name`` (a shape, axes, pads, bounds ...): a constant,
        or computed from constants and shapes. A value that depends on the data of the
        graph's inputs is an error naming them."""
        if name in self.static:
            return self.static[name]
        raise OnnxImportError(f"{what} ({name!r}) must be known at import time, but it "
                              f"{self._depends_on(name)}; ptxforge compiles networks of "
                              "static shapes: shapes, axes and bounds may come from constants "
                              "and from Shape, not from tensor data")

    def _depends_on(self, name: str) -> str:
        """Which graph inputs' data ``name`` is computed from (for error messages)."""
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
            return "is not computable while importing"
        return (f"depends on the data of graph input{'s' if len(found) > 1 else ''} "
                f"{', '.join(map(repr, sorted(found)))}" + (f" (through {via})" if via else ""))

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
            raise OnnxImportError(f"{where}: {e}") from e
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
            outs = [self.static[node.input[0]].astype(dt.to_numpy(like))]
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


def _conv(im: _Importer, node, a):
    x = im.tensor(node.input[0])
    w = im.tensor(node.input[1])
    if x.ndim != 4:
        raise OnnxImportError(f"Conv {node.name!r}: only 2-D convolutions (4-D tensors) are "
                              f"supported, got input {list(x.shape)}")
    kh, kw = w.shape[2:]
    strides = _ints(a.get("strides", [1, 1]))
    dilations = _ints(a.get("dilations", [1, 1]))
    pads = _pads(a, x.shape[2:], (kh, kw), strides, dilations)
    y = G.conv2d(x, w, strides, pads, dilations, groups=int(a.get("group", 1)))
    if len(node.input) > 2 and node.input[2]:
        b = im.tensor(node.input[2])
        y = G.add(y, _reshape_const(b, (b.shape[0], 1, 1)))
    return y


def _reshape_const(node: Node, shape) -> Node:
    if isinstance(node, Constant):
        return Constant(node.value.reshape(shape), node.name)
    return G.reshape(node, shape)


def _pads(a: dict, in_hw, kernel, strides, dilations) -> tuple:
    auto = a.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out = []
        for size, k, s, d in zip(in_hw, kernel, strides, dilations):
            total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
            small, big = total // 2, total - total // 2
            out.append((big, small) if auto == "SAME_LOWER" else (small, big))
        return (out[0][0], out[1][0], out[0][1], out[1][1])
    if auto == "VALID":
        return (0, 0, 0, 0)
    p = _ints(a.get("pads", [0, 0, 0, 0]))
    return (p[0], p[1], p[2], p[3])


def _batch_norm(im, node, a):
    x, scale, bias, mean, var = (im.tensor(i) for i in node.input[:5])
    return G.batch_norm(x, scale, bias, mean, var, 1, float(a.get("epsilon", 1e-5)))


def _unary(fn):
    return lambda im, node, a: fn(im.tensor(node.input[0]))


def _leaky(im, node, a):
    return G.leaky_relu(im.tensor(node.input[0]), float(a.get("alpha", 0.01)))


def _clip(im, node, a):
    x = im.tensor(node.input[0])
    info = np.finfo(np.float32)
    if im.opset < 11:
        lo, hi = float(a.get("min", info.min)), float(a.get("max", info.max))
    else:
        lo = (float(im.value(node.input[1], "Clip min").reshape(()))
              if len(node.input) > 1 and node.input[1] else float(info.min))
        hi = (float(im.value(node.input[2], "Clip max").reshape(()))
              if len(node.input) > 2 and node.input[2] else float(info.max))
    return G.clip(x, lo, hi)


def _pool(kind):
    def handler(im, node, a):
        if len(node.output) > 1 and node.output[1]:
            raise OnnxImportError(f"{node.op_type} {node.name!r}: the Indices output is not "
                                  "supported")
        x = im.tensor(node.input[0])
        kernel = _ints(a["kernel_shape"])
        strides = _ints(a.get("strides", [1, 1]))
        dilations = _ints(a.get("dilations", [1, 1]))
        pads = _pads(a, x.shape[2:], kernel, strides, dilations)
        ceil = bool(a.get("ceil_mode", 0))
        if kind == "max":
            return G.max_pool2d(x, kernel, strides, pads, dilations, ceil_mode=ceil)
        return G.avg_pool2d(x, kernel, strides, pads, dilations, ceil_mode=ceil,
                            count_include_pad=bool(a.get("count_include_pad", 0)))

    return handler


def _gemm(im, node, a):
    x = im.tensor(node.input[0])
    if a.get("transA", 0):
        x = G.transpose(x, (1, 0))
    bname = node.input[1]
    # dense takes the weight as [N, K]: B itself when transB, else B transposed
    w = im.tensor(node.input[1]) if a.get("transB", 0) else _transposed(im, bname)
    y = G.dense(x, w)
    alpha = float(a.get("alpha", 1.0))
    if alpha != 1.0:
        y = G.multiply(y, alpha)
    if len(node.input) > 2 and node.input[2]:
        c = im.tensor(node.input[2])
        beta = float(a.get("beta", 1.0))
        if beta != 1.0:
            c = G.multiply(c, beta)
        y = G.add(y, c)
    return y


def _transposed(im: _Importer, name: str) -> Node:
    """``name`` transposed (a ``[K, N]`` MatMul/Gemm weight as dense's ``[N, K]``): a weight
    initializer becomes a parameter ``<name>_T`` holding the transposed values, a constant
    a transposed constant, anything else a transpose."""
    if not im.is_static(name):
        return G.transpose(im.tensor(name), (1, 0))
    value = im.static[name]
    if name in im.initializers and value.dtype.kind == "f":
        tname = f"{name}_T"
        if tname not in im.nodes:
            value = np.ascontiguousarray(im.weight(value).T)
            var = Var(tname, value.shape, dt.from_numpy(value.dtype))
            im.params[tname] = value
            im.param_vars.append(var)
            im.nodes[tname] = var
        return im.nodes[tname]
    return Constant(np.ascontiguousarray(value.T), name)


def _matmul(im, node, a):
    x = im.tensor(node.input[0])
    bname = node.input[1]
    by = im.shape(bname)
    if len(by) == 2:
        w = _transposed(im, bname)
        if x.ndim == 2:
            return G.dense(x, w)
        lead = x.shape[:-1]
        flat = G.reshape(x, (int(np.prod(lead)), x.shape[-1]))
        return G.reshape(G.dense(flat, w), lead + (by[1],))
    y = im.tensor(bname)
    if x.ndim < 2 or y.ndim < 2:
        raise OnnxImportError(f"MatMul {node.name!r}: 1-D operands are not supported")
    lead_x, lead_y = x.shape[:-2], y.shape[:-2]
    if lead_x != lead_y:
        raise OnnxImportError(f"MatMul {node.name!r}: batch dimensions {list(lead_x)} and "
                              f"{list(lead_y)} differ")
    batch = int(np.prod(lead_x)) if lead_x else 1
    x3 = G.reshape(x, (batch,) + x.shape[-2:])
    y3 = G.reshape(y, (batch,) + y.shape[-2:])
    out = G.batch_matmul(x3, y3, transpose_b=False)
    return G.reshape(out, lead_x + (x.shape[-2], y.shape[-1]))


def _binary(fn):
    def handler(im, node, a):
        out = im.tensor(node.input[0])
        for name in node.input[1:]:
            out = fn(out, im.tensor(name))
        return out

    return handler


def _softmax(im, node, a):
    x = im.tensor(node.input[0])
    axis = int(a.get("axis", 1 if im.opset < 13 else -1)) % x.ndim
    if im.opset >= 13 or axis == x.ndim - 1:
        return G.softmax(x, axis)
    rows = int(np.prod(x.shape[:axis]))
    flat = G.reshape(x, (rows, -1))
    return G.reshape(G.softmax(flat, -1), x.shape)


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


def _pad(im, node, a):
    x = im.tensor(node.input[0])
    mode = a.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode != "constant":
        raise OnnxImportError(f"Pad {node.name!r}: mode {mode!r} is not supported (constant only)")
    if im.opset < 11:
        pads, value = _ints(a["pads"]), float(a.get("value", 0.0))
    else:
        pads = _ints(im.value(node.input[1], "the Pad widths"))
        value = (float(im.value(node.input[2], "the Pad value").reshape(()))
                 if len(node.input) > 2 and node.input[2] else 0.0)
        if len(node.input) > 3 and node.input[3]:
            axes = [int(v) % x.ndim for v in im.value(node.input[3], "the Pad axes")]
            full = [0] * (2 * x.ndim)
            for k, ax in enumerate(axes):
                full[ax], full[ax + x.ndim] = pads[k], pads[k + len(axes)]
            pads = full
    n = x.ndim
    return G.pad(x, [(pads[d], pads[d + n]) for d in range(n)], value)


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


def _reduce_mean(im, node, a):
    x = im.tensor(node.input[0])
    return G.mean(x, _axes(im, node, a, "the ReduceMean axes"), bool(a.get("keepdims", 1)))


def _layer_norm(im, node, a):
    x = im.tensor(node.input[0])
    axis = int(a.get("axis", -1))
    gamma = im.tensor(node.input[1])
    beta = (im.tensor(node.input[2]) if len(node.input) > 2 and node.input[2]
            else Constant(np.zeros(gamma.shape, x.dtype)))
    return G.layer_norm(x, gamma, beta, axis, float(a.get("epsilon", 1e-5)))


def _gelu(im, node, a):
    x = im.tensor(node.input[0])
    inner = G.erf(G.multiply(x, float(1 / np.sqrt(2.0))))
    return G.multiply(x, G.multiply(G.add(inner, 1.0), 0.5))


def _cast(im, node, a):
    x = im.tensor(node.input[0])
    to = ONNX_DTYPES.get(int(a["to"]))
    if to is None:
        raise OnnxImportError(f"Cast {node.name!r} to ONNX type {int(a['to'])} is not supported")
    return x if to == x.dtype else G.cast(x, to)


_HANDLERS = {
    "Conv": _conv,
    "BatchNormalization": _batch_norm,
    "Relu": _unary(G.relu),
    "Sigmoid": _unary(G.sigmoid),
    "Tanh": _unary(G.tanh),
    "Exp": _unary(G.exp),
    "Log": _unary(G.log),
    "Sqrt": _unary(G.sqrt),
    "Erf": _unary(G.erf),
    "Neg": _unary(G.negative),
    "LeakyRelu": _leaky,
    "Clip": _clip,
    "MaxPool": _pool("max"),
    "AveragePool": _pool("avg"),
    "GlobalAveragePool": _unary(G.global_avg_pool2d),
    "GlobalMaxPool": _unary(G.global_max_pool2d),
    "Gemm": _gemm,
    "MatMul": _matmul,
    "Add": _binary(G.add),
    "Sub": _binary(G.subtract),
    "Mul": _binary(G.multiply),
    "Div": _binary(G.divide),
    "Max": _binary(G.maximum),
    "Min": _binary(G.minimum),
    "Pow": _binary(G.power),
    "Softmax": _softmax,
    "Reshape": _reshape,
    "Flatten": _flatten,
    "Transpose": _transpose,
    "Concat": _concat,
    "Pad": _pad,
    "Constant": lambda im, node, a: None,
    "Identity": _identity,
    "Dropout": _identity,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "ReduceMean": _reduce_mean,
    "LayerNormalization": _layer_norm,
    "Gelu": _gelu,
    "Cast": _cast,
    "Shape": lambda im, node, a: _static_only(node),
    "Gather": lambda im, node, a: _static_only(node),
    "Slice": lambda im, node, a: _slice(im, node, a),
}


def _static_only(node):
    raise OnnxImportError(f"{node.op_type} {node.name!r} is supported only on values known "
                          "at import time (shapes and constants)")


# -- converters reading import-time values ---------------------------------------------------


def _s(im, node, k=0):
    return im.static[node.input[k]]


def _slice_args(im, node, a):
    """``(starts, ends, axes, steps)`` of a Slice node (attributes before opset 10, inputs
    known at import time after)."""
    if im.opset < 10:
        starts, ends = _ints(a["starts"]), _ints(a["ends"])
        axes = _ints(a.get("axes", range(len(starts))))
        return starts, ends, axes, [1] * len(starts)
    for k in range(1, len(node.input)):
        if node.input[k] and not im.is_static(node.input[k]):
            raise OnnxImportError(f"Slice {node.name!r}: its starts, ends, axes and steps must "
                                  "be known at import time (shapes are static)")
    starts, ends = _ints(_s(im, node, 1)), _ints(_s(im, node, 2))
    axes = _ints(_s(im, node, 3)) if len(node.input) > 3 and node.input[3] else list(
        range(len(starts)))
    steps = _ints(_s(im, node, 4)) if len(node.input) > 4 and node.input[4] else [1] * len(
        starts)
    return starts, ends, axes, steps


def _slice(im, node, a):
    starts, ends, axes, steps = _slice_args(im, node, a)
    return G.strided_slice(im.tensor(node.input[0]), starts, ends, steps, axes)



def _cast_like(im, node, a):
    x = im.tensor(node.input[0])
    to = im.tensor(node.input[1]).dtype
    return x if to == x.dtype else G.cast(x, to)


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
        model = load(onnx, source)
    if not isinstance(model, onnx.ModelProto):
        raise OnnxImportError(f"from_onnx takes an onnx.ModelProto or a path, got "
                              f"{type(model).__name__}")
    prefix = f"{source}: " if source else ""
    check(onnx, model, source, prefix)
    try:
        model = onnx_functions.inline_local_functions(model)
        return _Importer(model, shape_dict or {}, dtype).run()
    except OnnxImportError as e:
        if not prefix:
            raise
        raise OnnxImportError(f"{prefix}{e}") from e
    except Exception as e:  # noqa: BLE001 - reading the model's inputs (protobuf, numpy)
        raise OnnxImportError(f"{prefix}{type(e).__name__}: {e}") from e
