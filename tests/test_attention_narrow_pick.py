"""The default attention configuration of narrow heads over 512 to 1,024 keys (head dim 64:
BERT at 512 tokens, GPT-2 at 1,024), measured on an H200 where the estimate, calibrated on
head dim 128, ranked 64-key tiles first."""

from __future__ import annotations

import pytest

from ptxforge.ops.schedules.attention import AttentionWorkload, choose_attention_config
from ptxforge.ops.schedules.attention.knobs import (
    NARROW_PICK,
    _narrow_head_pick,
    attention_candidates,
    check_attention_config,
)
from ptxforge.target import as_target

SM90A = as_target("cuda -arch=sm_90a")


@pytest.mark.parametrize("batch,heads,seq,causal", [
    (8, 12, 512, False),   # BERT b8: 23.1 us against 24.2 for 4 x 64 x 1
    (1, 12, 1024, True),   # GPT-2: 14.8 us against 15.7 for 4 x 64 x 2
    (1, 12, 1024, False),  # 13.9 us against 16.2
])
def test_narrow_heads_over_few_keys_take_128_key_tiles(batch, heads, seq, causal):
    w = AttentionWorkload(batch, heads, heads, seq, seq, 64, 64, "float16", causal)
    cfg = choose_attention_config(w, SM90A)
    assert cfg == NARROW_PICK
    check_attention_config(w, cfg, SM90A)


@pytest.mark.parametrize("seq,dim", [(4096, 64), (128, 64), (1024, 128), (4096, 128)])
def test_outside_the_measured_range_the_estimate_chooses(seq, dim):
    w = AttentionWorkload(1, 16, 16, seq, seq, dim, dim, "float16", False)
    assert _narrow_head_pick(w, attention_candidates(w, SM90A)) is None
