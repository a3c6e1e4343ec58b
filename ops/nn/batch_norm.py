"""Batch normalization for inference, as one broadcast stage."""

from __future__ import annotations

from ...ir import te
from ...ir.expr import const
from ...ir.te import Tensor
from .. import tag
from ..utils import (
    accumulate_dtype,
    ax_names,
    cast_to,
    compute_named,
    expect_float,
    expect_ndim,
    expect_tensor,
    fail,
    normalize_axis,
)


def batch_norm(
    data: Tensor,
    gamma: Tensor,
    beta: Tensor,
    moving_mean: Tensor,
    moving_var: Tensor,
    axis: int = 1,
    epsilon: float = 1e-5,
    center: bool = True,
    scale: bool = True,
) -> Tensor:
    """``(data - mean) / sqrt(var + epsilon) * gamma + beta`` with the 1-D statistics and
    parameters running along ``axis`` (the channel axis).

    ``scale=False`` leaves out ``gamma``, ``center=False`` leaves out ``beta``. One stage
    ``T_batch_norm`` tagged ``broadcast``; TOPI spreads the same arithmetic over a chain of
    broadcast stages that fusion would inline into one.
    """
    op = "batch_norm"
    expect_tensor(op, "data", data)
    if data.ndim == 0:
        fail(op, "data must have at least one dimension")
    expect_float(op, "data", data)
    axis = normalize_axis(op, axis, data.ndim)
    channels = data.shape[axis]
    params = {"gamma": gamma, "beta": beta, "moving_mean": moving_mean, "moving_var": moving_var}
    for what, t in params.items():
        expect_ndim(op, what, t, 1)
        if t.shape[0] != channels:
            fail(
                op,
                f"{what} has {t.shape[0]} elements but data {list(data.shape)} has "
                f"{channels} channels along axis {axis}",
            )
        if t.dtype != data.dtype:
            fail(op, f"{what} has dtype {t.dtype} but data has dtype {data.dtype}")
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or epsilon < 0:
        fail(op, f"epsilon must be a non-negative number, got {epsilon!r}")
    acc = accumulate_dtype(data.dtype)  # 16-bit data: computed in float32, rounded once
    eps = const(float(epsilon), acc)

    def fcompute(*i):
        c = i[axis]

        def f(x):
            return cast_to(x, acc)

        out = (f(data(*i)) - f(moving_mean[c])) / te.sqrt(f(moving_var[c]) + eps)
        if scale:
            out = out * f(gamma[c])
        if center:
            out = out + f(beta[c])
        return cast_to(out, data.dtype)

    return compute_named(data.shape, ax_names(data.ndim), fcompute, "T_batch_norm", tag.BROADCAST)
