"""The default attention configuration of narrow heads over 128 to 256 keys in one wave of
blocks (:func:`short_keys_pick`: ViT-B/16's 197 tokens, BERT-base at 128 tokens, batch 1).
:func:`~.knobs.choose_attention_config` asks it before the narrow-head rule and the estimate.

Why: each block's loop over keys is one or two tiles long, so its cost is the first tile's
copy and the softmax's latency, not the products' rate, which the estimate (calibrated on
head dim 128 over 512 to 16k keys, ``calibration.py``) ranks by. Tiles of 128 keys halve
the steps of 64-key ones; two stages copy the second tile while the first is used; and the
intra-warpgroup overlap (``overlap="intra"``) runs the next tile's ``Q K^T`` and the last
one's ``P V`` under the softmax. Measured on an H200 (1,000-trial tuning records,
2026-11-28, every legal configuration of the fused attention, us a call):

- ViT-B/16, 12 heads x 197 tokens, head dim 64, 48 blocks: 3.53, the best of 63, where the
  estimate's pick (4 warps x 64 keys, 1 stage, registers) ran 4.50 and the narrow-head
  rule's 128-key tiles of 1 stage 4.13; without the overlap 3.63;
- BERT-base, 12 heads x 128 tokens, 24 blocks: 2.95, the best (tied with 1 stage: one
  tile), where the estimate's pick ran 3.26.
"""

from __future__ import annotations

from ....target import Target
from .knobs import AttentionConfig, check_attention_config
from .workload import AttentionError, AttentionWorkload

SHORT_KEYS = (128, 256)
"""The rule covers this many keys (one or two 128-key tiles), and as many queries; measured
at 128 and 197 of both."""
SHORT_HEAD_DIM = 64
"""... and head dims (``head_dim`` and ``v_dim``) up to this; measured at 64."""
SHORT_PICK = AttentionConfig(4, 128, 2, "wgmma", "registers", "registers", "intra")
"""One warpgroup (64 query rows), 128-key tiles, 2 stages, the register form with ``P``
from registers and the intra-warpgroup overlap."""


def short_keys_pick(w: AttentionWorkload, target: Target) -> AttentionConfig | None:
    """:data:`SHORT_PICK` for fp16 attention without a mask (nor causal) of
    :data:`SHORT_KEYS` queries and keys (measured: self-attention), head dims up to
    :data:`SHORT_HEAD_DIM`, whose blocks (64 query rows of each head and batch) fit one
    wave of the SMs, where the pick is legal on ``target``; None elsewhere (the other rules
    and the estimate choose)."""
    lo, hi = SHORT_KEYS
    if (w.dtype != "float16" or w.causal or w.mask is not None
            or not lo <= w.kv_len <= hi or not lo <= w.q_len <= hi
            or w.head_dim > SHORT_HEAD_DIM
            or w.v_dim > SHORT_HEAD_DIM or not target.has_wgmma):
        return None
    blocks = -(-w.q_len // SHORT_PICK.block_q) * w.heads * w.batch
    if blocks > target.num_sms:
        return None  # more than one wave was not measured
    try:
        check_attention_config(w, SHORT_PICK, target)
    except AttentionError:
        return None
    return SHORT_PICK
