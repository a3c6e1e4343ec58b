"""The default choosers: of each kind's candidates (:func:`gemm_candidates`,
:func:`wgmma_candidates`: the knob spaces of :mod:`.knobs` filtered by :mod:`.rules`), the
one :mod:`.estimate` expects fastest, near ties to the larger tile; :func:`wgmma_choice`
and :func:`wgmma_conv_choice` ask :mod:`.choice` whether wgmma beats mma.sync."""

from __future__ import annotations

from dataclasses import replace

from ....ir.te import ComputeOp
from ....passes.schedule.common import ScheduleError
from ....target import Target, as_target
from ..remap import epilogue_remap
from .choice import mma_sync_refusal, prefer_wgmma, wgmma_conv_refusal, wgmma_refusal
from .conv_shapes import (
    long_conv_wgmma_config,
    short_conv_flight,
    small_conv_config,
    windowed,
)
from .estimate import epilogue_read_time, gemm_time, wgmma_time
from .forms import GemmForm, conv_gemm_form, direct_store
from .knobs import (
    B_KN_PANEL,
    BLOCK_N,
    MMA_SYNC_SPACE,
    WGMMA_SPACE,
    TensorCoreConfig,
    WgmmaScheduleConfig,
    split_parts,
    tile_limit,
)
from .mid_size import mid_size_wgmma_config
from .row_blocks import deep_by_rows
from .rules import (
    C_TILE_ALIASED,
    _round_up,
    block_k,
    conv_rules,
    first_broken,
    gemm_rules,
    needs_c_tile,
    needs_padding,
    padded_extents,
    pads,
    wgmma_rules,
)

# -- mma.sync ----------------------------------------------------------------------------

_BLOCKS = (  # (block_m, block_n, warps_m, warps_n): warp tiles of 16..64 x 8..64
    (128, 128, 2, 2), (128, 64, 2, 2), (64, 128, 2, 2), (64, 64, 2, 2), (128, 32, 4, 1),
    (64, 32, 2, 1), (32, 64, 1, 2), (128, 16, 4, 1), (32, 32, 1, 2), (64, 16, 4, 1),
    (16, 64, 1, 4), (32, 16, 2, 1), (16, 32, 1, 2), (16, 16, 1, 2),
)


DEFAULT_STAGES = 4
"""The depth the default chooser gives every tile where shared memory and ``K`` allow: 4
beat 2 in four of five of 2,300 measured configurations (an H200), by up to 2.5x at small M."""


def gemm_candidates(form: GemmForm, target: Target | str | None = None,
                    split_k: bool = True) -> list:
    """Every configuration the default chooser ranks for ``form``: the table's block tiles
    up to :func:`~.knobs.tile_limit` (dividing ``M``, ``N`` where the product cannot be
    padded); each ``block_k`` from 128 down to the mma's k with a stage's tiles within 16
    KiB (at most 32 from 64 x 64 tiles) padding ``K`` by at most an eighth; split-K parts
    of :data:`SPLIT_K_CHOICES` where paddable (``block_k`` >= 32, >= 4 steps a part);
    :data:`DEFAULT_STAGES` stages where steps and shared memory allow; widest copies."""
    target = as_target(target)
    eb, M, N, K = form.elem_bytes, form.M, form.N, form.K
    k_slack = max(_round_up(K, 16) - K, K // 8)
    splits = (1,) + SPLIT_K_CHOICES if (split_k and form.paddable) else (1,)
    out = []
    for bm, bn, wm, wn in _BLOCKS:
        if bm > tile_limit(M) or bn > tile_limit(N):
            continue
        if not form.paddable and (M % bm or N % bn):
            continue
        big = bm * bn >= 64 * 64
        for bk in (128, 64, 32, 16, 8):
            if bk < form.mma_k or (bm + bn) * bk * eb > 16384 or (big and bk > 32):
                continue
            if not form.paddable and K % bk:
                continue
            for split in splits:
                part = bk * split
                steps = -(-K // part)
                if split > 1 and (bk < 32 or steps < 4):
                    continue
                if _round_up(K, part) - K > k_slack:
                    continue
                for stages in range(min(DEFAULT_STAGES, steps), 1, -1):
                    cfg = _first_legal(form, target, bm, bn, bk, wm, wn, stages, split)
                    if cfg is not None:
                        out.append(cfg)
                        break
                else:
                    cfg = _first_legal(form, target, bm, bn, bk, wm, wn, 1, split)
                    if cfg is not None:
                        out.append(cfg)
    return out


NEAR_TIE = 1.02
"""Estimates within this factor of the best are a tie for the default chooser."""


def _best(cands: list, form: GemmForm, target: Target, reads: int = 0
          ) -> TensorCoreConfig | None:
    """The candidate :func:`gemm_time` (with :func:`~.estimate.epilogue_read_time` of an
    epilogue reading ``reads`` output-sized tensors) expects fastest; ties within
    :data:`NEAR_TIE` (all tiles busy, or all at the DRAM floor) go to the larger block
    tile, the longer ``block_k``, the least work without the floor, the fewest split-K
    parts."""
    if not cands:
        return None
    timed = [(gemm_time(c, form, target) + epilogue_read_time(c, form, reads, target), c)
             for c in cands]
    fastest = min(t for t, _ in timed)
    near = [c for t, c in timed if t <= fastest * NEAR_TIE]
    return min(near, key=lambda c: (-c.block_m * c.block_n, -c.block_k,
                                    gemm_time(c, form, target, dram_floor=False), c.split_k))


def choose_gemm_config(form: GemmForm, target: Target | str | None = None,
                       split_k: bool = True) -> TensorCoreConfig:
    """The default tiles of ``form`` on ``target``: of :func:`gemm_candidates`, the one
    :func:`gemm_time` expects fastest (split-K included where ``split_k``)."""
    target = as_target(target)
    few = few_row_mma_config(form, target)
    if few is not None:
        return few
    best = _best(gemm_candidates(form, target, split_k), form, target)
    if best is None:
        raise ScheduleError(f"no tensor-core tiles of the default table fit {form}")
    return best


def remap_config(form: GemmForm, target: Target | str | None = None
                 ) -> TensorCoreConfig | None:
    """The default tiles of ``form`` for an epilogue storing another layout
    (:mod:`.remap`, which runs over the product's own loops): the best of
    :func:`gemm_candidates` without split-K whose tiles divide the product, or None."""
    target = as_target(target)
    return _best([c for c in gemm_candidates(form, target, split_k=False)
                  if not (form.paddable and needs_padding(c, form))], form, target)


SPLIT_K_CHOICES = split_parts(MMA_SYNC_SPACE)
"""The split-K parts the default chooser tries."""


def _first_legal(form, target, bm, bn, bk, wm, wn, stages, split_k=1):
    """The legal config of these tiles with the widest copies, or None."""
    eb = form.elem_bytes
    for v in (16 // eb, 8 // eb, 4 // eb, 2 // eb):
        if v < 1:
            continue
        cfg = TensorCoreConfig(bm, bn, bk, wm, wn, vec=v, pad=16 // eb, frag_load="ldmatrix",
                               tf32=form.tf32, stages=stages,
                               async_copy=target.has_cp_async and v * eb in (4, 8, 16),
                               split_k=split_k)
        rules = (conv_rules(cfg, form.M, form.N, form.K, form.tf32, target) if form.conv
                 else gemm_rules(cfg, form, target))
        if first_broken(rules) is None:
            return cfg
    return None


def wgmma_choice(op: ComputeOp, epilogue: ComputeOp | None, form: GemmForm,
                 target: Target | str | None = None):
    """The :class:`~.knobs.WgmmaScheduleConfig` the default schedule runs product stage
    ``op`` (with ``epilogue``) with, or None where it stays on mma.sync: wgmma does not
    run it (:func:`~.choice.wgmma_refusal`), no wgmma tiles fit, or the mma.sync pick's
    estimate is faster (:func:`~.choice.prefer_wgmma`; small products at the DRAM floor,
    where 64-row tiles only pad more). Few-row and mid-size fp16 products of the measured
    ranges follow :func:`few_row_mma_config`, :func:`few_row_wgmma_config` and
    :func:`mid_size_wgmma_config` instead."""
    target = as_target(target)
    if wgmma_refusal(form, target) is not None:
        return None
    remap = epilogue_remap(op, epilogue) is not None
    epi_tile = not direct_store(op, epilogue, form)
    if not remap:  # the few-row rules, where they speak, over the estimates
        if few_row_mma_config(form, target) is not None:
            return None
        few = few_row_wgmma_config(form, target, epi_tile)
        if few is None:
            few = mid_size_wgmma_config(form, target, epi_tile)
        if few is not None:
            return few
    w = choose_wgmma_config(form, target, epi_tile, remap)
    if w is None:
        return None
    if mma_sync_refusal(form) is not None:
        return w  # fp8: wgmma or nothing
    mma = remap_config(form, target) if remap else choose_gemm_config(form, target)
    return w if prefer_wgmma(form, w, mma, needs_c_tile(w, form, epi_tile), target) else None


# -- wgmma -------------------------------------------------------------------------------

WGMMA_SPLIT_K_CHOICES = split_parts(WGMMA_SPACE)
"""The split-K parts :func:`wgmma_candidates` tries."""


def wgmma_candidates(form, target=None, epilogue_tile: bool = True, split_k: bool = True,
                     divide: bool = False) -> list:
    """Every configuration :func:`choose_wgmma_config` ranks for ``form``: ``block_n`` up
    to :func:`~.knobs.tile_limit` of ``N``, 1 or 2 warpgroups (2 where ``M > 64``), split-K
    parts of :data:`WGMMA_SPLIT_K_CHOICES` where paddable (>= 4 steps a part, ``K`` padded
    by at most an eighth), the most stages (4 down to 1) its steps and shared memory allow
    (with the C tile where ``epilogue_tile`` or padding needs it), one group in flight
    from 3 stages; a convolution's one-warpgroup tiles from :data:`CONV_MAX_STAGES`.
    ``divide``: only tiles dividing the product, no split-K."""
    t = as_target(target)
    if wgmma_refusal(form, t) is not None:
        return []
    K = form.K
    bk = block_k(form)
    slack = max(-(-K // bk) * bk - K, K // 8)
    splits = (1,) + WGMMA_SPLIT_K_CHOICES if (split_k and form.paddable and not divide) else (1,)
    out = []
    for bn in BLOCK_N:
        if bn > max(tile_limit(form.N), BLOCK_N[0]):
            continue
        for wgs in (1, 2):
            if wgs == 2 and form.M <= 64:
                continue
            deepest = CONV_MAX_STAGES if form.conv and wgs == 1 else 4
            for split in splits:
                part = bk * split
                steps = -(-K // part)
                if split > 1 and steps < 4:
                    continue
                if -(-K // part) * part - K > slack:
                    continue
                for stages in range(deepest, 0, -1):
                    if stages > 1 and steps < stages:
                        continue
                    cfg = WgmmaScheduleConfig(bn, wgs, stages, 1 if stages >= 3 else 0, split)
                    if divide and padded_extents(cfg, form) != (form.M, form.N, form.K):
                        break
                    c_tile = needs_c_tile(cfg, form, epilogue_tile)
                    if first_broken(wgmma_rules(cfg, form, t, c_tile)) is not None:
                        continue
                    out.append(cfg)
                    break
    return out


SPLIT_K_GAIN = 0.85
"""Split-K is chosen only below this share of the best unsplit estimate: its second kernel
costs more than the estimate's launch (128 x 768 x 768 measured 3.9 us unsplit)."""


CONV_SPLIT_K_GAIN = 1.0
""":data:`SPLIT_K_GAIN` of the convolutions' one-warpgroup tiles: none, split-K wherever the
estimate expects it faster. In ResNet-50's tuned records (an H100, batch 1; the fastest
64 x 64 tiles of each part count of each layer without a residual) the estimate's ratio of
a split to the next smaller one fell on the measured side of 1 in 21 of 22 pairs, and 18
of them measured further from 1 (0.82 measured 0.71, 0.93 0.85, 0.97 0.895; 1.045 measured
1.23); the one pair on the wrong side, 784 x 256 x 512, estimated 1.07 for 2 parts and
measured 0.97. So a hurdle only kept measured wins away: 784 x 128 x 512 (26 tiles for 132
SMs) stayed unsplit under the 5% one it had, where 2 parts measured the fastest of the
records (3.61 us). Split two-warpgroup tiles were not among the records' fastest: they
keep the products' hurdle."""
CONV_MAX_STAGES = 5
"""The deepest pipeline :func:`wgmma_candidates` gives a convolution's one-warpgroup tiles
(4 for two warpgroups, as for products): 5 stages measured up to 4% faster than 4 on 7 of
ResNet-50's layers (tuned records, an H100, all on 64 x 64 tiles), as on the few-row and
mid-size products."""


def _split_k_gain(form, cfg) -> float:
    """The share of the best unsplit estimate a split ``cfg`` must stay below:
    :data:`CONV_SPLIT_K_GAIN` for a convolution's one-warpgroup tiles (what the records
    measured), else :data:`SPLIT_K_GAIN`."""
    return CONV_SPLIT_K_GAIN if form.conv and cfg.warpgroups == 1 else SPLIT_K_GAIN


def choose_wgmma_config(form, target=None, epilogue_tile: bool = True, remap: bool = False,
                        reads: int = 0) -> WgmmaScheduleConfig | None:
    """Of :func:`wgmma_candidates`, the one :func:`wgmma_time` expects fastest (near ties
    to the larger tile, more stages, fewer split-K parts; split-K only where it gains
    :data:`SPLIT_K_GAIN`), or None. ``remap``: tiles dividing the product, no split-K.
    ``reads``: output-sized tensors the epilogue reads (:func:`epilogue_reads`), costed
    by :func:`~.estimate.epilogue_read_time`. A convolution (:data:`CONV_SPLIT_K_GAIN`,
    :data:`CONV_MAX_STAGES`) breaks near ties to the tiles keeping more SMs busy first.
    On an H100: 4096^3 takes 128 x 256, 4 stages, one group in flight; 128 x 3072 x 768
    64 x 64, 4 stages; 128 x 768 x 3072 the same in split-K parts."""
    t = as_target(target)
    cands = wgmma_candidates(form, t, epilogue_tile, divide=remap)
    if not cands:
        return None
    timed = [(wgmma_time(c, form, t, needs_c_tile(c, form, epilogue_tile))
              + epilogue_read_time(c, form, reads, t, needs_c_tile(c, form, epilogue_tile)), c)
             for c in cands]
    unsplit = [x for x, c in timed if c.split_k == 1]
    if unsplit:
        best_unsplit = min(unsplit)
        timed = [(x, c) for x, c in timed
                 if c.split_k == 1 or x < _split_k_gain(form, c) * best_unsplit]
    fastest = min(x for x, _ in timed)
    near = [c for x, c in timed if x <= fastest * NEAR_TIE]

    def busy(c) -> int:
        # a convolution's near ties go to the tiles keeping more SMs busy first
        if not form.conv:
            return 0
        blocks = -(-form.M // c.block_m) * -(-form.N // c.block_n) * c.split_k
        return -min(blocks, t.num_sms)

    pick = min(near, key=lambda c: (
        busy(c), -c.block_m * c.block_n, -c.stages,
        wgmma_time(c, form, t, needs_c_tile(c, form, epilogue_tile), dram_floor=False),
        c.split_k))
    return _fused_pair(form, t, pick) if epilogue_tile and not remap else pick


FUSED_PAIR = WgmmaScheduleConfig(128, 2, 3, 1, 1)
"""The tiles a product with a fused epilogue over the C tile may take instead of the
estimate's pick (:func:`_fused_pair`): 128 x 128, 3 stages, whose 96 KB of operand stages
hold the C tile too (plan_dynamic_shared), so two blocks share an SM."""
FUSED_PAIR_TIE = 1.10
"""How much slower than the pick's the pair's estimated main loop may be: the estimate
leaves out the epilogue, which at one block an SM runs with nothing overlapping it and at
two under the other block's main loop. The smallest such epilogue measured (an H100) took
14% of its product: BERT's erf GELU, 58.8 us against 51.8 bare at 4096 x 3072 x 768; GPT-2's
tanh GELU 68% (27.3 against 16.2 at 1024 x 3072 x 768)."""


def _fused_pair(form, t, pick):
    """:data:`FUSED_PAIR` over ``pick`` for a product whose fused epilogue reads the C tile,
    where ``pick`` runs one block an SM, unsplit, and the pair, two blocks an SM with its C
    tile over the stages, does not pad more and is estimated at most
    :data:`FUSED_PAIR_TIE` slower (both with their C tiles over the stages)."""
    from .estimate import wgmma_blocks_per_sm

    pair = FUSED_PAIR
    if form.conv or pick.split_k > 1 or pick == pair or (pads(pair, form)
                                                         and not pads(pick, form)):
        return pick
    if wgmma_blocks_per_sm(pick, t, C_TILE_ALIASED) >= 2 or wgmma_blocks_per_sm(
            pair, t, C_TILE_ALIASED) < 2:
        return pick
    if first_broken(wgmma_rules(pair, form, t, True)) is not None:
        return pick
    if wgmma_time(pair, form, t, C_TILE_ALIASED) > FUSED_PAIR_TIE * wgmma_time(
            pick, form, t, C_TILE_ALIASED):
        return pick
    return pair


# -- few rows ---------------------------------------------------------------------------

FEW_ROWS_MAX_M = 256
"""The few-row rule covers fp16 products of at most this many rows and ``N``, ``K`` within
:data:`FEW_ROWS_NK`: the range a sweep on an H100 measured
(``bench/results/gemm_few_rows_sweep_h100_2026-11-27.jsonl``, replayed by
``bench/few_rows_replay.py``)."""
FEW_ROWS_NK = (768, 4096)
FEW_ROWS_MIN_PART_K = 768
"""A split-K part of the few-row rule reduces at least this many columns (12 steps)."""
FEW_ROWS_DEEP_PART_K = 1024
"""From this many columns a part (16 steps) the few-row rule for 64 < ``M`` <= 256 takes 5
stages (1.07x to 1.30x faster than 4 on 8 of the sweep's 10 such shapes, a tie on the other
two); at 12 steps 4 and 5 stages measured a tie (0.94x to 1.09x), and 4 it keeps."""


def _few_rows(form: GemmForm) -> bool:
    """Whether ``form`` is a product of the measured few-row range: fp16, not a conv nor a
    batch, at most :data:`FEW_ROWS_MAX_M` rows, ``N`` and ``K`` within :data:`FEW_ROWS_NK`."""
    lo, hi = FEW_ROWS_NK
    return (form.in_dtype == "float16" and not form.conv and not form.batched
            and form.paddable and not form.tf32 and form.M <= FEW_ROWS_MAX_M
            and lo <= form.N <= hi and lo <= form.K <= hi)


def few_row_mma_config(form: GemmForm, target: Target | str | None = None
                       ) -> TensorCoreConfig | None:
    """The mma.sync configuration the default takes for a few-row fp16 product on sm_90 or
    later, or None where the estimates choose. One rule, from the same sweep as
    :func:`few_row_wgmma_config`: ``M`` <= 16, ``N`` >= 3072, ``K`` < 3072 take 16 x 32
    tiles of ``block_k`` 64 over the whole reduction, :data:`DEFAULT_STAGES` stages (the
    best measured of all four such shapes; the estimates' 16 x 32 x 128 took 1.07x to
    1.22x as long)."""
    target = as_target(target)
    if (target.sm < 90 or not _few_rows(form) or form.M > 16 or form.N < 3072
            or form.K >= 3072):
        return None
    steps = -(-form.K // 64)
    return _first_legal(form, target, 16, 32, 64, 1, 2, min(DEFAULT_STAGES, steps))


def few_row_wgmma_config(form: GemmForm, target: Target | str | None = None,
                         epilogue_tile: bool = True) -> WgmmaScheduleConfig | None:
    """The wgmma configuration the default takes for a few-row fp16 product on sm_90a, or
    None where the rule does not speak (outside the measured range, or its pick breaks a
    rule) and the estimates choose. The estimates rank these products badly (the default
    measured a geomean 0.863x cuBLAS over the sweep's 36 shapes; their own pick of 128 x
    4096 x 4096 took 35.5 us against 20.1 us for the best): they never try 5 stages, which
    won 18 of the 24 shapes wgmma won, and they prefer 2 warpgroups where one measured
    faster. The rule, fitted to that sweep:

    - ``M`` <= 16, ``N`` and ``K`` >= 3072: 64 x 128 tiles, 5 stages, 4 split-K parts
      (best measured on 6 of those 8 shapes, within 4% on the other two; mma.sync with 16
      rows took up to 1.8x as long); smaller ones follow :func:`few_row_mma_config` where
      ``N`` >= 3072, else the estimates;
    - 64 < ``M`` <= 256: 64 x 64 tiles (one warpgroup), one group in flight, 5 stages
      where a part has at least :data:`FEW_ROWS_DEEP_PART_K` columns or ``M`` > 128
      (:func:`~.row_blocks.deep_by_rows`: ViT-B/16's 197 tokens), else 4;
      where the output has fewer tiles than half the SMs, the reduction in the most split-K
      parts of 2, 4, 8 keeping tiles x parts within 1.5 waves and parts of at least
      :data:`FEW_ROWS_MIN_PART_K` columns.

    ``M`` of 17 to 64 was not measured and keeps the estimates' pick; so does everything
    outside the range (:func:`_few_rows`)."""
    target = as_target(target)
    if not _few_rows(form) or wgmma_refusal(form, target) is not None:
        return None
    if form.M <= 16:
        if form.N < 3072 or form.K < 3072:
            return None
        cfg = WgmmaScheduleConfig(128, 1, 5, 1, 4)
    elif form.M > 64:
        tiles = -(-form.M // 64) * -(-form.N // 64)
        split = 1
        if 2 * tiles < target.num_sms:
            for p in (2, 4, 8):
                if tiles * p <= 1.5 * target.num_sms and form.K // p >= FEW_ROWS_MIN_PART_K:
                    split = p
        # 5 stages where a part runs at least 16 steps; at 12 they tie with 4 up to 2 row
        # blocks, and win from 3 (row_blocks.py)
        stages = (5 if form.K // split >= FEW_ROWS_DEEP_PART_K or deep_by_rows(form)
                  else DEFAULT_STAGES)
        cfg = WgmmaScheduleConfig(64, 1, stages, 1, split)
    else:
        return None
    if first_broken(wgmma_rules(cfg, form, target,
                                needs_c_tile(cfg, form, epilogue_tile))) is not None:
        return None
    return cfg


# -- convolutions ----------------------------------------------------------------------------

def epilogue_reads(op: ComputeOp, epilogue: ComputeOp | None) -> int:
    """How many tensors of the output's size (a residual) the element-wise ``epilogue`` of
    product or conv stage ``op`` reads besides ``op``'s result: the inputs of the stages
    between them that are not computed there, of at least as many elements as the output
    (a bias or a per-channel scale is smaller)."""
    if epilogue is None or epilogue is op:
        return 0
    size = _elements(epilogue.output(0))
    seen, count, stack = set(), 0, [epilogue]
    while stack:
        for t in stack.pop().input_tensors:
            if t.op is op or id(t.op) in seen:
                continue
            seen.add(id(t.op))
            if isinstance(t.op, ComputeOp) and not t.op.reduce_axis:
                stack.append(t.op)
            elif _elements(t) >= size:
                count += 1
    return count


def _elements(t) -> int:
    n = 1
    for x in t.shape:
        n *= int(x)
    return n


RESIDUAL_ROWS = (32, 4096)
"""The residual rule (:func:`residual_conv_config`) covers fp16 convolutions of this many
output rows (``M``), :data:`RESIDUAL_COLUMNS` output channels and :data:`RESIDUAL_DEPTH`
reduction columns: the range of ResNet-50's residual 1 x 1 layers at batch 1 (49 to 3,136
rows, 256 to 2,048 channels, 64 to 512 columns), which its tuned records measured
(``bench/results/resnet50_conv_records_h100_2026-11-27.jsonl``, an H100)."""
RESIDUAL_COLUMNS = (256, 2048)
RESIDUAL_DEPTH = (64, 512)
RESIDUAL_MAX_OUTPUT = 3136 * 256
"""The residual rule's largest output (``M x N``, the batch included): the records' largest
(ResNet-50's first stage at batch 1); at batch 16 its 14 x 14 stage (3,136 x 1,024) is
four times that and was not measured."""
RESIDUAL_WIDE_BLOCKS = 2
"""The residual rule takes 32 x 64 tiles where they give every SM at least this many
blocks, else 32 x 32."""
RESIDUAL_STAGES = 3
"""The residual rule's depth where ``K`` has the steps: 3 measured 2% to 9% faster than 2
and 4 on the records' 32 x 32 tiles (196 x 1,024 x 256: 3.29 us against 3.36 at 2; 49 x
2,048 x 512: 3.30 against 3.61 at 4)."""


def residual_conv_config(form: GemmForm, target: Target | str | None = None,
                         reads: int = 0) -> TensorCoreConfig | None:
    """The mma.sync tiles the default takes for a convolution whose fused epilogue reads
    ``reads`` >= 1 tensors of the output's size (a residual), on sm_90 or later, within the
    measured range (:data:`RESIDUAL_ROWS`, :data:`RESIDUAL_COLUMNS`,
    :data:`RESIDUAL_DEPTH`, :data:`RESIDUAL_MAX_OUTPUT`); None elsewhere (the estimates choose).

    Why: the residual's loads wait one after the other in the epilogue, about 120 cycles
    an element a thread stores (:data:`~.estimate.EPILOGUE_READ_CYCLES`), so wgmma's
    tiles of 32 to 128 elements a thread lose to mma.sync tiles of 8 or 16 (the records'
    fastest wgmma ran the four residual layers 1.1x to 1.7x slower than their fastest
    mma.sync), and splitting K to move the residual to a second kernel costs that
    kernel. The estimates rank the mma.sync tiles of these layers badly (they favour 8
    warps and 64-row tiles; the records measured 4 warps of 16 x 16 or 32 x 16 fastest).

    The rule: ``block_k`` 64, :data:`RESIDUAL_STAGES` stages (fewer where ``K`` has fewer
    steps), unsplit, 4 warps over 32 x 32 tiles (8 elements a thread); 32 x 64 tiles (1 x
    4 warps, 16 elements a thread, A read from L2 half as often) where those give every SM
    :data:`RESIDUAL_WIDE_BLOCKS` blocks or more. On the records: 3,136 x 256 x 64 takes 32
    x 64 (2.90 us, the fastest measured; 32 x 32 x 32 ran 3.65), 196 x 1,024 x 256 32 x 32
    (3.29, the fastest), 49 x 2,048 x 512 32 x 32 (3.30; the fastest, 8 warps, 3.26;
    the wgmma pick in 2 parts 3.71); 784 x 512 x 128 32 x 32 in 2 stages, which the
    records hold only on 1 x 4 warps (3.86; the fastest 16 x 128 x 16, 3.73)."""
    target = as_target(target)
    lo_m, hi_m = RESIDUAL_ROWS
    lo_n, hi_n = RESIDUAL_COLUMNS
    lo_k, hi_k = RESIDUAL_DEPTH
    if (reads < 1 or target.sm < 90 or not form.conv or form.in_dtype != "float16"
            or form.tf32 or not form.paddable or not lo_m <= form.M <= hi_m
            or not lo_n <= form.N <= hi_n or not lo_k <= form.K <= hi_k
            or form.batch * form.M * form.N > RESIDUAL_MAX_OUTPUT):
        return None
    wide = form.batch * -(-form.M // 32) * -(-form.N // 64)
    bm, bn, wm, wn = (32, 64, 1, 4) if wide >= RESIDUAL_WIDE_BLOCKS * target.num_sms else (
        32, 32, 2, 2)
    steps = -(-form.K // 64)
    return _first_legal(form, target, bm, bn, 64, wm, wn, min(RESIDUAL_STAGES, steps))


def choose_conv_config(op: ComputeOp, target: Target | str | None = None,
                       epilogue: ComputeOp | None = None) -> TensorCoreConfig:
    """:func:`conv_config`, or a :class:`ScheduleError` where no configuration fits."""
    cfg = conv_config(op, target, epilogue)
    if cfg is None:
        raise ScheduleError(f"tensor-core conv2d {op.name}: no configuration fits target "
                            f"{as_target(target).arch}")
    return cfg


def conv_config(op: ComputeOp, target: Target | str | None = None,
                epilogue: ComputeOp | None = None) -> TensorCoreConfig | None:
    """The default mma.sync configuration of conv stage ``op`` on ``target`` (None where none
    fits): the products' chooser on its implicit GEMM (:func:`gemm_candidates` of
    :func:`~.forms.conv_gemm_form` ranked by :func:`~.estimate.gemm_time`, split-K and
    :data:`DEFAULT_STAGES` stages included), so that one knob space, legality check and
    estimate serve products and convolutions alike. It replaced a count of waves x (tile
    work + tile loads) over one ``block_k`` per tile: on an H100 on mma.sync only it ran
    ResNet-18 at batch 1 2.34x and ResNet-50 1.90x faster (docs/tensor_cores.md).
    ``epilogue``: the fused element-wise stages, whose residual reads
    (:func:`epilogue_reads`) favour tiles of fewer elements a thread; in the measured
    residual range :func:`residual_conv_config`'s tiles instead, and for a convolution of
    little work :func:`~.conv_shapes.small_conv_config`'s."""
    target = as_target(target)
    form = conv_gemm_form(op)
    reads = epilogue_reads(op, epilogue)
    rule = measured_conv_mma_config(form, target, reads)
    if rule is not None:
        return rule
    return _best(gemm_candidates(form, target), form, target, reads)


def measured_conv_mma_config(form: GemmForm, target: Target,
                             reads: int) -> TensorCoreConfig | None:
    """The mma.sync tiles a measured conv rule takes (:func:`residual_conv_config`, then
    :func:`~.conv_shapes.small_conv_config`), or None where neither speaks: where one
    does, its tiles ran faster than every wgmma configuration of those layers."""
    rule = residual_conv_config(form, target, reads)
    return rule if rule is not None else small_conv_config(form, target)


def wgmma_conv_config(op: ComputeOp, target: Target | str | None = None,
                      epilogue: ComputeOp | None = None):
    """:func:`choose_wgmma_config` on conv stage ``op``'s implicit GEMM (its channels at
    least one 64-wide tile, which the schedule pads them to; the residual reads of
    ``epilogue`` costed), or None; a long reduction over many tiles takes
    :func:`~.conv_shapes.long_conv_wgmma_config`'s tiles instead, and a short one waits
    each step's wgmmas (:func:`~.conv_shapes.short_conv_flight`)."""
    form = conv_gemm_form(op)
    rule = long_conv_wgmma_config(form, target, windowed(op), epilogue_reads(op, epilogue))
    if rule is not None:
        return rule
    cfg = choose_wgmma_config(replace(form, N=max(form.N, B_KN_PANEL)), as_target(target),
                              reads=epilogue_reads(op, epilogue))
    return None if cfg is None else short_conv_flight(cfg, form)


def choose_wgmma_conv_config(op: ComputeOp, target: Target | str | None = None,
                             epilogue: ComputeOp | None = None):
    """:func:`wgmma_conv_config`, or a :class:`ScheduleError`."""
    target = as_target(target)
    cfg = wgmma_conv_config(op, target, epilogue)
    if cfg is None:
        form = conv_gemm_form(op)
        raise ScheduleError(f"wgmma conv2d {op.name}: no wgmma configuration fits the "
                            f"implicit GEMM {form.M}x{form.N}x{form.K} on {target.arch}")
    return cfg


def wgmma_conv_choice(op: ComputeOp, epilogue: ComputeOp | None = None,
                      target: Target | str | None = None):
    """The wgmma configuration the default conv schedule runs ``op`` with, or None where
    it stays on mma.sync, decided as :func:`wgmma_choice` does for products: wgmma must run
    it (:func:`~.choice.wgmma_conv_refusal`, :func:`~.choice.wgmma_refusal`) and its
    estimate (with the C tile) beat that of :func:`conv_config`'s pick, both on
    :func:`conv_gemm_form`, both with the residual reads of ``epilogue``
    (:func:`epilogue_reads`, :func:`~.estimate.epilogue_read_time`): the wgmma pick
    knows them, and so does the mma.sync pick compared, the one the conv schedule takes
    without a configuration (:func:`choose_conv_config` of ``op`` and ``epilogue``).
    Where :func:`residual_conv_config` or :func:`~.conv_shapes.small_conv_config` speaks,
    mma.sync (their tiles measured faster than every wgmma configuration of those layers);
    where :func:`~.conv_shapes.long_conv_wgmma_config` does, its tiles."""
    target = as_target(target)
    if wgmma_conv_refusal(op, target) is not None:
        return None
    form = conv_gemm_form(op)
    if wgmma_refusal(form, target) is not None:
        return None
    reads = epilogue_reads(op, epilogue)
    if measured_conv_mma_config(form, target, reads) is not None:
        return None  # a measured rule's mma.sync tiles: faster than any wgmma there
    long = long_conv_wgmma_config(form, target, windowed(op), reads)
    if long is not None:
        return long  # measured faster than the estimates' wgmma and mma.sync picks
    w = wgmma_conv_config(op, target, epilogue)
    if w is None:
        return None
    return w if prefer_wgmma(form, w, conv_config(op, target, epilogue), True, target,
                             reads) else None

