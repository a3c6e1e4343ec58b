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
  resident to hide latency; tensor-core work (mma.sync at the target's
  ``mma_sync_peak_fraction`` of its tensor peak, wgmma at
  :data:`~ptxforge.ops.schedules.gemm.estimate.WGMMA_PEAK_FRACTION`);
* shared-memory time including bank conflicts, L2 time from the 32-byte sectors the warps
  touch (coalescing), DRAM time from the bytes of the buffers, and a global-load latency
  term for kernels with little parallelism;
* barriers and a launch overhead.

Every figure of the GPU (SM count, clock, lanes, bandwidths, latencies, limits) comes from
the :class:`~ptxforge.target.Target` given, by default the current one.

:func:`simulation_seconds` is a separate estimate: how long the CPU simulator would take to
run the kernels, so a runner can skip a simulation that would take too long.
"""

from __future__ import annotations

import math

from ..target import Target, as_target
from .kernel_stats import KernelStats

SIM_SECONDS_PER_OP = 3e-7
SIM_SECONDS_PER_OP_LANE = 1.5e-10
SIM_LANES_PER_CHUNK = 1 << 16


def assumed_registers(stats: KernelStats) -> int:
    """Registers per thread when the assembler did not say: local arrays live in
    registers, plus a base for indices and addresses."""
    return int(min(255, 32 + stats.local_bytes // 4))


def blocks_per_sm(stats: KernelStats, registers: int | None,
                  target: Target | str | None = None) -> int:
    """Resident blocks per SM on ``target`` (0: the kernel cannot launch there: too many
    threads, registers or shared memory for one block)."""
    regs = registers if registers else assumed_registers(stats)
    return as_target(target).blocks_per_sm(stats.threads, regs, stats.shared_bytes)


def kernel_seconds(stats: KernelStats, registers: int | None = None,
                   target: Target | str | None = None) -> float:
    """Estimated seconds of one launch of a kernel on ``target`` (``inf`` if it cannot
    launch there)."""
    t = as_target(target)
    resident_limit = blocks_per_sm(stats, registers, t)
    if resident_limit == 0:
        return math.inf
    lanes = t.warp_size
    warps = -(-stats.threads // lanes)
    blocks = stats.blocks
    per_sm = -(-blocks // t.num_sms)  # blocks the busiest SM runs
    resident = min(resident_limit, per_sm)
    active_warps = resident * warps
    warp_work = per_sm * warps  # warps the busiest SM runs, one after another or together
    hide = min(1.0, active_warps / t.warps_to_hide_latency)
    clock = t.clock_hz

    # most float work is multiply-add pairs the backend fuses: one instruction for two
    fp_cycles = warp_work * (stats.flops / 2) / (t.fp32_lanes_per_sm / lanes)
    # index arithmetic is counted before common subexpressions are shared: weigh it down
    int_cycles = warp_work * (stats.int_ops / 4) / (t.int32_lanes_per_sm / lanes)
    compute = (fp_cycles + int_cycles) / hide / clock
    if stats.mma_flops or stats.wgmma_flops:
        from ..ops.schedules.gemm.estimate import WGMMA_PEAK_FRACTION

        tc = t.peak_flops("float16", tensor_core=True) / (t.num_sms * clock)  # per SM clock
        threads_sm = per_sm * stats.threads
        tc_cycles = threads_sm * (stats.mma_flops / max(t.mma_sync_peak_fraction, 1e-3)
                                  + stats.wgmma_flops / WGMMA_PEAK_FRACTION) / max(tc, 1.0)
        compute += tc_cycles / clock
    shared = warp_work * lanes * stats.shared_bytes_accessed / t.shared_bytes_per_clock / clock
    shared /= min(1.0, active_warps / t.schedulers_per_sm)
    active_sms = min(t.num_sms, blocks)
    l2 = stats.global_sector_bytes * stats.threads * blocks / (
        t.l2_bytes_per_s * active_sms / t.num_sms)
    dram = stats.global_footprint / t.dram_bytes_per_s
    loads = stats.global_load_bytes / 4
    latency = (warp_work / max(active_warps, 1)) * loads * t.global_latency_cycles / 4 / clock
    waves = -(-per_sm // resident)
    barriers = waves * stats.barriers * t.barrier_cycles / clock
    return max(compute, shared, l2, dram, latency) + barriers + t.launch_seconds


def module_seconds(stats: tuple, registers: dict | None = None,
                   target: Target | str | None = None) -> float:
    """Estimated seconds of one run of every kernel on ``target`` (``registers``: per
    kernel name, from the assembler's report, where known)."""
    t = as_target(target)
    registers = registers or {}
    return sum(kernel_seconds(s, registers.get(s.name), t) for s in stats)


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
