"""``decompose_attention``: ``nn.attention`` as the products and softmax the kernels run.

``torch.export`` keeps ``scaled_dot_product_attention`` whole (``nn.attention``). Until a
fused attention kernel lowers it, the fastest way to run it is the one a hand-written
transformer takes: per key head, one batched product of the queries with the keys, the
scale and the mask in its epilogue, one softmax over the rows, one batched product with the
values; the head reshapes and transposes around it then join the products (``fuse_ops``).
This pass writes it so::

    q [B, Hq, L, E] -> [B * Hkv, G * L, E]     (G = Hq / Hkv query heads per key head)
    k [B, Hkv, S, E] -> [B * Hkv, S, E];  v likewise
    p = softmax(q @ k^T * scale [+ mask] [+ causal], nan_to_zero=True)
    out = (p @ v) -> [B, Hq, L, Ev]

A bool mask becomes additive (0 where it keeps a score, minus infinity elsewhere) on its
own, smaller shape; a causal mask is a constant of the same form. A row with every score
masked gives zeros, as ``nn.attention`` defines (``nan_to_zero``). An attention whose
operands are read through ``views`` (the slices of a combined projection that
``fold_attention_layout`` folded into it) gets those slices back first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import opdefs as G
from ..ir import Call, Constant, Graph, Node, rewrite
from ..opdefs.attention import keeps_fused_attention
from ..opdefs.elemwise import cast_array
from .base import GraphPass, register_graph_pass


def _additive(mask: Node, dtype: str) -> Node:
    """The mask as values added to the scores (0 keeps, minus infinity drops)."""
    if mask.dtype == "bool":
        from ..opdefs.logic import where

        zero = Constant(cast_array(np.zeros(()), dtype), dtype=dtype)
        ninf = Constant(cast_array(np.full((), -np.inf), dtype), dtype=dtype)
        return where(mask, zero, ninf)
    return mask if mask.dtype == dtype else G.cast(mask, dtype)


def _causal(rows: int, cols: int, group: int, dtype: str) -> Constant:
    """0 where key ``j <= i`` (top-left aligned), minus infinity after, for ``group`` query
    heads stacked along the rows."""
    i = np.arange(rows)[:, None]
    j = np.arange(cols)[None, :]
    tile = np.where(j <= i, 0.0, -np.inf)
    return Constant(cast_array(np.tile(tile, (group, 1)), dtype), "causal_mask", dtype=dtype)


def viewed_operand(x: Node, view) -> Node:
    """The ``[B, S, H, D]`` operand a view ``(batch, seq, heads, dim, offset)`` of the
    attention (``fold_attention_layout``) reads out of ``x``: the ``H D`` elements from
    ``offset`` of each of its ``B S`` rows."""
    b, seq, heads, dim, offset = view
    rows = G.reshape(x, (b * seq, x.shape[-1])) if x.ndim != 2 else x
    cut = G.strided_slice(rows, [offset], [offset + heads * dim], [1], [1])
    return G.reshape(cut, (b, seq, heads, dim))


def decompose(call: Call, args: tuple) -> Node | None:
    if call.op != "nn.attention" or keeps_fused_attention(call):
        return None
    if call.attrs.get("views"):
        # operands read through views: the slices they stand for, then the bshd attention
        from ..opdefs.attention import attention

        qkv = [viewed_operand(a, view) if view else a
               for a, view in zip(args[:3], call.attrs["views"])]
        inner = attention(*qkv, args[3] if len(args) == 4 else None, call.attrs["scale"],
                          call.attrs["is_causal"], layout="bshd")
        return decompose(inner, tuple(inner.args)) or inner
    if call.attrs.get("layout") == "bshd":
        # [B, L, H, E] operands: the [B, H, L, E] attention of their transposes
        from ..opdefs.attention import attention

        heads = (0, 2, 1, 3)
        inner = attention(*(G.transpose(a, heads) for a in args[:3]),
                          args[3] if len(args) == 4 else None, call.attrs["scale"],
                          call.attrs["is_causal"])
        return G.transpose(decompose(inner, tuple(inner.args)) or inner, heads)
    q, k, v = args[:3]
    mask = args[3] if len(args) == 4 else None
    b, hq, lq, e = q.shape
    _, hk, s, _ = k.shape
    ev = v.shape[3]
    group = hq // hk
    dtype = q.dtype
    scale = call.attrs["scale"]
    scale = 1.0 / float(np.sqrt(e)) if scale is None else scale
    q3 = G.reshape(q, (b * hk, group * lq, e))
    k3 = G.reshape(k, (b * hk, s, e))
    v3 = G.reshape(v, (b * hk, s, ev))
    scores = G.batch_matmul(q3, k3, transpose_b=True)
    scores = G.multiply(scores, Constant(cast_array(np.asarray(scale, np.float64), dtype),
                                         "attn_scale", dtype=dtype))
    if mask is not None:
        s4 = G.add(G.reshape(scores, (b, hq, lq, s)), _additive(mask, dtype))
        scores = G.reshape(s4, (b * hk, group * lq, s))
    if call.attrs["is_causal"]:
        scores = G.add(scores, _causal(lq, s, group, dtype))
    probs = G.softmax(scores, axis=-1, nan_to_zero=True)
    out = G.batch_matmul(probs, v3, transpose_b=False)
    return G.reshape(out, (b, hq, lq, ev))


@register_graph_pass
@dataclass(frozen=True)
class DecomposeAttention(GraphPass):
    """``nn.attention`` as batched products and a softmax (see the module doc)."""

    name = "decompose_attention"

    def apply(self, graph: Graph, ctx) -> Graph:
        return rewrite(graph, decompose)
