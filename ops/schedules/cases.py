"""Every operator of :mod:`ptxforge.ops` as a ready-made workload with its numpy reference.

A :class:`Workload` holds the te tensors (inputs, then the output) and a function
computing the output from numpy inputs; ``random_inputs`` draws inputs in the operator's
domain (positive where a logarithm or square root needs it, integers for the integer
operators). :data:`CASES` maps a case name to a builder taking shape keywords;
:data:`SMALL` lists small shapes per case (awkward sizes, batch > 1) for simulator tests
and :data:`RESNET18` the layers of ResNet-18 at batch 1, the realistic shapes.

The default schedules are checked against these on the simulator and on the GPU, and the
benchmarks time them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...ir import dtype as dt
from ...ir import te
from ...ir.te import Tensor
from .. import nn
from .. import testing as ref
from ..broadcast import (
    add,
    divide,
    floor_divide,
    floor_mod,
    maximum,
    minimum,
    multiply,
    power,
    subtract,
)
from ..math import abs as t_abs
from ..math import cast, clip, erf, exp, log, negative, rsqrt, sigmoid, sqrt, tanh
from ..reduction import max as r_max
from ..reduction import mean as r_mean
from ..reduction import min as r_min
from ..reduction import sum as r_sum
from ..transform import concatenate, expand_dims, reshape, squeeze, strided_slice, transpose


@dataclass
class Workload:
    """A computation with its numpy reference.

    Attributes:
        name: the case name.
        tensors: the inputs, then the output (the argument list of ``ptxforge.build``).
        reference: numpy inputs -> numpy output.
        low, high: the range inputs are drawn from.
        dtype: the dtype the builder was asked for (each input draws in its own dtype).
        nonzero: draw inputs away from zero (divisors).
    """

    name: str
    tensors: list
    reference: Callable[..., np.ndarray]
    low: float = -1.0
    high: float = 1.0
    dtype: str = "float32"
    nonzero: bool = False

    @property
    def inputs(self) -> list[Tensor]:
        return self.tensors[:-1]

    @property
    def output(self) -> Tensor:
        return self.tensors[-1]

    def random_inputs(self, rng: np.random.Generator) -> list[np.ndarray]:
        """Fresh inputs in the operator's domain."""
        out = []
        for t in self.inputs:
            if t.dtype.startswith("int"):
                x = rng.integers(int(self.low), int(self.high) + 1, size=t.shape)
                if self.nonzero:
                    x = np.where(x == 0, 1, x)
            else:
                x = rng.uniform(self.low, self.high, size=t.shape)
                if self.nonzero:
                    x = np.where(np.abs(x) < 0.25, 0.25 + np.abs(x), x)
            out.append(dt.to_bfloat16(x) if t.dtype == "bfloat16" else x.astype(t.dtype))
        return out

    def expected(self, inputs: list[np.ndarray]) -> np.ndarray:
        """The reference output for ``inputs``, in the output's dtype."""
        if any(dt.is_half(t.dtype) for t in self.tensors):
            # computed in float64 and rounded once, not in 16-bit numpy arithmetic
            wide = self.expected64(inputs)
            if self.output.dtype == "bfloat16":
                return dt.to_bfloat16(wide)
            return wide.astype(self.output.dtype)
        return np.asarray(self.reference(*inputs)).astype(self.output.dtype)

    def expected64(self, inputs: list[np.ndarray]) -> np.ndarray:
        """The reference output computed in float64 from the (possibly 16-bit) float
        inputs: what low-precision results are measured against."""
        wide = [ref.widen(x, t.dtype) for x, t in zip(inputs, self.inputs)]
        return np.asarray(self.reference(*wide), dtype=np.float64)


def _ph(shape, name, dtype="float32"):
    return te.placeholder(tuple(shape), dtype=dtype, name=name)


def _unary(name, op, npfn, low=-1.0, high=1.0):
    def build(shape=(3, 5), dtype="float32"):
        x = _ph(shape, "x", dtype)
        return Workload(name, [x, op(x)], npfn, low, high)

    return build


def _binary(name, op, npfn, dtype="float32", nonzero=False, low=-1.0, high=1.0):
    own = dtype

    def build(shape_a=(3, 5), shape_b=(3, 5), dtype="float32"):
        if own != "float32":
            dtype = own  # the integer operators keep their dtype
        a = _ph(shape_a, "a", dtype)
        b = _ph(shape_b, "b", dtype)
        return Workload(name, [a, b, op(a, b)], npfn, low, high, dtype, nonzero)

    return build


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x.astype(np.float64))


def conv2d_nchw(n=1, ci=3, h=6, w=6, co=4, k=3, stride=1, pad=1, dilation=1, bias=False,
                relu=False, dtype="float32") -> Workload:
    """conv2d NCHW, optionally with a per-channel bias [1, CO, 1, 1] and a ReLU."""
    data = _ph((n, ci, h, w), "data", dtype)
    kernel = _ph((co, ci, k, k), "kernel", dtype)
    out = nn.conv2d_nchw(data, kernel, stride, pad, dilation)
    tensors = [data, kernel]
    if bias:
        b = _ph((1, co, 1, 1), "bias", dtype)
        tensors.append(b)
        out = out + b
    if relu:
        out = nn.relu(out)

    def reference(d, kk, *rest):
        r = ref.conv2d_nchw_python(d, kk, stride, pad, dilation)
        if bias:
            r = r + rest[0]
        return np.maximum(r, 0) if relu else r

    return Workload("conv2d_nchw", tensors + [out], reference)


def conv2d_nhwc(n=1, ci=3, h=6, w=6, co=4, k=3, stride=1, pad=1, dilation=1, bias=False,
                relu=False, dtype="float32") -> Workload:
    """conv2d NHWC (kernel HWIO), optionally with a bias [CO] (bias_add) and a ReLU."""
    data = _ph((n, h, w, ci), "data", dtype)
    kernel = _ph((k, k, ci, co), "kernel", dtype)
    out = nn.conv2d_nhwc(data, kernel, stride, pad, dilation)
    tensors = [data, kernel]
    if bias:
        b = _ph((co,), "bias", out.dtype)  # the output's dtype (float32 by default)
        tensors.append(b)
        out = nn.bias_add(out, b, axis=3)
    if relu:
        out = nn.relu(out)

    def reference(d, kk, *rest):
        r = ref.conv2d_nhwc_python(d, kk, stride, pad, dilation)
        if bias:
            r = r + rest[0]
        return np.maximum(r, 0) if relu else r

    return Workload("conv2d_nhwc", tensors + [out], reference)


def depthwise_nchw(n=1, c=4, h=6, w=6, m=1, k=3, stride=1, pad=1, dtype="float32") -> Workload:
    data = _ph((n, c, h, w), "data", dtype)
    kernel = _ph((c, m, k, k), "kernel", dtype)
    out = nn.depthwise_conv2d_nchw(data, kernel, stride, pad)
    return Workload("depthwise_conv2d_nchw", [data, kernel, out],
                    lambda d, kk: ref.depthwise_conv2d_nchw_python(d, kk, stride, pad))


def depthwise_nhwc(n=1, c=4, h=6, w=6, m=1, k=3, stride=1, pad=1, dtype="float32") -> Workload:
    data = _ph((n, h, w, c), "data", dtype)
    kernel = _ph((k, k, c, m), "kernel", dtype)
    out = nn.depthwise_conv2d_nhwc(data, kernel, stride, pad)
    return Workload("depthwise_conv2d_nhwc", [data, kernel, out],
                    lambda d, kk: ref.depthwise_conv2d_nhwc_python(d, kk, stride, pad))


def dense(batch=3, in_dim=10, out_dim=7, bias=False, relu=False, dtype="float32") -> Workload:
    data = _ph((batch, in_dim), "data", dtype)
    weight = _ph((out_dim, in_dim), "weight", dtype)
    tensors = [data, weight]
    b = None
    if bias:
        b = _ph((out_dim,), "bias", dtype)
        tensors.append(b)
    out = nn.dense(data, weight, b)
    if relu:
        out = nn.relu(out)

    def reference(d, wt, *rest):
        r = ref.dense_python(d, wt, rest[0] if bias else None)
        return np.maximum(r, 0) if relu else r

    return Workload("dense", tensors + [out], reference)


def matmul(m=4, k=6, n=5, transpose_a=False, transpose_b=False, dtype="float32") -> Workload:
    a = _ph((k, m) if transpose_a else (m, k), "A", dtype)
    b = _ph((n, k) if transpose_b else (k, n), "B", dtype)
    out = nn.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)
    return Workload("matmul", [a, b, out], lambda x, y: ref.matmul_python(
        x, y, transpose_a=transpose_a, transpose_b=transpose_b))


def batch_matmul(batch=2, m=4, k=6, n=5, batch_b=None, transpose_a=False,
                 transpose_b=True, dtype="float32") -> Workload:
    bb = batch if batch_b is None else batch_b
    x = _ph((batch, k, m) if transpose_a else (batch, m, k), "x", dtype)
    y = _ph((bb, n, k) if transpose_b else (bb, k, n), "y", dtype)
    out = nn.batch_matmul(x, y, transpose_a=transpose_a, transpose_b=transpose_b)
    return Workload("batch_matmul", [x, y, out], lambda a, b: ref.batch_matmul_python(
        a, b, transpose_a, transpose_b))


def max_pool2d(n=1, c=2, h=7, w=7, k=3, stride=2, pad=1, layout="NCHW",
               ceil_mode=False, dtype="float32") -> Workload:
    shape = (n, c, h, w) if layout == "NCHW" else (n, h, w, c)
    x = _ph(shape, "data", dtype)
    out = nn.max_pool2d(x, k, stride, pad, layout=layout, ceil_mode=ceil_mode)
    return Workload("max_pool2d", [x, out], lambda d: ref.pool2d_python(
        d, k, stride, 1, pad, "max", ceil_mode, layout))


def avg_pool2d(n=1, c=2, h=6, w=6, k=3, stride=2, pad=1, layout="NCHW",
               count_include_pad=False, dtype="float32") -> Workload:
    shape = (n, c, h, w) if layout == "NCHW" else (n, h, w, c)
    x = _ph(shape, "data", dtype)
    out = nn.avg_pool2d(x, k, stride, pad, layout=layout, count_include_pad=count_include_pad)
    return Workload("avg_pool2d", [x, out], lambda d: ref.pool2d_python(
        d, k, stride, 1, pad, "avg", False, layout, count_include_pad))


def global_pool2d(n=1, c=3, h=5, w=5, pool_type="avg", layout="NCHW", dtype="float32") -> Workload:
    shape = (n, c, h, w) if layout == "NCHW" else (n, h, w, c)
    x = _ph(shape, "data", dtype)
    out = nn.global_pool2d(x, pool_type, layout)
    return Workload(f"global_{pool_type}_pool2d", [x, out],
                    lambda d: ref.global_pool2d_python(d, pool_type, layout))


def softmax(shape=(3, 9), axis=-1, dtype="float32") -> Workload:
    x = _ph(shape, "x", dtype)
    return Workload("softmax", [x, nn.softmax(x, axis)],
                    lambda d: ref.softmax_python(d.astype(np.float64), axis), -3.0, 3.0)


def attention(batch=1, heads=2, kv_heads=1, q_len=5, kv_len=7, dim=8, causal=True,
              dtype="float32") -> Workload:
    """Scaled dot-product attention (grouped-query when ``kv_heads < heads``), unfused."""
    from ..attention import attention as t_attention
    from ..attention_testing import attention_python

    q = _ph((batch, heads, q_len, dim), "q", dtype)
    k = _ph((batch, kv_heads, kv_len, dim), "k", dtype)
    v = _ph((batch, kv_heads, kv_len, dim), "v", dtype)
    return Workload("attention", [q, k, v, t_attention(q, k, v, causal=causal)],
                    lambda a, b, c: attention_python(a, b, c, causal=causal), -2.0, 2.0)


def batch_norm(shape=(2, 3, 4, 4), axis=1, dtype="float32") -> Workload:
    c = shape[axis]
    x = _ph(shape, "data", dtype)
    params = [_ph((c,), name, dtype) for name in ("gamma", "beta", "mean", "var")]
    out = nn.batch_norm(x, *params, axis=axis)
    # inputs in [0.5, 1.5] keep the variance positive
    return Workload("batch_norm", [x, *params, out], lambda d, g, b, m, v: ref.batch_norm_python(
        d, g, b, m, v, axis), 0.5, 1.5)


def bias_add(shape=(2, 3, 4), axis=1, dtype="float32") -> Workload:
    x = _ph(shape, "data", dtype)
    b = _ph((shape[axis],), "bias", dtype)
    return Workload("bias_add", [x, b, nn.bias_add(x, b, axis)],
                    lambda d, bb: ref.bias_add_python(d, bb, axis))


def relu(shape=(3, 5), dtype="float32") -> Workload:
    x = _ph(shape, "x", dtype)
    return Workload("relu", [x, nn.relu(x)], ref.relu_python)


def leaky_relu(shape=(3, 5), alpha=0.1, dtype="float32") -> Workload:
    x = _ph(shape, "x", dtype)
    return Workload("leaky_relu", [x, nn.leaky_relu(x, alpha)],
                    lambda d: np.where(d > 0, d, d * np.float32(alpha)))


def pad(shape=(2, 3, 4), before=(0, 1, 2), after=(1, 0, 1), value=0.5, dtype="float32") -> Workload:
    x = _ph(shape, "x", dtype)
    return Workload("pad", [x, nn.pad(x, list(before), list(after), value)],
                    lambda d: ref.pad_python(d, before, after, value))


def flatten(shape=(2, 3, 2, 2), dtype="float32") -> Workload:
    x = _ph(shape, "x", dtype)
    return Workload("flatten", [x, nn.flatten(x)], lambda d: d.reshape(d.shape[0], -1))


def reduce(kind="sum", shape=(3, 4, 5), axis=1, keepdims=False, dtype="float32") -> Workload:
    fn = {"sum": r_sum, "max": r_max, "min": r_min, "mean": r_mean}[kind]
    npfn = {"sum": np.sum, "max": np.max, "min": np.min, "mean": np.mean}[kind]
    x = _ph(shape, "x", dtype)
    return Workload(kind, [x, fn(x, axis, keepdims)],
                    lambda d: npfn(d.astype(np.float64), axis=axis, keepdims=keepdims))


def reshape_case(shape=(2, 3, 4), newshape=(4, -1), dtype="float32") -> Workload:
    x = _ph(shape, "x", dtype)
    return Workload("reshape", [x, reshape(x, newshape)], lambda d: d.reshape(newshape))


def transpose_case(shape=(2, 3, 4), axes=(2, 0, 1), dtype="float32") -> Workload:
    x = _ph(shape, "x", dtype)
    return Workload("transpose", [x, transpose(x, axes)], lambda d: d.transpose(axes))


def concatenate_case(shapes=((2, 3), (2, 4), (2, 1)), axis=1, dtype="float32") -> Workload:
    xs = [_ph(s, f"x{k}", dtype) for k, s in enumerate(shapes)]
    return Workload("concatenate", xs + [concatenate(xs, axis)],
                    lambda *ds: np.concatenate(ds, axis))


def strided_slice_case(shape=(4, 10), begin=(1, 2), end=(4, 9), strides=(1, 3), axes=None,
                       dtype="float32") -> Workload:
    x = _ph(shape, "x", dtype)
    ax = range(len(begin)) if axes is None else axes
    index = [slice(None)] * len(shape)
    for a, b, e, st in zip(ax, begin, end, strides):
        index[a] = slice(b, e, st)
    return Workload("strided_slice", [x, strided_slice(x, begin, end, strides, axes)],
                    lambda d: np.ascontiguousarray(d[tuple(index)]))


def squeeze_case(shape=(2, 1, 3, 1), axis=None, dtype="float32") -> Workload:
    x = _ph(shape, "x", dtype)
    return Workload("squeeze", [x, squeeze(x, axis)], lambda d: np.squeeze(d, axis))


def expand_dims_case(shape=(2, 3), axis=1, num_newaxis=2, dtype="float32") -> Workload:
    x = _ph(shape, "x", dtype)

    def reference(d):
        for _ in range(num_newaxis):
            d = np.expand_dims(d, axis)
        return d

    return Workload("expand_dims", [x, expand_dims(x, axis, num_newaxis)], reference)


def cast_case(shape=(3, 5), to="int32", dtype="float32") -> Workload:
    x = _ph(shape, "x", dtype)
    return Workload("cast", [x, cast(x, to)], lambda d: d.astype(to), -9.0, 9.0)


def clip_case(shape=(3, 5), a_min=-0.3, a_max=0.4, dtype="float32") -> Workload:
    x = _ph(shape, "x", dtype)
    return Workload("clip", [x, clip(x, a_min, a_max)],
                    lambda d: np.clip(d, np.float32(a_min), np.float32(a_max)))


def chain(shape=(2, 3, 5), dtype="float32") -> Workload:
    """An element-wise chain with a broadcast operand: ``relu(a * b + c)``."""
    a, b = _ph(shape, "a", dtype), _ph(shape, "b", dtype)
    c = _ph(shape[-1:], "c", dtype)
    return Workload("chain", [a, b, c, nn.relu(multiply(a, b) + c)],
                    lambda x, y, z: np.maximum(x * y + z, 0))


CASES: dict[str, Callable[..., Workload]] = {
    "add": _binary("add", add, np.add),
    "subtract": _binary("subtract", subtract, np.subtract),
    "multiply": _binary("multiply", multiply, np.multiply),
    "divide": _binary("divide", divide, np.divide, nonzero=True),
    "floor_divide": _binary("floor_divide", floor_divide, np.floor_divide, "int32", True,
                            -9, 9),
    "floor_mod": _binary("floor_mod", floor_mod, np.mod, "int32", True, -9, 9),
    "maximum": _binary("maximum", maximum, np.maximum),
    "minimum": _binary("minimum", minimum, np.minimum),
    "power": _binary("power", power, np.power, low=0.5, high=2.0),
    "abs": _unary("abs", t_abs, np.abs),
    "exp": _unary("exp", exp, np.exp),
    "log": _unary("log", log, np.log, 0.1, 4.0),
    "sqrt": _unary("sqrt", sqrt, np.sqrt, 0.0, 4.0),
    "rsqrt": _unary("rsqrt", rsqrt, lambda d: 1.0 / np.sqrt(d.astype(np.float64)), 0.1, 4.0),
    "sigmoid": _unary("sigmoid", sigmoid, lambda d: 1.0 / (1.0 + np.exp(-d.astype(np.float64)))),
    "tanh": _unary("tanh", tanh, np.tanh),
    "erf": _unary("erf", erf, _erf),
    "negative": _unary("negative", negative, np.negative),
    "cast": cast_case,
    "clip": clip_case,
    "relu": relu,
    "leaky_relu": leaky_relu,
    "bias_add": bias_add,
    "batch_norm": batch_norm,
    "pad": pad,
    "flatten": flatten,
    "reshape": reshape_case,
    "transpose": transpose_case,
    "concatenate": concatenate_case,
    "strided_slice": strided_slice_case,
    "squeeze": squeeze_case,
    "expand_dims": expand_dims_case,
    "chain": chain,
    "sum": lambda **kw: reduce("sum", **kw),
    "max": lambda **kw: reduce("max", **kw),
    "min": lambda **kw: reduce("min", **kw),
    "mean": lambda **kw: reduce("mean", **kw),
    "softmax": softmax,
    "attention": attention,
    "max_pool2d": max_pool2d,
    "avg_pool2d": avg_pool2d,
    "global_pool2d": global_pool2d,
    "conv2d_nchw": conv2d_nchw,
    "conv2d_nhwc": conv2d_nhwc,
    "depthwise_conv2d_nchw": depthwise_nchw,
    "depthwise_conv2d_nhwc": depthwise_nhwc,
    "dense": dense,
    "matmul": matmul,
    "batch_matmul": batch_matmul,
}

SMALL: dict[str, list[dict]] = {
    "add": [{}, {"shape_a": (2, 3, 5), "shape_b": (3, 1)}],
    "subtract": [{"shape_a": (4, 1), "shape_b": (1, 6)}],
    "multiply": [{"shape_a": (2, 7), "shape_b": (7,)}],
    "divide": [{}],
    "floor_divide": [{}],
    "floor_mod": [{"shape_a": (3, 5), "shape_b": (5,)}],
    "maximum": [{}],
    "minimum": [{}],
    "power": [{}],
    "abs": [{}],
    "exp": [{"shape": (2, 3, 4)}],
    "log": [{}],
    "sqrt": [{}],
    "rsqrt": [{}],
    "sigmoid": [{}],
    "tanh": [{}],
    "erf": [{}],
    "negative": [{}],
    "cast": [{}],
    "clip": [{}],
    "relu": [{"shape": (2, 3, 7)}, {"shape": (300,)}],
    "leaky_relu": [{}],
    "bias_add": [{}, {"shape": (2, 5, 3, 3), "axis": 1}, {"shape": (3, 4), "axis": -1}],
    "batch_norm": [{}, {"shape": (2, 3, 4, 5), "axis": 3}],
    "pad": [{}],
    "flatten": [{}],
    "reshape": [{}],
    "transpose": [{}],
    "concatenate": [{}, {"shapes": ((1, 2, 3), (2, 2, 3)), "axis": 0}],
    "strided_slice": [{}, {"shape": (2, 6, 5), "begin": (-4,), "end": (6,), "strides": (2,),
                           "axes": (1,)}],
    "squeeze": [{}],
    "expand_dims": [{}],
    "chain": [{}],
    "sum": [{}, {"axis": None}, {"axis": (0, 2), "keepdims": True}],
    "max": [{}, {"axis": 2}],
    "min": [{"axis": 0}],
    "mean": [{}, {"axis": (1, 2)}],
    "softmax": [{}, {"shape": (2, 5, 3), "axis": 1}],
    "attention": [{}, {"heads": 2, "kv_heads": 2, "q_len": 3, "kv_len": 3, "causal": False}],
    "max_pool2d": [{}, {"n": 2, "c": 3, "h": 6, "w": 5, "k": 2, "stride": 2, "pad": 0},
                   {"layout": "NHWC"}, {"ceil_mode": True, "h": 6, "w": 6, "pad": 0}],
    "avg_pool2d": [{}, {"n": 2, "count_include_pad": True}, {"layout": "NHWC", "k": 2,
                                                             "stride": 1, "pad": 0}],
    "global_pool2d": [{}, {"pool_type": "max", "n": 2}, {"layout": "NHWC"}],
    "conv2d_nchw": [
        {},
        {"n": 2, "ci": 5, "h": 7, "w": 5, "co": 6, "stride": 2},
        {"ci": 4, "h": 5, "w": 5, "co": 3, "k": 1, "pad": 0},
        {"ci": 3, "h": 7, "w": 7, "co": 5, "dilation": 2, "pad": 2, "bias": True, "relu": True},
    ],
    "conv2d_nhwc": [{}, {"n": 2, "ci": 5, "h": 5, "w": 6, "co": 7, "stride": 2, "bias": True,
                         "relu": True}],
    "depthwise_conv2d_nchw": [{}, {"n": 2, "c": 3, "m": 2, "h": 7, "w": 5, "stride": 2}],
    "depthwise_conv2d_nhwc": [{}, {"n": 2, "c": 3, "m": 2, "h": 5, "w": 6}],
    "dense": [{}, {"batch": 1, "in_dim": 17, "out_dim": 13, "bias": True},
              {"batch": 5, "in_dim": 9, "out_dim": 11, "bias": True, "relu": True}],
    "matmul": [{}, {"transpose_a": True}, {"transpose_a": True, "transpose_b": True, "m": 3,
                                           "n": 7}, {"transpose_b": True, "k": 11}],
    "batch_matmul": [{}, {"batch": 3, "batch_b": 1, "transpose_b": False},
                     {"batch": 1, "batch_b": 2, "transpose_a": True, "m": 5, "n": 3}],
}
"""Small shapes per case: non-dividing extents, batch > 1, every layout and option."""


def _conv(h, ci, co, k, stride, pad):
    return {"n": 1, "ci": ci, "h": h, "w": h, "co": co, "k": k, "stride": stride, "pad": pad,
            "bias": True, "relu": True}


RESNET18: dict[str, tuple[str, dict]] = {
    "conv1_7x7_s2": ("conv2d_nchw", _conv(224, 3, 64, 7, 2, 3)),
    "layer1_3x3": ("conv2d_nchw", _conv(56, 64, 64, 3, 1, 1)),
    "layer2_3x3_s2": ("conv2d_nchw", _conv(56, 64, 128, 3, 2, 1)),
    "layer2_1x1_s2": ("conv2d_nchw", {**_conv(56, 64, 128, 1, 2, 0), "relu": False}),
    "layer2_3x3": ("conv2d_nchw", _conv(28, 128, 128, 3, 1, 1)),
    "layer3_3x3_s2": ("conv2d_nchw", _conv(28, 128, 256, 3, 2, 1)),
    "layer3_1x1_s2": ("conv2d_nchw", {**_conv(28, 128, 256, 1, 2, 0), "relu": False}),
    "layer3_3x3": ("conv2d_nchw", _conv(14, 256, 256, 3, 1, 1)),
    "layer4_3x3_s2": ("conv2d_nchw", _conv(14, 256, 512, 3, 2, 1)),
    "layer4_1x1_s2": ("conv2d_nchw", {**_conv(14, 256, 512, 1, 2, 0), "relu": False}),
    "layer4_3x3 (seed)": ("conv2d_nchw", _conv(7, 512, 512, 3, 1, 1)),
    "maxpool": ("max_pool2d", {"n": 1, "c": 64, "h": 112, "w": 112, "k": 3, "stride": 2,
                               "pad": 1}),
    "global_avg_pool": ("global_pool2d", {"n": 1, "c": 512, "h": 7, "w": 7}),
    "fc": ("dense", {"batch": 1, "in_dim": 512, "out_dim": 1000, "bias": True}),
    "softmax": ("softmax", {"shape": (1, 1000)}),
    "layer1_3x3_nhwc": ("conv2d_nhwc", {**_conv(56, 64, 64, 3, 1, 1)}),
}
"""ResNet-18's distinct layers at batch 1 (224x224, float32): name -> (case, shape)."""


def workload(case: str, **shape) -> Workload:
    """The workload of ``case`` at ``shape`` (see :data:`CASES`)."""
    if case not in CASES:
        raise KeyError(f"no case {case!r}; cases: {', '.join(sorted(CASES))}")
    return CASES[case](**shape)
