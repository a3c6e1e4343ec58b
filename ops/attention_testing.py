"""numpy references of fused attention (as :mod:`ptxforge.ops.testing` for the other ops)."""

from __future__ import annotations

import math

import numpy as np

from .testing import widen


def attention_python(q, k, v, mask=None, scale: float | None = None,
                     causal: bool = False, dtype: str | None = None,
                     layout: str = "bhsd") -> np.ndarray:
    """``softmax(q k^T * scale (+ mask) (causal)) v`` per batch and query head in float64,
    as float32. ``q [B, Hq, L, E]``, ``k [B, Hkv, S, E]``, ``v [B, Hkv, S, Ev]`` with ``Hq``
    a multiple of ``Hkv`` (grouped-query: query head ``h`` reads key head ``h // (Hq /
    Hkv)``). A bool mask keeps the scores where True, any other mask is added; both
    broadcast to ``[B, Hq, L, S]``. ``causal`` drops key ``j > i`` (top-left aligned, as
    PyTorch). A row with every score dropped gives zeros. ``dtype`` names the inputs'
    dtype where bfloat16 arrays hold bit patterns (see :func:`~ptxforge.ops.testing.widen`).
    ``layout="bshd"``: q, k, v and the result are ``[B, L, H, E]``."""
    if layout == "bshd":
        q, k, v = (np.swapaxes(x, 1, 2) for x in (q, k, v))
        return np.ascontiguousarray(np.swapaxes(
            attention_python(q, k, v, mask, scale, causal, dtype), 1, 2))
    qd, kd, vd = (widen(x, dtype) for x in (q, k, v))
    group = qd.shape[1] // kd.shape[1]
    if group > 1:
        kd = np.repeat(kd, group, axis=1)
        vd = np.repeat(vd, group, axis=1)
    sc = scale if scale is not None else 1.0 / math.sqrt(qd.shape[-1])
    scores = np.einsum("bhie,bhje->bhij", qd, kd) * sc
    if mask is not None:
        m = np.asarray(mask)
        if m.dtype == np.bool_:
            scores = np.where(m, scores, -np.inf)
        else:
            scores = scores + widen(m)
    if causal:
        lq, s = scores.shape[-2:]
        scores = np.where(np.tril(np.ones((lq, s), dtype=bool)), scores, -np.inf)
    row_max = scores.max(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        ex = np.where(row_max == -np.inf, 0.0, np.exp(scores - row_max))
    total = ex.sum(axis=-1, keepdims=True)
    probs = np.where(total == 0, 0.0, ex / np.where(total == 0, 1.0, total))
    return np.einsum("bhij,bhjd->bhid", probs, vd).astype(np.float32)


def attention_tolerance(dtype: str) -> float:
    """The largest error against :func:`attention_python` (relative to the values' scale)
    a kernel in ``dtype`` may show: the probabilities are rounded to ``dtype`` before the
    second product and the output once at the end."""
    return {"float16": 4e-3, "bfloat16": 3e-2}.get(dtype, 1e-5)
