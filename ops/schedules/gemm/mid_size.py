"""The mid-size rule of the default wgmma chooser (:func:`mid_size_wgmma_config`): fp16
products of 512 to 4,096 rows (GPT-2 at 1,024 tokens, BERT at batch 8 x 512 tokens), fitted
to sweeps of every legal configuration on an H100 and an H200, where the estimates of
:mod:`.estimate` rank the good configurations badly. :func:`~.chooser.wgmma_choice` asks
it after the few-row rules."""

from __future__ import annotations

from dataclasses import replace

from ....target import Target, as_target
from .choice import wgmma_refusal
from .estimate import wgmma_blocks_per_sm
from .forms import GemmForm
from .knobs import WGMMA_SPACE, WgmmaScheduleConfig
from .rules import block_k, first_broken, needs_c_tile, pads, wgmma_rules

MID_MIN_M = 512
"""The mid-size rule covers fp16 products of at least this many rows, ``N`` of at least
:data:`MID_MIN_N` and ``K`` within :data:`MID_K`. Measured: from 1,000 rows on an H100
(``bench/results/gemm_mid_sweep_h100_2026-11-28.jsonl``), 1,024 on an H200
(``gemm_m1024_knobs_h200_2026-11-28.jsonl``); 512 to 999 rows follow the 64-row tiles of
:func:`_mid_rows_config` by their tile count, unmeasured."""
MID_MIN_N = 768
MID_K = (768, 4096)
MID_ROWS_MAX_M = 2048
"""Up to this many rows, with a B that fits the L2, the mid-size rule runs 64 x 128 tiles
through the C tile (:func:`_mid_rows_config`). The H200 sweep of GPT-2's four products at
1,024 tokens (every legal configuration with 192-wide tiles, in-flight 0 and 1, block
orders 1, 4, 8 and the staged epilogue: 844 kernels) measured 64 x 128 tiles with the
staged epilogue fastest on all four, cuBLAS/ours 0.76-0.97 where the earlier rule's picks
(128 x 128 and 64 x 64 stored from the fragments) ran 0.52-0.78; 2,048 rows are twice
those tiles, unmeasured (beyond, the H100's 4,096-row picks stand)."""
MID_ROWS_RASTER = 4
"""The block order of the 64-row tiles where they fill the SMs: groups of 4 row blocks
(raster 4 and 8 within 3% of each other; the plain order 1.05-1.20x slower)."""
MID_SHORT_STEPS = 16
"""Up to this many 64-column steps (``K`` <= 1,024) the mid-size rule runs 128 x 128 tiles
two blocks an SM, one block's pipeline fill and epilogue under the other's K loop."""
MID_NARROW_STEPS = 12
"""Up to this many steps (``K`` <= 768), where the rule takes one-warpgroup tiles, they are
64 x 64: twice the blocks, two an SM. Measured on GPT-2's attention projection (1,024 x
768 x 768, 12 steps: 5.89 us against 6.12 for 64 x 128); at 16 steps (1,000^3) 64 x 128
ran 12.62 us against 16.46, and at 48 (1,024 x 768 x 3,072) 14.19 against 16.79."""
MID_LONG_STEPS = 32
"""From this many steps (``K`` >= 2,048) 128 x 256 tiles pay off with a single wave of
at least :data:`MID_WIDE_WAVE` of the SMs."""
MID_WIDE_WAVE = 0.7
MID_192_MIN_M = 4096
"""From this many rows, with ``N`` a multiple of 192, the mid-size rule runs 128 x 192 tiles:
the H100 sweep of the wgmma knobs (``bench/results/gemm_mid_knobs_h100_2026-11-28.txt``,
BERT's products at batch 8 x 512 tokens) measured them fastest, 0.68-0.88x cuBLAS where the
earlier rule's picks ran 0.53-0.69x: 384 to 1,024 blocks fill the 132 SMs in whole waves
where 128 x 256 tiles left a third of the last wave idle."""


MID_FUSED_NARROW_N = 1024
"""From :data:`MID_192_MIN_M` rows, a product of at most this many columns with a fused
epilogue (BERT's attention projection and second FFN product, each with its residual add)
runs 64 x 128 tiles of 3 stages, none in flight, in groups of 4 row blocks, through the C
tile (:func:`_fused_wide_config`)."""
MID_FUSED_WIDE_N = 3072
"""From :data:`MID_192_MIN_M` rows and up to :data:`MID_SHORT_STEPS` steps, a product of at
least this many columns with a fused epilogue (BERT's first FFN product with its GELU) runs
128 x 128 tiles of 3 stages, none in flight, in groups of 4 row blocks, stored from the
fragments (:func:`_fused_wide_config`)."""


def _mid_size(form: GemmForm) -> bool:
    """Whether ``form`` is a product of the mid-size range: fp16, B read K-major
    (``[N, K]``, as a dense layer's weight), not a conv nor a batch, at least
    :data:`MID_MIN_M` rows and :data:`MID_MIN_N` columns, ``K`` within :data:`MID_K`."""
    lo, hi = MID_K
    return (form.in_dtype == "float16" and not form.conv and not form.batched
            and not form.b_kn and form.paddable and not form.tf32 and form.M >= MID_MIN_M
            and form.N >= MID_MIN_N and lo <= form.K <= hi)


def _b_bytes(form: GemmForm) -> int:
    return form.batch * form.N * form.K * form.elem_bytes


def _mid_rows_config(form: GemmForm, target: Target, epilogue_tile: bool
                     ) -> WgmmaScheduleConfig | None:
    """The 64-row pick of :func:`mid_size_wgmma_config` (``M`` of :data:`MID_MIN_M` to
    :data:`MID_ROWS_MAX_M`, B within the L2), or None where it breaks a rule. 64 x 128
    tiles (one warpgroup), unsplit, through the C tile (``staged_epilogue`` where nothing
    else puts them there: a fused epilogue or padding stores that way already), and:

    - fewer tiles than SMs (one block an SM, one partial wave): 5 stages, one group in
      flight, the plain block order (all blocks run at once: groups of 4 measured within
      1%). GPT-2's 1,024 x 768 x 768 (96 tiles): 4.69 us, the best 4.67, cuBLAS 4.39;
      1,024 x 768 x 3,072: 12.33 us, the best 12.22, cuBLAS 9.29;
    - else 3 stages, none in flight (two blocks an SM: the copies two tiles ahead, one
      block's waits under the other's wgmmas), in groups of :data:`MID_ROWS_RASTER` row
      blocks (2 or 1 where they do not divide the row blocks). 1,024 x 2,304 x 768 (288
      tiles): 9.35 us, the best, cuBLAS 7.82 (the earlier 128 x 128 pick 15.14); 1,024 x
      3,072 x 768: 9.75 us, the best, cuBLAS 9.49 (14.79). Measured at ``K`` = 768 only.

    The sweep stored the cast only: its staged kernels store as a fused epilogue (a bias,
    GELU, a residual, a float32 output) does, over the same C tile a row at a time."""
    rows = -(-form.M // 64)
    if rows * -(-form.N // 128) < target.num_sms:
        cfg = WgmmaScheduleConfig(128, 1, 5, 1, 1)
    else:
        cfg = WgmmaScheduleConfig(128, 1, 3, 0, 1, _grouped(rows))
    if not needs_c_tile(cfg, form, epilogue_tile):
        cfg = replace(cfg, staged_epilogue=True)
    return cfg if first_broken(wgmma_rules(cfg, form, target, True)) is None else None


def _grouped(rows: int) -> int:
    """Groups of :data:`MID_ROWS_RASTER` row blocks, or 2 or 1 where they do not divide
    ``rows``."""
    return next(r for r in (MID_ROWS_RASTER, 2, 1) if rows % r == 0)


def _fused_wide_config(form: GemmForm, target: Target, steps: int
                       ) -> WgmmaScheduleConfig | None:
    """The pick of :func:`mid_size_wgmma_config` for a product with a fused epilogue from
    :data:`MID_192_MIN_M` rows, or None (no such pick, or it breaks a rule). Measured with
    BERT's own epilogues at batch 8 x 512 tokens (``bench/bench_gemm_persistent.py``,
    ``bench/results/gemm_epilogues_4096_2026-11-28.txt``, an H100 and an H200, us, H100 /
    H200, against the 128 x 192 picks of the cast-only sweep):

    - ``N`` <= :data:`MID_FUSED_NARROW_N`: 64 x 128 tiles, 3 stages, none in flight, groups
      of 4, through the C tile: 4096 x 768 x 768 with its residual 10.35 / 10.26 (128 x
      192: 11.27 / 11.01), 4096 x 768 x 3,072 with its residual 35.53 / 33.38 (47.28 /
      46.10; cuBLAS and a separate add 33.45 / 33.29);
    - ``N`` >= :data:`MID_FUSED_WIDE_N` up to :data:`MID_SHORT_STEPS` steps: 128 x 128
      tiles, 3 stages, none in flight, groups of 4, stored from the fragments: 4096 x 3,072
      x 768 with bias and erf GELU 48.05 / 49.72 (66.12 / 60.31).

    The cast-only sweep of the same shapes on an H100 ranked these below 128 x 192 tiles (at
    4096 x 768 x 768 13.7 us against 10.9): there the picks below stand."""
    if form.N <= MID_FUSED_NARROW_N:
        cfg = WgmmaScheduleConfig(128, 1, 3, 0, 1, _grouped(-(-form.M // 64)), True)
    elif form.N >= MID_FUSED_WIDE_N and steps <= MID_SHORT_STEPS:
        cfg = WgmmaScheduleConfig(128, 2, 3, 0, 1, _grouped(-(-form.M // 128)))
    else:
        return None
    return cfg if first_broken(wgmma_rules(cfg, form, target, needs_c_tile(
        cfg, form, True))) is None else None


def _b_once_raster(cfg: WgmmaScheduleConfig, form: GemmForm, target: Target
                   ) -> WgmmaScheduleConfig:
    """``cfg`` in the block order of :data:`~.knobs.WGMMA_SPACE` that reads a B larger than
    the L2 the fewest times (:func:`~.estimate.dram_passes`: once per group of ``raster``
    row blocks; the smallest group of the fewest passes, dividing the row blocks), else
    ``cfg``. GPT-2's head (50,257 x 768, 77 MB) at 1,024 tokens in 128-row blocks: read 8
    times in the plain order, once in groups of 8. The H100 sweep measured what the passes
    cost in the plain order: 64-row tiles (16 passes) took 470 us where 128-row tiles (8)
    took 270 at 5 stages; the grouped order itself was not measured on the head."""
    if _b_bytes(form) <= target.l2_bytes:
        return cfg
    rows = -(-form.M // cfg.block_m)
    raster = min((r for r in WGMMA_SPACE.raster if rows % r == 0),
                 key=lambda r: (-(-rows // r), r))
    return replace(cfg, raster=raster)


def mid_size_wgmma_config(form: GemmForm, target: Target | str | None = None,
                          epilogue_tile: bool = True) -> WgmmaScheduleConfig | None:
    """The wgmma configuration the default takes for a mid-size fp16 product (GPT-2 at
    1,024 tokens, BERT at batch 8 x 512 tokens: ``M`` of 512 to 4,096, ``K`` of 768 to
    3,072) on sm_90a, or None outside the range (:func:`_mid_size`) where the estimates
    choose. The estimates' pick there was up to 1.21x slower than the best measured one
    (an H100 sweep of 14 shapes, every configuration; refits of :func:`wgmma_estimate`'s
    figures, or of a cost per step and per block of each configuration, still missed the
    best by more than 5% on 4 to 6 of them: the measured times of the good configurations
    lie within 10% of each other, where the waves and the per-block costs decide). The
    rule (``T(m, n)``: output tiles of ``m x n``, ``S``: SMs):

    - up to :data:`MID_ROWS_MAX_M` rows with a B that fits the L2: 64 x 128 tiles through
      the C tile, fused epilogues included (:func:`_mid_rows_config`, an H200 sweep);

    then, fitted to the H100 sweep:

    - ``2 T(128, 128) < S``: 64 x 128 tiles (one warpgroup), 5 stages; 64 x 64 up to
      :data:`MID_NARROW_STEPS` steps;
    - 128 x 256 tiles, 4 stages, where ``T(128, 256) >= 2 S``, or ``K`` has at least
      :data:`MID_LONG_STEPS` steps and ``T(128, 256) >=`` :data:`MID_WIDE_WAVE` ``S``;
    - up to :data:`MID_SHORT_STEPS` steps, 128 x 128 tiles of 3 stages where two blocks
      fit an SM;
    - else 128 x 128 tiles of 5 stages (4 where 5 do not fit);
    - before all these, from :data:`MID_192_MIN_M` rows with ``N`` a multiple of 192:
      128 x 192 tiles, 3 stages through the C tile up to :data:`MID_SHORT_STEPS` steps (a
      fused epilogue too: it stores the same way), 4 stages from :data:`MID_LONG_STEPS`
      (without a fused epilogue).

    Each with one group in flight, unsplit, in the block order that reads a B larger than
    the L2 the fewest times (:func:`_b_once_raster`: GPT-2's head); a pick that breaks a
    rule of :func:`~.rules.wgmma_rules` (with the C tile where the epilogue or padding
    needs it) gives way to the next. The H100 sweep's products stored only their cast,
    through the C tile where the tiles padded them: a fused epilogue (``epilogue_tile``)
    over a pick of these that does not pad is left to the estimates (None)."""
    target = as_target(target)
    if not _mid_size(form) or wgmma_refusal(form, target) is not None:
        return None
    if form.M <= MID_ROWS_MAX_M and _b_bytes(form) <= target.l2_bytes:
        pick = _mid_rows_config(form, target, epilogue_tile)
        if pick is not None:
            return pick
    sms = target.num_sms

    def tiles(bm: int, bn: int) -> int:
        return -(-form.M // bm) * -(-form.N // bn)

    def c_tile(cfg) -> bool:
        return needs_c_tile(cfg, form, epilogue_tile)

    steps = -(-form.K // block_k(form))
    if form.M >= MID_192_MIN_M and epilogue_tile:
        pick = _fused_wide_config(form, target, steps)
        if pick is not None:
            return pick
    if form.M >= MID_192_MIN_M and form.N % 192 == 0:
        # short K: 3 stages, the accumulators through the C tile and stored a row at a
        # time (as a fused epilogue stores them: 10.9 us for 4096 x 768 x 768 against
        # 15.6); long K: 4 stages, stored from the fragments (the bias epilogue of this
        # one was not measured: it is left to the picks below)
        # (groups of 4 row blocks ran 4096 x 2304 x 768 in 32.24 / 30.35 us on an H100 /
        # H200 against 33.94 / 30.81 in the plain order in the epilogue sweep above, but
        # 1.2-1.3x slower in the H100 knob sweep of the cast: left plain until both agree)
        pick = (WgmmaScheduleConfig(192, 2, 3, 1, 1, staged_epilogue=True)
                if steps <= MID_SHORT_STEPS else
                WgmmaScheduleConfig(192, 2, 4, 1, 1) if steps >= MID_LONG_STEPS else None)
        if pick is not None and (pick.staged_epilogue or not epilogue_tile) and first_broken(
                wgmma_rules(pick, form, target, c_tile(pick))) is None:
            return pick
    if 2 * tiles(128, 128) < sms:
        picks = [WgmmaScheduleConfig(128, 1, 5, 1, 1), WgmmaScheduleConfig(128, 1, 4, 1, 1)]
        if steps <= MID_NARROW_STEPS:
            picks.insert(0, WgmmaScheduleConfig(64, 1, 5, 1, 1))
    else:
        wide, pair = WgmmaScheduleConfig(256, 2, 4, 1, 1), WgmmaScheduleConfig(128, 2, 3, 1, 1)
        picks = []
        if tiles(128, 256) >= 2 * sms or (steps >= MID_LONG_STEPS
                                          and tiles(128, 256) >= MID_WIDE_WAVE * sms):
            picks.append(wide)
        if steps <= MID_SHORT_STEPS and wgmma_blocks_per_sm(pair, target, c_tile(pair)) >= 2:
            picks.append(pair)
        picks += [WgmmaScheduleConfig(128, 2, 5, 1, 1), WgmmaScheduleConfig(128, 2, 4, 1, 1)]
    for cfg in picks:
        if first_broken(wgmma_rules(cfg, form, target, c_tile(cfg))) is None:
            # the sweep's C tiles came with padding only: a fused epilogue over tiles
            # that divide the product (a bias, BERT's GELU) was not measured
            return None if epilogue_tile and not pads(cfg, form) else _b_once_raster(
                cfg, form, target)
    return None
