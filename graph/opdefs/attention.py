"""Scaled dot-product attention: ``nn.attention``, PyTorch's
``scaled_dot_product_attention`` kept whole.

``nn.attention(q, k, v[, mask], scale=, is_causal=)`` with ``q`` [B, Hq, L, E], ``k``
[B, Hkv, S, E] and ``v`` [B, Hkv, S, Ev] computes, per batch and query head ``h``,
``softmax(q @ k^T * scale + mask) @ v`` where the key and value head is ``h // (Hq / Hkv)``
(grouped-query attention: ``Hq`` a multiple of ``Hkv``; equal for plain multi-head). The
mask broadcasts to [B, Hq, L, S]: a bool mask keeps the scores where it is True (the others
become -inf), a float mask is added. ``is_causal`` masks key ``j > i`` (top-left aligned, as
PyTorch). A row with every score masked gives zeros, as PyTorch's math kernel does.

Its te lowering is the unfused composition (a batched product, the scale and mask, a
softmax of four stages, a second batched product), so a graph holding it compiles today; a
fused attention kernel replaces that lowering without changing the operator.
"""

from __future__ import annotations

import math

import numpy as np

from ...ir import te
from ...ir.expr import as_expr, const, select
from ...ops.utils import accumulate_dtype, cast_to, compute_named, i_names
from ..ir import Call, Node, TensorType
from ..op import OpDef, OpPattern, register_op
from .common import broadcast_shapes, expect_float, fail

OP = "nn.attention"


def _dims(types: list[TensorType]) -> tuple[int, int, int, int, int, int, int]:
    if len(types) not in (3, 4):
        fail(OP, f"takes q, k, v and an optional mask (3 or 4 arguments), got {len(types)}")
    q, k, v = types[:3]
    for what, t in (("q", q), ("k", k), ("v", v)):
        if t.ndim != 4:
            fail(OP, f"{what} must be 4-D [batch, heads, seq, dim], got {t}")
        expect_float(OP, what, t)
    if len({q.dtype, k.dtype, v.dtype}) != 1:
        fail(OP, f"q, k and v have different dtypes {q.dtype}, {k.dtype}, {v.dtype}; cast "
                 "them to one first")
    b, hq, lq, e = q.shape
    bk, hk, s, ek = k.shape
    bv, hv, sv, ev = v.shape
    if not b == bk == bv:
        fail(OP, f"batch sizes differ: q {b}, k {bk}, v {bv}")
    if hk != hv:
        fail(OP, f"k has {hk} heads but v has {hv}")
    if hk == 0 or hq % hk:
        fail(OP, f"q has {hq} heads, not a multiple of the {hk} heads of k and v (grouped-"
                 "query attention needs a whole number of query heads per key head)")
    if ek != e:
        fail(OP, f"q's head dimension is {e} but k's is {ek}")
    if sv != s:
        fail(OP, f"k has {s} positions but v has {sv}")
    return b, hq, hk, lq, s, e, ev


def _infer(types, attrs):
    b, hq, _, lq, s, _, ev = _dims(types)
    if len(types) == 4:
        mask = types[3]
        if mask.ndim > 4:
            fail(OP, f"the mask must have at most 4 dimensions, got {mask}")
        if mask.dtype != "bool" and not mask.dtype.startswith(("float", "bfloat")):
            fail(OP, f"the mask must be bool (True keeps a score) or float (added to the "
                     f"scores), got {mask.dtype}")
        got = broadcast_shapes(OP, mask.shape, (b, hq, lq, s))
        if got != (b, hq, lq, s):
            fail(OP, f"the mask {list(mask.shape)} does not broadcast to the scores "
                     f"[{b}, {hq}, {lq}, {s}]")
    return TensorType((b, hq, lq, ev), types[0].dtype)


def _normalize(attrs):
    scale = attrs["scale"]
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))):
        fail(OP, f"scale must be a number or None (1/sqrt(head dim)), got {scale!r}")
    if not isinstance(attrs["is_causal"], bool):
        fail(OP, f"is_causal must be a bool, got {attrs['is_causal']!r}")
    return {"scale": None if scale is None else float(scale), "is_causal": attrs["is_causal"]}


def _scale(attrs, e: int) -> float:
    return attrs["scale"] if attrs["scale"] is not None else 1.0 / math.sqrt(e)


def _lower(a, attrs):
    q, k, v = a[:3]
    mask = a[3] if len(a) == 4 else None
    b, hq, lq, e = (int(x) for x in q.shape)
    hk, s = int(k.shape[1]), int(k.shape[2])
    ev = int(v.shape[3])
    group = hq // hk
    acc = accumulate_dtype(q.dtype)
    scale = _scale(attrs, e)
    neg_inf = const(float("-inf"), acc)

    def kv_head(h):
        return h if group == 1 else h // group

    re = te.reduce_axis((0, e), name="re")
    raw = compute_named(
        (b, hq, lq, s), i_names(4),
        lambda n, h, i, j: te.sum(cast_to(q[n, h, i, re], acc) * cast_to(k[n, kv_head(h), j, re],
                                                                         acc), axis=re),
        "T_attention_qk", "batch_matmul")

    def mask_index(idx):
        shape = [int(x) for x in mask.shape]
        lead = 4 - len(shape)
        return tuple(as_expr(0) if shape[d] == 1 else idx[lead + d] for d in range(len(shape)))

    def score(n, h, i, j):
        val = raw[n, h, i, j] * const(scale, acc)
        if mask is not None:
            m = mask[mask_index((n, h, i, j))]
            val = select(m, val, neg_inf) if mask.dtype == "bool" else val + cast_to(m, acc)
        if attrs["is_causal"]:
            val = select(j <= i, val, neg_inf)
        return val

    scores = compute_named((b, hq, lq, s), i_names(4), score, "T_attention_score", "injective")
    rm = te.reduce_axis((0, s), name="rm")
    row_max = compute_named((b, hq, lq), i_names(3),
                            lambda n, h, i: te.max(scores[n, h, i, rm], axis=rm),
                            "T_attention_max", "softmax_output")
    # a row with every score masked has max -inf: its weights are zeros, not NaNs
    expo = compute_named(
        (b, hq, lq, s), i_names(4),
        lambda n, h, i, j: select(row_max[n, h, i] == neg_inf, const(0.0, acc),
                                  te.exp(scores[n, h, i, j] - row_max[n, h, i])),
        "T_attention_exp", "softmax_output")
    rs = te.reduce_axis((0, s), name="rs")
    row_sum = compute_named((b, hq, lq), i_names(3),
                            lambda n, h, i: te.sum(expo[n, h, i, rs], axis=rs),
                            "T_attention_sum", "softmax_output")
    probs = compute_named(
        (b, hq, lq, s), i_names(4),
        lambda n, h, i, j: select(row_sum[n, h, i] == const(0.0, acc), const(0.0, acc),
                                  expo[n, h, i, j] / row_sum[n, h, i]),
        "T_attention_probs", "softmax_output")
    rv = te.reduce_axis((0, s), name="rv")
    out = compute_named(
        (b, hq, lq, ev), i_names(4),
        lambda n, h, i, d: te.sum(probs[n, h, i, rv] * cast_to(v[n, kv_head(h), rv, d], acc),
                                  axis=rv),
        "T_attention_pv", "batch_matmul")
    if out.dtype == q.dtype:
        return out
    return compute_named(out.shape, i_names(4), lambda *i: out(*i).astype(q.dtype),
                         "T_cast", "elemwise")


def attention_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask=None,
                        scale: float | None = None, is_causal: bool = False) -> np.ndarray:
    """The numpy reference of ``nn.attention`` (float64 inside, rounded once at the end)."""
    from .elemwise import cast_array

    dtype = q.dtype
    qd, kd, vd = (cast_array(x, "float64") for x in (q, k, v))
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
            scores = scores + cast_array(m, "float64")
    if is_causal:
        lq, s = scores.shape[-2:]
        scores = np.where(np.tril(np.ones((lq, s), dtype=bool)), scores, -np.inf)
    row_max = scores.max(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        ex = np.where(row_max == -np.inf, 0.0, np.exp(scores - row_max))
    total = ex.sum(axis=-1, keepdims=True)
    probs = np.where(total == 0, 0.0, ex / np.where(total == 0, 1.0, total))
    out = np.einsum("bhij,bhjd->bhid", probs, vd)
    from ...ir import dtype as dt

    return cast_array(out.astype(np.float32), dt.from_numpy(dtype))


def _ref(a, attrs):
    return attention_reference(a[0], a[1], a[2], a[3] if len(a) == 4 else None,
                               attrs["scale"], attrs["is_causal"])


register_op(OpDef(
    name=OP, num_inputs=None, infer=_infer, lower=_lower, ref=_ref, pattern=OpPattern.OPAQUE,
    defaults={"scale": None, "is_causal": False}, normalize=_normalize,
))


def attention(q: Node, k: Node, v: Node, mask: Node | None = None, scale: float | None = None,
              is_causal: bool = False) -> Call:
    """``softmax(q @ k^T * scale + mask) @ v`` per head (see the module's docstring);
    ``scale`` None is ``1 / sqrt(head dim)``."""
    args = [q, k, v] + ([mask] if mask is not None else [])
    return Call(OP, args, {"scale": scale, "is_causal": is_causal})
