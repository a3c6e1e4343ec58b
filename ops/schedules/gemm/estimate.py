"""The one time estimate of each tensor-core kind, to rank configurations: :func:`gemm_time`
(mma.sync) and :func:`wgmma_time`, over arrays of knobs :func:`gemm_estimate` and
:func:`wgmma_estimate` (the auto-scheduler's models). Both are waves of blocks x a per-step
cost, a DRAM floor, a launch, and split-K's second kernel and partial sums."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ....ir.intrin.wgmma import WARPGROUP
from ....target import Target, as_target
from .forms import GemmForm
from .knobs import ROW_BYTES, TensorCoreConfig, WgmmaScheduleConfig
from .rules import block_k, shared_bytes, wgmma_shared_bytes


def gemm_time(cfg: TensorCoreConfig, form: GemmForm, target: Target | str | None = None,
              dram_floor: bool = True) -> float:
    """:func:`gemm_estimate` of one configuration, in seconds."""
    return float(gemm_estimate(cfg.block_m, cfg.block_n, cfg.block_k, cfg.warps_m,
                               cfg.warps_n, cfg.stages, cfg.split_k, cfg.pad, form, target,
                               dram_floor))


def gemm_estimate(block_m, block_n, block_k, warps_m, warps_n, stages, split_k, pad, form,
                  target=None, dram_floor: bool = True):
    """The mma.sync schedule's time in seconds over arrays of knobs, fitted to 2,300
    measured configurations of eight fp16 products (M 16 to 512, an H200: the chooser's
    pick within 1.10x of the fastest measured, geometric mean). The blocks run in waves of
    the SMs x the blocks resident on one, the ``r`` sharing an SM dividing its rate; a
    ``block_k`` step costs the largest of the mma work (``mma_sync_peak_fraction`` of the
    peak; a block of fewer than 4 warps uses that share of the 4 sub-cores), the tile
    copies (``tile_copy_bytes_per_clock``) and the global latency ``stages - 1`` copies in
    flight hide, plus a barrier; at least the DRAM floor (unless not ``dram_floor``), one
    launch, and split-K's cost (:func:`_split_k_cost`)."""
    t = as_target(target)
    bm, bn, bk = (np.asarray(x, dtype=np.int64) for x in (block_m, block_n, block_k))
    wm, wn = np.asarray(warps_m, dtype=np.int64), np.asarray(warps_n, dtype=np.int64)
    stages = np.asarray(stages, dtype=np.int64)
    split = np.maximum(np.asarray(split_k, dtype=np.int64), 1)
    Mp, Np, blocks, steps = _tiles(form, bm, bn, bk, split)
    warps = wm * wn
    accum = bm * bn // (32 * warps)  # float32 accumulators per thread
    regs = np.minimum(255, 40 + accum + 8 * (bm // wm // 16) + 4 * (bn // wn // 8))
    waves, r = _waves(t, blocks, 32 * warps, regs,
                      shared_bytes(bm, bn, bk, stages, pad, form, True))
    tc_sm = (t.peak_flops("tf32" if form.tf32 else form.in_dtype, tensor_core=True)
             * t.mma_sync_peak_fraction / (t.num_sms * t.clock_hz))
    mma = r * 2.0 * bm * bn * bk / (tc_sm * np.minimum(1.0, r * warps / 4.0))
    load = r * (bm + bn) * bk * form.elem_bytes / t.tile_copy_bytes_per_clock
    latency = t.global_latency_cycles / np.maximum(stages - 1, 1) + t.barrier_cycles
    sec = (waves * steps * (np.maximum(np.maximum(mma, load), latency) + t.barrier_cycles)
           / t.clock_hz)
    return _finish(sec, form, t, split, Mp * Np, dram_floor)


def _tiles(form, bm, bn, bk, split):
    """``(Mp, Np, blocks, steps)``: the padded product, its blocks, the steps a part."""
    if form.paddable:
        Mp, Np = -(-form.M // bm) * bm, -(-form.N // bn) * bn
        Kp = -(-form.K // (bk * split)) * (bk * split)
    else:
        Mp, Np, Kp = form.M, form.N, form.K
    return Mp, Np, form.batch * (Mp // bm) * (Np // bn) * split, Kp // (bk * split)


def _waves(t, blocks, threads, regs, smem):
    """``(waves, r)``: the waves of ``blocks`` over the SMs and the blocks sharing one."""
    per_sm = np.maximum(1, t.blocks_per_sm(threads, regs, smem + 1024))
    return -(-blocks // (t.num_sms * per_sm)), np.minimum(per_sm, -(-blocks // t.num_sms))


def _finish(sec, form, t, split, mn, dram_floor: bool):
    """``sec`` at least the DRAM floor (where ``dram_floor``), plus a launch and split-K."""
    if dram_floor:
        sec = np.maximum(sec, form.input_bytes / t.dram_bytes_per_s)
    return sec + t.launch_seconds + _split_k_cost(split, form.batch * mn, t)


def _split_k_cost(split, elements, t):
    """Split-K's second kernel right behind the first and the float32 partial sums written
    and read once (at L2 bandwidth while they fit half the L2); none unsplit."""
    partial = split * elements * 4.0
    rate = np.where(2 * partial <= t.l2_bytes, t.l2_bytes_per_s, t.dram_bytes_per_s)
    return np.where(split > 1, t.dependent_launch_seconds + 2.0 * partial / rate, 0.0)


WGMMA_PEAK_FRACTION = 0.65
"""The share of the tensor-core peak a block's wgmmas reach while two warpgroups (of one
block or two) keep each SM busy; one warpgroup alone reaches 0.8 of that. Fitted to the
te schedule on an H200: 4096^3 fp16 at 128 x 256, 4 stages, one group in flight (580
TFLOP/s)."""

WGMMA_COPY_BYTES_PER_CLOCK = 80
"""What the 16-byte cp.async copies of one SM's wgmma tiles receive from L2 in a clock
(the mma.sync schedule's ``tile_copy_bytes_per_clock`` is a third of it: its warps also
issue the ldmatrix and mma instructions). Fitted to BERT-base's M = 128 products on an
H200 (64 x 64 tiles, 4 stages: 12 steps of 64 in 1.4 us, 48 in 7.3 us)."""

L2_TILE_RATE = 1.8
"""The L2 serves the tile copies of all blocks together at this multiple of the target's
``l2_bytes_per_s`` (most copies hit lines another block just fetched); a floor of
:func:`wgmma_time` that keeps narrow tiles of long products (many blocks reading the
same rows of B) from looking free."""

NO_FLIGHT_RATE = 0.86
"""The rate of a wgmma GEMM that waits for each step's wgmmas (``in_flight=0``) as a share
of one that leaves a group running: 0.2863 against 0.2473 ms at 4096^3 fp16 (128 x 256,
4 stages, an H100)."""


WGMMA_CONV_FILL_CYCLES = 2000.0
"""What each wave of the wgmma conv's blocks costs besides its K steps: the first stages'
gathered A rows (the window's addresses and padding predicates) before the first wgmma,
and the epilogue. Fitted to ResNet-50's convolutions at batch 1 on an H100 (the tuned
records of ``.gpu/resnet50_fp16.json``: 585 measured configurations of 24 layers); it is
what makes split-K pay where a few blocks run long reductions (14 x 14 and 7 x 7 layers:
4 to 16 parts measured 1.1x to 1.3x faster than the unsplit or less split pick)."""


def wgmma_time(cfg: WgmmaScheduleConfig, form, target=None, c_tile: bool = False,
               dram_floor: bool = True, conv_fill: bool = True) -> float:
    """:func:`wgmma_estimate` of one configuration, in seconds."""
    return float(wgmma_estimate(cfg.block_n, cfg.warpgroups, cfg.stages, cfg.split_k, form,
                                target, c_tile, dram_floor, cfg.in_flight,
                                getattr(cfg, "raster", 1), conv_fill))


def wgmma_estimate(block_n, warpgroups, stages, split_k, form, target=None, c_tile=False,
                   dram_floor: bool = True, in_flight=1, raster=1, conv_fill: bool = True):
    """The wgmma schedule's time over arrays of knobs, in the shape of
    :func:`gemm_estimate`: each 128-byte step the largest of the wgmma work
    (:data:`WGMMA_PEAK_FRACTION`, :data:`NO_FLIGHT_RATE`), the tile copies
    (:data:`WGMMA_COPY_BYTES_PER_CLOCK`) and the latency the copies in flight hide, a
    convolution's waves :data:`WGMMA_CONV_FILL_CYCLES` more (unless not ``conv_fill``:
    the mma.sync estimate has no such term, and :func:`~.choice.prefer_wgmma` compares the
    two without it); at least the tiles' L2 traffic (:data:`L2_TILE_RATE`) and the DRAM
    floor, which reads a B larger than the L2 once per group of ``raster`` row blocks
    (:func:`dram_passes`)."""
    t = as_target(target)
    bn = np.asarray(block_n, dtype=np.int64)
    wgs = np.asarray(warpgroups, dtype=np.int64)
    split = np.maximum(np.asarray(split_k, dtype=np.int64), 1)
    stages = np.asarray(stages, dtype=np.int64)
    bm = 64 * wgs
    bk = block_k(form)
    Mp, Np, blocks, steps = _tiles(form, bm, bn, bk, split)
    smem = wgmma_shared_bytes(SimpleNamespace(block_m=bm, block_n=bn, stages=stages), c_tile,
                              t)
    waves, r = _waves(t, blocks, WARPGROUP * wgs, _wgmma_registers(bn), smem)
    tc_sm = t.peak_flops(form.in_dtype, tensor_core=True) / (t.num_sms * t.clock_hz)
    frac = (WGMMA_PEAK_FRACTION * np.where(r * wgs >= 2, 1.0, 0.8)
            * np.where(np.asarray(in_flight) > 0, 1.0, NO_FLIGHT_RATE))
    mma = r * 2.0 * bm * bn * bk / (tc_sm * frac)
    load = r * (bm + bn) * ROW_BYTES / WGMMA_COPY_BYTES_PER_CLOCK
    latency = t.global_latency_cycles / np.maximum(stages - 1, 1)
    fill = WGMMA_CONV_FILL_CYCLES if conv_fill and getattr(form, "conv", False) else 0.0
    sec = waves * (steps * (np.maximum(np.maximum(mma, load), latency) + t.barrier_cycles)
                   + fill) / t.clock_hz
    tiles = blocks * steps * (bm + bn) * ROW_BYTES
    sec = np.maximum(sec, tiles / (L2_TILE_RATE * t.l2_bytes_per_s))
    if dram_floor:
        b_bytes = form.batch * form.N * form.K * form.elem_bytes
        passes = dram_passes(-(-form.M // bm), raster, b_bytes, t)
        sec = np.maximum(sec, (form.input_bytes + (passes - 1) * b_bytes) / t.dram_bytes_per_s)
    return _finish(sec, form, t, split, Mp * Np, dram_floor)


def dram_passes(row_blocks, raster, b_bytes: float, target) -> np.ndarray:
    """How many times the blocks read B from DRAM: once where it fits the L2; else once per
    group of ``raster`` row blocks (the blocks run along a row block's columns, each row
    block streaming all of B past the L2; GPT-2's 50,257 x 768 head at 1,024 tokens in
    128-row blocks: 8 passes over its 77 MB)."""
    raster = np.maximum(np.asarray(raster, dtype=np.int64), 1)
    groups = -(-np.asarray(row_blocks, dtype=np.int64) // raster)
    return np.where(b_bytes > target.l2_bytes, groups, 1)


def _wgmma_registers(block_n):
    """Registers a thread of the wgmma schedule is expected to take: its ``block_n / 2``
    float32 accumulators and 48 more."""
    return np.minimum(255, 48 + np.asarray(block_n) // 2)


def wgmma_blocks_per_sm(cfg: WgmmaScheduleConfig, target=None, c_tile: bool = False) -> int:
    """Blocks of the wgmma schedule of ``cfg`` resident on one SM of ``target`` (shared
    memory with the C tile where ``c_tile``, the expected registers), as the estimate
    counts them."""
    t = as_target(target)
    smem = wgmma_shared_bytes(cfg, c_tile, t)
    return int(t.blocks_per_sm(WARPGROUP * cfg.warpgroups, int(_wgmma_registers(cfg.block_n)),
                               int(smem) + 1024))


EPILOGUE_READ_CYCLES = 120.0
"""What each element a thread stores costs a convolution's epilogue per tensor of the
output's size it reads there (a residual), per wave of resident blocks: those loads wait
one after the other. Fitted to the residual layers of ResNet-50's tuned records (an H100:
4 layers, 115 measured configurations of both kinds): over the layers without a residual,
the same tiles took 0.3 us more at 8 elements a thread, 1.2 at 16, 1.6 at 32, 4.5 at 64
and 8.4 at 128. The products' choosers do not add it: the wgmma GEMM's epilogue over the
C tile showed no such cost (4,096 x 768 x 3,072 with a residual 51.7 us, with GELU 51.2,
``bench/results/epilogues_attention_d64_h100_2026-11-28.txt``)."""


def epilogue_read_time(cfg, form, reads: int, target=None, c_tile: bool = True) -> float:
    """:data:`EPILOGUE_READ_CYCLES` of configuration ``cfg`` (mma.sync or wgmma) whose
    epilogue reads ``reads`` tensors of the output's size, in seconds; none split-K (its
    second kernel runs the epilogue, an element or a few a thread)."""
    if reads <= 0 or cfg.split_k > 1:
        return 0.0
    t = as_target(target)
    if isinstance(cfg, WgmmaScheduleConfig):
        bm, bn = 64 * cfg.warpgroups, cfg.block_n
        threads = WARPGROUP * cfg.warpgroups
        per_sm = wgmma_blocks_per_sm(cfg, t, c_tile)
    else:
        bm, bn = cfg.block_m, cfg.block_n
        warps = cfg.warps_m * cfg.warps_n
        threads = 32 * warps
        regs = min(255, 40 + bm * bn // threads + 8 * (bm // cfg.warps_m // 16)
                   + 4 * (bn // cfg.warps_n // 8))
        smem = int(shared_bytes(bm, bn, cfg.block_k, cfg.stages, cfg.pad, form, True))
        per_sm = max(1, t.blocks_per_sm(threads, regs, smem + 1024))
    blocks = form.batch * -(-form.M // bm) * -(-form.N // bn)
    waves = -(-blocks // (t.num_sms * per_sm))
    return reads * waves * (bm * bn / threads) * EPILOGUE_READ_CYCLES / t.clock_hz
