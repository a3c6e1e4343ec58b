"""The GPU limits and rates the search checks states against and its cost features use."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HardwareParams:
    """Per-GPU limits (checked before measuring) and rough rates (for the features and
    the analytical estimate that ranks states before any measurement). Defaults: H100."""

    num_sms: int = 132
    warp_size: int = 32
    max_threads_per_block: int = 1024
    max_threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32
    max_shared_memory_per_block: int = 48 * 1024
    max_shared_memory_per_sm: int = 228 * 1024
    max_registers_per_sm: int = 65536
    max_vthread_extent: int = 8
    max_accumulators_per_thread: int = 128
    clock_hz: float = 1.75e9
    fma_per_sm_per_clock: int = 128
    issue_per_sm_per_clock: int = 4
    shared_words_per_sm_per_clock: int = 32
    dram_bytes_per_s: float = 3.0e12
    l2_bytes_per_s: float = 8.0e12
    launch_s: float = 2.0e-6
