"""``ops.attention``: scaled dot-product attention as one te op, and its fused kernel.

``attention(q, k, v, mask=None, causal=False, scale=None)`` declares, per batch ``b`` and
query head ``h`` (key/value head ``h // (Hq / Hkv)``: grouped-query attention)::

    S = q[b, h] @ k[b, h']^T * scale (+ additive mask | bool mask) (causal: j <= i)
    out[b, h] = softmax(S) @ v[b, h']          (a fully masked row gives zeros)

as te stages (the scores, the row maximum, the exponentials, the row sum, the weighted sum
of the values, the cast to the input dtype); the last stage is tagged ``attention`` and
carries ``causal`` and ``scale`` in its attrs. Any schedule of the stages computes it (the
operator library's default does, unfused); :func:`ptxforge.build_attention` compiles it as the one
fused tensor-core kernel of :mod:`ptxforge.ops.schedules.attention` (online softmax over
key tiles, float32 running maxima and sums), and :func:`attention_workload` reads the
problem back from the output tensor for the tuners.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..ir import te
from ..ir.expr import as_expr, const, select
from ..ir.te import Tensor
from .utils import accumulate_dtype, cast_to, compute_named, i_names

if TYPE_CHECKING:
    from .schedules.attention import AttentionWorkload

TAG = "attention"


def _error(msg: str) -> Exception:
    # the schedules (and the passes they import) load on first use, not with ``ops``
    from .schedules.attention import AttentionError

    return AttentionError(msg)


STAGES = ("T_attention_qk", "T_attention_score", "T_attention_max", "T_attention_exp",
          "T_attention_sum", "T_attention_pv")


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
              causal: bool = False, scale: float | None = None,
              layout: str = "bhsd") -> Tensor:
    """Scaled dot-product attention (see the module's docstring). ``q [B, Hq, L, E]``,
    ``k [B, Hkv, S, E]``, ``v [B, Hkv, S, Ev]``, ``mask`` broadcasting to ``[B, Hq, L, S]``
    (bool: True keeps; float: added); ``scale`` None is ``1 / sqrt(E)``. Returns ``[B, Hq,
    L, Ev]`` in q's dtype, accumulated in float32 for 16-bit inputs. ``layout="bshd"``
    takes q, k, v and returns the output as ``[B, L, H, E]`` (what a projection writes and
    reads: the head split and merge transposes folded into the addressing); the mask
    still broadcasts to ``[B, Hq, L, S]``."""
    if layout not in ("bhsd", "bshd"):
        raise _error(f"attention: layout must be 'bhsd' ([B, H, L, E]) or 'bshd' "
                     f"([B, L, H, E]), got {layout!r}")
    dims = "[batch, seq, heads, dim]" if layout == "bshd" else "[batch, heads, seq, dim]"
    for what, t in (("q", q), ("k", k), ("v", v)):
        if len(t.shape) != 4:
            raise _error(f"attention: {what} must be 4-D {dims}, got {list(t.shape)}")

    def bhsd(t):
        n, x, y, d = (int(a) for a in t.shape)
        return (n, y, x, d) if layout == "bshd" else (n, x, y, d)
    b, hq, lq, e = bhsd(q)
    bk, hk, s, ek = bhsd(k)
    bv, hv, sv, ev = bhsd(v)
    if not b == bk == bv or hk != hv or s != sv or e != ek or hk == 0 or hq % hk:
        raise _error(f"attention: q {list(q.shape)}, k {list(k.shape)} and v "
                             f"{list(v.shape)} do not agree (same batch; k and v the same "
                             "heads and positions; q's heads a multiple of k's; q and k the "
                             "same head dim)")
    if len({q.dtype, k.dtype, v.dtype}) != 1:
        raise _error(f"attention: q, k and v have dtypes {q.dtype}, {k.dtype}, "
                             f"{v.dtype}; cast them to one first")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))):
        raise _error(f"attention: scale must be a number or None, got {scale!r}")
    group = hq // hk
    acc = accumulate_dtype(q.dtype)
    sc = float(scale) if scale is not None else 1.0 / math.sqrt(e)
    neg_inf = const(float("-inf"), acc)
    if mask is not None:
        _check_mask(mask, (b, hq, lq, s))

    def kv_head(h):
        return h if group == 1 else h // group

    def at(t, n, h, i, d):
        """Element ``(n, h, i, d)`` of ``t`` in the layout's order."""
        return t[n, i, h, d] if layout == "bshd" else t[n, h, i, d]

    re = te.reduce_axis((0, e), name="re")
    raw = compute_named(
        (b, hq, lq, s), i_names(4),
        lambda n, h, i, j: te.sum(cast_to(at(q, n, h, i, re), acc)
                                  * cast_to(at(k, n, kv_head(h), j, re), acc), axis=re),
        STAGES[0], "batch_matmul")

    def mask_index(idx):
        shape = [int(x) for x in mask.shape]
        lead = 4 - len(shape)
        return tuple(as_expr(0) if shape[d] == 1 else idx[lead + d] for d in range(len(shape)))

    def score(n, h, i, j):
        val = raw[n, h, i, j] * const(sc, acc)
        if mask is not None:
            m = mask[mask_index((n, h, i, j))]
            val = select(m, val, neg_inf) if mask.dtype == "bool" else val + cast_to(m, acc)
        if causal:
            val = select(j <= i, val, neg_inf)
        return val

    scores = compute_named((b, hq, lq, s), i_names(4), score, STAGES[1], "injective")
    rm = te.reduce_axis((0, s), name="rm")
    row_max = compute_named((b, hq, lq), i_names(3),
                            lambda n, h, i: te.max(scores[n, h, i, rm], axis=rm),
                            STAGES[2], "softmax_output")
    # a row with every score masked has max -inf: its weights are zeros, not NaNs
    expo = compute_named(
        (b, hq, lq, s), i_names(4),
        lambda n, h, i, j: select(row_max[n, h, i] == neg_inf, const(0.0, acc),
                                  te.exp(scores[n, h, i, j] - row_max[n, h, i])),
        STAGES[3], "softmax_output")
    rs = te.reduce_axis((0, s), name="rs")
    row_sum = compute_named((b, hq, lq), i_names(3),
                            lambda n, h, i: te.sum(expo[n, h, i, rs], axis=rs),
                            STAGES[4], "softmax_output")
    rv = te.reduce_axis((0, s), name="rv")
    attrs = {"causal": bool(causal), "scale": None if scale is None else float(scale)}
    if layout != "bhsd":
        attrs["layout"] = layout
    out_tag = TAG if acc == q.dtype else "batch_matmul"

    def weighted(n, h, i, d):
        return te.sum(
            select(row_sum[n, h, i] == const(0.0, acc), const(0.0, acc),
                   expo[n, h, i, rv] / row_sum[n, h, i])
            * cast_to(at(v, n, kv_head(h), rv, d), acc), axis=rv)
    if layout == "bshd":
        out = compute_named((b, lq, hq, ev), i_names(4),
                            lambda n, i, h, d: weighted(n, h, i, d),
                            STAGES[5], out_tag, attrs if out_tag == TAG else None)
    else:
        out = compute_named((b, hq, lq, ev), i_names(4), weighted, STAGES[5], out_tag,
                            attrs if out_tag == TAG else None)
    if out.dtype == q.dtype:
        return out
    return compute_named(out.shape, i_names(4), lambda *i: out(*i).astype(q.dtype),
                         "T_attention_out", TAG, attrs)


VIEW_TAG = "attention_view"
"""The tag of an :func:`operand_view` stage (its attrs: ``row_stride``, ``offset``)."""


def operand_view(base: Tensor, shape, offset: int, name: str = "x") -> Tensor:
    """The ``[B, S, H, D]`` operand (``shape``) of a ``bshd`` attention read out of the
    rows of ``base``: element ``(b, s, h, d)`` is element ``offset + h D + d`` of row
    ``b S + s`` (the rows: every dimension of ``base`` but its last, ``row_stride``
    elements). A stage of its own (tagged :data:`VIEW_TAG`) that any schedule computes as
    a copy; the fused kernel reads ``base`` through it instead
    (:class:`~ptxforge.ops.schedules.attention.OperandView`), as it reads the slices of a
    combined Q/K/V projection."""
    b, seq, heads, dim = (int(x) for x in shape)
    lead = [int(x) for x in base.shape[:-1]]
    stride = int(base.shape[-1]) if base.shape else 0
    rows = 1
    for d in lead:
        rows *= d
    if not lead or rows != b * seq or offset < 0 or offset + heads * dim > stride:
        raise _error(f"attention: a view of {heads} heads of {dim} from element {offset} of "
                     f"{b * seq} rows does not fit {name}'s tensor {list(base.shape)} (its "
                     "rows: every dimension but the last)")

    def body(n, i, h, d):
        pos = n * seq + i
        idx = []
        for extent in reversed(lead[1:]):
            idx.append(pos % extent)
            pos = pos // extent
        idx.append(pos)
        return base[(*reversed(idx), h * dim + d + offset)]
    return compute_named((b, seq, heads, dim), i_names(4), body,
                         f"T_attention_{name}_view", VIEW_TAG,
                         {"row_stride": stride, "offset": int(offset)})


def _viewed(t: Tensor) -> tuple:
    """``(base, view attrs)`` of an :func:`operand_view` stage, ``(t, None)`` otherwise."""
    if getattr(t.op, "tag", "") == VIEW_TAG:
        return t.op.input_tensors[0], t.op.attrs
    return t, None


def _check_mask(mask: Tensor, scores: tuple) -> None:
    shape = tuple(int(x) for x in mask.shape)
    ok = len(shape) <= 4 and all(g in (1, w) for g, w in zip(reversed(shape), reversed(scores)))
    if not ok:
        raise _error(f"attention: the mask {list(shape)} does not broadcast to the "
                             f"scores {list(scores)}")
    if mask.dtype != "bool" and not mask.dtype.startswith(("float", "bfloat")):
        raise _error(f"attention: the mask must be bool or float, got {mask.dtype}")


def _stage(out: Tensor, name: str) -> Tensor:
    seen, todo = set(), [out]
    while todo:
        t = todo.pop()
        if t.op.name == name:
            return t
        if id(t.op) in seen or not hasattr(t.op, "input_tensors"):
            continue
        seen.add(id(t.op))
        todo.extend(t.op.input_tensors)
    raise _error(f"{out.op.name} is not the output of ops.attention (no stage {name})")


def _operands(out: Tensor) -> list[Tensor]:
    """``[q, k, v]`` as the attention's stages read them (views included), and the mask."""
    if out.op.tag != TAG:
        raise _error(f"{out.op.name} (tag {out.op.tag!r}) is not the output of "
                             "ops.attention")
    q, k = _stage(out, STAGES[0]).op.input_tensors[:2]
    v = _stage(out, STAGES[5]).op.input_tensors[-1]
    score_in = _stage(out, STAGES[1]).op.input_tensors
    mask = [t for t in score_in if t.op.name != STAGES[0]]
    return [q, k, v] + mask[:1]


def attention_inputs(out: Tensor) -> list[Tensor]:
    """``[q, k, v]`` (and the mask when there is one) of an :func:`attention` output: the
    tensors the fused kernel reads, where an operand is an :func:`operand_view` its base
    (so q, k and v may be one tensor)."""
    ins = _operands(out)
    return [_viewed(t)[0] for t in ins[:3]] + ins[3:]


def attention_workload(out: Tensor) -> AttentionWorkload:
    """The :class:`AttentionWorkload` an :func:`attention` output computes."""
    from .schedules.attention import AttentionMask, AttentionWorkload
    from .schedules.attention.workload import OperandView

    ins = _operands(out)
    q, k, v = ins[:3]
    views = []
    for t in (q, k, v):
        base, attrs = _viewed(t)
        views.append(None if attrs is None else OperandView(
            attrs["row_stride"], attrs["offset"], tuple(int(x) for x in base.shape)))
    layout = out.op.attrs.get("layout", "bhsd")
    b, hq, lq, e = (int(x) for x in q.shape)
    hk, s = int(k.shape[1]), int(k.shape[2])
    if layout == "bshd":
        lq, hq = hq, lq
        hk, s = s, hk
    mask = None
    if len(ins) == 4:
        mask = AttentionMask(tuple(int(x) for x in ins[3].shape), ins[3].dtype)
    return AttentionWorkload(b, hq, hk, lq, s, e, int(v.shape[3]), q.dtype,
                             bool(out.op.attrs["causal"]), out.op.attrs["scale"], mask,
                             layout, tuple(views) if any(views) else None)
