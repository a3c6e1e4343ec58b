"""The depth of the few-row wgmma rule by row blocks (:func:`deep_by_rows`): fp16 products of
129 to 256 rows (ViT-B/16's 197 tokens) run 5 stages whatever the reduction's length.
:func:`~.chooser.few_row_wgmma_config` asks it beside its own condition (a part of at least
:data:`~.chooser.FEW_ROWS_DEEP_PART_K` columns).

Why the rows decide: from 3 row blocks of 64, each weight tile is read by 3 or 4 blocks and
the 64 x 64 tiles outnumber the SMs at ``N`` >= 2,304 (144 to 256 blocks, two on some SMs),
so more copies in flight pay where with 1 or 2 row blocks they did not. Measured:

- ViT-B/16 on an H200 (1,000-trial tuning records, 2026-11-28, the products with their own
  fused epilogues, us a call, 4 against 5 stages of 64 x 64 tiles, one group in flight):
  197 x 768 x 768 with its residual 4.18 -> 3.69 (the best of 128 records), 197 x 3,072 x
  768 with its erf GELU 7.02 -> 6.02 (the best), 197 x 2,304 x 768 with its bias 6.21 ->
  5.47 (the best, 64 x 128 tiles, 5.24), 197 x 768 x 3,072 in 4 parts with its residual
  8.08 -> 7.20 (the best, 8 parts of 4 stages none in flight, 6.97);
- the H100 few-row sweep at 256 rows (cast only), 12 steps a part: 5 stages 0.92x to
  1.04x the time of 4 (256 x 4,096 x 768 6.86 against 7.48; 256 x 768 x 3,072 in 4 parts
  7.36 against 7.63; 256 x 768 x 768 4.09 against 3.93);
- at 128 rows (2 row blocks) 4 stages stay: BERT-base's four products at batch 1 x 128
  tokens on the same H200 (tuning records) measured 4 stages 1.03x to 1.06x faster than 5,
  as the H100 sweep had at 12 steps (0.94x to 1.09x).
"""

from __future__ import annotations

from .forms import GemmForm

DEEP_ROW_BLOCKS = 3
"""From this many row blocks of 64 (``M`` > 128) the few-row rule runs 5 stages."""
ROW_BLOCK = 64


def deep_by_rows(form: GemmForm) -> bool:
    """Whether the few-row wgmma rule's 64-row tiles of ``form`` run 5 stages by its rows:
    at least :data:`DEEP_ROW_BLOCKS` row blocks of :data:`ROW_BLOCK` (see the module)."""
    return -(-form.M // ROW_BLOCK) >= DEEP_ROW_BLOCKS
