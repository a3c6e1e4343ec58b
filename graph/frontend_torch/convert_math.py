"""Converters of element-wise, comparison, logic, activation and reduction overloads."""

from __future__ import annotations

import math

import numpy as np

from .helpers import axes_of, numel, operand, promoted, reshape
from .registry import converter

# -- binary arithmetic --------------------------------------------------------------------


def _binary(op: str, swap: bool = False):
    def fn(cx, a):
        dtype = promoted(cx)
        other = a.other
        alpha = getattr(a, "alpha", 1)
        if alpha is not None and alpha != 1:
            other = cx.call("multiply", [operand(cx, other, dtype), cx.const(alpha, dtype)])
        x, y = operand(cx, a.self, dtype), operand(cx, other, dtype)
        return cx.call(op, [y, x] if swap else [x, y])
    return fn


converter("aten.add.Tensor", "aten.add.Scalar", needs=("add", "multiply"))(_binary("add"))
converter("aten.sub.Tensor", "aten.sub.Scalar", needs=("subtract", "multiply"))(
    _binary("subtract"))
converter("aten.rsub.Scalar", "aten.rsub.Tensor", needs=("subtract", "multiply"))(
    _binary("subtract", swap=True))
converter("aten.mul.Tensor", "aten.mul.Scalar", needs="multiply")(_binary("multiply"))
converter("aten.maximum.default", needs="maximum")(_binary("maximum"))
converter("aten.minimum.default", needs="minimum")(_binary("minimum"))


@converter("aten.div.Tensor", "aten.div.Scalar", needs="divide")
def _div(cx, a):
    dtype = promoted(cx)
    return cx.call("divide", [operand(cx, a.self, dtype), operand(cx, a.other, dtype)])


@converter("aten.div.Tensor_mode", "aten.div.Scalar_mode",
           needs=("divide", "floor", "ceil", "less", "where", "trunc_divide", "floor_mod",
                  "subtract"),
           maps_to="divide, then floor or trunc (integers: trunc_divide, floor_mod)")
def _div_mode(cx, a):
    dtype = promoted(cx)
    x, y = operand(cx, a.self, dtype), operand(cx, a.other, dtype)
    if a.rounding_mode is None:
        return cx.call("divide", [x, y])
    if a.rounding_mode not in ("floor", "trunc"):
        cx.fail(f"rounding_mode must be None, 'floor' or 'trunc', got {a.rounding_mode!r}")
    if dtype.startswith(("float", "bfloat")):
        q = cx.call("divide", [x, y])
        return cx.call("floor", [q]) if a.rounding_mode == "floor" else _trunc_of(cx, q)
    if a.rounding_mode == "trunc":
        return cx.call("trunc_divide", [x, y])
    # x - floor_mod(x, y) is an exact multiple of y: its truncating quotient is the floor's
    return cx.call("trunc_divide", [cx.call("subtract", [x, cx.call("floor_mod", [x, y])]), y])


@converter("aten.pow.Tensor_Tensor", "aten.pow.Tensor_Scalar", needs=("power", "multiply"))
def _pow(cx, a):
    dtype = promoted(cx)
    if not hasattr(a.exponent, "shape") and a.exponent == 2:
        x = operand(cx, a.self, dtype)
        return cx.call("multiply", [x, x])
    return cx.call("power", [operand(cx, a.self, dtype), operand(cx, a.exponent, dtype)])


@converter("aten.pow.Scalar", needs="power")
def _pow_scalar(cx, a):
    dtype = promoted(cx)
    return cx.call("power", [operand(cx, a.self, dtype), operand(cx, a.exponent, dtype)])


def _mod(op: str):
    def fn(cx, a):
        dtype = promoted(cx)
        return cx.call(op, [operand(cx, a.self, dtype), operand(cx, a.other, dtype)])
    return fn


@converter("aten.remainder.Tensor", "aten.remainder.Scalar",
           needs=("floor_mod", "floor", "divide", "multiply", "subtract"),
           maps_to="floor_mod (floats: x - floor(x / y) * y)")
def _remainder(cx, a):
    dtype = promoted(cx)
    x, y = operand(cx, a.self, dtype), operand(cx, a.other, dtype)
    if not dtype.startswith(("float", "bfloat")):
        return cx.call("floor_mod", [x, y])
    q = cx.call("floor", [cx.call("divide", [x, y])])
    return cx.call("subtract", [x, cx.call("multiply", [q, y])])
converter("aten.fmod.Tensor", "aten.fmod.Scalar", needs="fmod")(_mod("fmod"))
# -- unary --------------------------------------------------------------------------------


def _unary(op: str):
    def fn(cx, a):
        return cx.call(op, [operand(cx, a.self, promoted(cx))])
    return fn


for _aten, _op in {"relu": "nn.relu", "sigmoid": "sigmoid", "tanh": "tanh", "exp": "exp",
                   "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "erf": "erf",
                   "neg": "negative"}.items():
    converter(f"aten.{_aten}.default", needs=_op)(_unary(_op))

for _name in ("sin", "cos", "tan", "asin", "acos", "atan", "ceil", "floor", "round", "sign"):
    converter(f"aten.{_name}.default", needs=_name)(_unary(_name))


def _trunc_of(cx, x):
    neg = cx.call("less", [x, cx.const(0, x.dtype)])
    return cx.call("where", [neg, cx.call("ceil", [x]), cx.call("floor", [x])])


@converter("aten.trunc.default", needs=("less", "where", "ceil", "floor"),
           maps_to="where(x < 0, ceil(x), floor(x))")
def _trunc(cx, a):
    x = operand(cx, a.self, promoted(cx))
    return x if not x.dtype.startswith(("float", "bfloat")) else _trunc_of(cx, x)


@converter("aten.abs.default", needs=("maximum", "negative"), maps_to="maximum(x, negative(x))")
def _abs(cx, a):
    x = operand(cx, a.self, promoted(cx))
    return cx.call("maximum", [x, cx.call("negative", [x])])


@converter("aten.reciprocal.default", needs="divide", maps_to="divide(1, x)")
def _reciprocal(cx, a):
    dtype = promoted(cx)
    return cx.call("divide", [cx.const(1, dtype), operand(cx, a.self, dtype)])


def _log_base(base: float):
    def fn(cx, a):
        dtype = promoted(cx)
        return cx.call("divide", [cx.call("log", [operand(cx, a.self, dtype)]),
                                  cx.const(math.log(base), dtype)])
    return fn


converter("aten.log2.default", needs=("log", "divide"), maps_to="log(x) / ln 2")(_log_base(2))
converter("aten.log10.default", needs=("log", "divide"), maps_to="log(x) / ln 10")(
    _log_base(10))


@converter("aten.log1p.default", needs=("log", "add"), maps_to="log(1 + x)")
def _log1p(cx, a):
    dtype = promoted(cx)
    return cx.call("log", [cx.call("add", [cx.const(1, dtype), operand(cx, a.self, dtype)])])


@converter("aten.expm1.default", needs=("exp", "subtract"), maps_to="exp(x) - 1")
def _expm1(cx, a):
    dtype = promoted(cx)
    return cx.call("subtract", [cx.call("exp", [operand(cx, a.self, dtype)]), cx.const(1, dtype)])


def _hyperbolic(kind: str):
    def fn(cx, a):
        dtype = promoted(cx)
        x = operand(cx, a.self, dtype)
        c = lambda v: cx.const(v, dtype)  # noqa: E731
        ex = cx.call("exp", [x])
        emx = cx.call("exp", [cx.call("negative", [x])])
        op = "subtract" if kind == "sinh" else "add"
        return cx.call("multiply", [cx.call(op, [ex, emx]), c(0.5)])
    return fn


converter("aten.sinh.default", needs=("exp", "negative", "subtract", "multiply"),
          maps_to="(exp(x) - exp(-x)) / 2")(_hyperbolic("sinh"))
converter("aten.cosh.default", needs=("exp", "negative", "add", "multiply"),
          maps_to="(exp(x) + exp(-x)) / 2")(_hyperbolic("cosh"))


@converter("aten.asinh.default", needs=("log", "sqrt", "add", "multiply"),
           maps_to="log(x + sqrt(x*x + 1))")
def _asinh(cx, a):
    dtype = promoted(cx)
    x = operand(cx, a.self, dtype)
    root = cx.call("sqrt", [cx.call("add", [cx.call("multiply", [x, x]), cx.const(1, dtype)])])
    return cx.call("log", [cx.call("add", [x, root])])


@converter("aten.acosh.default", needs=("log", "sqrt", "subtract", "add", "multiply"),
           maps_to="log(x + sqrt(x*x - 1))")
def _acosh(cx, a):
    dtype = promoted(cx)
    x = operand(cx, a.self, dtype)
    root = cx.call("sqrt", [cx.call("subtract", [cx.call("multiply", [x, x]),
                                                 cx.const(1, dtype)])])
    return cx.call("log", [cx.call("add", [x, root])])


@converter("aten.atanh.default", needs=("log", "subtract", "add", "divide", "multiply"),
           maps_to="log((1 + x) / (1 - x)) / 2")
def _atanh(cx, a):
    dtype = promoted(cx)
    x = operand(cx, a.self, dtype)
    one = cx.const(1, dtype)
    ratio = cx.call("divide", [cx.call("add", [one, x]), cx.call("subtract", [one, x])])
    return cx.call("multiply", [cx.call("log", [ratio]), cx.const(0.5, dtype)])


@converter("aten.gelu.default", needs=("erf", "tanh", "add", "multiply"),
           maps_to="x * (1 + erf(x / sqrt 2)) / 2 (or the tanh form)")
def _gelu(cx, a):
    dtype = promoted(cx)
    x = operand(cx, a.self, dtype)
    c = lambda v: cx.const(v, dtype)  # noqa: E731
    mul = lambda p, q: cx.call("multiply", [p, q])  # noqa: E731
    if a.approximate == "tanh":
        inner = mul(c(math.sqrt(2 / math.pi)),
                    cx.call("add", [x, mul(c(0.044715), mul(x, mul(x, x)))]))
        return mul(mul(c(0.5), x), cx.call("add", [c(1), cx.call("tanh", [inner])]))
    if a.approximate != "none":
        cx.fail(f"approximate must be 'none' or 'tanh', got {a.approximate!r}")
    return mul(mul(c(0.5), x),
               cx.call("add", [c(1), cx.call("erf", [mul(x, c(1 / math.sqrt(2)))])]))


@converter("aten.elu.default", needs=("maximum", "minimum", "exp", "subtract", "multiply"),
           maps_to="scale * (max(x, 0) + min(0, alpha * (exp(x * input_scale) - 1)))")
def _elu(cx, a):
    dtype = promoted(cx)
    x = operand(cx, a.self, dtype)
    c = lambda v: cx.const(v, dtype)  # noqa: E731
    mul = lambda p, q: cx.call("multiply", [p, q])  # noqa: E731
    neg = mul(c(a.alpha), cx.call("subtract", [cx.call("exp", [mul(x, c(a.input_scale))]),
                                                c(1)]))
    out = cx.call("add", [cx.call("maximum", [x, c(0)]), cx.call("minimum", [c(0), neg])])
    return out if a.scale == 1 else mul(out, c(a.scale))


@converter("aten.hardtanh.default", needs="clip")
def _hardtanh(cx, a):
    return cx.call("clip", [a.self], {"a_min": float(a.min_val), "a_max": float(a.max_val)})


@converter("aten.leaky_relu.default", needs="nn.leaky_relu")
def _leaky(cx, a):
    return cx.call("nn.leaky_relu", [a.self], {"alpha": float(a.negative_slope)})


@converter("aten.clamp.default", needs=("clip", "maximum", "minimum"),
           maps_to="clip (maximum / minimum with one bound)")
def _clamp(cx, a):
    dtype = promoted(cx)
    x = operand(cx, a.self, dtype)
    lo, hi = a.min, a.max
    if lo is not None and hi is not None and dtype.startswith(("float", "bfloat")):
        return cx.call("clip", [x], {"a_min": float(lo), "a_max": float(hi)})
    if lo is not None:
        x = cx.call("maximum", [x, cx.const(lo, dtype)])
    if hi is not None:
        x = cx.call("minimum", [x, cx.const(hi, dtype)])
    return x


@converter("aten.clamp.Tensor", needs=("maximum", "minimum"))
def _clamp_tensor(cx, a):
    dtype = promoted(cx)
    x = operand(cx, a.self, dtype)
    if a.min is not None:
        x = cx.call("maximum", [x, operand(cx, a.min, dtype)])
    if a.max is not None:
        x = cx.call("minimum", [x, operand(cx, a.max, dtype)])
    return x


# -- comparisons and logic ----------------------------------------------------------------

def _compare(op: str):
    def fn(cx, a):
        import torch

        from .importer import graph_dtype

        vals = [v.meta["val"] if hasattr(v, "meta") else v for v in cx.node.args[:2]]
        dtype = graph_dtype(torch.result_type(*vals))
        return cx.call(op, [operand(cx, a.self, dtype), operand(cx, a.other, dtype)])
    return fn


for _aten, _op in {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal",
                   "gt": "greater", "ge": "greater_equal"}.items():
    converter(f"aten.{_aten}.Tensor", f"aten.{_aten}.Scalar", needs=_op)(_compare(_op))

for _name in ("and", "or", "xor"):
    converter(f"aten.logical_{_name}.default", needs=f"logical_{_name}")(
        (lambda op: lambda cx, a: cx.call(op, [operand(cx, a.self, "bool"),
                                               operand(cx, a.other, "bool")]))(
            f"logical_{_name}"))
    converter(f"aten.bitwise_{_name}.Tensor", f"aten.bitwise_{_name}.Scalar",
              needs=(f"bitwise_{_name}", f"logical_{_name}"),
              maps_to=f"bitwise_{_name} (logical_{_name} on bool)")(
        (lambda name: lambda cx, a: cx.call(
            f"logical_{name}" if promoted(cx) == "bool" else f"bitwise_{name}",
            [operand(cx, a.self, promoted(cx)), operand(cx, a.other, promoted(cx))]))(_name))

converter("aten.logical_not.default", needs="logical_not")(
    lambda cx, a: cx.call("logical_not", [operand(cx, a.self, "bool")]))


@converter("aten.bitwise_not.default", needs=("bitwise_not", "logical_not"),
           maps_to="bitwise_not (logical_not on bool)")
def _bitwise_not(cx, a):
    return cx.call("logical_not" if a.self.dtype == "bool" else "bitwise_not", [a.self])


@converter("aten.isnan.default", needs="not_equal", maps_to="not_equal(x, x)")
def _isnan(cx, a):
    return cx.call("not_equal", [a.self, a.self])


@converter("aten.isinf.default", needs=("equal", "maximum", "negative"),
           maps_to="equal(abs(x), inf)")
def _isinf(cx, a):
    x = a.self
    mag = cx.call("maximum", [x, cx.call("negative", [x])])
    return cx.call("equal", [mag, cx.const(np.inf, x.dtype)])


@converter("aten.where.self", needs="where")
def _where(cx, a):
    dtype = promoted(cx)
    return cx.call("where", [operand(cx, a.condition, "bool"), operand(cx, a.self, dtype),
                             operand(cx, a.other, dtype)])


# -- reductions ---------------------------------------------------------------------------

def _reduce(op: str):
    def fn(cx, a):
        x = a.self
        dim = getattr(a, "dim", None)
        keep = bool(getattr(a, "keepdim", False))
        dtype = getattr(a, "dtype", None)
        if dtype is not None:
            x = operand(cx, x, cx.out_dtype())
        axes = axes_of(dim, x.ndim)
        return cx.call(op, [x], {"axis": axes, "keepdims": keep})
    return fn


converter("aten.mean.dim", "aten.mean.default", needs=("mean", "cast"))(_reduce("mean"))
converter("aten.sum.dim_IntList", needs=("reduce.sum", "cast"))(_reduce("reduce.sum"))
converter("aten.amax.default", needs="reduce.max")(_reduce("reduce.max"))
converter("aten.amin.default", needs="reduce.min")(_reduce("reduce.min"))
converter("aten.prod.dim_int", "aten.prod.default", needs=("reduce.prod", "cast"))(
    _reduce("reduce.prod"))


@converter("aten.any.default", "aten.any.dim", "aten.any.dims", needs=("reduce.max", "cast"),
           maps_to="reduce.max of the values as int8, cast to bool")
def _any(cx, a):
    x = operand(cx, operand(cx, a.self, "bool"), "int8")
    axes = axes_of(getattr(a, "dim", None), x.ndim)
    out = cx.call("reduce.max", [x], {"axis": axes, "keepdims": bool(getattr(a, "keepdim",
                                                                               False))})
    return operand(cx, out, "bool")


def _reduce_with_index(op: str, arg: str):
    def fn(cx, a):
        attrs = {"axis": (a.dim % max(a.self.ndim, 1),), "keepdims": bool(a.keepdim)}
        return (cx.call(op, [a.self], attrs),
                cx.call(arg, [a.self], {"axis": a.dim, "keepdims": bool(a.keepdim)}))
    return fn


converter("aten.max.dim", needs=("reduce.max", "argmax"))(
    _reduce_with_index("reduce.max", "argmax"))
converter("aten.min.dim", needs=("reduce.min", "argmin"))(
    _reduce_with_index("reduce.min", "argmin"))


def _arg(op: str):
    def fn(cx, a):
        x = a.self
        if a.dim is None:
            x = reshape(cx, x, (numel(x.shape),))
            return cx.call(op, [x], {"axis": 0, "keepdims": False})
        return cx.call(op, [x], {"axis": a.dim, "keepdims": bool(a.keepdim)})
    return fn


converter("aten.argmax.default", needs=("argmax", "reshape"))(_arg("argmax"))
converter("aten.argmin.default", needs=("argmin", "reshape"))(_arg("argmin"))


@converter("aten.var.correction", "aten.var.dim",
           needs=("mean", "subtract", "multiply"),
           maps_to="mean((x - mean(x))^2) * n / (n - correction)")
def _var(cx, a):
    x = a.self
    axes = axes_of(a.dim, x.ndim)
    n = numel([x.shape[d] for d in axes])
    corr = a.correction if hasattr(a, "correction") else None
    if corr is None:
        corr = 1 if getattr(a, "unbiased", True) else 0
    mu = cx.call("mean", [x], {"axis": axes, "keepdims": True})
    d = cx.call("subtract", [x, mu])
    var = cx.call("mean", [cx.call("multiply", [d, d])],
                  {"axis": axes, "keepdims": bool(a.keepdim)})
    if corr == 0:
        return var
    if n - corr <= 0:
        cx.fail(f"the correction {corr} leaves no degrees of freedom over {n} elements")
    return cx.call("multiply", [var, cx.const(n / (n - corr), x.dtype)])


@converter("aten._softmax.default", needs="nn.softmax")
def _softmax(cx, a):
    return cx.call("nn.softmax", [a.self], {"axis": a.dim})


@converter("aten._log_softmax.default",
           needs=("reduce.max", "reduce.sum", "exp", "log", "subtract"),
           maps_to="x - max - log(sum(exp(x - max)))")
def _log_softmax(cx, a):
    x = a.self
    axis = (a.dim % x.ndim,)
    top = cx.call("reduce.max", [x], {"axis": axis, "keepdims": True})
    shifted = cx.call("subtract", [x, top])
    total = cx.call("reduce.sum", [cx.call("exp", [shifted])], {"axis": axis, "keepdims": True})
    return cx.call("subtract", [shifted, cx.call("log", [total])])
