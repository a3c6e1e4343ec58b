"""Normalizations: ``nn.batch_norm`` (inference), ``nn.layer_norm`` and ``nn.softmax``.

Layer norm and softmax take ``out_dtype`` (default ``""``: the data's dtype): a float dtype
no wider than the data's, to which the operator rounds its result once at the end while
computing exactly as without it. ``fold_output_cast`` sets it where a cast down is the
only reader of their float32 result in a mixed-precision network."""

from __future__ import annotations

import numpy as np

from ... import ops
from ...ir import te
from ...ops import testing
from ...ops.utils import accumulate_dtype, cast_to
from ..ir import Call, Node, TensorType
from ..op import OpDef, OpPattern, register_op
from .common import axis_index, empty_out_dtype, expect_float, expect_rank, fail, rounded_output
from .elemwise import cast_array


def _round_output(value: np.ndarray, data: np.ndarray, attrs: dict) -> np.ndarray:
    """A reference result rounded to the data's dtype (the operator's arithmetic), then,
    with an ``out_dtype``, once more to it: a rounding of the data-dtype result, exactly
    what a kernel that computes in the data's dtype and converts at its store gives."""
    value = value.astype(data.dtype)
    out = attrs.get("out_dtype")
    return cast_array(value, out) if out else value


def _bn_infer(types, attrs):
    op = "nn.batch_norm"
    data = types[0]
    expect_float(op, "data", data)
    axis = axis_index(op, attrs["axis"], data.ndim)
    for what, t in zip(("gamma", "beta", "moving_mean", "moving_var"), types[1:]):
        expect_rank(op, what, t, 1)
        if t.shape[0] != data.shape[axis]:
            fail(op, f"{what} has {t.shape[0]} elements but data {list(data.shape)} has "
                     f"{data.shape[axis]} channels along axis {attrs['axis']}")
        if t.dtype != data.dtype:
            fail(op, f"{what} has dtype {t.dtype} but data has {data.dtype}")
    return data


def _bn_ref(a, attrs):
    axis = attrs["axis"] % a[0].ndim
    return testing.batch_norm_python(a[0], a[1], a[2], a[3], a[4], axis, attrs["epsilon"],
                                     attrs["center"], attrs["scale"])


register_op(OpDef(
    name="nn.batch_norm", num_inputs=5, infer=_bn_infer,
    lower=lambda a, attrs: ops.nn.batch_norm(*a, axis=attrs["axis"], epsilon=attrs["epsilon"],
                                             center=attrs["center"], scale=attrs["scale"]),
    ref=_bn_ref, pattern=OpPattern.BROADCAST,
    defaults={"axis": 1, "epsilon": 1e-5, "center": True, "scale": True},
))


def batch_norm(data: Node, gamma: Node, beta: Node, moving_mean: Node, moving_var: Node,
               axis: int = 1, epsilon: float = 1e-5, center: bool = True,
               scale: bool = True) -> Call:
    """Inference batch normalization: ``(x - mean) / sqrt(var + eps) * gamma + beta`` with
    the statistics along ``axis``. ``simplify_inference`` turns it into a multiply and an
    add that fold into the convolution before it."""
    return Call("nn.batch_norm", [data, gamma, beta, moving_mean, moving_var],
                {"axis": axis, "epsilon": float(epsilon), "center": center, "scale": scale})


def _ln_infer(types, attrs):
    op = "nn.layer_norm"
    data, gamma, beta = types
    expect_float(op, "data", data)
    axis = axis_index(op, attrs["axis"], data.ndim)
    if axis != data.ndim - 1:
        fail(op, f"only the last axis is normalized here (axis=-1), got axis={attrs['axis']} "
                 f"for a {data.ndim}-D tensor; transpose the axis last first")
    for what, t in (("gamma", gamma), ("beta", beta)):
        if t.shape != (data.shape[-1],):
            fail(op, f"{what} must have shape [{data.shape[-1]}], got {list(t.shape)}")
    return TensorType(data.shape, rounded_output(op, data, attrs))


def _ln_lower(a, attrs):
    x, gamma, beta = a
    last = x.ndim - 1
    # 16-bit data: statistics and normalization in float32, one rounding at the end
    acc = accumulate_dtype(x.dtype)
    xa = x if acc == x.dtype else ops.cast(x, acc)
    mean = ops.mean(xa, last, keepdims=True)
    centered = ops.subtract(xa, mean)
    var = ops.mean(ops.multiply(centered, centered), last, keepdims=True)
    eps = te.const(float(attrs["epsilon"]), acc)
    norm = te.compute(
        x.shape,
        lambda *i: cast_to(centered(*i) * te.rsqrt(var(*i[:-1], 0) + eps)
                           * cast_to(gamma[i[-1]], acc) + cast_to(beta[i[-1]], acc),
                           attrs.get("out_dtype") or x.dtype),
        name="T_layer_norm", tag="injective")
    return norm


def _ln_ref(a, attrs):
    x, gamma, beta = a
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    out = (x - mean) / np.sqrt(var + np.asarray(attrs["epsilon"], x.dtype)) * gamma + beta
    return _round_output(out, x, attrs)


register_op(OpDef(
    name="nn.layer_norm", num_inputs=3, infer=_ln_infer, lower=_ln_lower, ref=_ln_ref,
    pattern=OpPattern.OPAQUE, defaults={"axis": -1, "epsilon": 1e-5, "out_dtype": ""},
    normalize=empty_out_dtype,
))


def layer_norm(data: Node, gamma: Node, beta: Node, axis: int = -1,
               epsilon: float = 1e-5, out_dtype: str = "") -> Call:
    """Layer normalization over the last axis, then ``* gamma + beta``; the result in
    ``out_dtype`` (default: the data's dtype; see the module's docstring)."""
    return Call("nn.layer_norm", [data, gamma, beta],
                {"axis": axis, "epsilon": float(epsilon), "out_dtype": out_dtype})


def _softmax_infer(types, attrs):
    (data,) = types
    expect_float("nn.softmax", "data", data)
    axis_index("nn.softmax", attrs["axis"], data.ndim)
    sum_dtype = attrs.get("sum_dtype", "")
    if sum_dtype and sum_dtype != data.dtype:
        fail("nn.softmax", f"sum_dtype {sum_dtype!r} is not supported for {data.dtype} "
                           f"data: leave it empty (float32 sums for 16-bit data) or give "
                           f"the data's own dtype {data.dtype!r}")
    return TensorType(data.shape, rounded_output("nn.softmax", data, attrs))


def _softmax_ref(a, attrs):
    x = a[0]
    if x.dtype.name == "bfloat16" and not attrs.get("sum_dtype"):
        # as the kernels compute it: float32 inside, one rounding (numpy on bfloat16
        # arrays would round the running sum after every term: sum_dtype="bfloat16")
        out = testing.softmax_python(x.astype(np.float32), attrs["axis"]).astype(x.dtype)
    else:
        out = testing.softmax_python(x, attrs["axis"])
    if attrs["nan_to_zero"]:
        out = np.where(np.isnan(out), np.zeros((), out.dtype), out)
    return _round_output(out, a[0], attrs)


register_op(OpDef(
    name="nn.softmax", num_inputs=1, infer=_softmax_infer,
    lower=lambda a, attrs: ops.nn.softmax(a[0], attrs["axis"],
                                            attrs.get("out_dtype") or None,
                                            nan_to_zero=attrs["nan_to_zero"],
                                            sum_dtype=attrs.get("sum_dtype") or None),
    ref=_softmax_ref,
    pattern=OpPattern.OPAQUE,
    defaults={"axis": -1, "out_dtype": "", "nan_to_zero": False, "sum_dtype": ""},
    normalize=lambda attrs: dict(empty_out_dtype(attrs),
                                 nan_to_zero=bool(attrs["nan_to_zero"])),
))


def softmax(data: Node, axis: int = -1, out_dtype: str = "", nan_to_zero: bool = False,
            sum_dtype: str = "") -> Call:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``; the result in ``out_dtype``
    (default: the data's dtype; see the module's docstring). ``nan_to_zero``: NaN results
    (a row of only minus infinities: an attention row whose keys are all masked) are 0, as
    ``where(isnan(p), 0, p)`` after the softmax gives. ``sum_dtype``: "" (float32 row sums
    for 16-bit data) or the data's own 16-bit dtype: the running sum rounded to it after
    every term, in order, as ONNX defines a bfloat16 softmax
    (:func:`ptxforge.ops.nn.softmax`)."""
    attrs = {"axis": axis, "out_dtype": out_dtype, "nan_to_zero": nan_to_zero}
    if sum_dtype:
        attrs["sum_dtype"] = sum_dtype
    return Call("nn.softmax", [data], attrs)



from . import norm_nd  # noqa: E402,F401  (registers nn.group_norm and nn.lrn)
