"""``bias_add``: add a 1-D bias along one axis of a tensor."""

from __future__ import annotations

from ...ir.te import Tensor
from .. import tag
from ..utils import (
    ax_names,
    compute_named,
    expect_ndim,
    expect_tensor,
    fail,
    normalize_axis,
)


def bias_add(data: Tensor, bias: Tensor, axis: int = 1) -> Tensor:
    """``data + bias`` where ``bias`` [C] runs along ``data``'s dimension ``axis``.

    One stage ``T_add`` tagged ``broadcast`` that reads ``bias[ax<axis>]`` (TOPI reaches
    the same stage through ``expand_dims`` and a broadcast add).
    """
    op = "bias_add"
    expect_tensor(op, "data", data)
    expect_ndim(op, "bias", bias, 1, "C")
    if data.ndim == 0:
        fail(op, "data must have at least one dimension")
    axis = normalize_axis(op, axis, data.ndim)
    if bias.shape[0] != data.shape[axis]:
        fail(
            op,
            f"bias has {bias.shape[0]} elements but data {list(data.shape)} has "
            f"{data.shape[axis]} along axis {axis}",
        )
    if bias.dtype != data.dtype:
        fail(op, f"bias has dtype {bias.dtype} but data has dtype {data.dtype}")
    return compute_named(
        data.shape,
        ax_names(data.ndim),
        lambda *i: data(*i) + bias[i[axis]],
        "T_add",
        tag.BROADCAST,
    )
