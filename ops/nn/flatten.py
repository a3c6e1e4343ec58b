"""``flatten`` (``batch_flatten``): collapse all dimensions but the first."""

from __future__ import annotations

from ...ir import te
from ...ir.te import Tensor
from .. import tag
from ..transform import unravel_index
from ..utils import expect_tensor, fail


def flatten(data: Tensor) -> Tensor:
    """``data`` [N, d1, d2, ...] as [N, d1*d2*...] in row-major order.

    Stage ``compute`` over ``(i, j)`` tagged ``injective``, as TOPI's ``nn.flatten``.
    """
    expect_tensor("flatten", "data", data)
    if data.ndim < 1:
        fail("flatten", "data must have at least one dimension (the batch)")
    inner = tuple(data.shape[1:])
    dim = 1
    for s in inner:
        dim *= s
    if not inner:
        return te.compute((data.shape[0], 1), lambda i, j: data[i], tag=tag.INJECTIVE)
    return te.compute(
        (data.shape[0], dim),
        lambda i, j: data(i, *unravel_index(j, inner)),
        tag=tag.INJECTIVE,
    )


batch_flatten = flatten
