"""Small transformers written as Hugging Face's transformers 4 wrote their eager attention,
for exports the current library no longer produces: BERT's padding mask ``(1 -
attention_mask) * finfo.min`` added to the scores, DistilBERT's ``masked_fill`` of
``attention_mask == 0``, GPT-2's causal ``where(bias, scores, finfo.min)`` followed by the
padding mask, the same with a cache of earlier keys (the causal mask bottom-right aligned),
and a cross attention whose keys have one batch for all the queries' batches (a product
with a broadcast batch dimension). Hidden 64, 4 heads, 2 layers, seeded weights.
"""

from __future__ import annotations

import math

import torch
from torch import nn

HIDDEN, HEADS, LAYERS, VOCAB = 64, 4, 2, 96
HEAD_DIM = HIDDEN // HEADS


def _split(x: torch.Tensor) -> torch.Tensor:
    b, seq, _ = x.shape
    return x.view(b, seq, HEADS, HEAD_DIM).permute(0, 2, 1, 3)


def _merge(x: torch.Tensor) -> torch.Tensor:
    b, _, seq, _ = x.shape
    return x.permute(0, 2, 1, 3).contiguous().view(b, seq, HIDDEN)


class _Block(nn.Module):
    """Attention (``attend``), projection, layer norms and a GELU feed-forward."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN)
        self.out = nn.Linear(HIDDEN, HIDDEN)
        self.ln1 = nn.LayerNorm(HIDDEN)
        self.ln2 = nn.LayerNorm(HIDDEN)
        self.ff = nn.Sequential(nn.Linear(HIDDEN, 2 * HIDDEN), nn.GELU(),
                                nn.Linear(2 * HIDDEN, HIDDEN))

    def forward(self, x, attend):
        q, k, v = self.qkv(x).split(HIDDEN, dim=2)
        x = self.ln1(x + self.out(_merge(attend(_split(q), _split(k), _split(v)))))
        return self.ln2(x + self.ff(x))


class LegacyBert(nn.Module):
    """BERT (and RoBERTa): ``scores / sqrt(E) + (1 - mask[:, None, None, :]) * finfo.min``."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(VOCAB, HIDDEN)
        self.blocks = nn.ModuleList(_Block() for _ in range(LAYERS))

    def forward(self, input_ids, attention_mask):
        x = self.emb(input_ids)
        ext = attention_mask[:, None, None, :].to(x.dtype)
        ext = (1.0 - ext) * torch.finfo(x.dtype).min

        def attend(q, k, v):
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(HEAD_DIM)
            probs = nn.functional.softmax(scores + ext, dim=-1)
            return torch.matmul(probs, v)

        for blk in self.blocks:
            x = blk(x, attend)
        return x


class LegacyDistilBert(LegacyBert):
    """DistilBERT: q divided first, ``scores.masked_fill(mask == 0, finfo.min)``."""

    def forward(self, input_ids, attention_mask):
        x = self.emb(input_ids)
        b, seq = attention_mask.shape

        def attend(q, k, v):
            scores = torch.matmul(q / math.sqrt(HEAD_DIM), k.transpose(2, 3))
            drop = (attention_mask == 0).view(b, 1, 1, seq).expand_as(scores)
            scores = scores.masked_fill(drop, torch.tensor(torch.finfo(scores.dtype).min))
            return torch.matmul(nn.functional.softmax(scores, dim=-1), v)

        for blk in self.blocks:
            x = blk(x, attend)
        return x


class LegacyGpt2(nn.Module):
    """GPT-2: ``where(bias[:, :, S - L:S, :S], scores, finfo.min) + (1 - mask) * finfo.min``;
    ``prefix`` > 0: earlier keys and values of every layer are inputs (a cache), so the
    causal mask is bottom-right aligned; ``positions``: the causal bias's size (at least the
    keys)."""

    def __init__(self, prefix: int = 0, positions: int = 64):
        super().__init__()
        torch.manual_seed(1)
        self.prefix = prefix
        self.emb = nn.Embedding(VOCAB, HIDDEN)
        self.blocks = nn.ModuleList(_Block() for _ in range(LAYERS))
        tril = torch.tril(torch.ones(positions, positions, dtype=torch.bool))
        self.register_buffer("bias", tril.view(1, 1, positions, positions), persistent=False)

    def forward(self, input_ids, attention_mask, past=None):
        x = self.emb(input_ids)
        ext = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for n, blk in enumerate(self.blocks):
            def attend(q, k, v, n=n):
                if past is not None:
                    k = torch.cat([past[2 * n], k], dim=2)
                    v = torch.cat([past[2 * n + 1], v], dim=2)
                w = torch.matmul(q, k.transpose(-1, -2))
                w = w / torch.full([], v.size(-1) ** 0.5, dtype=w.dtype)
                lq, s = q.size(-2), k.size(-2)
                keep = self.bias[:, :, s - lq:s, :s]
                w = torch.where(keep, w, torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype))
                w = nn.functional.softmax(w + ext, dim=-1)
                return torch.matmul(w, v)

            x = blk(x, attend)
        return x


class SharedMemory(nn.Module):
    """Cross attention to a memory of one batch (``[1, M, D]``) from queries of ``B``:
    ``[B, H, L, E] @ [1, H, E, M]``, products with a broadcast batch dimension."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(2)
        self.q = nn.Linear(HIDDEN, HIDDEN)
        self.kv = nn.Linear(HIDDEN, 2 * HIDDEN)
        self.blocks = nn.ModuleList(nn.LayerNorm(HIDDEN) for _ in range(LAYERS))

    def forward(self, x, memory):
        k, v = (_split(t) for t in self.kv(memory).split(HIDDEN, dim=2))
        for ln in self.blocks:
            q = _split(self.q(x))
            w = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(HEAD_DIM))
            x = ln(x + _merge(torch.matmul(nn.functional.softmax(w, dim=-1), v)))
        return x
