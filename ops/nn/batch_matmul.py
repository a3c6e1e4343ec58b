"""Batched matrix product, with a batch of 1 broadcast against any batch."""

from __future__ import annotations

from ...ir import te
from ...ir.expr import as_expr
from ...ir.te import Tensor
from .. import tag
from ..precision import check_precision, operand
from ..utils import (
    accumulate_dtype,
    cast_output,
    check_dtype,
    expect_ndim,
    expect_same_dtype,
    fail,
)


def batch_matmul(
    x: Tensor,
    y: Tensor,
    *,
    out_dtype: str | None = None,
    transpose_a: bool = False,
    transpose_b: bool = True,
    precision: str | None = None,
) -> Tensor:
    """``x[b] @ y[b]`` for every batch ``b``, transposing where asked.

    ``x`` is [B, M, K] ([B, K, M] if ``transpose_a``); ``y`` is [B, N, K] by default
    (``transpose_b=True``, as in TOPI) or [B, K, N]. A batch of 1 on either side is
    broadcast. Stage ``T_batch_matmul_<NN|NT|TN|TT>`` tagged ``batch_matmul``;
    ``out_dtype`` (16-bit inputs accumulate in float32) and ``precision`` as
    :func:`ptxforge.ops.nn.matmul`.
    """
    op = "batch_matmul"
    expect_ndim(op, "x", x, 3)
    expect_ndim(op, "y", y, 3)
    expect_same_dtype(op, "x", x, "y", y)
    if not isinstance(transpose_a, bool) or not isinstance(transpose_b, bool):
        fail(op, f"transpose_a and transpose_b must be bools, got {transpose_a!r}, "
                 f"{transpose_b!r}")
    out_dtype = check_dtype(op, out_dtype, x.dtype)
    if transpose_a:
        xb, xk, xi = x.shape
    else:
        xb, xi, xk = x.shape
    if transpose_b:
        yb, yj, yk = y.shape
    else:
        yb, yk, yj = y.shape
    if xk != yk:
        fail(
            op,
            f"inner dimensions differ: x {list(x.shape)} gives {xk} (transpose_a="
            f"{transpose_a}) but y {list(y.shape)} gives {yk} (transpose_b={transpose_b})",
        )
    if xb != yb and xb != 1 and yb != 1:
        fail(op, f"batch sizes {xb} and {yb} differ and neither is 1")
    k = te.reduce_axis((0, xk), name="k")
    zero = as_expr(0)
    acc = accumulate_dtype(out_dtype)
    precision = check_precision(op, precision, x.dtype)

    def fcompute(b, i, j):
        bx = b if xb != 1 else zero
        by = b if yb != 1 else zero
        a_val = x[bx, k, i] if transpose_a else x[bx, i, k]
        b_val = y[by, j, k] if transpose_b else y[by, k, j]
        return te.sum(operand(a_val, acc, precision) * operand(b_val, acc, precision), axis=k)

    form = ("T" if transpose_a else "N") + ("T" if transpose_b else "N")
    return cast_output(te.compute(
        (max(xb, yb), xi, yj), fcompute, name=f"T_batch_matmul_{form}", tag=tag.BATCH_MATMUL,
        attrs={"layout_free_placeholders": [y], "precision": precision},
    ), out_dtype)
