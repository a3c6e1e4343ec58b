"""An analytical model of kernel time on a GPU, for machines without one.

The simulator runner reports this model's figure as an **estimated** time: it ranks
candidates well enough for a tuner to make progress and for tests to run the whole flow,
but it is no measurement. The model is a bounded roofline per streaming multiprocessor:

* occupancy: resident blocks per SM from threads, shared memory and registers per block
  (the assembler's register count when the builder ran ptxas; otherwise a guess from the
  size of the local arrays, which live in registers);
* the busiest SM's share of the blocks (``ceil(blocks / SMs)``), so grids smaller than the
  GPU or with a ragged last wave pay for it;
* issue time of floating-point and index arithmetic, slowed down when too few warps are
  resident to hide latency;
* shared-memory time including bank conflicts, L2 time from the 32-byte sectors the warps
  touch (coalescing), DRAM time from the bytes of the buffers, and a global-load latency
  term for kernels with little parallelism;
* barriers and a launch overhead.

:func:`simulation_seconds` is a separate estimate: how long the CPU simulator would take to
run the kernels, so a runner can skip a simulation that would take too long.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .kernel_stats import KernelStats


@dataclass(frozen=True)
class GPUSpec:
    """What the model knows of a GPU (defaults: an H100 SXM)."""

    name: str = "H100-SXM"
    sms: int = 132
    clock_hz: float = 1.755e9
    fp32_lanes_per_sm: int = 128
    int_lanes_per_sm: int = 64
    max_threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32
    registers_per_sm: int = 65536
    shared_bytes_per_sm: int = 228 * 1024
    shared_bytes_per_clock: int = 128
    l2_bytes_per_s: float = 5.5e12
    dram_bytes_per_s: float = 3.0e12
    global_latency_cycles: int = 600
    barrier_cycles: int = 40
    launch_seconds: float = 2.5e-6
    warps_to_hide_latency: int = 8


H100 = GPUSpec()

SIM_SECONDS_PER_OP = 3e-7
SIM_SECONDS_PER_OP_LANE = 1.5e-10
SIM_LANES_PER_CHUNK = 1 << 16


def assumed_registers(stats: KernelStats) -> int:
    """Registers per thread when the assembler did not say: local arrays live in
    registers, plus a base for indices and addresses."""
    return int(min(255, 32 + stats.local_bytes // 4))


def blocks_per_sm(stats: KernelStats, registers: int | None, spec: GPUSpec = H100) -> int:
    """Resident blocks per SM (0: the kernel cannot launch)."""
    warps = -(-stats.threads // 32)
    regs = registers if registers else assumed_registers(stats)
    regs_alloc = -(-regs // 8) * 8
    limits = [spec.max_blocks_per_sm, spec.max_threads_per_sm // (warps * 32),
              spec.registers_per_sm // (regs_alloc * warps * 32)]
    if stats.shared_bytes:
        limits.append(spec.shared_bytes_per_sm // stats.shared_bytes)
    return max(0, min(limits))


def kernel_seconds(stats: KernelStats, registers: int | None = None,
                   spec: GPUSpec = H100) -> float:
    """Estimated seconds of one launch of a kernel (``inf`` if it cannot launch)."""
    resident_limit = blocks_per_sm(stats, registers, spec)
    if resident_limit == 0:
        return math.inf
    warps = -(-stats.threads // 32)
    blocks = stats.blocks
    per_sm = -(-blocks // spec.sms)  # blocks the busiest SM runs
    resident = min(resident_limit, per_sm)
    active_warps = resident * warps
    warp_work = per_sm * warps  # warps the busiest SM runs, one after another or together
    hide = min(1.0, active_warps / spec.warps_to_hide_latency)
    clock = spec.clock_hz

    # most float work is multiply-add pairs the backend fuses: one instruction for two
    fp_cycles = warp_work * (stats.flops / 2) / (spec.fp32_lanes_per_sm / 32)
    # index arithmetic is counted before common subexpressions are shared: weigh it down
    int_cycles = warp_work * (stats.int_ops / 4) / (spec.int_lanes_per_sm / 32)
    compute = (fp_cycles + int_cycles) / hide / clock
    shared = warp_work * 32 * stats.shared_bytes_accessed / spec.shared_bytes_per_clock / clock
    shared /= min(1.0, active_warps / 4)
    active_sms = min(spec.sms, blocks)
    l2 = stats.global_sector_bytes * stats.threads * blocks / (
        spec.l2_bytes_per_s * active_sms / spec.sms)
    dram = stats.global_footprint / spec.dram_bytes_per_s
    loads = stats.global_load_bytes / 4
    latency = (warp_work / max(active_warps, 1)) * loads * spec.global_latency_cycles / 4 / clock
    waves = -(-per_sm // resident)
    barriers = waves * stats.barriers * spec.barrier_cycles / clock
    return max(compute, shared, l2, dram, latency) + barriers + spec.launch_seconds


def module_seconds(stats: tuple, registers: dict | None = None,
                   spec: GPUSpec = H100) -> float:
    """Estimated seconds of one run of every kernel (``registers``: per kernel name, from
    the assembler's report, where known)."""
    registers = registers or {}
    return sum(kernel_seconds(s, registers.get(s.name), spec) for s in stats)


def simulation_seconds(stats: tuple) -> float:
    """Rough seconds the CPU simulator needs for the kernels: it runs chunks of up to 65,536
    lanes, evaluating every expression of the kernel once per chunk over all lanes."""
    total = 0.0
    for s in stats:
        per_chunk = max(1, SIM_LANES_PER_CHUNK // s.threads)
        chunks = -(-s.blocks // per_chunk)
        lanes = min(s.blocks, per_chunk) * s.threads
        total += chunks * s.sim_ops * (SIM_SECONDS_PER_OP + lanes * SIM_SECONDS_PER_OP_LANE)
    return total
