"""The knob space of each tensor-core GEMM form, declared once.

The default choosers, the AutoTVM templates and the auto-scheduler's sketch slots all
draw their choices from here, so they cannot drift apart (they had: split-K up to 8
parts in the auto-scheduler but 16 in the AutoTVM template, wgmma stages up to 4 against
5). Choices only ever grow at the end of a tuple: record logs store knob values (AutoTVM)
or positions in these tuples (auto-scheduler slots), and both must keep replaying.
"""

from __future__ import annotations

from dataclasses import dataclass

from ....passes.schedule.common import ScheduleError


@dataclass(frozen=True)
class MmaSyncSpace:
    """Knobs of the mma.sync GEMM and implicit-GEMM conv templates
    (:class:`TensorCoreConfig`): block tiles, ``block_k``, warps per block
    along each axis, pipeline stages (1: none), split-K parts, copy widths in 16-bit
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
    """Knobs of the wgmma GEMM and conv templates (:class:`WgmmaScheduleConfig`): the
    block's N (the wgmma's), warpgroups (64-row halves of the block tile), pipeline
    stages, wgmma groups left in flight across a K step, split-K parts."""

    block_n: tuple = (64, 128, 256)
    warpgroups: tuple = (1, 2)
    stages: tuple = (1, 2, 3, 4, 5)
    in_flight: tuple = (0, 1)
    split_k: tuple = (1, 2, 4, 8, 16)


MMA_SYNC_SPACE = MmaSyncSpace()
WGMMA_SPACE = WgmmaSpace()
BLOCK_K = 64
"""K step of a wgmma shared tile of 16-bit elements (fp16/bf16): one 128-byte row."""


def mma_sync_choices(form, divide: bool = False) -> dict:
    """The choices of each knob of the mma.sync template over ``form`` (a
    :class:`~.forms.GemmForm`, a convolution's implicit GEMM too), from which the AutoTVM
    templates' knobs and the auto-scheduler's sketch slots are made: block tiles up to
    each extent's :func:`tile_limit` (``divide``: only those dividing it, for an epilogue
    that stores the product in another layout, ``block_k`` too), every warp grid and
    pipeline depth, the copy widths of the inputs' element size, the shared rows padded
    by 16 bytes or not (``pad_bytes``), and split-K parts that leave each part at least 16
    reduction columns where the product can be padded (not over a broadcast batch, not
    under ``divide``)."""
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
    """The choices of each knob of the wgmma template over ``form``, from which the AutoTVM
    templates' knobs and the auto-scheduler's sketch slots are made: ``block_n`` up to
    ``N`` rounded up to a power of two (at least the narrowest), 2 warpgroups only where
    ``M > 64``, pipeline depths and split-K parts up to the 64-column steps of ``K``
    (split-K where the product can be padded); where it cannot be padded (a broadcast
    batch) or ``divide``, only tiles that divide the product."""
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
        "split_k": tuple(p for p in S.split_k if p == 1 or (pad and steps >= p))}


def split_parts(space) -> tuple:
    """The split-K parts of ``space`` that split (more than one part): what the default
    choosers try besides no split."""
    return tuple(p for p in space.split_k if p > 1)


def tile_limit(extent: int) -> int:
    """The largest block tile worth trying along an extent: the extent rounded up to a
    power of two, at least 16 (the smallest tile); a larger tile would only multiply the
    zeros it is padded with."""
    return max(16, 1 << max(int(extent) - 1, 0).bit_length())


@dataclass(frozen=True)
class TensorCoreConfig:
    """The knob values of an mma.sync schedule (:func:`~.schedule.schedule_gemm`).

    ``block_m x block_n`` outputs per thread block, ``block_k`` reduction columns per
    shared-memory stage, ``warps_m x warps_n`` warps per block (each owning a
    ``block_m / warps_m x block_n / warps_n`` warp tile), ``vec`` elements per copy of the
    cooperative global -> shared loads, ``pad`` elements added to each shared row (against
    ldmatrix bank conflicts; a multiple of 16 bytes, which keeps rows 16-byte aligned: the
    defaults take 8 16-bit elements or 4 fp32, as 8 fp32 would leave TF32's ldmatrix 2-way
    conflicts), ``unroll`` the warp-tile loops. ``frag_load``: ``"ldmatrix"`` or
    ``"load"`` (lane by lane); TF32 takes both (its ldmatrix reads 8 rows of 4 fp32 values
    per matrix, B as ``[N, K]`` only). ``tf32``: allow float32 inputs to be multiplied in
    TF32 (10 mantissa bits), which is never chosen silently. ``async_copy``: fill the
    shared tiles with cp.async; ``stages`` (2 to 5): software-pipeline the ``block_k`` loop
    with that many shared buffers per tile (1: none). ``split_k``: the reduction split into
    that many parts computed by different blocks (``blockIdx.z``) into float32 partial
    sums, which a second kernel adds up with the epilogue (1: none).
    """

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

    def check(self, M: int, N: int, K: int, mma_k: int = 16, elem_bytes: int = 2,
              split_k_ok: bool = False) -> None:
        """Raise :class:`ScheduleError` naming the rule these knobs break on an
        ``M x N x K`` product whose tiles divide it (:func:`~.rules.knob_rules_mma`)."""
        from .rules import first_broken, knob_rules_mma

        why = first_broken(knob_rules_mma(self, M, N, K, mma_k, elem_bytes, split_k_ok))
        if why is not None:
            raise ScheduleError(f"tensor-core dense {M}x{N}x{K} with {self}: need {why}")


ROW_BYTES = 128
"""Bytes of K in a wgmma shared tile's row: one row of the 128B swizzle."""
BLOCK_N = WGMMA_SPACE.block_n
"""The wgmma block tile widths offered (one ``m64n{block_n}k16`` per k16 step)."""
B_KN_PANEL = 64
"""The panel width of wgmma products reading B as ``[K, N]``: their shared B tile is
MN-major (``imm-trans-b`` 1), ``block_n / 64`` panels of 64 K-rows of one 128-byte swizzle
atom of N (64 elements), one panel after the other (``layout_panels``; the descriptor's
leading byte offset, :data:`~ptxforge.ir.intrin.wgmma.B_KN_LBO`, is the panel stride)."""


@dataclass(frozen=True)
class WgmmaScheduleConfig:
    """The knob values of a wgmma schedule (:func:`~.schedule.schedule_gemm`).

    ``block_n``: 64, 128 or 256 output columns per block (the wgmma's N);
    ``warpgroups``: 1 or 2 (the block tile has ``64 * warpgroups`` rows);
    ``stages``: 1 to 5 shared buffers per operand (1: no software pipeline);
    ``in_flight``: 0 or 1 wgmma groups left running across K steps (1 needs 3 stages or
    more: the copies then run ``stages - 2`` tiles ahead, so none overwrites a tile the
    running group reads);
    ``split_k``: the reduction in that many parts of float32 partial sums on blockIdx.z,
    added up by a second kernel that runs the epilogue (1: none).
    """

    block_n: int = 128
    warpgroups: int = 2
    stages: int = 4
    in_flight: int = 0
    split_k: int = 1

    @property
    def block_m(self) -> int:
        return 64 * self.warpgroups

    def check(self, M: int, N: int, K: int, target=None) -> None:
        """Raise :class:`ScheduleError` naming the rule these knobs break on an
        ``M x N x K`` fp16/bf16 product whose tiles divide it, without split-K (the rules
        of :func:`~.rules.wgmma_rules` on a product that is not padded)."""
        from .forms import GemmForm
        from .rules import first_broken, wgmma_rules

        form = GemmForm(1, M, N, K, "float16", "float32", False, False, broadcast=True)
        why = first_broken(wgmma_rules(self, form, target, c_tile=False, steps=False))
        if why is not None:
            raise ScheduleError(f"wgmma dense {M}x{N}x{K} with {self}: {why}")
