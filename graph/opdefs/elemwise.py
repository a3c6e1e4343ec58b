"""Element-wise operators: binary ones with numpy broadcasting, and unary ones."""

from __future__ import annotations

import math

import numpy as np

from ... import ops
from ...ir import dtype as dt
from ..ir import Call, Constant, Node, TensorType
from ..op import OpDef, OpPattern, register_op
from .common import broadcast_shapes, expect_float, fail

_BINARY = {
    "add": (ops.add, np.add),
    "subtract": (ops.subtract, np.subtract),
    "multiply": (ops.multiply, np.multiply),
    # integers round toward zero (ONNX Div), not toward minus infinity as ops.divide
    "divide": (ops.broadcast.trunc_divide, lambda a, b: _divide(a, b)),
    "maximum": (ops.maximum, np.maximum),
    "minimum": (ops.minimum, np.minimum),
    "power": (ops.power, np.power),
}


def _divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy's division, except that integers round toward zero exactly (ONNX ``Div``; a
    detour through float64 would round int64 values beyond 2**53)."""
    if np.result_type(a, b).kind not in "iu":
        return np.divide(a, b)
    with np.errstate(divide="ignore", over="ignore"):
        q = np.floor_divide(a, b)
        fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
    return q + fix.astype(q.dtype)


def _binary_infer(name):
    def infer(types, attrs):
        a, b = types
        if a.dtype != b.dtype:
            fail(name, f"operand dtypes differ: {a.dtype} and {b.dtype}; cast one first")
        return TensorType(broadcast_shapes(name, a.shape, b.shape), a.dtype)

    return infer


def _binary_ref(npfn):
    def ref(a, attrs):
        out = npfn(a[0], a[1])
        return out.astype(np.result_type(a[0], a[1]), copy=False)

    return ref


for _name, (_te_fn, _np_fn) in _BINARY.items():
    register_op(OpDef(
        name=_name, num_inputs=2, infer=_binary_infer(_name),
        lower=(lambda fn: lambda a, attrs: fn(a[0], a[1]))(_te_fn),
        ref=_binary_ref(_np_fn), pattern=OpPattern.BROADCAST, scalar_args=(0, 1),
    ))


def _operand(x, other: Node) -> Node:
    if isinstance(x, Node):
        return x
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return Constant(np.array(x, dtype=other.dtype))
    return Constant(np.asarray(x, dtype=other.dtype))


def _binary_ctor(name):
    def ctor(lhs, rhs) -> Call:
        if not isinstance(lhs, Node) and not isinstance(rhs, Node):
            fail(name, "at least one operand must be a graph node")
        if not isinstance(lhs, Node):
            lhs = _operand(lhs, rhs)
        if not isinstance(rhs, Node):
            rhs = _operand(rhs, lhs)
        return Call(name, [lhs, rhs])

    ctor.__name__ = name
    ctor.__doc__ = f"Element-wise ``{name}`` with numpy broadcasting (numbers become constants)."
    return ctor


add = _binary_ctor("add")
subtract = _binary_ctor("subtract")
multiply = _binary_ctor("multiply")
divide = _binary_ctor("divide")
maximum = _binary_ctor("maximum")
minimum = _binary_ctor("minimum")
power = _binary_ctor("power")


def _same(types, attrs):
    return types[0]


def _float_same(name):
    def infer(types, attrs):
        expect_float(name, "x", types[0])
        return types[0]

    return infer


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)


def _sigmoid(x):
    return (1 / (1 + np.exp(-x))).astype(x.dtype)


_UNARY = {
    "nn.relu": (ops.nn.relu, lambda x: np.maximum(x, np.zeros((), x.dtype)), False),
    "sigmoid": (ops.sigmoid, _sigmoid, True),
    "tanh": (ops.tanh, np.tanh, True),
    "exp": (ops.exp, np.exp, True),
    "log": (ops.log, np.log, True),
    "sqrt": (ops.sqrt, np.sqrt, True),
    "rsqrt": (ops.rsqrt, lambda x: (1 / np.sqrt(x)).astype(x.dtype), True),
    "erf": (ops.erf, _erf, True),
    "negative": (ops.negative, np.negative, False),
}

for _name, (_te_fn, _np_fn, _floats) in _UNARY.items():
    register_op(OpDef(
        name=_name, num_inputs=1, infer=_float_same(_name) if _floats else _same,
        lower=(lambda fn: lambda a, attrs: fn(a[0]))(_te_fn),
        ref=(lambda fn: lambda a, attrs: fn(a[0]))(_np_fn),
        pattern=OpPattern.ELEMWISE,
    ))


def _unary_ctor(name):
    def ctor(x: Node) -> Call:
        return Call(name, [x])

    ctor.__name__ = name.split(".")[-1]
    ctor.__doc__ = f"Element-wise ``{name}``."
    return ctor


relu = _unary_ctor("nn.relu")
sigmoid = _unary_ctor("sigmoid")
tanh = _unary_ctor("tanh")
exp = _unary_ctor("exp")
log = _unary_ctor("log")
sqrt = _unary_ctor("sqrt")
rsqrt = _unary_ctor("rsqrt")
erf = _unary_ctor("erf")
negative = _unary_ctor("negative")


def _clip_ref(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """``np.clip``; on integers with the bounds clamped into the dtype's range and compared
    as integers (float64 would round int64 values beyond 2**53)."""
    if x.dtype.kind not in "iu":
        return np.clip(x, lo, hi).astype(x.dtype)
    info = np.iinfo(x.dtype)
    lo_i = int(info.min) if lo <= info.min else int(lo)
    hi_i = int(info.max) if hi >= info.max else int(hi)
    return np.clip(x, lo_i, hi_i).astype(x.dtype)


def _clip_normalize(attrs):
    lo, hi = attrs["a_min"], attrs["a_max"]
    for what, v in (("a_min", lo), ("a_max", hi)):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            fail("clip", f"{what} must be a number, got {v!r}")
    if lo > hi:
        fail("clip", f"a_min ({lo}) is larger than a_max ({hi})")
    return {"a_min": float(lo), "a_max": float(hi)}


register_op(OpDef(
    name="clip", num_inputs=1, infer=_same,
    lower=lambda a, attrs: ops.clip(a[0], attrs["a_min"], attrs["a_max"]),
    ref=lambda a, attrs: _clip_ref(a[0], attrs["a_min"], attrs["a_max"]),
    pattern=OpPattern.ELEMWISE, defaults={"a_min": None, "a_max": None},
    normalize=_clip_normalize,
))


def clip(x: Node, a_min: float, a_max: float) -> Call:
    """Clamp every element into ``[a_min, a_max]`` (ReLU6 is ``clip(x, 0, 6)``)."""
    return Call("clip", [x], {"a_min": a_min, "a_max": a_max})


def _leaky_ref(a, attrs):
    x = a[0]
    return np.where(x > 0, x, x * np.asarray(attrs["alpha"], x.dtype)).astype(x.dtype)


register_op(OpDef(
    name="nn.leaky_relu", num_inputs=1, infer=_float_same("nn.leaky_relu"),
    lower=lambda a, attrs: ops.nn.leaky_relu(a[0], attrs["alpha"]),
    ref=_leaky_ref, pattern=OpPattern.ELEMWISE, defaults={"alpha": 0.01},
))


def leaky_relu(x: Node, alpha: float = 0.01) -> Call:
    """``x`` where positive, ``alpha * x`` elsewhere."""
    return Call("nn.leaky_relu", [x], {"alpha": float(alpha)})


def _cast_infer(types, attrs):
    return TensorType(types[0].shape, attrs["dtype"])


def _cast_ref(a, attrs):
    return cast_array(a[0], attrs["dtype"])


def cast_array(x, dtype: str) -> np.ndarray:
    """A host array of ``dtype`` holding ``x`` rounded once (as the GPU's ``cvt.rn``);
    bfloat16 input is read exactly first."""
    x = np.asarray(x)
    if x.dtype == dt.BFLOAT16_HOST:
        x = dt.from_bfloat16(x)
    if dtype == "bfloat16":
        return dt.to_bfloat16(x)
    return x.astype(dt.to_numpy(dtype))


def _cast_normalize(attrs):
    dtype = attrs["dtype"]
    if not isinstance(dtype, str):
        fail("cast", f"dtype must be a dtype name, got {dtype!r}")
    try:
        dt.check(dtype)
    except dt.DTypeError as e:
        fail("cast", str(e))
    return {"dtype": dtype}


register_op(OpDef(
    name="cast", num_inputs=1, infer=_cast_infer,
    lower=lambda a, attrs: ops.cast(a[0], attrs["dtype"]),
    ref=_cast_ref, pattern=OpPattern.ELEMWISE, defaults={"dtype": None},
    normalize=_cast_normalize,
))


def cast(data: Node, dtype: str) -> Call:
    """Every element converted to ``dtype`` (floats round to nearest even)."""
    return Call("cast", [data], {"dtype": dtype})
