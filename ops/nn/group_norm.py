"""Group normalization (and instance normalization, its case of one channel per group) and
local response normalization over the channels, channel-first data ``[N, C, ...]``.

``group_norm``: two reduction stages over the channels of a group and the spatial positions
(``gn_sum``, then the centered sum of squares ``gn_squares``; tag
``comm_reduce,group_norm_stats``, scheduled one block per (sample, group) by default) and
an element-wise stage ``T_group_norm``; 16-bit data keeps its statistics in float32 and
rounds once.
``lrn``: a reduction over the channel window (``lrn_sqsum``) and an element-wise stage.
"""

from __future__ import annotations

import math

import numpy as np

from ...ir import te
from ...ir.expr import emax, emin
from ...ir.te import Tensor
from .. import tag
from ..utils import accumulate_dtype, ax_names, cast_to, compute_named, fail

GROUP_NORM_STATS = tag.COMM_REDUCE + ",group_norm_stats"
"""The tag of the statistics stages: a comm_reduce with its own default schedule (one block
per (sample, group), :mod:`ptxforge.ops.schedules.block_reduce`)."""


def group_norm(data: Tensor, gamma: Tensor, beta: Tensor, num_groups: int,
               epsilon: float = 1e-5) -> Tensor:
    """``(x - mean) / sqrt(var + epsilon) * gamma + beta`` with the statistics of each
    sample's group of ``C / num_groups`` channels over all spatial positions; ``gamma`` and
    ``beta`` hold one value per channel ``[C]`` or one per group ``[num_groups]``."""
    op = "group_norm"
    if data.ndim < 2:
        fail(op, f"data must be [N, C, ...], got {list(data.shape)}")
    n, c = data.shape[:2]
    if num_groups < 1 or c % num_groups:
        fail(op, f"num_groups={num_groups} must divide the {c} channels")
    for what, t in (("gamma", gamma), ("beta", beta)):
        if tuple(t.shape) not in ((c,), (num_groups,)):
            fail(op, f"{what} must have shape [{c}] or [{num_groups}], got {list(t.shape)}")
    cg = c // num_groups
    spatial = list(data.shape[2:])
    count = cg * math.prod(spatial)
    acc = accumulate_dtype(data.dtype)
    k = len(spatial)

    def reduce_axes():
        return (te.reduce_axis((0, cg), name="rc"),
                [te.reduce_axis((0, s), name=f"rs{j}") for j, s in enumerate(spatial)])

    rc, rs = reduce_axes()
    inv = te.const(1.0 / count, acc)
    total = compute_named(
        (n, num_groups), ["n", "g"],
        lambda b, g: te.sum(cast_to(data(b, g * cg + rc, *rs), acc), axis=[rc, *rs]),
        "gn_sum", GROUP_NORM_STATS)
    rc2, rs2 = reduce_axes()

    def mean(b, g):
        return total(b, g) * inv

    def fsquares(b, g):
        d = cast_to(data(b, g * cg + rc2, *rs2), acc) - mean(b, g)
        return te.sum(d * d, axis=[rc2, *rs2])

    squares = compute_named((n, num_groups), ["n", "g"], fsquares, "gn_squares",
                            GROUP_NORM_STATS)
    eps = te.const(float(epsilon), acc)

    def var(b, g):
        return squares(b, g) * inv

    def fnorm(b, ch, *s):
        g = ch // cg if cg > 1 else ch
        scale = gamma(ch) if gamma.shape[0] == c else gamma(g)
        shift = beta(ch) if beta.shape[0] == c else beta(g)
        value = ((cast_to(data(b, ch, *s), acc) - mean(b, g)) * te.rsqrt(var(b, g) + eps)
                 * cast_to(scale, acc) + cast_to(shift, acc))
        return cast_to(value, data.dtype)

    return compute_named(data.shape, ax_names(2 + k), fnorm, "T_group_norm", tag.INJECTIVE)


def group_norm_reference(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, num_groups: int,
                         epsilon: float) -> np.ndarray:
    n, c = x.shape[:2]
    xg = x.astype(np.float64).reshape(n, num_groups, -1)
    mean = xg.mean(axis=-1, keepdims=True)
    var = ((xg - mean) ** 2).mean(axis=-1, keepdims=True)
    y = ((xg - mean) / np.sqrt(var + epsilon)).reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    g = gamma if gamma.shape[0] == c else np.repeat(gamma, c // num_groups)
    b = beta if beta.shape[0] == c else np.repeat(beta, c // num_groups)
    return (y * g.reshape(shape) + b.reshape(shape)).astype(x.dtype)


def lrn(data: Tensor, size: int, alpha: float, beta: float, bias: float) -> Tensor:
    """ONNX's ``LRN``: ``x / (bias + alpha / size * sum of x^2 over the channel window)^beta``,
    the window ``[c - floor((size - 1) / 2), c + ceil((size - 1) / 2)]`` cut at the edges."""
    op = "lrn"
    if data.ndim < 2:
        fail(op, f"data must be [N, C, ...], got {list(data.shape)}")
    if size < 1:
        fail(op, f"size must be a positive int, got {size}")
    c = data.shape[1]
    lo = (size - 1) // 2
    acc = accumulate_dtype(data.dtype)
    rk = te.reduce_axis((0, size), name="rk")

    def fsum(b, ch, *s):
        src = ch - lo + rk
        inside = te.all(src >= 0, src < c)
        value = cast_to(data(b, emin(emax(src, 0), c - 1), *s), acc)
        return te.sum(te.if_then_else(inside, value * value, te.const(0.0, acc)), axis=[rk])

    names = ax_names(data.ndim)
    sqsum = compute_named(data.shape, names, fsum, "lrn_sqsum", tag.COMM_REDUCE)
    coef = te.const(float(alpha) / size, acc)

    def fout(*i):
        base = te.const(float(bias), acc) + coef * sqsum(*i)
        return cast_to(cast_to(data(*i), acc) / te.power(base, te.const(float(beta), acc)),
                       data.dtype)

    return compute_named(data.shape, names, fout, "T_lrn", tag.ELEMWISE)


def lrn_reference(x: np.ndarray, size: int, alpha: float, beta: float, bias: float):
    c = x.shape[1]
    sq = x.astype(np.float64) ** 2
    total = np.zeros_like(sq)
    lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
    for ch in range(c):
        total[:, ch] = sq[:, max(0, ch - lo):min(c, ch + hi + 1)].sum(axis=1)
    return (x / (bias + alpha / size * total) ** beta).astype(x.dtype)


def _register_default_schedules() -> None:
    from ..schedules import register_schedule
    from ..schedules.block_reduce import schedule_block_reduce

    register_schedule(GROUP_NORM_STATS, schedule_block_reduce)


_register_default_schedules()
