"""The knob space of each tensor-core GEMM form, declared once.

The default choosers, the AutoTVM templates and the auto-scheduler's sketch slots all
draw their choices from here, so they cannot drift apart (they had: split-K up to 8
parts in the auto-scheduler but 16 in the AutoTVM template, wgmma stages up to 4 against
5). Choices only ever grow at the end of a tuple: record logs store knob values (AutoTVM)
or positions in these tuples (auto-scheduler slots), and both must keep replaying.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MmaSyncSpace:
    """Knobs of the mma.sync GEMM and implicit-GEMM conv templates
    (:class:`~..tensorcore.TensorCoreConfig`): block tiles, ``block_k``, warps per block
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
    """Knobs of the wgmma GEMM and conv templates
    (:class:`~..tensorcore_wgmma.WgmmaScheduleConfig`): the block's N (the wgmma's),
    warpgroups (64-row halves of the block tile), pipeline stages, wgmma groups left in
    flight across a K step, split-K parts."""

    block_n: tuple = (64, 128, 256)
    warpgroups: tuple = (1, 2)
    stages: tuple = (1, 2, 3, 4, 5)
    in_flight: tuple = (0, 1)
    split_k: tuple = (1, 2, 4, 8, 16)


MMA_SYNC_SPACE = MmaSyncSpace()
WGMMA_SPACE = WgmmaSpace()


def split_parts(space) -> tuple:
    """The split-K parts of ``space`` that split (more than one part): what the default
    choosers try besides no split."""
    return tuple(p for p in space.split_k if p > 1)
