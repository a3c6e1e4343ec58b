"""``nn.rms_norm``: root-mean-square normalization over the last axis (Llama, T5).

``y = x / sqrt(mean(x ** 2, -1) + eps) * weight``, with float32 statistics whatever the
data's dtype and one rounding at the end; ``out_dtype`` as for ``nn.layer_norm`` (see
:mod:`ptxforge.graph.opdefs.norm`). ``canonicalize_norms`` builds it from the decomposed
form exporters write.
"""

from __future__ import annotations

import numpy as np

from ... import ops
from ...ir import te
from ...ops.utils import accumulate_dtype, cast_to
from ..ir import Call, Node, TensorType
from ..op import OpDef, OpPattern, register_op
from .common import axis_index, empty_out_dtype, expect_float, fail, rounded_output
from .norm import _round_output


def _infer(types, attrs):
    op = "nn.rms_norm"
    data, weight = types
    expect_float(op, "data", data)
    axis = axis_index(op, attrs["axis"], data.ndim)
    if axis != data.ndim - 1:
        fail(op, f"only the last axis is normalized (axis=-1), got axis={attrs['axis']} for "
                 f"a {data.ndim}-D tensor; transpose the axis last first")
    if weight.shape != (data.shape[-1],):
        fail(op, f"weight must have shape [{data.shape[-1]}], got {list(weight.shape)}")
    return TensorType(data.shape, rounded_output(op, data, attrs))


def _lower(a, attrs):
    x, weight = a
    last = x.ndim - 1
    acc = accumulate_dtype(x.dtype)
    xa = x if acc == x.dtype else ops.cast(x, acc)
    ms = ops.mean(ops.multiply(xa, xa), last, keepdims=True)
    eps = te.const(float(attrs["epsilon"]), acc)
    return te.compute(
        x.shape,
        lambda *i: cast_to(xa(*i) * te.rsqrt(ms(*i[:-1], 0) + eps)
                           * cast_to(weight[i[-1]], acc), attrs.get("out_dtype") or x.dtype),
        name="T_rms_norm", tag="injective")


def _ref(a, attrs):
    x, weight = a
    ms = (x * x).mean(axis=-1, keepdims=True)
    out = x / np.sqrt(ms + np.asarray(attrs["epsilon"], x.dtype)) * weight
    return _round_output(out, x, attrs)


register_op(OpDef(
    name="nn.rms_norm", num_inputs=2, infer=_infer, lower=_lower, ref=_ref,
    pattern=OpPattern.OPAQUE, defaults={"axis": -1, "epsilon": 1e-6, "out_dtype": ""},
    normalize=empty_out_dtype,
))


def rms_norm(data: Node, weight: Node, axis: int = -1, epsilon: float = 1e-6,
             out_dtype: str = "") -> Call:
    """RMS normalization over the last axis, then ``* weight``; the result in ``out_dtype``
    (default: the data's dtype)."""
    return Call("nn.rms_norm", [data, weight],
                {"axis": axis, "epsilon": float(epsilon), "out_dtype": out_dtype})
