"""ONNX converters of element-wise, comparison, logic, activation and reduction operators.

Every converter maps one ONNX node onto the graph operators of ``graph/opdefs/``
(``elemwise``, ``arith``, ``logic``, ``activation``, ``reduce``), which fuse as element-wise,
broadcast or reduction stages. Operators that exporters use in shape computations
(comparisons, Where, logic, Abs, Sign, Ceil/Floor, Max/Min/Sum, Mod, Add/Sub/Mul/Div,
ReduceProd, ...) also evaluate at import time when all their inputs are known then: the
same converter runs on constants and the result is folded through the operators' numpy
references, so import-time and run-time semantics cannot drift apart.
"""

from __future__ import annotations

import numpy as np

from ...ir import dtype as dt
from .. import onnx_float8
from .. import opdefs as G
from ..frontend_onnx import OnnxImportError, register_converter
from ..interpreter import run_graph
from ..ir import Call, Constant, Graph, Node
from ..opdefs import activation as GA
from ..opdefs import logic as GL
from ..opdefs.arith import binary, unary
from ..opdefs.mapping import FLOATS, INTS
from ..opdefs.reduce import argmax, argmin
from ..opdefs.reduce import reduce as reduction
from .common import has_input as _has
from .common import refuse as _refuse
from .common import text_attr as _text

# -- helpers ---------------------------------------------------------------------------------


class _Constants:
    """The importer seen by a converter evaluating at import time: every input is a constant
    of its exact dtype (the importer's own ``tensor`` would turn float initializers into
    parameters)."""

    def __init__(self, im):
        self._im = im
        self.opset = im.opset
        self.dtype = im.dtype
        self.static = im.static

    def tensor(self, name: str) -> Node:
        value = np.asarray(self._im.static[name])
        return Constant(value, name, dtype=dt.from_numpy(value.dtype))

    def value(self, name: str, what: str):
        return self._im.value(name, what)

    def is_static(self, name: str) -> bool:
        return True

    def shape(self, name: str) -> tuple:
        return tuple(np.asarray(self._im.static[name]).shape)


def _folded(converter):
    """An import-time evaluation running ``converter`` on constants and folding the result."""
    def static(im, node, a):
        out = converter(_Constants(im), node, a)
        outs = out if isinstance(out, (list, tuple)) else [out]
        return run_graph(Graph([], list(outs), "static"))

    return static


def converter(*op_types: str, static: bool = False):
    """Register the decorated function as the converter of ``op_types``; ``static``: it also
    evaluates at import time when its inputs are all known then."""
    def wrap(fn):
        for op_type in op_types:
            register_converter(op_type, static=_folded(fn) if static else None)(fn)
        return fn

    return wrap


def _unify(nodes: list[Node]) -> list[Node]:
    """Operands that ONNX types alike but the importer stored differently (a float
    initializer kept as float32 beside a float64 input, a 0-D int64 constant stored as
    int32) brought back to one dtype: that of the first operand computed at run time."""
    dtypes = {n.dtype for n in nodes}
    if len(dtypes) <= 1:
        return nodes
    target = next((n.dtype for n in nodes if not isinstance(n, Constant)), nodes[0].dtype)
    out = []
    for n in nodes:
        if n.dtype == target:
            out.append(n)
        elif isinstance(n, Constant):
            out.append(Constant(n.value.astype(dt.to_numpy(target)), n.name, dtype=target))
        else:
            out.append(G.cast(n, target))
    return out


def _inputs(im, node) -> list[Node]:
    return [im.tensor(i) for i in node.input if i]


def _expect(node, x: Node, allowed: tuple, what: str = "input") -> None:
    if x.dtype not in allowed:
        _refuse(node, f"{what} has dtype {x.dtype}; supported: {', '.join(allowed)}")


# -- arithmetic ------------------------------------------------------------------------------


def _fold_binary(fn):
    def convert(im, node, a):
        ins = _unify(_inputs(im, node))
        out = ins[0]
        for x in ins[1:]:
            out = fn(node, out, x)
        return out

    return convert


def _div(node, x, y):
    _expect(node, x, FLOATS + INTS)
    return G.divide(x, y)  # integers round towards zero, as ONNX's Div


def _no_bool(fn):
    def checked(node, x, y):
        _expect(node, x, FLOATS + INTS)
        return fn(x, y)

    return checked


for _op, _fn in (("Add", G.add), ("Sub", G.subtract), ("Mul", G.multiply),
                 ("Max", G.maximum), ("Min", G.minimum)):
    converter(_op, static=True)(_fold_binary(_no_bool(_fn)))
converter("Div", static=True)(_fold_binary(_div))
converter("Sum", static=True)(_fold_binary(_no_bool(G.add)))


@converter("Mean")
def _mean(im, node, a):
    total = _fold_binary(_no_bool(G.add))(im, node, a)
    _expect(node, total, FLOATS)
    n = len([i for i in node.input if i])
    return total if n == 1 else G.divide(total, Constant(np.array([n]), dtype=total.dtype))


@converter("Mod", static=True)
def _mod(im, node, a):
    x, y = _unify(_inputs(im, node))
    fmod = int(a.get("fmod", 0))
    if fmod not in (0, 1):
        _refuse(node, f"fmod must be 0 or 1, got {fmod}")
    _expect(node, x, FLOATS + INTS)
    return binary("fmod" if fmod else "floor_mod", x, y)


@converter("Pow", static=True)
def _pow(im, node, a):
    x = im.tensor(node.input[0])
    known = np.asarray(im.static[node.input[1]]) if im.is_static(node.input[1]) else None
    if (x.dtype in FLOATS and known is not None and known.size == 1 and known.ndim <= x.ndim
            and float(known.astype(np.float64).reshape(())) == 2.0):
        # x * x is the correctly rounded square, as pow(x, 2) is, without the pow routine
        # (exported layer norms and variances square this way)
        return G.multiply(x, x)
    y = im.tensor(node.input[1])
    if x.dtype in INTS:
        _expect(node, y, FLOATS + INTS, "the exponent")
        return binary("int_power", x, y)
    _expect(node, x, FLOATS, "the base")
    if y.dtype != x.dtype:
        y = (Constant(y.value.astype(dt.to_numpy(x.dtype)) if x.dtype != "bfloat16"
                      else dt.to_bfloat16(y.value), dtype=x.dtype)
             if isinstance(y, Constant) else G.cast(y, x.dtype))
    return G.power(x, y)


# -- unary functions -------------------------------------------------------------------------

_SIMPLE_UNARY = {
    # ONNX op: graph constructor
    "Relu": G.relu, "Sigmoid": G.sigmoid, "Tanh": G.tanh, "Exp": G.exp, "Log": G.log,
    "Sqrt": G.sqrt, "Erf": G.erf, "Neg": G.negative,
}
_NAMED_UNARY = {
    "Abs": "abs", "Sign": "sign", "Ceil": "ceil", "Floor": "floor", "Round": "round",
    "Reciprocal": "reciprocal", "Sin": "sin", "Cos": "cos", "Tan": "tan", "Asin": "asin",
    "Acos": "acos", "Atan": "atan", "Sinh": "sinh", "Cosh": "cosh", "Asinh": "asinh",
    "Acosh": "acosh", "Atanh": "atanh", "IsNaN": "isnan", "Not": "logical_not",
    "BitwiseNot": "bitwise_not",
}
_STATIC_UNARY = {"Neg", "Abs", "Sign", "Ceil", "Floor", "Round", "Not", "Sqrt", "Reciprocal"}


def _unary_converter(make):
    def convert(im, node, a):
        return make(im.tensor(node.input[0]))

    return convert


for _op, _ctor in _SIMPLE_UNARY.items():
    converter(_op, static=_op in _STATIC_UNARY)(_unary_converter(_ctor))
for _op, _name in _NAMED_UNARY.items():
    converter(_op, static=_op in _STATIC_UNARY)(
        _unary_converter((lambda name: lambda x: unary(name, x))(_name)))


@converter("IsInf")
def _isinf(im, node, a):
    return GL.isinf(im.tensor(node.input[0]), bool(a.get("detect_positive", 1)),
                    bool(a.get("detect_negative", 1)))


# -- activations -----------------------------------------------------------------------------

_ACTIVATIONS = {
    # ONNX op: (constructor, {ONNX attribute: default})
    "HardSigmoid": (GA.hard_sigmoid, {"alpha": 0.2, "beta": 0.5}),
    "HardSwish": (GA.hard_swish, {}),
    "Mish": (GA.mish, {}),
    "Softplus": (GA.softplus, {}),
    "Softsign": (GA.softsign, {}),
    "Elu": (GA.elu, {"alpha": 1.0}),
    "Selu": (GA.selu, {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875}),
    "Celu": (GA.celu, {"alpha": 1.0}),
    "ThresholdedRelu": (GA.thresholded_relu, {"alpha": 1.0}),
    "Swish": (GA.swish, {"alpha": 1.0}),
}


def _activation(make, defaults):
    def convert(im, node, a):
        attrs = {k: float(a.get(k, v)) for k, v in defaults.items()}
        return make(im.tensor(node.input[0]), **attrs)

    return convert


for _op, (_ctor, _defaults) in _ACTIVATIONS.items():
    converter(_op)(_activation(_ctor, _defaults))


@converter("LeakyRelu")
def _leaky(im, node, a):
    return G.leaky_relu(im.tensor(node.input[0]), float(a.get("alpha", 0.01)))


@converter("Gelu")
def _gelu(im, node, a):
    approximate = _text(a.get("approximate"), "none")
    if approximate not in ("none", "tanh"):
        _refuse(node, f"approximate={approximate!r} is not supported ('none' or 'tanh')")
    return GA.gelu(im.tensor(node.input[0]), approximate)


@converter("PRelu")
def _prelu(im, node, a):
    x, slope = _unify([im.tensor(node.input[0]), im.tensor(node.input[1])])
    return GA.prelu(x, slope)


# -- comparisons, logic, selection -----------------------------------------------------------

_COMPARE = {"Equal": "equal", "Less": "less", "LessOrEqual": "less_equal",
            "Greater": "greater", "GreaterOrEqual": "greater_equal",
            "And": "logical_and", "Or": "logical_or", "Xor": "logical_xor",
            "BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or",
            "BitwiseXor": "bitwise_xor"}


def _binary_converter(name: str):
    def convert(im, node, a):
        x, y = _unify(_inputs(im, node))
        return Call(name, [x, y])

    return convert


for _op, _name in _COMPARE.items():
    converter(_op, static=not _op.startswith("Bitwise"))(_binary_converter(_name))


@converter("CastLike", static=True)
def _cast_like(im, node, a):
    x, like = im.tensor(node.input[0]), im.tensor(node.input[1])
    return onnx_float8.cast(x, like.dtype, bool(a.get("saturate", 1)),
                            node.name or node.output[0])


@converter("Where", static=True)
def _where(im, node, a):
    cond = im.tensor(node.input[0])
    x, y = _unify([im.tensor(node.input[1]), im.tensor(node.input[2])])
    return GL.where(cond, x, y)


@converter("BitShift")
def _bit_shift(im, node, a):
    direction = _text(a.get("direction"), "").lower()
    if direction not in ("left", "right"):
        _refuse(node, f"direction must be 'LEFT' or 'RIGHT', got {a.get('direction')!r}")
    x, y = _unify(_inputs(im, node))
    return binary("bit_shift", x, y, direction=direction)


# -- Clip ------------------------------------------------------------------------------------


def _bound(im, node, k: int, attr: str, a):
    """Clip's bound ``k`` (1: min, 2: max): a number, a graph node, or None when absent."""
    if im.opset < 11:
        return float(a[attr]) if attr in a else None
    if not _has(node, k):
        return None
    if im.is_static(node.input[k]):
        value = np.asarray(im.static[node.input[k]])
        if value.size != 1:
            _refuse(node, f"the {attr} bound must be a scalar, got shape {list(value.shape)}")
        return value.reshape(()).item()
    return im.tensor(node.input[k])


@converter("Clip", static=True)
def _clip(im, node, a):
    x = im.tensor(node.input[0])
    lo, hi = _bound(im, node, 1, "min", a), _bound(im, node, 2, "max", a)
    _expect(node, x, FLOATS + INTS)
    numbers = not isinstance(lo, Node) and not isinstance(hi, Node)
    if numbers and x.dtype in FLOATS and None not in (lo, hi) and lo <= hi:
        return G.clip(x, lo, hi)
    # an absent bound is the dtype's own limit: nothing to clamp on that side
    out = x
    for bound, fn in ((lo, G.maximum), (hi, G.minimum)):
        if bound is None:
            continue
        if not isinstance(bound, Node):
            bound = Constant(np.array([bound]).astype(dt.to_numpy(x.dtype)), dtype=x.dtype)
        out = fn(*_unify([out, bound]))
    return out


# -- softmax family ----------------------------------------------------------------------


def _rows(im, node, a, x: Node):
    """``(x as the op sees it, axis, restore)``: from opset 13 the op works on ``axis``;
    before, on the rows of ``x`` flattened to 2-D at ``axis``."""
    default = 1 if im.opset < 13 else -1
    axis = int(a.get("axis", default))
    if not -x.ndim <= axis < max(x.ndim, 1):
        _refuse(node, f"axis {axis} is out of range for a {x.ndim}-D input")
    axis %= max(x.ndim, 1)
    if im.opset >= 13 or axis == x.ndim - 1:
        return x, axis, lambda y: y
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    flat = G.reshape(x, (rows, -1))
    return flat, 1, lambda y: G.reshape(y, x.shape)


@converter("Softmax")
def _softmax(im, node, a):
    x = im.tensor(node.input[0])
    _expect(node, x, FLOATS)
    data, axis, restore = _rows(im, node, a, x)
    # ONNX computes a bfloat16 softmax in bfloat16 (its reference: numpy on bfloat16 arrays,
    # the row sum rounded after every term, in order; Attention's softmax_precision
    # default, "the input's precision", reaches this Softmax through its function body)
    serial = "bfloat16" if x.dtype == "bfloat16" else ""
    return restore(G.softmax(data, axis, sum_dtype=serial))


def log_softmax(x: Node, axis: int) -> Node:
    """``x - max - log(sum(exp(x - max)))`` along ``axis`` (stable for large inputs)."""
    shifted = G.subtract(x, reduction("max", x, (axis,), True))
    total = reduction("sum", G.exp(shifted), (axis,), True)
    return G.subtract(shifted, G.log(total))


@converter("LogSoftmax")
def _log_softmax(im, node, a):
    x = im.tensor(node.input[0])
    _expect(node, x, FLOATS)
    data, axis, restore = _rows(im, node, a, x)
    return restore(log_softmax(data, axis))


@converter("Hardmax")
def _hardmax(im, node, a):
    x = im.tensor(node.input[0])
    _expect(node, x, FLOATS)
    data, axis, restore = _rows(im, node, a, x)
    index = argmax(data, axis, keepdims=True)
    shape = [1] * data.ndim
    shape[axis] = data.shape[axis]
    positions = Constant(np.arange(data.shape[axis], dtype=np.int64).reshape(shape),
                         dtype="int64")
    return restore(G.cast(GL.equal(index, positions), x.dtype))


# -- reductions ------------------------------------------------------------------------------

# the opset from which each reduction takes its axes as an input (before: an attribute)
_AXES_INPUT_FROM = {"ReduceSum": 13}


def _reduce_axes(im, node, a, x: Node):
    """The reduced axes (a tuple; None: all) or ``"noop"`` for the identity."""
    if im.opset >= _AXES_INPUT_FROM.get(node.op_type, 18):
        if "axes" in a:
            _refuse(node, f"from opset {_AXES_INPUT_FROM.get(node.op_type, 18)} the axes are "
                          "an input, not an attribute")
        axes = (np.asarray(im.value(node.input[1], f"the {node.op_type} axes")).reshape(-1)
                if _has(node, 1) else np.zeros(0, np.int64))
    else:
        axes = np.asarray(a.get("axes", []), dtype=np.int64).reshape(-1)
    if axes.size == 0:
        return "noop" if int(a.get("noop_with_empty_axes", 0)) else None
    for ax in axes:
        if not -x.ndim <= int(ax) < x.ndim:
            _refuse(node, f"axis {int(ax)} is out of range for a {x.ndim}-D input")
    return tuple(sorted({int(ax) % x.ndim for ax in axes}))


def _keep_shape(x: Node, axes) -> tuple:
    axes = range(x.ndim) if axes is None else axes
    return tuple(1 if d in axes else s for d, s in enumerate(x.shape))


def _drop(y: Node, x: Node, axes, keepdims: bool) -> Node:
    """``y`` reduced with kept dimensions, reshaped as ``keepdims`` asks."""
    if keepdims:
        return y
    axes = range(x.ndim) if axes is None else axes
    return G.reshape(y, tuple(s for d, s in enumerate(x.shape) if d not in axes))


def _as_float(node, y: Node, x: Node) -> Node:
    """The float result of a sqrt/log reduction of integers: ONNX keeps the input's dtype."""
    return y if x.dtype in FLOATS else G.cast(y, x.dtype)


def _empty_reduction(kind: str, x: Node, axes, keep: bool) -> Constant:
    """The reduction of an empty tensor: an empty result, or over an empty axis the
    reduction's identity, as ONNX defines it (max: the lowest value, min: the highest;
    log-sums: log(0) = -inf; mean: 0 / 0)."""
    shape = _keep_shape(x, axes)
    if not keep:
        shape = tuple(s for d, s in enumerate(x.shape) if d not in (axes or range(x.ndim)))
    numpy_dtype = dt.to_numpy(x.dtype)
    if 0 in shape:
        value = 0
    elif x.dtype == "bool":
        value = kind == "min"
    elif x.dtype in INTS:
        info = np.iinfo(numpy_dtype)
        value = {"max": info.min, "min": info.max, "prod": 1}.get(kind, 0)
        if kind in ("mean", "log_sum", "log_sum_exp"):
            raise OnnxImportError(f"{kind} of an empty integer tensor has no integer value")
    else:
        value = {"max": -np.inf, "min": np.inf, "prod": 1.0, "mean": np.nan,
                 "log_sum": -np.inf, "log_sum_exp": -np.inf}.get(kind, 0.0)
    return Constant(np.full(shape, value, dtype=np.float64 if x.dtype == "bfloat16" else
                            numpy_dtype), dtype=x.dtype)


def _reduction(kind: str):
    def convert(im, node, a):
        x = im.tensor(node.input[0])
        axes = _reduce_axes(im, node, a, x)
        if axes == "noop":
            return x
        keep = bool(int(a.get("keepdims", 1)))
        if x.ty.size == 0:  # nothing to compute: the identity, or an empty tensor
            return _empty_reduction(kind, x, axes, keep)
        if x.dtype == "bool":
            if kind not in ("max", "min"):
                _refuse(node, "bool data is supported by ReduceMax and ReduceMin only")
            y = reduction(kind, G.cast(x, "uint8"), axes, keep)
            return G.cast(y, "bool")
        _expect(node, x, FLOATS + INTS)
        if kind in ("sum", "max", "min", "prod", "l1", "sum_square"):
            return reduction(kind, x, axes, keep)
        if kind == "mean":
            if x.dtype in FLOATS:
                return G.mean(x, axes, keep)
            count = int(np.prod([x.shape[d] for d in (axes or range(x.ndim))]))
            total = reduction("sum", x, axes, keep)
            return binary("trunc_divide", total,
                          Constant(np.array([count]), dtype=x.dtype))
        wide = x if x.dtype in FLOATS else G.cast(x, "float64")
        if kind == "l2":
            return _as_float(node, G.sqrt(reduction("sum_square", wide, axes, keep)), x)
        if kind == "log_sum":
            return _as_float(node, G.log(reduction("sum", wide, axes, keep)), x)
        # log_sum_exp, shifted by the maximum so that large inputs do not overflow
        top = reduction("max", wide, axes, True)
        total = reduction("sum", G.exp(G.subtract(wide, top)), axes, True)
        y = G.add(G.log(total), top)
        return _as_float(node, _drop(y, x, axes, keep), x)

    return convert


for _op, _kind in (("ReduceSum", "sum"), ("ReduceMax", "max"), ("ReduceMin", "min"),
                   ("ReduceProd", "prod"), ("ReduceL1", "l1"), ("ReduceL2", "l2"),
                   ("ReduceSumSquare", "sum_square"), ("ReduceLogSum", "log_sum"),
                   ("ReduceLogSumExp", "log_sum_exp"), ("ReduceMean", "mean")):
    converter(_op, static=_op in ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"))(
        _reduction(_kind))


def _arg(largest: bool):
    def convert(im, node, a):
        x = im.tensor(node.input[0])
        _expect(node, x, FLOATS + INTS)
        axis = int(a.get("axis", 0))
        if not -x.ndim <= axis < x.ndim:
            _refuse(node, f"axis {axis} is out of range for a {x.ndim}-D input")
        keep = bool(int(a.get("keepdims", 1)))
        last = bool(int(a.get("select_last_index", 0)))
        make = argmax if largest else argmin
        return make(x, axis % x.ndim, keep, last)

    return convert


converter("ArgMax", static=True)(_arg(True))
converter("ArgMin", static=True)(_arg(False))
