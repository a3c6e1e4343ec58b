"""Static analysis of a population of states, without lowering: per kernel, the launch
shape, work per thread, memory footprint and traffic per scope, reuse, occupancy, and a
rough analytical time.

Everything is numpy arithmetic over the slot arrays of one sketch (``[n, levels]`` tile
extents, ``[n]`` choices), so a generation of thousands of states costs milliseconds. The
quantities feed the validity check (threads, vthreads, shared memory, accumulators, unrolled
code), the cost model's features and, before any measurement, the ranking of states.
"""

from __future__ import annotations

import numpy as np

from ..target import resident_blocks
from .attention import AttentionStep, attention_model
from .fused_rows import FusedRowsStep, fused_rows_model
from .gemm_rows import RowGemmStep, gemm_rows_model
from .hardware import HardwareParams
from .sketch import Sketch
from .steps import CrossThreadStep, InlineStep, SimpleStep, TileStep
from .tensorcore import TensorCoreStep, tensorcore_model

F32 = 4

MAX_UNROLLED_PER_THREAD = 448
"""The most statements a thread's code may hold once its loops are unrolled (see
:func:`unrolled_code`). Past it a CUDA-core kernel takes seconds to build (9,000 lines of
PTX, up to the builders' 10 s timeout) for no speed: in 4,000 records of fp16 tuning runs on
an H200 (ResNet-18/50, MobileNetV2, BERT) every state within 5% of its task's best held at
most 321, while all 10 CUDA-core states that built in over 2 s and 33 of the 37 over 1 s
held more (docs/tuning.md)."""


def _prod(arrays, n: int) -> np.ndarray:
    out = np.ones(n, dtype=np.int64)
    for a in arrays:
        out = out * a
    return out


def _region(access, tiles: list, n: int) -> np.ndarray:
    """Elements of ``access.producer`` touched when the stage's axes range over ``tiles``
    (one ``[n]`` array per axis): the bounding box of an affine access."""
    elems = np.ones(n, dtype=np.int64)
    for d, extent in enumerate(access.shape):
        if not access.affine[d]:
            elems = elems * extent
            continue
        span = np.ones(n, dtype=np.int64)
        for j, c in enumerate(access.coef[d]):
            if c:
                span = span + abs(int(c)) * (tiles[j] - 1)
        elems = elems * np.minimum(span, extent)
    return elems


def _region_dims(access, tiles: list, n: int) -> list:
    dims = []
    for d, extent in enumerate(access.shape):
        if not access.affine[d]:
            dims.append(np.full(n, extent, dtype=np.int64))
            continue
        span = np.ones(n, dtype=np.int64)
        for j, c in enumerate(access.coef[d]):
            if c:
                span = span + abs(int(c)) * (tiles[j] - 1)
        dims.append(np.minimum(span, extent))
    return dims


def unrolled_code(step: TileStep, V, n: int) -> np.ndarray:
    """``[n]`` statements of one thread's code once ``auto_unroll_max_step`` has unrolled
    its loops: the tiled stage's per-thread nest (reduce levels 1 and 2, spatial levels 3
    and 4, under the outer reduce loop) unrolled as ``unroll_loops`` does (the largest
    inner nest of at most ``unroll`` steps, the whole nest with the outer reduce loop if
    that fits), copied once per virtual thread, plus the cooperative fetch loops of the
    shared inputs (one statement per iteration)."""
    sp = [V[step.slot("tile", a)] for a, _ in step.spatial]
    rd = [V[step.slot("tile", a)] for a, _ in step.reduce]
    if step.split_k is not None:
        rd[step.split_k] = rd[step.split_k][:, 1:]
    unroll = V[step.slot("unroll")]
    # innermost last, in the order TileStep.emit reorders the tiled stage
    loops = ([f[:, 1] for f in rd] + [f[:, 3] for f in sp] + [f[:, 2] for f in rd]
             + [f[:, 4] for f in sp])
    nest = np.ones(n, dtype=np.int64)
    code = np.ones(n, dtype=np.int64)
    for extent in reversed(loops):
        nest = nest * extent
        code = np.where(nest <= unroll, nest, code)
    whole = nest * _prod([f[:, 0] for f in rd], n)
    code = np.where(whole <= unroll, whole, code)
    vthreads = _prod([f[:, 1] for f in sp], n)
    return code * vthreads


TILE_LIMITS = ("threads", "vthreads", "shared_bytes", "accum", "unrolled_code")
"""The quantities of a tile state that :func:`tile_model` bounds (see
:func:`tile_limits_exceeded`)."""


def tile_limits_exceeded(stats: dict, hw: HardwareParams) -> dict:
    """``{quantity: [n] bool}``: where each bounded quantity of :data:`TILE_LIMITS` in
    ``stats`` passes its limit (threads, virtual threads, shared memory per block,
    accumulators and unrolled code per thread). A tile state is valid where none does;
    :mod:`~ptxforge.autosched.repair` reads which one to relieve."""
    limits = tile_limit_values(hw)
    return {k: np.asarray(stats[k]) > limits[k] for k in TILE_LIMITS}


def tile_limit_values(hw: HardwareParams) -> dict:
    """``{quantity: limit}`` for :data:`TILE_LIMITS` on the hardware ``hw``."""
    return {"threads": hw.max_threads_per_block, "vthreads": hw.max_vthread_extent,
            "shared_bytes": hw.max_shared_memory_per_block,
            "accum": hw.max_accumulators_per_thread,
            "unrolled_code": MAX_UNROLLED_PER_THREAD}


def _occupancy(threads, regs, shared, blocks, hw: HardwareParams) -> dict:
    warps = -(-threads // hw.warp_size)
    # the target's occupancy rule with the search's figures; 1 KiB of shared memory per
    # block is the driver's reservation; a block that does not fit counts as one (the
    # limits are checked before a state is measured, not here)
    bps = np.maximum(resident_blocks(
        threads, np.minimum(regs, 255), shared + 1024, warp_size=hw.warp_size,
        max_threads_per_sm=hw.max_threads_per_sm, registers_per_sm=hw.max_registers_per_sm,
        shared_memory_per_sm=hw.max_shared_memory_per_sm,
        max_blocks_per_sm=hw.max_blocks_per_sm, max_threads_per_block=hw.max_threads_per_sm,
        max_registers_per_thread=255, max_shared_per_block=hw.max_shared_memory_per_sm), 1)
    slots = hw.num_sms * bps
    waves = -(-blocks // slots)
    wave_eff = blocks / (waves * slots)
    resident = np.minimum(bps, -(-blocks // hw.num_sms))
    return {"blocks_per_sm": bps, "waves": waves, "wave_eff": wave_eff,
            "warps_per_sm": resident * warps, "sms_used": np.minimum(blocks, hw.num_sms)}


def _inputs(step: TileStep) -> dict:
    """The stage's accesses grouped by the buffer they read."""
    by_input: dict = {}
    for acc in step.accesses:
        by_input.setdefault(acc.producer, []).append(acc)
    return by_input


def tile_limits(step: TileStep, V, n: int) -> dict:
    """The quantities of :data:`TILE_LIMITS` of ``n`` states of a tile step (and what they
    are made of: the tile levels, block tiles, each input's block region), without the
    rest of :func:`tile_model`: what :mod:`~ptxforge.autosched.repair` evaluates while it
    moves a refused state, the same arithmetic as the model's validity."""
    sp = [V[step.slot("tile", a)] for a, _ in step.spatial]
    rd = [V[step.slot("tile", a)] for a, _ in step.reduce]
    k_split = np.ones(n, dtype=np.int64)
    if step.split_k is not None:
        k_split = rd[step.split_k][:, 0]
        rd[step.split_k] = rd[step.split_k][:, 1:]
    vthreads = _prod([f[:, 1] for f in sp], n)
    threads = _prod([f[:, 2] for f in sp], n)
    inner = _prod([f[:, 3] * f[:, 4] for f in sp], n)
    block_tiles = [f[:, 1] * f[:, 2] * f[:, 3] * f[:, 4] for f in sp] + \
                  [f[:, 1] * f[:, 2] for f in rd]
    shared_bytes = np.zeros(n, dtype=np.int64)
    fetch_iters = np.zeros(n, dtype=np.int64)
    elems = {}
    for x, accs in _inputs(step).items():
        elems[x] = np.max([_region(a, block_tiles, n) for a in accs], axis=0)
        if x in step.shared:
            vec = V[step.slot("vec", x)]
            shared_bytes = shared_bytes + elems[x] * F32
            fetch_iters = fetch_iters + -(-elems[x] // (vec * threads))
    return {"sp": sp, "rd": rd, "k_split": k_split, "vthreads": vthreads,
            "threads": threads, "inner": inner, "accum": vthreads * inner,
            "block_tiles": block_tiles, "elems": elems, "shared_bytes": shared_bytes,
            "fetch_iters": fetch_iters,
            "unrolled_code": unrolled_code(step, V, n) + fetch_iters}


def tile_model(step: TileStep, V, hw: HardwareParams, n: int) -> dict:
    lim = tile_limits(step, V, n)
    sp, rd, k_split = lim["sp"], lim["rd"], lim["k_split"]
    vthreads, threads, inner, accum = lim["vthreads"], lim["threads"], lim["inner"], lim["accum"]
    shared_bytes, fetch_iters = lim["shared_bytes"], lim["fetch_iters"]
    block_tiles = lim["block_tiles"]
    reduce_size = 1
    for _, e in step.reduce:
        reduce_size *= e
    space = 1
    for _, e in step.spatial:
        space *= e
    blocks = k_split * _prod([f[:, 0] for f in sp], n)
    r0 = _prod([f[:, 0] for f in rd], n)
    r2 = _prod([f[:, 2] for f in rd], n)
    fma_thread = accum * (reduce_size // k_split)
    unroll = V[step.slot("unroll")]
    inner_steps = inner * r2 * vthreads
    unrolled = inner_steps <= np.maximum(unroll, 32)
    thread_tiles = [f[:, 1] * f[:, 3] * f[:, 4] for f in sp] + [f[:, 2] for f in rd]
    fetch_run = np.full(n, 32, dtype=np.int64)
    lds_thread = np.zeros(n, dtype=np.int64)
    conflict = np.ones(n, dtype=np.int64)
    global_elems = np.zeros(n, dtype=np.int64)
    unique = 0
    # the fastest-varying thread axis and each thread's step along it
    fast = np.full(n, -1, dtype=np.int64)
    for j, f in enumerate(sp):
        fast = np.where(f[:, 2] > 1, j, fast)
    by_input = _inputs(step)
    for x, accs in by_input.items():
        size = int(np.prod(accs[0].shape))
        unique += size * F32
        elems = lim["elems"][x]
        t_elems = np.max([_region(a, thread_tiles, n) for a in accs], axis=0)
        lds_thread = lds_thread + t_elems
        if x in step.shared:
            global_elems = global_elems + elems * r0
            dims = _region_dims(accs[0], block_tiles, n)
            run = np.ones(n, dtype=np.int64)
            full = np.ones(n, dtype=bool)
            for d in range(len(dims) - 1, -1, -1):
                run = np.where(full, run * dims[d], run)
                full = full & (dims[d] == accs[0].shape[d])
            fetch_run = np.minimum(fetch_run, np.minimum(run, 32))
            # shared-memory bank conflicts of the inner loop along the fastest thread axis
            strides = np.ones(n, dtype=np.int64)
            addr = np.zeros(n, dtype=np.int64)
            for d in range(len(dims) - 1, -1, -1):
                for j in range(len(sp)):
                    c = int(accs[0].coef[d, j]) if accs[0].affine[d] else 0
                    if c:
                        step_j = sp[j][:, 3] * sp[j][:, 4]
                        addr = addr + np.where(fast == j, c * strides * step_j, 0)
                strides = strides * dims[d]
            deg = np.where(addr == 0, 1, np.gcd(np.abs(addr), 32))
            lanes = np.where(fast >= 0, np.minimum(
                np.choose(np.maximum(fast, 0), [f[:, 2] for f in sp]), 32), 1)
            conflict = np.maximum(conflict, np.minimum(deg, lanes))
        else:
            global_elems = global_elems + elems * r0
    unique += space * F32
    code = lim["unrolled_code"]
    per_fma = np.where(unrolled, lds_thread / np.maximum(accum * r2, 1),
                       float(len(by_input)))
    regs = np.where(unrolled, 24 + accum + np.minimum(lds_thread, 64), 32 + accum)
    occ = _occupancy(threads, regs, shared_bytes, blocks, hw)
    # an analytical time: issue, shared-memory and DRAM/L2 bounds, plus barrier latency
    # of the outer reduce loop, all scaled by how much of the GPU the launch fills
    warps = -(-threads // hw.warp_size)
    per_sm_blocks = -(-blocks // hw.num_sms)
    instr = fma_thread * (1.0 + per_fma + np.where(unrolled, 0.15, 1.0))
    ilp = np.minimum(1.0, occ["warps_per_sm"] * np.minimum(accum, 8) / 16.0)
    issue = per_sm_blocks * warps * instr / (hw.issue_per_sm_per_clock * ilp * hw.clock_hz)
    lds = per_sm_blocks * warps * fma_thread * per_fma * conflict / hw.clock_hz
    global_bytes = blocks * global_elems * F32
    mem = np.maximum(unique / hw.dram_bytes_per_s, global_bytes / hw.l2_bytes_per_s)
    coalesce = 32.0 / np.maximum(fetch_run, 1)
    mem = mem * np.sqrt(np.minimum(coalesce, 32.0))
    latency = hw.global_latency_cycles + 30.0 * fetch_iters
    sync = occ["waves"] * r0 * latency / hw.clock_hz / np.maximum(
        np.minimum(occ["blocks_per_sm"], per_sm_blocks), 1)
    est = np.maximum(np.maximum(issue, lds), mem) + sync + hw.launch_s
    over = tile_limits_exceeded({"threads": threads, "vthreads": vthreads,
                                 "shared_bytes": shared_bytes, "accum": accum,
                                 "unrolled_code": code}, hw)
    valid = ~np.any(list(over.values()), axis=0)
    return {
        "valid": valid, "over": over, "blocks": blocks, "threads": threads, "vthreads": vthreads,
        "accum": accum, "fma_thread": fma_thread, "shared_bytes": shared_bytes,
        "global_bytes": global_bytes, "unique_bytes": np.full(n, float(unique)),
        "lds_per_fma": per_fma, "conflict": conflict, "fetch_iters": fetch_iters,
        "fetch_run": fetch_run, "unroll": unroll, "inner_steps": inner_steps,
        "unrolled": unrolled, "unrolled_code": code, "r0": r0, "split_k": k_split, "regs": regs,
        "store_threads": sp[-1][:, 2], "store_inner": sp[-1][:, 3] * sp[-1][:, 4],
        "est": est, **occ,
    }


def simple_model(step: SimpleStep, V, hw: HardwareParams, n: int, work: float,
                 in_bytes: float) -> dict:
    threads = V[step.slot("threads")]
    blocks = -(-step.size // threads)
    unroll = V[step.slot("unroll")] if (step.attach or step.reduce_loop) else \
        np.zeros(n, dtype=np.int64)
    occ = _occupancy(threads, np.full(n, 32), np.zeros(n, dtype=np.int64), blocks, hw)
    mem = (in_bytes + step.size * F32) / hw.dram_bytes_per_s
    per_sm = -(-blocks // hw.num_sms)
    warps = -(-threads // hw.warp_size)
    issue = per_sm * warps * (work / step.size) * 2.0 / (hw.issue_per_sm_per_clock * hw.clock_hz)
    est = np.maximum(mem, issue) / np.maximum(occ["wave_eff"], 0.05) + hw.launch_s
    return {"valid": threads <= hw.max_threads_per_block, "blocks": blocks,
            "threads": threads, "unroll": unroll, "est": est, **occ}


def cross_thread_model(step: CrossThreadStep, V, hw: HardwareParams, n: int,
                       space: int, in_bytes: float) -> dict:
    threads = V[step.slot("threads")]
    red = step.reduce_size
    blocks = np.full(n, space, dtype=np.int64)
    per_thread = -(-red // threads)
    occ = _occupancy(threads, np.full(n, 40), threads * F32, blocks, hw)
    per_sm = -(-blocks // hw.num_sms)
    warps = -(-threads // hw.warp_size)
    steps_tree = np.log2(np.maximum(threads, 2))
    issue = per_sm * warps * (per_thread * 4.0 + steps_tree * 10) / (
        hw.issue_per_sm_per_clock * hw.clock_hz)
    # inputs without reuse inside a block: every block reads its whole reduction
    traffic = space * red * F32 * 2.0
    mem = np.maximum(in_bytes / hw.dram_bytes_per_s, traffic / hw.l2_bytes_per_s)
    sync = per_sm * steps_tree * hw.barrier_cycles / hw.clock_hz
    est = np.maximum(issue, mem) + sync + hw.launch_s
    return {"valid": threads <= hw.max_threads_per_block, "blocks": blocks,
            "threads": threads, "unroll": V[step.slot("unroll")],
            "fma_thread": per_thread, "est": est, **occ}


class SketchModel:
    """The static analysis of every step of one sketch of a task."""

    def __init__(self, sketch: Sketch, analysis, hw: HardwareParams):
        self.sketch = sketch
        self.analysis = analysis
        self.hw = hw
        self._in_bytes: dict = {}
        for st in sketch.steps:
            stage = getattr(st, "attach", None) or st.stage
            info = analysis.stages.get(stage)
            if info is None:
                self._in_bytes[st.stage] = (0.0, 0.0, 1)
                continue
            total = 0.0
            for x in info.inputs:
                shape = analysis.stages[x].shape if x in analysis.stages else \
                    analysis.placeholders[x].shape
                total += float(np.prod(shape)) * F32
            self._in_bytes[st.stage] = (total, float(info.space_size * info.reduce_size),
                                        info.space_size)

    def kernels(self, rows: np.ndarray) -> list:
        """``[(kind, stats)]`` per kernel-producing step, the main (tiled or cross-thread)
        kernel first."""
        return [(kind, stats) for _, kind, stats in self.step_kernels(rows)]

    def step_kernels(self, rows: np.ndarray, limits_only: bool = False) -> list:
        """``[(step, kind, stats)]``: :meth:`kernels` with the step each kernel comes
        from. With ``limits_only`` a tile step's stats are only what its validity reads
        (:func:`tile_limits` with ``valid`` and ``over``): the same validity for about half
        the arithmetic, to check draws most of which are refused."""
        V = self.sketch.values(rows)
        n = len(rows)
        out = []
        for st in self.sketch.steps:
            if isinstance(st, InlineStep):
                continue
            in_bytes, work, space = self._in_bytes[st.stage]
            if isinstance(st, AttentionStep):
                out.insert(0, (st, "attention", attention_model(st, V, self.hw, n)))
            elif isinstance(st, FusedRowsStep):
                out.insert(0, (st, "fused_rows", fused_rows_model(st, V, self.hw, n)))
            elif isinstance(st, RowGemmStep):
                out.insert(0, (st, "tensorcore", gemm_rows_model(st, V, self.hw, n)))
            elif isinstance(st, TensorCoreStep):
                out.insert(0, (st, "tensorcore", tensorcore_model(st, V, self.hw, n)))
            elif isinstance(st, TileStep) and limits_only:
                lim = tile_limits(st, V, n)
                lim["over"] = tile_limits_exceeded(lim, self.hw)
                lim["valid"] = ~np.any(list(lim["over"].values()), axis=0)
                out.insert(0, (st, "tile", lim))
            elif isinstance(st, TileStep):
                out.insert(0, (st, "tile", tile_model(st, V, self.hw, n)))
            elif isinstance(st, CrossThreadStep):
                out.insert(0, (st, "cross_thread",
                               cross_thread_model(st, V, self.hw, n, space, in_bytes)))
            elif isinstance(st, SimpleStep):
                if st.attach and any(isinstance(s, TileStep) and s.stage == st.attach
                                     for s in self.sketch.steps):
                    # the final sum of a split-K reduction reads the partial sums
                    tile = next(s for s in self.sketch.steps
                                if isinstance(s, TileStep) and s.stage == st.attach)
                    ks = V[tile.slot("tile", tile.reduce[tile.split_k][0])][:, 0]
                    out.append((st, "simple", simple_model(st, V, self.hw, n, st.size * ks,
                                                           st.size * ks * F32)))
                else:
                    out.append((st, "simple", simple_model(
                        st, V, self.hw, n, max(work, st.size), in_bytes)))
        return out

    def valid(self, rows: np.ndarray, kernels: list | None = None) -> np.ndarray:
        kernels = kernels if kernels is not None else self.kernels(rows)
        ok = np.ones(len(rows), dtype=bool)
        for _, k in kernels:
            ok &= k["valid"]
        return ok

    def estimate(self, rows: np.ndarray, kernels: list | None = None) -> np.ndarray:
        """The analytical time in seconds (a ranking, not a prediction to trust)."""
        kernels = kernels if kernels is not None else self.kernels(rows)
        t = np.zeros(len(rows))
        for _, k in kernels:
            t = t + k["est"]
        return t
