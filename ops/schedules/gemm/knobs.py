"""The knob space of each tensor-core GEMM form, declared once: the default choosers, the
AutoTVM templates and the auto-scheduler's sketch slots all draw their choices from here.
Choices only ever grow at the end of a tuple: record logs store knob values (AutoTVM) or
positions in these tuples (auto-scheduler slots), and both must keep replaying."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MmaSyncSpace:
    """Knobs of the mma.sync templates (:class:`TensorCoreConfig`); copy widths in 16-bit
    elements and TF32's (fp32) ones."""

    blocks: tuple = (16, 32, 64, 128)
    block_k: tuple = (16, 32, 64)
    warps: tuple = (1, 2, 4)
    stages: tuple = (1, 2, 3, 4)
    split_k: tuple = (1, 2, 4, 8, 16)
    vec: tuple = (8, 4, 2)
    tf32_vec: tuple = (4, 2, 1)


@dataclass(frozen=True)
class WgmmaSpace:
    """Knobs of the wgmma templates (:class:`WgmmaScheduleConfig`)."""

    block_n: tuple = (64, 128, 256)
    warpgroups: tuple = (1, 2)
    stages: tuple = (1, 2, 3, 4, 5)
    in_flight: tuple = (0, 1)
    split_k: tuple = (1, 2, 4, 8, 16)
    raster: tuple = (1, 2, 4, 8)


MMA_SYNC_SPACE = MmaSyncSpace()
WGMMA_SPACE = WgmmaSpace()
BLOCK_K = 64
"""K step of a wgmma shared tile of 16-bit elements (fp16/bf16): one 128-byte row."""


def mma_sync_choices(form, divide: bool = False) -> dict:
    """The choices of each mma.sync knob over ``form`` (a conv's implicit GEMM too), which
    the AutoTVM knobs and the sketch slots are made of: block tiles up to
    :func:`tile_limit` (``divide``: dividing the extent, ``block_k`` too), every warp grid
    and depth, the copy widths of the element size, shared rows padded by 16 bytes or not
    (``pad_bytes``), split-K parts of at least 16 columns where paddable and not
    ``divide``."""
    S = MMA_SYNC_SPACE

    def tiles(choices, extent):
        if divide:
            return tuple(c for c in choices if extent % c == 0) or (choices[0],)
        return tuple(c for c in choices if c <= tile_limit(extent))

    split_ok = form.paddable and not divide
    return {"block_m": tiles(S.blocks, form.M), "block_n": tiles(S.blocks, form.N),
            "block_k": tiles(S.block_k, form.K), "warps_m": S.warps, "warps_n": S.warps,
            "stages": S.stages, "vec": S.tf32_vec if form.tf32 else S.vec,
            "pad_bytes": (16, 0),
            "split_k": tuple(p for p in S.split_k if p == 1 or (split_ok and form.K >= 16 * p))}


def wgmma_choices(form, divide: bool = False) -> dict:
    """The choices of each wgmma knob over ``form``: ``block_n`` up to :func:`tile_limit`,
    2 warpgroups only where ``M > 64``, depths and split-K parts up to the 64-column steps
    of ``K`` (split-K where paddable), block orders (``raster``) where more than 128 rows
    make several row blocks (none on a convolution); not paddable or ``divide``: tiles
    dividing the product."""
    S = WGMMA_SPACE
    pad = form.paddable and not divide
    steps = -(-form.K // BLOCK_K)
    return {
        "block_n": tuple(n for n in S.block_n if (n <= max(tile_limit(form.N), S.block_n[0])
                                                  if pad else form.N % n == 0)),
        "warpgroups": tuple(w for w in S.warpgroups
                            if (w == 1 or form.M > 64 if pad else form.M % (64 * w) == 0)),
        "stages": tuple(x for x in S.stages if x <= max(1, steps)),
        "in_flight": S.in_flight,
        "split_k": tuple(p for p in S.split_k if p == 1 or (pad and steps >= p)),
        "raster": S.raster[:1] if form.conv or form.M <= RASTER_MIN_M else S.raster}


RASTER_MIN_M = 128
"""Up to this many rows (two row blocks of 64) the block order is no choice (``raster``
1): the tuners' spaces of such products stay as they were."""


def split_parts(space) -> tuple:
    """The split-K parts of ``space`` above 1 (what the choosers try besides none)."""
    return tuple(p for p in space.split_k if p > 1)


def tile_limit(extent: int) -> int:
    """The largest block tile worth trying along an extent: the extent rounded up to a
    power of two, at least 16."""
    return max(16, 1 << max(int(extent) - 1, 0).bit_length())


@dataclass(frozen=True)
class TensorCoreConfig:
    """The knob values of an mma.sync schedule (:func:`~.schedule.schedule_gemm`):
    ``block_m x block_n`` outputs a block, ``block_k`` columns a shared stage,
    ``warps_m x warps_n`` warps (each a warp tile), ``vec`` elements a copy, ``pad``
    elements after each shared row (a multiple of 16 bytes, against ldmatrix bank
    conflicts), ``unroll`` the warp-tile loops, ``frag_load`` ``"ldmatrix"`` or ``"load"``
    (lane by lane), ``tf32`` (float32 inputs multiplied in TF32, never chosen silently),
    ``async_copy`` (cp.async), ``stages`` shared buffers (1: no pipeline), ``split_k``
    parts of float32 partial sums on blockIdx.z added up by a second kernel."""

    block_m: int = 64
    block_n: int = 64
    block_k: int = 32
    warps_m: int = 2
    warps_n: int = 2
    vec: int = 8
    pad: int = 8
    unroll: bool = True
    frag_load: str = "ldmatrix"
    tf32: bool = False
    stages: int = 1
    async_copy: bool = False
    split_k: int = 1


PERSISTENT_BLOCKS = (0, 1, 2)
"""The values of ``WgmmaScheduleConfig.persistent``: off, or blocks an SM of a persistent
grid. Not among the templates' knobs: measured first (``bench/bench_gemm_persistent.py``)."""

ROW_BYTES = 128
"""Bytes of K in a wgmma shared tile's row: one row of the 128B swizzle."""
BLOCK_N = WGMMA_SPACE.block_n
"""The wgmma block tile widths offered (one ``m64n{block_n}k16`` per k16 step)."""
BLOCK_N_K_MAJOR = BLOCK_N + (192,)
"""The wgmma block tile widths a product whose B is read K-major (``[N, K]``) may take: also
192, whose tiles fill the 132 SMs of an H100 where 128 and 256 leave part of a wave empty
(BERT's and GPT-2's N of 768, 2304 and 3072 are multiples of 192; cuBLAS runs them in
192-wide tiles). Not among the knob spaces' or the default candidates' widths: the sweep
(``bench/bench_gemm_few_rows.py --block-n``) measures it first."""
B_KN_PANEL = 64
"""The panel width of wgmma's MN-major B tile (B read as ``[K, N]``): ``block_n / 64``
panels of 64 K-rows of one 128-byte swizzle atom of N (the descriptor's leading byte
offset, :data:`~ptxforge.ir.intrin.wgmma.B_KN_LBO`, is the panel stride)."""


@dataclass(frozen=True)
class WgmmaScheduleConfig:
    """The knob values of a wgmma schedule (:func:`~.schedule.schedule_gemm`):
    ``block_n`` columns (the wgmma's N), ``warpgroups`` (``64 * warpgroups`` rows),
    ``stages`` shared buffers (1: no pipeline), ``in_flight`` wgmma groups left running
    across K steps (1 needs 3 stages: the copies run ``stages - 2`` tiles ahead),
    ``split_k`` as :class:`TensorCoreConfig`'s, ``raster`` the block order: 1 puts the
    column blocks on blockIdx.x and the row blocks on y (consecutive blocks share their A
    rows); ``g`` > 1 runs the blocks on blockIdx.x alone in groups of ``g`` row blocks of
    one column block (consecutive blocks share their B tile: a B that does not stay in L2,
    the 77 MB of GPT-2's 50,257 x 768 head, is read once instead of once per row block);
    ``staged_epilogue``: the accumulators go through the float32 C tile in shared memory
    and all threads store the output a row at a time, 4 elements a thread, even where the
    warpgroups could store their fragments straight to it (4 bytes a thread, 8 rows a
    warp instruction); ``persistent`` (0: off) blocks an SM in a persistent grid of
    ``min(tiles, SMs x persistent)`` blocks, each looping over tiles ``blockIdx.x, +
    gridDim.x, ...`` with the next tile's first copies issued before this tile's epilogue
    (the software pipeline across tiles) and the launch bound ``.minnctapersm
    persistent``."""

    block_n: int = 128
    warpgroups: int = 2
    stages: int = 4
    in_flight: int = 0
    split_k: int = 1
    raster: int = 1
    staged_epilogue: bool = False
    persistent: int = 0

    @property
    def block_m(self) -> int:
        return 64 * self.warpgroups
