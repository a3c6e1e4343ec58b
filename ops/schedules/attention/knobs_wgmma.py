"""The ``wgmma`` configurations of the fused attention kernel (sm_90a): their rules, shared
layout and time estimate.

A ``wgmma`` configuration runs both products on ``wgmma.mma_async m64nNk16``: a warpgroup
of 4 warps owns 64 query rows, so ``warps`` is 4 or 8 (one or two warpgroups, ``block_q``
64 or 128). ``S = Q K^T`` is one ``m64n{block_kv}k16`` per 16 columns of the head dim, A
(Q) and B (the K tile, ``[N, K]``) K-major in 128B-swizzled shared memory; ``O += P V``
one ``m64n{v_dim}k16`` per 16 keys, A (the probabilities) K-major in shared memory (the
intrinsics here take A from shared memory only) and B (the V tile as it lies in memory,
``[K, N]``) MN-major (``_kn``). The rules follow from those layouts: ``block_kv`` 64 or
128 (whole 64-key panels of P and V), ``v_dim`` a multiple of 64 (the MN-major B is read
in 64-column panels), both products' N within wgmma's 256.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ....target import Target
from .workload import AttentionError, AttentionWorkload, check_workload

WGMMA_WARPS = (4, 8)
WGMMA_BLOCK_KV = (64, 128)
WGMMA_STAGES = (1, 2, 3)
"""K/V tiles in shared memory: 1 (copy, then use), 2 (the next tile's copies overlap), 3
(the tile after next is copied while the next tile's ``Q K^T`` overlaps this tile's
softmax)."""
PANEL = 64
"""16-bit elements of a 128-byte row: one 128B swizzle atom's row."""
ATOM_ALIGN = 1024
PAD32 = 8
"""Float32 rows of 16 n + 8 elements (see :data:`~.knobs.PAD32`)."""
BASE_REGISTERS = 56
"""Registers beyond the accumulators and the softmax's scores (addresses, loop counters,
the running maxima and sums): ptxas 13 gave 106 to 254 registers for head dims 64 and 128,
4 and 8 warps, ``block_kv`` 64 and 128, 1 to 3 stages on sm_90a, no spills, within 40 of
this estimate."""
REGISTERS_FORM_EXTRA = {1: 16, 2: 64}
"""Registers the ``scores="registers"`` form holds beyond its accumulators and
:data:`BASE_REGISTERS`, by stages (the two-stage loop runs two tiles an iteration): ptxas
13 on sm_90a gave 168 to 254 registers for head dim 128, 4 and 8 warps, ``block_kv`` 64
and 128, causal or not, no spills, within 40 of this estimate."""
COPY_OFFSETS_EXTRA = {1: -20, 2: -20}
"""The same with P in registers, whose copies take constant offsets
(:func:`copy_offsets_by_default`) where the base counts a 64-bit address a copy: ptxas 13
on sm_90a, head dim 128: 127 registers for 4 x 64 x 1 (165 with an address a copy), 168
for 4 x 128 x 1 causal (248), 132 for 4 x 64 x 2 (213); no spills."""
OVERLAP_EXTRA = 16
"""Registers the overlapped form (``overlap="intra"``) holds beyond its two score
accumulators, the output's and :data:`BASE_REGISTERS` (its loop runs two tiles an
iteration; its copies' addresses are one register pair a thread plus constants): ptxas 13
on sm_90a gave 192 to 210 registers for head dim 128 (4 and 8 warps, ``block_kv`` 64,
causal or not), 138 to 227 for head dim 64 (``block_kv`` 64 and 128), no spills."""
REGISTER_BUDGET = 255


@dataclass(frozen=True)
class WgmmaLayout:
    """Shared buffers of a ``wgmma`` configuration: ``sizes`` and ``offsets`` in bytes
    (1024-byte aligned: the 128B swizzle's atoms); ``s_ld``/``o_ld`` the float32 rows
    of the scores (also the accumulator tile stored for a rescale and at the end) and of
    the flushed output; ``q_panels`` the 64-column panels of a Q or K row, ``v_panels``
    of a V row; the 16-bit tiles hold no padding (the swizzle spreads the banks)."""

    q_panels: int
    v_panels: int
    s_ld: int
    o_ld: int
    sizes: dict
    offsets: dict
    total: int


def output_chunk(w: AttentionWorkload, cfg) -> int:
    """Columns of the output accumulator stored at a time through the scores' float32
    tile (a flush, the epilogue): all ``v_dim`` where the key tile is as wide, else the
    widest width dividing both (64 or 128), so that the tile is no wider than the keys."""
    return w.v_dim if w.v_dim <= cfg.block_kv else math.gcd(w.v_dim, cfg.block_kv)


def wgmma_layout(w: AttentionWorkload, cfg) -> WgmmaLayout:
    """``Q_s`` ``[q_panels][block_q][64]``, ``K_s`` ``stages x [q_panels][block_kv][64]``,
    ``V_s`` ``stages x [block_kv / 64][v_panels][64][64]`` (64 K-rows a panel: the
    MN-major descriptor's 8192-byte LBO), ``P_s`` ``[block_kv / 64][block_q][64]``, all
    16-bit and 128B-swizzled; ``S_s`` and ``O_s`` float32 ``[block_q][ld]``; one float32
    per row (``R_s``) and per warp (``W_s``). With ``scores="registers"`` the scores and
    the output stay in the accumulators' registers: no ``S_s``, ``O_s``, ``R_s``, ``W_s``
    (``s_ld`` and ``o_ld`` 0)."""
    br, bc = cfg.block_q, cfg.block_kv
    qp = -(-w.head_dim // PANEL)
    vp = -(-w.v_dim // PANEL)
    sizes = {
        "Q_s": qp * br * PANEL * 2, "K_s": cfg.stages * qp * bc * PANEL * 2,
        "V_s": cfg.stages * bc * vp * PANEL * 2, "P_s": bc * br * 2,
    }
    if cfg.p_operand == "registers":
        del sizes["P_s"]  # P is the A of P V's wgmmas, in registers
    s_ld = o_ld = 0
    if cfg.scores != "registers":
        s_ld = max(bc, output_chunk(w, cfg)) + PAD32
        o_ld = w.v_dim + PAD32
        sizes.update({"S_s": br * s_ld * 4, "O_s": br * o_ld * 4, "R_s": br * 4,
                      "W_s": cfg.warps * 4})
    offsets, at = {}, 0
    for name, n in sizes.items():
        offsets[name] = at
        at += -(-n // ATOM_ALIGN) * ATOM_ALIGN
    return WgmmaLayout(qp, vp, s_ld, o_ld, sizes, offsets, at)


def copy_offsets_by_default(w: AttentionWorkload, cfg) -> bool:
    """Whether the kernel of ``cfg`` addresses its copies at constant offsets unless told
    otherwise: the overlapped form, and the register form with P in registers at head dim
    128 and more (on an H100, 4096 keys: 252.7 against 275.8 us; fewer registers, one more
    block an SM). At head dim 64 the offsets' lower register estimate moved the chooser to
    P in shared memory, measured slower (BERT b8 s512: 27.4 against 24.6 us), so the other
    forms keep an address a copy, as their calibration rows were timed."""
    return cfg.overlap != "none" or (cfg.scores == "registers"
                                     and cfg.p_operand == "registers" and w.head_dim >= 128)


def wgmma_registers(w: AttentionWorkload, cfg) -> int:
    """32-bit registers a thread holds: its share of the two accumulators (``block_kv /
    2`` and ``v_dim / 2`` float32), the masked scores its softmax keeps (``block_kv / 2``;
    none with ``scores="registers"``, which masks them in place) plus a fixed overhead."""
    if cfg.overlap != "none":
        # two score accumulators: the next tile's Q K^T lands in one while P V reads the
        # other's probabilities
        return cfg.block_kv + w.v_dim // 2 + BASE_REGISTERS + OVERLAP_EXTRA
    if cfg.scores == "registers":
        # P in registers takes the scores' registers (in place): none more
        extra = COPY_OFFSETS_EXTRA if copy_offsets_by_default(w, cfg) else REGISTERS_FORM_EXTRA
        return cfg.block_kv // 2 + w.v_dim // 2 + BASE_REGISTERS + extra.get(cfg.stages, 64)
    return cfg.block_kv + w.v_dim // 2 + BASE_REGISTERS


def check_wgmma_config(w: AttentionWorkload, cfg, target: Target) -> None:
    """Raise :class:`AttentionError` naming the rule the ``wgmma`` configuration ``cfg``
    breaks for ``w`` on ``target``."""
    if not target.has_wgmma:
        raise AttentionError(f"mma='wgmma' needs sm_90a (the arch-specific Hopper target); "
                             f"{target.arch} has no wgmma: build for 'cuda -arch=sm_90a' or "
                             "take mma='mma_sync'")
    check_workload(w)  # the problem's own rules (dtype, head dims) come first
    if not target.has_cp_async:
        raise AttentionError(f"fused attention stages K and V with cp.async, which "
                             f"{target.arch} lacks")
    if cfg.warps not in WGMMA_WARPS:
        raise AttentionError(f"mma='wgmma' runs warpgroups of 4 warps, 64 query rows each: "
                             f"warps must be one of {WGMMA_WARPS} (block_q 64 or 128), got "
                             f"{cfg.warps}")
    if cfg.block_kv not in WGMMA_BLOCK_KV:
        raise AttentionError(f"mma='wgmma' reads P and V in 64-key panels: block_kv must be "
                             f"one of {WGMMA_BLOCK_KV}, got {cfg.block_kv}")
    if cfg.stages not in WGMMA_STAGES:
        raise AttentionError(f"mma='wgmma' takes stages in {WGMMA_STAGES} (3: the next "
                             f"tile's Q K^T overlaps this tile's softmax), got {cfg.stages}")
    if cfg.scores == "registers" and cfg.stages == 3:
        raise AttentionError("scores='registers' takes 1 or 2 stages: the overlapped form "
                             "(stages=3) issues the next tile's Q K^T into the accumulator "
                             "the softmax still reads (it would need a second one); take "
                             "stages 1 or 2, or scores='shared'")
    if cfg.overlap != "none" and cfg.stages != 2:
        raise AttentionError(f"overlap={cfg.overlap!r} takes stages=2: a step reads this "
                             "tile's K and the previous tile's V while the next K and this "
                             f"V are copied (two stages of each), got stages={cfg.stages}")
    if w.v_dim % PANEL or w.v_dim > 256:
        raise AttentionError(f"mma='wgmma' reads V as the MN-major B of m64n{w.v_dim}k16, in "
                             f"64-column panels: v_dim must be 64, 128, 192 or 256, got "
                             f"{w.v_dim}; take mma='mma_sync'")
    if w.head_dim % 16 or w.head_dim > 256:
        raise AttentionError(f"mma='wgmma': head_dim {w.head_dim} is not a multiple of 16 "
                             "up to 256 (k16 steps of Q K^T)")
    if cfg.p_operand == "registers":
        from ....ir.intrin.keys import IntrinKey
        from ....ir.intrin.registry import lowered_for

        rs = IntrinKey("wgmma", ab=w.dtype, acc="float32", n=w.v_dim, b_kn=True, a_regs=True,
                       a_cvt=True)
        if not lowered_for(rs, "ptx"):
            raise AttentionError(
                f"p_operand='registers' runs P V as wgmma with A from registers, which the "
                f"PTX backend does not lower for {w.dtype} with v_dim {w.v_dim}: take "
                f"p_operand='shared'")
    lay = wgmma_layout(w, cfg)
    limit = target.max_shared_memory_per_block_optin
    if lay.total > limit:
        fewer = [what for what, more in (("4 warps", cfg.warps > 4),
                                         ("block_kv 64", cfg.block_kv > 64),
                                         ("one stage", cfg.stages > 1)) if more]
        fix = (f"take {' or '.join(fewer)}" if fewer else
               "no wgmma configuration fits these head dims: take mma='mma_sync'")
        raise AttentionError(f"the configuration {cfg.to_dict()} needs {lay.total} bytes of "
                             f"shared memory per block; {target.arch} allows {limit}: {fix}")
    regs = wgmma_registers(w, cfg)
    if regs > REGISTER_BUDGET:
        two = " (two score accumulators)" if cfg.overlap != "none" else ""
        raise AttentionError(f"the configuration {cfg.to_dict()} holds about {regs} registers "
                             f"per thread{two} (more than {REGISTER_BUDGET}): take block_kv 64")
    if regs * cfg.threads > target.registers_per_block:
        raise AttentionError(f"{regs} registers x {cfg.threads} threads exceed the "
                             f"{target.registers_per_block} registers of a block")


def _sizes(w: AttentionWorkload, warps=WGMMA_WARPS):
    """``(warps, block_kv)`` of the wgmma forms that the problem's size does not refuse:
    none at 32 queries or keys or fewer (the wgmma tiles would multiply mostly padding), 8
    warps only beyond 64 queries, 128 keys a tile only beyond 64 keys."""
    if w.q_len <= 32 or w.kv_len <= 32:
        return
    for n in warps:
        if n > 4 and w.q_len <= 64:
            continue
        for bc in WGMMA_BLOCK_KV:
            if bc > 64 and w.kv_len <= 64:
                continue
            yield n, bc


def _legal(w: AttentionWorkload, target: Target, configs) -> list:
    """The configurations of ``configs`` that :func:`check_wgmma_config` takes."""
    out = []
    for cfg in configs:
        try:
            check_wgmma_config(w, cfg, target)
        except AttentionError:
            continue
        out.append(cfg)
    return out


def wgmma_candidates(w: AttentionWorkload, target: Target) -> list:
    """The legal ``wgmma`` configurations (two warpgroups only where the query rows pass
    64; ``block_kv`` 128 only where the keys pass 64); none where the query rows or the
    keys fill less than half of wgmma's 64-wide tiles (at most 32): there its tiles would
    multiply mostly padding, 4x the work of 16-row ``mma.sync`` tiles (a configuration
    given explicitly still runs such problems)."""
    from .knobs import AttentionConfig

    forms = (("shared", "shared"), ("registers", "shared"), ("registers", "registers"))
    return _legal(w, target, (AttentionConfig(n, bc, st, "wgmma", scores, p)
                              for n, bc in _sizes(w) for scores, p in forms
                              for st in WGMMA_STAGES))


def overlap_candidates(w: AttentionWorkload, target: Target) -> list:
    """The legal configurations of the overlapped register form (``overlap="intra"``),
    under the same rules of size as :func:`wgmma_candidates`. Kept apart from
    :func:`~.knobs.attention_candidates` (what the default chooser ranks) until a GPU has
    timed them: the tuners and the benchmark take them from here."""
    from .knobs import AttentionConfig

    return _legal(w, target, (AttentionConfig(n, bc, 2, "wgmma", "registers", "registers",
                                              "intra") for n, bc in _sizes(w)))


def pingpong_candidates(w: AttentionWorkload, target: Target) -> list:
    """The legal configurations of the ping-pong schedule (``schedule="pingpong"``: two
    warpgroups of the register form, 8 warps, issuing their products in turns), plain and
    overlapped, under the same rules of size as :func:`wgmma_candidates`. Kept from the
    default chooser until a GPU has timed them: the benchmark takes them from here."""
    from .knobs import AttentionConfig

    forms = [(st, p, "none") for p in ("shared", "registers") for st in (1, 2)]
    forms.append((2, "registers", "intra"))
    return _legal(w, target, (AttentionConfig(8, bc, st, "wgmma", "registers", p, overlap,
                                              "pingpong")
                              for _, bc in _sizes(w, (8,)) for st, p, overlap in forms))


def wgmma_attention_time(w: AttentionWorkload, cfg, target: Target) -> float:
    """Estimated seconds of one launch of a ``wgmma`` configuration: as
    :func:`~.knobs.attention_time`, the tensor-core work at the wgmma GEMM's fitted share
    of the peak (``WGMMA_PEAK_FRACTION``, the share of a GEMM that waits for each step's
    wgmmas, ``NO_FLIGHT_RATE``: both products are waited for before their results are
    read) and the copies at the wgmma GEMM's ``WGMMA_COPY_BYTES_PER_CLOCK``; the row work
    adds the scores' store from the accumulators. Not calibrated on a GPU yet."""
    from ..gemm.estimate import NO_FLIGHT_RATE, WGMMA_COPY_BYTES_PER_CLOCK, WGMMA_PEAK_FRACTION
    from .knobs import busiest_slot_steps

    br, bc = cfg.block_q, cfg.block_kv
    per_sm = max(1, int(target.blocks_per_sm(cfg.threads, wgmma_registers(w, cfg),
                                             wgmma_layout(w, cfg).total)))
    clock = target.clock_hz
    flops = 2.0 * br * bc * (w.head_dim + w.v_dim)
    frac = WGMMA_PEAK_FRACTION * NO_FLIGHT_RATE * (1.0 if per_sm * cfg.warpgroups >= 2 else 0.8)
    peak = target.peak_flops(w.dtype, tensor_core=True) * frac
    t_mma = flops * per_sm / (peak / target.num_sms)
    copy_bytes = 2.0 * bc * (w.head_dim + w.v_dim)
    t_copy = copy_bytes * per_sm / (WGMMA_COPY_BYTES_PER_CLOCK * clock)
    # the scores stored, read once, the probabilities written; the barriers (two a step,
    # three with one stage)
    row_work = 3 * br * bc / cfg.threads + cfg.warps
    if cfg.scores == "registers":
        # the softmax reads the accumulators' registers: only the probabilities' store
        row_work = br * bc / cfg.threads
    t_rows = (row_work * 4 + (3 if cfg.stages == 1 else 2) * target.barrier_cycles) / clock
    if cfg.overlap != "none":
        # the softmax runs beside the previous tile's P V (and the tail of this tile's
        # Q K^T); one barrier a step
        t_rows = (row_work * 4 + target.barrier_cycles) / clock
        step = max(t_mma, t_copy, t_rows + t_mma / 2)
    elif cfg.stages == 3:
        # the softmax runs beside the next tile's Q K^T (half the tensor-core work)
        step = max(t_mma, t_copy, t_rows + t_mma / 2)
    else:
        step = (max(t_mma, t_copy) if cfg.stages > 1 else t_mma + t_copy) + t_rows
    steps = busiest_slot_steps(w, cfg, target.num_sms * per_sm)
    return steps * step + target.launch_seconds
