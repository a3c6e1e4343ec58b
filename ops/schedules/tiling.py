"""Tile sizes for the tiled reduction schedules (conv2d, depthwise, dense, batch_matmul).

A tiled reduction is scheduled as TVM's GPU templates do: every spatial axis is split into
(block, thread, inner) loops, the reduction runs per thread into a local accumulator of
``prod(inner)`` elements, and the longest reduce axis is cut into chunks; each chunk of
an input the threads of a block share is staged in shared memory by all of them, and an
input each thread reads alone (a matrix-vector product's weights) is read from global
memory where it is used.

:func:`choose_tiling` enumerates the factor choices (divisors of each extent, and powers
of two, which need a predicate where they do not divide) and ranks them with a small cost
model of one SM of the target GPU (every figure comes from the
:class:`~ptxforge.target.Target`):

* a reduction step of a thread issues ``O`` FMAs (``O = prod(inner)``) and ``L`` loads
  (the distinct input elements the step needs; a fourth of that where consecutive steps
  read consecutive elements, which LLVM turns into vector loads; a global load counts
  twice);
* an SM runs ``w`` resident warps; per step it needs ``w * (O + L) / 4`` issue cycles
  (the target's schedulers per SM; fewer than 2 warps per scheduler issue proportionally
  less) and
  ``w * L`` cycles of the shared-memory pipe (one warp-wide load per cycle);
* every chunk costs global-memory round trips (a thread keeps about 16 loads in flight)
  behind a barrier, plus the fetch's issue;
* what all blocks load from global memory (each block its staged tiles, each thread the
  inputs it reads alone) is bounded by the L2 bandwidth, and what the busiest SM's blocks
  load by the bandwidth from L2 into one SM;
* the busiest SM runs ``ceil(blocks / SMs)`` blocks, as many at a time as threads,
  registers and shared memory allow.

The figures are rough, but they order the candidates sensibly: enough blocks to fill the
SMs, enough warps to hide latency, and register tiles that cut shared-memory traffic.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...ir.te import ComputeOp
from ...target import Target, as_target
from ..tag import DEPTHWISE_CONV2D_NHWC
from .analysis import InputAccess, footprint, input_accesses

MAX_UNROLLED_STEPS = 512
"""Largest per-chunk body (reduce steps times accumulators) the schedules unroll."""

MAX_OUTPUTS_PER_THREAD = 16
MAX_INNER = 8
SHARED_MARGIN = 1024
"""Bytes kept free below the shared-memory limit for alignment padding."""
LOADS_IN_FLIGHT = 16
"""Global loads one thread keeps outstanding (so a chunk's loads take several round
trips when there are more)."""
MAX_FETCH_PER_THREAD = 24
"""Elements one thread copies into shared memory per chunk: the unrolled fetch holds them
all in registers, and LLVM's NVPTX code generation slows down sharply past this."""
COALESCED_CHANNELS = 16
"""The fewest threads a depthwise NHWC tiling puts along the channels (the contiguous axis
of its input, weights and output), each on one channel: a 32-byte sector holds 16 fp16
channels, and with fewer consecutive threads a warp's loads and stores touch more sectors
than they use. The model counts loads, not sectors, and picked 2 to 9 threads there;
every fastest tuned record of MobileNetV2 b1's 11 depthwise layers (an H200) has 16 to 64,
one channel each (the default took 1.3x to 2.5x as long: 112 x 112 x 32, 6.2 us against
2.5)."""
RAGGED_PENALTY = 0.25
"""Extra cost per axis whose tile does not divide it: the guard of the overhang sits on
every reduction step, which blocks vector loads and costs instructions."""


@dataclass(frozen=True)
class Tiling:
    """Tile sizes of a tiled reduction.

    Attributes:
        threads: threads per block along each spatial axis.
        inner: accumulators per thread along each spatial axis.
        chunk_axis: index (into the reduce axes) of the axis cut into chunks.
        chunk: reduce-axis elements staged per chunk.
        staged: per distinct input (in order of first read), whether it is copied into
            shared memory (else each thread reads it from global memory).
        blocks: thread blocks launched.
        shared_bytes: estimated shared memory per block.
        cycles: the cost model's estimate for the busiest SM.
    """

    threads: tuple
    inner: tuple
    chunk_axis: int
    chunk: int
    staged: tuple = ()
    blocks: int = 0
    shared_bytes: int = 0
    cycles: float = 0.0
    extents: tuple = field(default=(), compare=False)

    @property
    def num_threads(self) -> int:
        return int(np.prod(self.threads, dtype=np.int64))

    @property
    def outputs_per_thread(self) -> int:
        return int(np.prod(self.inner, dtype=np.int64))

    def describe(self) -> str:
        """One line: threads, accumulators, chunk, blocks and the estimate."""
        return (f"threads {list(self.threads)} (= {self.num_threads}), inner "
                f"{list(self.inner)}, chunk {self.chunk} on reduce axis {self.chunk_axis}, "
                f"staged {list(self.staged)}, "
                f"{self.blocks} blocks, ~{self.shared_bytes} B shared, "
                f"~{self.cycles:.0f} cycles")


def divisors(n: int) -> list[int]:
    """The divisors of ``n``, ascending."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def thread_candidates(extent: int, cap: int) -> list[int]:
    """Thread counts tried along an axis: its divisors and the powers of two below it."""
    out = {d for d in divisors(extent) if d <= cap}
    p = 1
    while p < extent and p <= cap:
        out.add(p)
        p *= 2
    return sorted(out)


def inner_candidates(extent: int) -> list[int]:
    """Accumulators per thread tried along an axis: its divisors up to :data:`MAX_INNER`."""
    return [d for d in divisors(extent) if d <= MAX_INNER]


def _axis_pairs(extent: int, cap: int) -> np.ndarray:
    pairs = [(t, i) for t in thread_candidates(extent, cap) for i in inner_candidates(extent)
             if t * i <= extent]
    return np.array(pairs, dtype=np.int64).reshape(-1, 2)


def _grid(extents: list[int], target: Target) -> tuple[np.ndarray, np.ndarray]:
    """All (threads, inner) combinations over the axes within the per-block limits, as two
    arrays of shape (candidates, axes)."""
    threads = np.ones((1, 0), dtype=np.int64)
    inner = np.ones((1, 0), dtype=np.int64)
    for e in extents:
        pairs = _axis_pairs(e, target.max_threads_per_block)
        n, m = len(threads), len(pairs)
        threads = np.concatenate([np.repeat(threads, m, 0), np.tile(pairs[:, :1], (n, 1))], 1)
        inner = np.concatenate([np.repeat(inner, m, 0), np.tile(pairs[:, 1:], (n, 1))], 1)
        t = threads.prod(1)
        o = inner.prod(1)
        keep = (t <= target.max_threads_per_block) & (o <= MAX_OUTPUTS_PER_THREAD)
        threads, inner = threads[keep], inner[keep]
    return threads, inner


def _registers(outputs, fetched):
    # calibrated on sm_90 kernels with the per-chunk body unrolled: ~80 registers with one
    # accumulator; each more accumulator holds its own value and its operands, and LLVM
    # issues all of a thread's fetch loads before their stores, holding them in registers
    return 64 + 6 * outputs + 2 * fetched


def input_tensors(accesses: list[InputAccess]) -> list:
    """The distinct tensors of ``accesses``, in order of first read."""
    out, seen = [], set()
    for a in accesses:
        if id(a.tensor) not in seen:
            seen.add(id(a.tensor))
            out.append(a.tensor)
    return out


def choose_tiling(op: ComputeOp, target: Target | str | None = None,
                  accesses: list | None = None,
                  max_unrolled: int = MAX_UNROLLED_STEPS) -> Tiling:
    """The best tiling of reduction ``op`` on ``target`` (default: the current target)
    under the cost model (see the module doc)."""
    return rank_tilings(op, target, 1, accesses, max_unrolled)[0]


def rank_tilings(op: ComputeOp, target: Target | str | None = None, count: int = 5,
                 accesses: list | None = None,
                 max_unrolled: int = MAX_UNROLLED_STEPS) -> list[Tiling]:
    """The ``count`` best tilings of reduction ``op`` under the cost model, best first
    (for checking the model against measurements)."""
    if not op.reduce_axis:
        raise ValueError(f"choose_tiling: stage {op.name} has no reduce axes")
    gpu = as_target(target)
    accesses = input_accesses(op) if accesses is None else accesses
    tensors = input_tensors(accesses)
    owner = [next(k for k, x in enumerate(tensors) if x is a.tensor) for a in accesses]
    extents = [int(a.extent) for a in op.axis]
    r_extents = [int(a.extent) for a in op.reduce_axis]
    spatial_vars = [a.var for a in op.axis]
    reduce_vars = [a.var for a in op.reduce_axis]
    chunk_axis = int(np.argmax(r_extents))
    chunk_extent = r_extents[chunk_axis]
    other_steps = int(np.prod(r_extents, dtype=np.int64)) // chunk_extent
    steps = int(np.prod(r_extents, dtype=np.int64))
    total_outputs = int(np.prod(extents, dtype=np.int64)) if extents else 1

    threads, inner = _grid(extents, gpu)
    tile = threads * inner
    t = threads.prod(1)
    o = inner.prod(1)
    ext = np.array(extents, dtype=np.int64).reshape(1, -1)
    blocks = (-(-ext // np.maximum(tile, 1))).prod(1) if extents else np.ones(len(t), np.int64)
    keep = t >= min(32, total_outputs)
    if op.tag.split(",")[0] == DEPTHWISE_CONV2D_NHWC:
        # and one channel a thread: a warp's every load covers consecutive channels
        keep &= (threads[:, -1] >= min(COALESCED_CHANNELS, extents[-1])) & (inner[:, -1] == 1)
    threads, inner, tile, t, o, blocks = (x[keep] for x in (threads, inner, tile, t, o, blocks))
    if len(t) == 0:
        raise ValueError(
            f"choose_tiling: no tiling of {op.name} fits the limits of {gpu.label}")
    n = len(t)
    wpb = -(-t // gpu.warp_size)
    per_sm = -(-blocks // gpu.num_sms)
    # loads per reduction step of one thread, per access
    step_tile = {v: inner[:, k] for k, v in enumerate(spatial_vars)}
    step_loads = [footprint(a, step_tile).astype(float)
                  * (0.25 if a.contiguous_in_reduce else 1.0) for a in accesses]

    best = {"cost": np.full(n, np.inf), "chunk": np.zeros(n, np.int64),
            "smem": np.zeros(n, np.int64), "staged": np.zeros((n, len(tensors)), bool)}
    for kc in divisors(chunk_extent):
        block_tile = {v: tile[:, k] for k, v in enumerate(spatial_vars)}
        thread_tile = dict(step_tile)
        for k, v in enumerate(reduce_vars):
            block_tile[v] = thread_tile[v] = kc if k == chunk_axis else r_extents[k]
        # an input is staged in shared memory when the threads of a block share elements
        # of it; one each thread reads alone is read from global memory where it is used
        block_fp = [footprint(a, block_tile).astype(np.int64) for a in accesses]
        staged = np.zeros((n, len(tensors)), bool)
        for a_idx, a in enumerate(accesses):
            alone = footprint(a, thread_tile).astype(np.int64) * t
            staged[:, owner[a_idx]] |= block_fp[a_idx] * 10 < alone * 9
        smem = np.zeros(n, np.int64)
        loads = np.zeros(n)
        for a_idx, a in enumerate(accesses):
            on = staged[:, owner[a_idx]]
            elems = block_fp[a_idx]
            if a.contiguous_in_reduce and kc >= 16:
                elems = elems * (kc + 4) // kc  # rows padded by storage_align
            smem += np.where(on, elems * 4, 0)
            # a global load that misses the neighbours' cache lines costs about twice a
            # shared one in the load/store pipe
            loads += np.where(on, 1.0, 2.0) * step_loads[a_idx]
        ok = smem + SHARED_MARGIN <= gpu.max_shared_memory_per_block
        body = kc * other_steps * o
        ok &= (body <= max_unrolled) | (kc == 1)
        fetch = -(-(smem // 4) // t)
        regs = _registers(o, fetch)
        max_regs = gpu.max_registers_per_thread
        ok &= ((regs <= max_regs) & (fetch <= MAX_FETCH_PER_THREAD)) | (kc == 1)
        regs = np.minimum(regs, max_regs)
        resident = gpu.blocks_per_sm(t, regs, smem + SHARED_MARGIN)
        ok &= resident >= 1
        resident = np.maximum(resident, 1)
        rounds = -(-per_sm // resident)
        warps = np.minimum(per_sm, resident) * wpb
        eff = np.minimum(1.0, warps / (2.0 * gpu.schedulers_per_sm))
        issue = warps * (o + loads) / gpu.schedulers_per_sm / eff
        step = np.maximum.reduce([issue, warps * loads, np.full(n, 4.0)])
        compute = rounds * steps * step
        chunks = -(-chunk_extent // kc)
        any_staged = staged.any(1)
        any_direct = ~staged.all(1)
        # a thread keeps about LOADS_IN_FLIGHT global loads outstanding: a chunk costs one
        # round trip per that many loads, for the fetch and for the direct reads alike
        direct = np.zeros(n)
        for a_idx, a in enumerate(accesses):
            per_thread = footprint(a, thread_tile).astype(float)
            vec = 0.25 if a.contiguous_in_reduce else 1.0
            direct += np.where(staged[:, owner[a_idx]], 0.0, per_thread * vec)
        trips = (np.where(any_staged, np.ceil(fetch / LOADS_IN_FLIGHT), 0.0)
                 + np.where(any_direct, np.ceil(direct / LOADS_IN_FLIGHT), 0.0))
        staging = rounds * chunks * (
            gpu.global_latency_cycles * trips
            + np.where(any_staged, 3.0 * fetch * warps / gpu.schedulers_per_sm, 0.0))
        # every block loads its staged footprint, or each thread its own, per chunk
        loaded = np.zeros(n)
        for a_idx, a in enumerate(accesses):
            on = staged[:, owner[a_idx]]
            alone = footprint(a, thread_tile).astype(float) * t
            loaded += np.where(on, block_fp[a_idx], alone)
        l2 = blocks * chunks * loaded * 4.0 / gpu.l2_bytes_per_clock
        sm_in = per_sm * chunks * loaded * 4.0 / gpu.l2_to_sm_bytes_per_clock
        cost = np.where(ok, np.maximum.reduce([compute + staging, l2, sm_in]), np.inf)
        better = cost < best["cost"]
        for key, value in (("cost", cost), ("chunk", kc), ("smem", smem)):
            best[key] = np.where(better, value, best[key])
        best["staged"] = np.where(better[:, None], staged, best["staged"])
    cost = best["cost"]
    if not np.isfinite(cost).any():
        raise ValueError(
            f"choose_tiling: no tiling of {op.name} fits in "
            f"{gpu.max_shared_memory_per_block} bytes of shared memory ({gpu.label})")
    ragged = ((ext % np.maximum(tile, 1)) != 0).sum(1) if extents else np.zeros(n)
    cost = cost * (1.0 + RAGGED_PENALTY * ragged)
    # ties (within 1%) go to tilings whose splits divide evenly, then to more threads
    key = np.lexsort((-t, ragged, np.round(cost / (np.nanmin(cost) * 0.01))))
    key = [int(k) for k in key[:max(1, count)] if np.isfinite(cost[k])]
    return [Tiling(
        threads=tuple(int(x) for x in threads[k]),
        inner=tuple(int(x) for x in inner[k]),
        chunk_axis=chunk_axis,
        chunk=int(best["chunk"][k]),
        staged=tuple(bool(x) for x in best["staged"][k]),
        blocks=int(blocks[k]),
        shared_bytes=int(best["smem"][k]),
        cycles=float(cost[k]),
        extents=tuple(extents),
    ) for k in key]
