"""Three rules for fp16 convolutions the estimates rank badly, fitted to the tuned records
of MobileNetV2 b1, ResNet-18 b1 / b16 and ResNet-50 b1 on an H200
(``bench/conv_defaults_h200.py`` replays them):

- :func:`small_conv_config`: a convolution of little work runs in 1.5 to 3 us, where
  every estimate sits at the launch floor and ties go to the largest tile; what decides
  is how many blocks share the SMs and how long each one runs. mma.sync tiles of 4 warps
  and 4 to 8 elements a thread win, and wgmma loses: its fastest configuration of any
  such layer measured 2.7 to 3.3 us (its prologue and the C tile), mma.sync's 1.5 to 3.1;
- :func:`long_conv_wgmma_config`: a long reduction (``K`` >= 576) over an output of at
  least half a wave of 64 x 64 tiles runs fastest on one warpgroup of 64 x 128 (ResNet-18
  b16's 3 x 3 layers of 128 to 512 channels: up to 1.7x faster than the estimates'
  128 x 64, 128 x 128 or unsplit 64 x 64), split in parts where those tiles are too few
  for the SMs;
- :func:`short_conv_flight`: an unsplit reduction of at most 4 steps waits each step's
  wgmmas (no group in flight), as fast or faster on every such layer measured.

The first two return None outside their range, the third its input: the estimates choose
there, as before.
"""

from __future__ import annotations

from ....target import Target, as_target
from .forms import GemmForm
from .knobs import TensorCoreConfig, WgmmaScheduleConfig
from .rules import first_broken, needs_c_tile, wgmma_rules

SMALL_CONV_FLOP = 48e6
"""The most work (``2 M N K``, the batch included) :func:`small_conv_config` covers: every
1 x 1 and stem convolution of MobileNetV2 b1 (1.3 to 40 MFLOP) and the 1 x 1 downsampling
convolutions of ResNet-18 b1 (12.8 MFLOP), where the records' fastest is mma.sync on 4
warps; ResNet-50 b1's smallest other layer (25.7 MFLOP, 3,136 x 64 x 64) measured wgmma
64 x 64 1.89 us against mma.sync 1.95 (a tie), its next ones (103 MFLOP) wgmma faster."""
SMALL_CONV_MIN_ROWS = 32
"""The fewest output rows (pixels x batch) the small rule covers: the records' smallest
layers have 49 (7 x 7); fewer were not measured."""
SMALL_CONV_WIDE_ROWS = 2048
"""From this many output rows the small rule's tiles have 32 rows, below it 16 (which pad
196 rows to 208 where 32 pad to 224, and make twice the blocks)."""
SMALL_CONV_SPLIT_DEPTH = 512
"""The small rule splits ``K`` only from this many columns (measured: 384 columns in 26
tiles ran fastest unsplit, 576 to 960 in 20 to 40 tiles split in 4 or 8 parts)."""
SMALL_CONV_MIN_PART = 96
"""The fewest columns a split part of the small rule reduces."""
SMALL_CONV_SPLIT_WAVE = 1.25
"""The small rule's split parts keep tiles x parts within this many waves of the SMs."""


def _small_range(form: GemmForm, target: Target) -> bool:
    if not (form.conv and target.sm >= 90 and form.in_dtype == "float16" and not form.tf32
            and form.paddable
            and 2.0 * form.batch * form.M * form.N * form.K <= SMALL_CONV_FLOP):
        return False
    rows = form.batch * form.M
    # whole 64 x 64 wgmma tiles (no padded rows, columns or steps): wgmma measured as fast
    # there (ResNet-50 b1's 3,136 x 64 x 64: 1.89 us, mma.sync 1.95, 32 x 32 tiles 2.49)
    full = rows % 64 == 0 and form.N % 64 == 0 and form.K % 64 == 0
    return rows >= SMALL_CONV_MIN_ROWS and not full


def small_conv_config(form: GemmForm, target: Target | str | None = None
                      ) -> TensorCoreConfig | None:
    """The mma.sync configuration the default takes for a convolution of at most
    :data:`SMALL_CONV_FLOP` (fp16, sm_90 or later) and at least :data:`SMALL_CONV_MIN_ROWS`
    output rows, or None where the estimates choose: outside that range, and where
    wgmma's 64 x 64 tiles cover the product exactly (rows, ``N`` and ``K`` multiples of
    64: wgmma measured as fast as mma.sync there).

    Why: at that size every estimate is at the launch floor, so the estimates' tie-break
    (the largest tile) decided, and 64- or 128-row tiles left most of the 132 SMs idle
    (196 x 384 x 64: wgmma 64 x 64 makes 24 blocks). The records' fastest are 4 warps
    over 16 x 32, 16 x 64 or 32 x 32 tiles; wgmma never wins there (module doc).

    The rule: 4 warps, 1 x 4 (2 x 2 on 16 columns); tiles of 16 rows below
    :data:`SMALL_CONV_WIDE_ROWS` output rows, of 32 from there; 32 columns (16 where ``N``
    <= 16), 64 on 16-row tiles where 32 would make more blocks than SMs (one wave of wider
    tiles measured faster: 196 x 384 x 64 1.56 us against 1.67), or 32 rows where those pad
    no more rows (49 x 1,280 x 320: 32 x 32 2.46 us, 16 x 32 2.72); ``block_k`` the whole
    ``K`` up to 64, else 64, or 32 where that divides ``K`` and 64 would pad it by more than
    a quarter (196 x 576 x 96: 3 steps of 32 1.84 us, 2 of 64 1.89); where ``K`` >=
    :data:`SMALL_CONV_SPLIT_DEPTH` and the tiles fill fewer than half the SMs, the most
    split-K parts of 2, 4, 8 keeping tiles x parts within :data:`SMALL_CONV_SPLIT_WAVE`
    waves and parts of :data:`SMALL_CONV_MIN_PART` columns or more, over ``block_k`` 32; 4
    stages where the steps and the shared memory allow."""
    from .chooser import DEFAULT_STAGES, _first_legal

    t = as_target(target)
    if not _small_range(form, t):
        return None
    rows = form.batch * form.M
    bm = 32 if rows >= SMALL_CONV_WIDE_ROWS else 16
    bn = 16 if form.N <= 16 else 32
    if bm == 16 and -(-rows // 16) * -(-form.N // 32) > t.num_sms and form.N > 32:
        # more 16 x 32 tiles than SMs: one wave of tiles twice as large, 32 rows where
        # those pad no more rows (49: 64 either way), else 64 columns
        if -(-rows // 32) * 32 == -(-rows // 16) * 16:
            bm = 32
        else:
            bn = 64
    tiles = -(-rows // bm) * -(-form.N // bn)
    # 1 x 4 warps (warp tiles of 8 columns) where the tile has 32 columns or more: on
    # the stem (12,544 x 32 x 36) 2.31 us against 2 x 2's 3.75, elsewhere within 3%
    wm, wn = (2, 2) if bn == 16 else (1, 4)
    K = form.K
    # the whole K in one step up to 64; else steps of 64, or of 32 (below)
    bk = 16 if K <= 16 else 32 if K <= 32 else 64
    if K > 64 and K % 32 == 0 and 4 * (-(-K // 64) * 64 - K) > K:
        bk = 32  # 64 would pad K by more than a quarter
    split = 1
    if K >= SMALL_CONV_SPLIT_DEPTH and 2 * tiles < t.num_sms:
        for p in (2, 4, 8):
            if tiles * p <= SMALL_CONV_SPLIT_WAVE * t.num_sms and K // p >= SMALL_CONV_MIN_PART:
                split = p
        if split > 1:
            bk = 32
    steps = -(-K // (bk * split))
    for stages in range(max(1, min(DEFAULT_STAGES, steps)), 0, -1):
        cfg = _first_legal(form, t, bm, bn, bk, wm, wn, stages, split)
        if cfg is not None:  # the deepest pipeline the shared memory holds
            return cfg
    return None


LONG_CONV_DEPTH = 576
"""The fewest reduction columns (9 steps of 64) of :func:`long_conv_wgmma_config`: ResNet-18
b16's 12,544 x 128 x 576 ran 64 x 128 in 6.63 us, the estimates' 128 x 128 7.04; its layers
of 64 channels (50,176 x 64 x 576) cannot take 128 columns."""
LONG_CONV_WIDE_N = 512
"""From this many output channels the long rule's split tiles are 64 x 256."""
LONG_CONV_STAGES = 4
"""The long rule's depth: 4 stages, one group in flight (the records' fastest 64 x 128 on
4 of ResNet-18 b16's 5 long layers; 5 stages 3% faster on the fifth, 7% slower on two)."""


def long_conv_wgmma_config(form: GemmForm, target: Target | str | None = None,
                           window: bool = True, reads: int = 0
                           ) -> WgmmaScheduleConfig | None:
    """The wgmma tiles the default takes for an fp16 convolution of ``K`` >=
    :data:`LONG_CONV_DEPTH` whose output makes at least half a wave of 64 x 64 tiles
    (sm_90a) over a window of more than one tap (``window``), or None where the estimates
    choose (ResNet-50 and ResNet-18 at batch 1 keep their measured 64 x 64 picks in 4 to 16
    parts; 1 x 1 convolutions, whose A rows are not gathered windows, were not measured).

    Why: the estimates pick two warpgroups of 128 x 64 (or 64 x 64 unsplit), and the
    records measured one warpgroup of 64 x 128 1.3x to 1.5x faster (ResNet-18 b16,
    3,136 x 256 x 2,304: 15.89 us against 10.74; x 1,152: 9.59 against 6.98): the same
    operand bytes a step, half the gathered window rows (the A tile, whose addresses and
    padding predicates each row computes) a block, 64 accumulators a thread. Where those
    tiles number fewer than half the SMs, ``K`` splits in the most parts of 2 and 4
    keeping tiles x parts within two waves, over 64 x 256 tiles where ``N`` >=
    :data:`LONG_CONV_WIDE_N` (784 x 512 x 4,608: unsplit 64 x 64 21.38 us, 64 x 128 in 4
    parts 14.21, 64 x 256 in 4 parts 12.45; 784 x 512 x 2,304: 12.16, 9.69 and 9.62).

    Where the epilogue reads ``reads`` >= 1 tensors of the output's size (a residual) and
    ``K`` does not split, the rule is silent: the estimates cost those loads
    (:data:`~.estimate.EPILOGUE_READ_CYCLES`), this rule does not (a split layer runs its
    epilogue in the second kernel). The records would take 64 x 128 there too (3,136 x 256
    x 2,304: 14.30 us against the estimates' 128 x 64 17.39; 12,544 x 128 x 1,152: 12.49
    against 128 x 128 13.13)."""
    t = as_target(target)
    if (not form.conv or not window or not t.has_wgmma or form.in_dtype != "float16"
            or form.tf32 or not form.paddable or form.K < LONG_CONV_DEPTH or form.N < 128):
        return None
    rows = -(-form.batch * form.M // 64)
    if 2 * rows * -(-form.N // 64) < t.num_sms:
        return None
    bn = 128
    if 2 * rows * -(-form.N // bn) < t.num_sms and form.N >= LONG_CONV_WIDE_N:
        bn = 256  # split anyway: each gathered row serves 256 columns
    tiles = rows * -(-form.N // bn)
    split = 1
    if 2 * tiles < t.num_sms:
        for p in (2, 4):
            if tiles * p <= 2 * t.num_sms:
                split = p
    if reads >= 1 and split == 1:
        return None  # the residual's loads in the epilogue: the estimates cost them
    for n in dict.fromkeys((bn, 128)):
        cfg = WgmmaScheduleConfig(n, 1, LONG_CONV_STAGES, 1, split)
        if first_broken(wgmma_rules(cfg, form, t, needs_c_tile(cfg, form, True))) is None:
            return cfg
    return None


SHORT_CONV_STEPS = 4
"""The most 64-column steps of an unsplit reduction :func:`short_conv_flight` waits each
step's wgmmas over."""


def short_conv_flight(cfg: WgmmaScheduleConfig, form: GemmForm) -> WgmmaScheduleConfig:
    """``cfg`` with no group of wgmmas in flight (``in_flight=0``) where the convolution's
    unsplit reduction runs at most :data:`SHORT_CONV_STEPS` steps, else ``cfg``.

    Why: the estimates charge waiting for each step's wgmmas (``NO_FLIGHT_RATE``) on every
    step, but over 4 steps or fewer the records measured it as fast or faster, on every
    such layer and depth (the 7 x 7 stem, 4 steps: 4.15 us against 4.47 at batch 1, 37.55
    against 39.33 at 16; ResNet-50 b1's 3,136 x 64 x 256: 2.49 against 2.59; 784 x 512 x
    256: 3.63 against 3.65 and a tie at batch 16); at 9 steps a group in flight won (3,136
    x 64 x 576: 3.51 against 3.85). Split parts of 4 steps measured a tie (1% either
    way: 784 x 128 x 512 in 2 parts 3.61 in flight, 3.65 waiting, an H100) and keep theirs."""
    from dataclasses import replace

    from .rules import block_k

    steps = -(-form.K // block_k(form))
    if not form.conv or cfg.in_flight == 0 or cfg.split_k > 1 or steps > SHORT_CONV_STEPS:
        return cfg
    return replace(cfg, in_flight=0)


def windowed(op) -> bool:
    """Whether conv stage ``op`` reduces over a window of more than one tap (its implicit
    GEMM's ``K`` exceeds its input channels)."""
    from .forms import conv_gemm_shape

    return conv_gemm_shape(op)[2] > int(op.input_tensors[0].shape[-1])
