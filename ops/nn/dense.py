"""Matrix products: ``matmul`` (any transposition) and ``dense`` (``data @ weight.T``)."""

from __future__ import annotations

from ...ir import te
from ...ir.te import Tensor
from .. import tag
from ..precision import check_precision, operand
from ..utils import (
    accumulate_dtype,
    cast_output,
    cast_to,
    check_dtype,
    expect_ndim,
    expect_same_dtype,
    fail,
)

# (transpose_a, transpose_b) -> (stage name, tag); TOPI still tags the NT form "dense"
_FORMS = {
    (False, False): ("T_matmul_NN", tag.MATMUL),
    (False, True): ("T_matmul_NT", tag.DENSE),
    (True, False): ("T_matmul_TN", tag.MATMUL),
    (True, True): ("T_matmul_TT", tag.MATMUL),
}


def matmul(
    tensor_a: Tensor,
    tensor_b: Tensor,
    bias: Tensor | None = None,
    out_dtype: str | None = None,
    transpose_a: bool = False,
    transpose_b: bool = False,
    precision: str | None = None,
) -> Tensor:
    """``op(a) @ op(b) (+ bias)`` where ``op`` transposes when asked.

    ``a`` is [M, K] ([K, M] if ``transpose_a``), ``b`` is [K, N] ([N, K] if
    ``transpose_b``), ``bias`` is [N]. Stage ``T_matmul_<NN|NT|TN|TT>`` with reduce axis
    ``k``; a bias adds a stage ``compute`` tagged ``broadcast``. Arguments in TOPI's order.

    ``out_dtype`` defaults to the inputs' dtype; float16 and bfloat16 products accumulate
    in float32 and round once to a 16-bit output (stage ``T_cast``, or the bias stage).
    ``precision`` (float32 inputs only) is ``"float32"`` or ``"tf32"`` (inputs rounded to
    TF32 before the multiply); None takes the process default (:func:`ptxforge.ops.tf32`).
    The product stage carries it as ``attrs["precision"]``.
    """
    op = "matmul"
    _check_bias(op, bias)
    expect_ndim(op, "tensor_a", tensor_a, 2)
    expect_ndim(op, "tensor_b", tensor_b, 2)
    expect_same_dtype(op, "tensor_a", tensor_a, "tensor_b", tensor_b)
    if not isinstance(transpose_a, bool) or not isinstance(transpose_b, bool):
        fail(op, f"transpose_a and transpose_b must be bools, got {transpose_a!r}, "
                 f"{transpose_b!r}")
    out_dtype = check_dtype(op, out_dtype, tensor_a.dtype)
    if transpose_a:
        in_dim, batch = tensor_a.shape
    else:
        batch, in_dim = tensor_a.shape
    if transpose_b:
        out_dim, red_dim = tensor_b.shape
    else:
        red_dim, out_dim = tensor_b.shape
    if in_dim != red_dim:
        fail(
            op,
            f"inner dimensions differ: tensor_a {list(tensor_a.shape)} gives {in_dim} "
            f"(transpose_a={transpose_a}) but tensor_b {list(tensor_b.shape)} gives "
            f"{red_dim} (transpose_b={transpose_b})",
        )
    return _product(op, tensor_a, tensor_b, bias, out_dtype, transpose_a, transpose_b,
                    batch, in_dim, out_dim, precision)


def dense(
    data: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    out_dtype: str | None = None,
    precision: str | None = None,
) -> Tensor:
    """Fully connected layer: ``data`` [B, K] times ``weight`` [N, K] transposed, plus
    ``bias`` [N]: [B, N]. Stage ``T_matmul_NT`` tagged ``dense``; ``out_dtype`` and
    ``precision`` as :func:`matmul`."""
    op = "dense"
    _check_bias(op, bias)
    expect_ndim(op, "data", data, 2, ("batch", "in_dim"))
    expect_ndim(op, "weight", weight, 2, ("out_dim", "in_dim"))
    expect_same_dtype(op, "data", data, "weight", weight)
    out_dtype = check_dtype(op, out_dtype, data.dtype)
    batch, in_dim = data.shape
    out_dim, red_dim = weight.shape
    if in_dim != red_dim:
        fail(op, f"data has {in_dim} input features but weight expects {red_dim}")
    return _product(op, data, weight, bias, out_dtype, False, True, batch, in_dim, out_dim,
                    precision)


def _check_bias(op: str, bias) -> None:
    # checked first: a positional transpose flag passed where TOPI's order puts the bias
    # should be reported as such, not as a bad dtype
    if bias is not None:
        expect_ndim(op, "bias", bias, 1, "N")


def _product(op, a, b, bias, out_dtype, ta, tb, batch, in_dim, out_dim,
             precision) -> Tensor:
    if bias is not None:
        if bias.shape[0] != out_dim:
            fail(op, f"bias has {bias.shape[0]} elements but the output has {out_dim} columns")
    k = te.reduce_axis((0, in_dim), name="k")
    acc = accumulate_dtype(out_dtype)
    precision = check_precision(op, precision, a.dtype)

    def fcompute(i, j):
        x = a[k, i] if ta else a[i, k]
        y = b[j, k] if tb else b[k, j]
        return te.sum(operand(x, acc, precision) * operand(y, acc, precision), axis=k)

    name, form_tag = _FORMS[(ta, tb)]
    mat = te.compute(
        (batch, out_dim), fcompute, name=name, tag=form_tag,
        attrs={"layout_free_placeholders": [b], "precision": precision},
    )
    if bias is None:
        return cast_output(mat, out_dtype)
    # the bias is added before the one rounding to a 16-bit output
    return te.compute(
        (batch, out_dim), lambda i, j: cast_to(mat[i, j] + cast_to(bias[j], acc), out_dtype),
        tag=tag.BROADCAST,
    )
