"""Matrix products: ``nn.dense``, ``nn.matmul``, ``nn.batch_matmul``, and ``nn.bias_add``."""

from __future__ import annotations

from ... import ops
from ...ops import testing
from ..ir import Call, Node, TensorType
from ..op import OpDef, OpPattern, register_op
from .common import (
    axis_index,
    check_matrix_precision,
    expect_rank,
    fail,
    precision_arg,
    same_dtype,
    with_precision,
)


def _dense_infer(types, attrs):
    op = "nn.dense"
    data, weight = types
    expect_rank(op, "data", data, 2, "[batch, in_dim]")
    expect_rank(op, "weight", weight, 2, "[units, in_dim]")
    dtype = same_dtype(op, types)
    if data.shape[1] != weight.shape[1]:
        fail(op, f"data has {data.shape[1]} features but weight {list(weight.shape)} expects "
                 f"{weight.shape[1]}")
    if attrs["units"] is not None and attrs["units"] != weight.shape[0]:
        fail(op, f"units={attrs['units']} but the weight has {weight.shape[0]} rows")
    check_matrix_precision(op, attrs, dtype)
    return TensorType((data.shape[0], weight.shape[0]), attrs["out_dtype"] or dtype)


register_op(OpDef(
    name="nn.dense", num_inputs=2, infer=_dense_infer,
    lower=lambda a, attrs: ops.nn.dense(a[0], a[1], out_dtype=attrs["out_dtype"] or None,
                                        precision=precision_arg(attrs)),
    ref=with_precision(lambda a, attrs: testing.dense_python(a[0], a[1]).astype(
        attrs["out_dtype"] or a[0].dtype)),
    pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    defaults={"units": None, "out_dtype": "", "precision": ""},
))


def dense(data: Node, weight: Node, units: int | None = None, out_dtype: str = "",
          precision: str = "") -> Call:
    """``data [B, K] @ weight [N, K]^T``: [B, N]."""
    return Call("nn.dense", [data, weight], {"units": units, "out_dtype": out_dtype,
                                        "precision": precision})


def _matmul_infer(types, attrs):
    op = "nn.matmul"
    a, b = types
    expect_rank(op, "tensor_a", a, 2)
    expect_rank(op, "tensor_b", b, 2)
    dtype = same_dtype(op, types)
    m, k1 = (a.shape[1], a.shape[0]) if attrs["transpose_a"] else a.shape
    k2, n = (b.shape[1], b.shape[0]) if attrs["transpose_b"] else b.shape
    if k1 != k2:
        fail(op, f"inner dimensions differ: tensor_a {list(a.shape)} gives {k1}, tensor_b "
                 f"{list(b.shape)} gives {k2} (transpose_a={attrs['transpose_a']}, "
                 f"transpose_b={attrs['transpose_b']})")
    check_matrix_precision(op, attrs, dtype)
    return TensorType((m, n), attrs["out_dtype"] or dtype)


register_op(OpDef(
    name="nn.matmul", num_inputs=2, infer=_matmul_infer,
    lower=lambda a, attrs: ops.nn.matmul(a[0], a[1], out_dtype=attrs["out_dtype"] or None,
                                         transpose_a=attrs["transpose_a"],
                                         transpose_b=attrs["transpose_b"],
                                         precision=precision_arg(attrs)),
    ref=with_precision(lambda a, attrs: testing.matmul_python(
        a[0], a[1], transpose_a=attrs["transpose_a"], transpose_b=attrs["transpose_b"]).astype(
            attrs["out_dtype"] or a[0].dtype)),
    pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    defaults={"transpose_a": False, "transpose_b": False, "out_dtype": "", "precision": ""},
))


def matmul(tensor_a: Node, tensor_b: Node, transpose_a: bool = False,
           transpose_b: bool = False, out_dtype: str = "", precision: str = "") -> Call:
    """``op(a) @ op(b)`` for 2-D tensors, ``op`` transposing where asked."""
    return Call("nn.matmul", [tensor_a, tensor_b], {
        "transpose_a": transpose_a, "transpose_b": transpose_b, "out_dtype": out_dtype,
        "precision": precision})


def _bmm_dims(types, attrs):
    x, y = types
    b1, m, k1 = (x.shape[0], x.shape[2], x.shape[1]) if attrs["transpose_a"] else x.shape
    if attrs["transpose_b"]:
        b2, n, k2 = y.shape
    else:
        b2, k2, n = y.shape
    return b1, m, k1, b2, n, k2


def _bmm_infer(types, attrs):
    op = "nn.batch_matmul"
    x, y = types
    expect_rank(op, "x", x, 3)
    expect_rank(op, "y", y, 3)
    dtype = same_dtype(op, types)
    b1, m, k1, b2, n, k2 = _bmm_dims(types, attrs)
    if k1 != k2:
        fail(op, f"inner dimensions differ: x {list(x.shape)} gives {k1}, y {list(y.shape)} "
                 f"gives {k2} (transpose_a={attrs['transpose_a']}, "
                 f"transpose_b={attrs['transpose_b']})")
    if b1 != b2 and 1 not in (b1, b2):
        fail(op, f"batch sizes {b1} and {b2} differ and neither is 1")
    check_matrix_precision(op, attrs, dtype)
    return TensorType((max(b1, b2), m, n), attrs["out_dtype"] or dtype)


register_op(OpDef(
    name="nn.batch_matmul", num_inputs=2, infer=_bmm_infer,
    lower=lambda a, attrs: ops.nn.batch_matmul(
        a[0], a[1], out_dtype=attrs["out_dtype"] or None, transpose_a=attrs["transpose_a"],
        transpose_b=attrs["transpose_b"], precision=precision_arg(attrs)),
    ref=with_precision(lambda a, attrs: testing.batch_matmul_python(
        a[0], a[1], attrs["transpose_a"], attrs["transpose_b"]).astype(
            attrs["out_dtype"] or a[0].dtype)),
    pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    defaults={"transpose_a": False, "transpose_b": True, "out_dtype": "", "precision": ""},
))


def batch_matmul(x: Node, y: Node, transpose_a: bool = False, transpose_b: bool = True,
                 out_dtype: str = "", precision: str = "") -> Call:
    """``x[b] @ y[b]`` per batch; ``y`` is [B, N, K] by default (``transpose_b=True``)."""
    return Call("nn.batch_matmul", [x, y], {"transpose_a": transpose_a,
                                            "transpose_b": transpose_b, "out_dtype": out_dtype,
                                            "precision": precision})


def _bias_infer(types, attrs):
    op = "nn.bias_add"
    data, bias = types
    expect_rank(op, "bias", bias, 1, "[C]")
    same_dtype(op, types)
    if data.ndim == 0:
        fail(op, "data must have at least one dimension")
    axis = axis_index(op, attrs["axis"], data.ndim)
    if bias.shape[0] != data.shape[axis]:
        fail(op, f"bias has {bias.shape[0]} elements but data {list(data.shape)} has "
                 f"{data.shape[axis]} along axis {attrs['axis']}")
    return data


def _bias_ref(a, attrs):
    axis = attrs["axis"] % a[0].ndim
    return testing.bias_add_python(a[0], a[1], axis)


register_op(OpDef(
    name="nn.bias_add", num_inputs=2, infer=_bias_infer,
    lower=lambda a, attrs: ops.nn.bias_add(a[0], a[1], attrs["axis"]),
    ref=_bias_ref, pattern=OpPattern.BROADCAST, defaults={"axis": 1},
))


def bias_add(data: Node, bias: Node, axis: int = 1) -> Call:
    """``data + bias`` with the 1-D ``bias`` along ``axis``."""
    return Call("nn.bias_add", [data, bias], {"axis": axis})

