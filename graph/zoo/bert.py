"""A BERT-base encoder layer: multi-head self-attention and the feed-forward block, each
with a residual connection and layer norm (hidden 768, 12 heads, intermediate 3072)."""

from __future__ import annotations

import math

import numpy as np

from .. import opdefs as G
from ..ir import Node, Var
from .layers import NetBuilder


def _gelu(x: Node) -> Node:
    # the exact GELU of BERT: x * 0.5 * (1 + erf(x / sqrt(2)))
    inner = G.erf(G.multiply(x, 1.0 / math.sqrt(2.0)))
    return G.multiply(x, G.multiply(G.add(inner, 1.0), 0.5))


def _heads(x: Node, batch: int, seq: int, heads: int, head_dim: int) -> Node:
    y = G.reshape(x, (batch, seq, heads, head_dim))
    y = G.transpose(y, (0, 2, 1, 3))
    return G.reshape(y, (batch * heads, seq, head_dim))


def bert_layer(batch: int, dtype: str, seq_len: int = 128, hidden: int = 768, heads: int = 12,
               intermediate: int = 3072, seed: int = 0):
    """One encoder layer over ``data`` [batch, seq_len, hidden]; output of the same shape."""
    return bert_encoder(batch, dtype, 1, seq_len, hidden, heads, intermediate, seed)


def bert_encoder(batch: int, dtype: str, layers: int = 12, seq_len: int = 128,
                 hidden: int = 768, heads: int = 12, intermediate: int = 3072, seed: int = 0):
    """``layers`` encoder layers (BERT-base: 12) over ``data`` [batch, seq_len, hidden];
    output of the same shape. Layer ``k > 0``'s weights are named ``layer<k>_...``."""
    b = NetBuilder("NCHW", dtype, seed)
    shape = (batch, seq_len, hidden)
    data = Var("data", shape, dtype)
    x = G.reshape(data, (batch * seq_len, hidden))
    for k in range(layers):
        x = _encoder_layer(b, x, batch, seq_len, hidden, heads, intermediate,
                           f"layer{k}_" if k else "")
    return G.reshape(x, shape), b.params, shape


def _encoder_layer(b: NetBuilder, x: Node, batch: int, seq_len: int, hidden: int, heads: int,
                   intermediate: int, prefix: str) -> Node:
    head_dim = hidden // heads

    def proj(inp, name, units):
        return b.dense(inp, prefix + name, units, std=0.02)

    q = _heads(proj(x, "attention_query", hidden), batch, seq_len, heads, head_dim)
    k = _heads(proj(x, "attention_key", hidden), batch, seq_len, heads, head_dim)
    v = _heads(proj(x, "attention_value", hidden), batch, seq_len, heads, head_dim)
    scores = G.multiply(G.batch_matmul(q, k), 1.0 / math.sqrt(head_dim))
    probs = G.softmax(scores, axis=-1)
    ctx = G.batch_matmul(probs, v, transpose_b=False)
    ctx = G.reshape(ctx, (batch, heads, seq_len, head_dim))
    ctx = G.reshape(G.transpose(ctx, (0, 2, 1, 3)), (batch * seq_len, hidden))
    attn = G.add(proj(ctx, "attention_output", hidden), x)
    attn = G.layer_norm(attn, b.param(prefix + "attention_ln_gamma", np.ones(hidden)),
                        b.param(prefix + "attention_ln_beta", np.zeros(hidden)), epsilon=1e-12)
    inter = _gelu(proj(attn, "intermediate", intermediate))
    out = G.add(proj(inter, "output", hidden), attn)
    return G.layer_norm(
        out, b.param(prefix + "output_ln_gamma", b.rng.uniform(0.9, 1.1, hidden)),
        b.param(prefix + "output_ln_beta", b.rng.normal(0, 0.02, hidden)), epsilon=1e-12)
