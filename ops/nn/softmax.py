"""Softmax along one axis, in TOPI's four stages (max, exp, sum, normalize).

::

    T_softmax_maxelem(i0) max= x[i0, k]
    T_softmax_exp(i0, i1) = tir.exp((x[i0, i1] - T_softmax_maxelem[i0]))
    T_softmax_expsum(i0) += T_softmax_exp[i0, k]
    T_softmax_norm(i0, i1) = (T_softmax_exp[i0, i1]/T_softmax_expsum[i0])
"""

from __future__ import annotations

from ...ir import te
from ...ir.te import Tensor
from .. import tag
from ..utils import (
    accumulate_dtype,
    cast_to,
    compute_named,
    expect_float,
    expect_tensor,
    fail,
    i_names,
    normalize_axis,
    rounded_output_dtype,
)


def softmax(x: Tensor, axis: int = -1, out_dtype: str | None = None,
            nan_to_zero: bool = False, sum_dtype: str | None = None) -> Tensor:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``; every stage is tagged
    ``softmax_output`` and the last carries ``attrs["axis"]``.

    ``out_dtype`` (default: ``x``'s dtype) is the output's dtype, a float dtype no wider
    than ``x``'s: the stages compute exactly as for ``x``'s dtype and the last one rounds
    its quotient once to ``out_dtype`` (float32 data, float16 output: the same bits as a
    float32 softmax followed by a cast, in one stage).

    ``nan_to_zero``: the last stage writes 0 where the quotient is NaN (a row of only minus
    infinities), as a masked attention's softmax must.

    ``sum_dtype`` (default None: float32 for 16-bit ``x``, else ``x``'s dtype) is the dtype
    of the row sum's running total. ``x``'s own 16-bit dtype asks for what numpy computes
    on such arrays and what ONNX defines for a bfloat16 ``Softmax`` and for an
    ``Attention`` whose ``softmax_precision`` is left at its default: the shifted input
    and each exponential rounded to ``x``'s dtype, and the sum rounded to it after every
    term, in order along the axis. The sum stage is then order-sensitive: the default
    schedule reduces each row in one thread, serially, which keeps that order."""
    op = "softmax"
    expect_tensor(op, "x", x)
    if x.ndim == 0:
        fail(op, "x must have at least one dimension")
    expect_float(op, "x", x)
    axis = normalize_axis(op, axis, x.ndim)
    out_dtype = rounded_output_dtype(op, x.dtype, out_dtype)
    shape = tuple(x.shape)
    reduced = tuple(s for d, s in enumerate(shape) if d != axis)
    k1 = te.reduce_axis((0, shape[axis]), name="k")
    k2 = te.reduce_axis((0, shape[axis]), name="k")

    def with_reduce(indices, r):
        return tuple(indices[:axis]) + (r,) + tuple(indices[axis:])

    def without_axis(indices):
        return tuple(v for d, v in enumerate(indices) if d != axis)

    # the maximum is exact in any dtype; exp and the sum run in float32 for 16-bit inputs
    acc = accumulate_dtype(x.dtype)
    serial = _serial_sum(op, x.dtype, sum_dtype)

    def in_input_precision(v):
        # a float16 softmax computes in float16, as the reference executor (numpy) and ONNX
        # (softmax_precision defaults to the input's) define it: the shifted input, each
        # exponential and the row sum are rounded to float16, the sum accumulating in
        # float32 as numpy's float16 sum does. Skipping those roundings moves results by a
        # unit in the last place, which a product with V afterwards makes two. bfloat16 is
        # left unrounded: numpy (ml_dtypes) rounds its sum after every term, in order, which
        # no parallel reduction reproduces.
        rounds = x.dtype == "float16" or serial
        return cast_to(cast_to(v, x.dtype), acc) if rounds else v

    max_elem = compute_named(
        reduced, i_names(len(reduced)),
        lambda *i: te.max(x[with_reduce(i, k1)], axis=k1),
        "T_softmax_maxelem", tag.SOFTMAX,
    )
    exp = compute_named(
        shape, i_names(len(shape)),
        lambda *i: in_input_precision(te.exp(in_input_precision(
            cast_to(x[i], acc) - cast_to(max_elem[without_axis(i)], acc)))),
        "T_softmax_exp", tag.SOFTMAX,
    )
    expsum = compute_named(
        reduced, i_names(len(reduced)),
        # a running total in x's 16-bit dtype rounds after every term (exact: the terms
        # are already x's values)
        lambda *i: te.sum(cast_to(exp[with_reduce(i, k2)], x.dtype) if serial
                          else exp[with_reduce(i, k2)], axis=k2),
        "T_softmax_expsum", tag.SOFTMAX,
    )
    def norm(*i):
        q = exp[i] / cast_to(in_input_precision(expsum[without_axis(i)]), acc)
        if nan_to_zero:
            q = te.if_then_else(q != q, te.const(0.0, acc), q)
        return cast_to(q, out_dtype)

    return compute_named(shape, i_names(len(shape)), norm, "T_softmax_norm", tag.SOFTMAX,
                         attrs={"axis": axis})


def _serial_sum(op: str, dtype: str, sum_dtype: str | None) -> bool:
    """Whether the row sum runs in ``dtype`` itself, a 16-bit float (``sum_dtype`` is that
    dtype); a TEError for any other ``sum_dtype`` than None, the accumulation dtype or
    ``dtype``."""
    if not sum_dtype or sum_dtype == accumulate_dtype(dtype):
        return False
    if sum_dtype == dtype:
        return True
    fail(op, f"sum_dtype {sum_dtype!r} is not supported for {dtype} data: the row sum runs "
             f"in {accumulate_dtype(dtype)} (leave sum_dtype out) or in {dtype} itself")
