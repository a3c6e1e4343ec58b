"""The fused attention kernel's knob space: one legality check and one time estimate.

A configuration is ``warps`` (each warp owns 16 query rows, so a block holds
``block_q = 16 * warps`` rows), ``block_kv`` (the key/value tile ``Bc`` staged in shared
memory per step of the loop over keys) and ``stages`` (1: each K/V tile is copied and then
used; 2: the next tile's ``cp.async`` copies run while the current one is used). The
default chooser, the AutoTVM template and the auto-scheduler's sketch all enumerate
:func:`attention_candidates`, reject with :func:`check_attention_config` and rank with
:func:`attention_time`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ....target import Target
from .workload import AttentionError, AttentionWorkload, check_workload

WARPS = (1, 2, 4, 8)
BLOCK_KV = (16, 32, 64, 128)
STAGES = (1, 2)
MMAS = ("mma_sync", "wgmma")
"""The products' instructions: ``mma.sync m16n8k16`` (a warp's 16 rows) or, on sm_90a,
``wgmma m64nNk16`` (a warpgroup's 64 rows, operands in 128B-swizzled shared memory)."""
SCORES = ("shared", "registers")
"""Where the wgmma form keeps the scores between ``Q K^T`` and ``P V``: ``"shared"`` (the
accumulators stored to a float32 tile the softmax reads; the output flushed through
shared memory) or ``"registers"`` (the softmax on the accumulator's registers, the
output rescaled in them: :mod:`.kernel_wgmma_regs`)."""
P_OPERANDS = ("shared", "registers")
"""Where ``P V``'s A, the probabilities, comes from in the register-scores form: a
swizzled shared tile (``"shared"``) or the registers the softmax cast them into
(``"registers"``: wgmma with A from registers, the ``_rs`` intrinsics)."""
OVERLAPS = ("none", "intra")
"""What the wgmma register form runs beside its softmax: ``"none"`` (each tile's products
waited for before its softmax) or ``"intra"`` (FlashAttention-3's intra-warpgroup
overlap: the next tile's ``Q K^T`` into a second score accumulator and the previous
tile's ``P V`` are in flight while this tile's softmax runs; :mod:`.kernel_wgmma_overlap`).
"""
SCHEDULES = ("cooperative", "pingpong")
"""How the warpgroups of a block share the tensor cores: ``"cooperative"`` (each issues its
products as it reaches them) or ``"pingpong"`` (FlashAttention-3's order for two
warpgroups of the register form, 8 warps: named barriers make them issue their products
in turns, so that one warpgroup's softmax runs while the other's products do;
:mod:`.kernel_wgmma_pingpong`)."""
MMA_ROWS = 16
COPY_ELEMS = 8
"""16-bit elements of one 16-byte ``cp.async``."""
# shared rows padded so ldmatrix's 8 row addresses fall in different banks (16-bit rows
# of 16 n + 8 elements: 4 words mod 8 apart)
PAD16 = 8
PAD32 = 8
"""Float32 rows of 16 n + 8 elements: 8 rows 8 words (mod 32) apart, so a warp's pairs of
accumulator elements (8 rows x 8 consecutive words, stored and read as 8-byte pairs) take
every bank once per 16 lanes (:mod:`.banks`)."""
REGISTER_BUDGET = 255
BASE_REGISTERS = 72
"""Registers beyond the fragments (addresses, loop counters, the running max and sum):
ptxas 13 gave 127 to 235 registers for head dims 64 and 128, 2 to 8 warps, ``block_kv`` 32
to 128 on sm_90a, within about 30 of this estimate."""


@dataclass(frozen=True)
class AttentionConfig:
    """Knobs of the fused attention kernel (see the module's docstring)."""

    warps: int = 4
    block_kv: int = 64
    stages: int = 2
    mma: str = "mma_sync"
    scores: str = "shared"
    p_operand: str = "shared"
    overlap: str = "none"
    schedule: str = "cooperative"

    @property
    def block_q(self) -> int:
        return MMA_ROWS * self.warps

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def warpgroups(self) -> int:
        """Warpgroups of 4 warps (64 query rows each) of a ``wgmma`` configuration."""
        return self.warps // 4

    def to_dict(self) -> dict:
        out = {"warps": self.warps, "block_kv": self.block_kv, "stages": self.stages}
        if self.mma != "mma_sync":
            out["mma"] = self.mma
        if self.scores != "shared":
            out["scores"] = self.scores
        if self.p_operand != "shared":
            out["p_operand"] = self.p_operand
        if self.overlap != "none":
            out["overlap"] = self.overlap
        if self.schedule != "cooperative":
            out["schedule"] = self.schedule
        return out


@dataclass(frozen=True)
class SharedLayout:
    """Element offsets are in each buffer's dtype; ``offsets`` in bytes (16-byte aligned)
    of the dynamic shared memory."""

    q_ld: int
    k_ld: int
    v_ld: int
    s_ld: int
    p_ld: int
    o_ld: int
    sizes: dict
    offsets: dict
    total: int


def shared_layout(w: AttentionWorkload, cfg: AttentionConfig) -> SharedLayout:
    """Rows (padded) and byte offsets of the kernel's shared buffers: ``QP_s`` (the Q tile,
    then, once Q's fragments are loaded, the probabilities in the input dtype), ``stages``
    K and V tiles, ``SO_s`` (the float32 scores, and the float32 output tile while the
    scores are dead: the rescaling and the end), one float32 per row (the rescale factor,
    then the inverse sum) and one per warp (its vote for a rescaling). A ``wgmma``
    configuration has its own layout (:func:`~.knobs_wgmma.wgmma_layout`, with the same
    ``sizes``, ``offsets``, ``total``, ``s_ld`` and ``o_ld``)."""
    if cfg.mma == "wgmma":
        # the wgmma form's own layout (swizzled panels; see knobs_wgmma.wgmma_layout)
        from .knobs_wgmma import wgmma_layout

        return wgmma_layout(w, cfg)
    e, ev, br, bc = w.head_dim, w.v_dim, cfg.block_q, cfg.block_kv
    q_ld, k_ld, v_ld = e + PAD16, e + PAD16, ev + PAD16
    # the scores and the output share their float32 buffer and its row length
    s_ld = o_ld = max(bc, ev) + PAD32
    p_ld = bc + PAD16
    sizes = {  # bytes
        "QP_s": br * max(q_ld, p_ld) * 2, "K_s": cfg.stages * bc * k_ld * 2,
        "V_s": cfg.stages * bc * v_ld * 2, "SO_s": br * s_ld * 4,
        "R_s": br * 4, "W_s": cfg.warps * 4,
    }
    offsets, at = {}, 0
    for name, n in sizes.items():
        offsets[name] = at
        at += -(-n // 16) * 16
    return SharedLayout(q_ld, k_ld, v_ld, s_ld, p_ld, o_ld, sizes, offsets, at)


def registers_estimate(w: AttentionWorkload, cfg: AttentionConfig) -> int:
    """32-bit registers a thread holds: its share of the Q (16-bit pairs), scores and output
    fragments (float32), plus a fixed overhead (``wgmma`` configurations:
    :func:`~.knobs_wgmma.wgmma_registers`)."""
    if cfg.mma == "wgmma":
        from .knobs_wgmma import wgmma_registers

        return wgmma_registers(w, cfg)
    lanes = 32
    q = MMA_ROWS * w.head_dim // lanes // 2
    s = MMA_ROWS * cfg.block_kv // lanes
    o = MMA_ROWS * w.v_dim // lanes
    return q + s + o + BASE_REGISTERS


def check_attention_config(w: AttentionWorkload, cfg: AttentionConfig,
                           target: Target) -> None:
    """Raise :class:`AttentionError` naming the rule ``cfg`` breaks for ``w`` on
    ``target``."""
    check_workload(w)
    if cfg.mma not in MMAS:
        raise AttentionError(f"mma must be one of {MMAS}, got {cfg.mma!r}")
    if cfg.scores not in SCORES:
        raise AttentionError(f"scores must be one of {SCORES}, got {cfg.scores!r}")
    if cfg.p_operand not in P_OPERANDS:
        raise AttentionError(f"p_operand must be one of {P_OPERANDS}, got {cfg.p_operand!r}")
    if cfg.overlap not in OVERLAPS:
        raise AttentionError(f"overlap must be one of {OVERLAPS}, got {cfg.overlap!r}")
    if cfg.schedule not in SCHEDULES:
        raise AttentionError(f"schedule must be one of {SCHEDULES}, got {cfg.schedule!r}")
    if cfg.schedule == "pingpong" and (cfg.mma, cfg.scores, cfg.warps) != (
            "wgmma", "registers", 8):
        raise AttentionError(
            "schedule='pingpong' takes turns between two warpgroups of the wgmma register "
            "form (one's softmax beside the other's products): take mma='wgmma', "
            f"scores='registers', warps=8 (got mma={cfg.mma!r}, scores={cfg.scores!r}, "
            f"warps={cfg.warps}), or schedule='cooperative'")
    if cfg.p_operand != "shared" and cfg.scores != "registers":
        raise AttentionError("p_operand='registers' (the probabilities as wgmma's A in "
                             "registers) needs the scores in registers: take mma='wgmma', "
                             "scores='registers'")
    if cfg.scores != "shared" and cfg.mma != "wgmma":
        raise AttentionError(f"scores={cfg.scores!r} is a form of the wgmma kernel (the "
                             "softmax on wgmma's accumulator registers): take mma='wgmma' "
                             "(sm_90a), or scores='shared' with mma.sync")
    if cfg.overlap != "none" and (cfg.mma, cfg.scores, cfg.p_operand) != (
            "wgmma", "registers", "registers"):
        raise AttentionError(f"overlap={cfg.overlap!r} keeps the previous tile's "
                             "probabilities in registers as P V's A while the next "
                             "tile's softmax runs: take mma='wgmma', scores='registers', "
                             "p_operand='registers'")
    if cfg.mma == "wgmma":
        from .knobs_wgmma import check_wgmma_config

        check_wgmma_config(w, cfg, target)
        return
    if not target.has_ldmatrix or not target.has_mma("m16n8k16", w.dtype):
        raise AttentionError(f"fused attention runs mma.sync m16n8k16 and ldmatrix, which "
                             f"{target.arch} lacks; use an sm_80 or newer target")
    if not target.has_cp_async:
        raise AttentionError(f"fused attention stages K and V with cp.async, which "
                             f"{target.arch} lacks; use an sm_80 or newer target")
    if cfg.warps not in WARPS:
        raise AttentionError(f"warps must be one of {WARPS}, got {cfg.warps}")
    if cfg.block_kv not in BLOCK_KV:
        raise AttentionError(f"block_kv must be one of {BLOCK_KV} (whole 16-column mma "
                             f"tiles), got {cfg.block_kv}")
    if cfg.stages not in STAGES:
        raise AttentionError(f"stages must be one of {STAGES}, got {cfg.stages}")
    lay = shared_layout(w, cfg)
    limit = target.max_shared_memory_per_block_optin
    if lay.total > limit:
        raise AttentionError(f"the configuration {cfg.to_dict()} needs {lay.total} bytes of "
                             f"shared memory per block; {target.arch} allows {limit}: take "
                             "fewer warps, a smaller block_kv or one stage")
    regs = registers_estimate(w, cfg)
    if regs > REGISTER_BUDGET:
        raise AttentionError(f"the configuration {cfg.to_dict()} holds about {regs} registers "
                             f"per thread (more than {REGISTER_BUDGET}): take a smaller "
                             "block_kv")
    if regs * cfg.threads > target.registers_per_block:
        raise AttentionError(f"{regs} registers x {cfg.threads} threads exceed the "
                             f"{target.registers_per_block} registers of a block")


def attention_candidates(w: AttentionWorkload, target: Target) -> list[AttentionConfig]:
    """Every legal configuration; a ``block_kv`` above the keys rounded up to 16 and warps
    beyond the query rows rounded up to 16 are left out (they only pad)."""
    out = []
    keys = -(-w.kv_len // MMA_ROWS) * MMA_ROWS
    rows = -(-w.q_len // MMA_ROWS) * MMA_ROWS
    for warps in WARPS:
        if warps > 1 and MMA_ROWS * warps > rows:
            continue
        for bc in BLOCK_KV:
            if bc > 16 and bc > keys:
                continue
            for st in STAGES:
                cfg = AttentionConfig(warps, bc, st)
                try:
                    check_attention_config(w, cfg, target)
                except AttentionError:
                    continue
                out.append(cfg)
    if target.has_wgmma:
        from .knobs_wgmma import wgmma_candidates

        out += wgmma_candidates(w, target)
    return out


def block_steps(w: AttentionWorkload, cfg: AttentionConfig) -> list:
    """Key tiles each query tile's block visits, in launch order (``blockIdx.x``): all of
    them, or under the causal mask those up to its last row's diagonal."""
    br, bc = cfg.block_q, cfg.block_kv
    kv_tiles = -(-w.kv_len // bc)
    if not w.causal:
        return [kv_tiles] * -(-w.q_len // br)
    return [max(1, -(-min(min(q0 + br, w.q_len), w.kv_len) // bc))
            for q0 in range(0, w.q_len, br)]


def busiest_slot_steps(w: AttentionWorkload, cfg: AttentionConfig, slots: int) -> int:
    """Steps of the busiest of ``slots`` block slots (SMs x resident blocks) when the
    blocks start in launch order (query tiles, then heads, then batches), each on the
    first slot free: waves x steps for equal blocks; for causal ones the tail of long
    blocks (a single wave runs as long as its longest block)."""
    import heapq

    per_head = block_steps(w, cfg)
    n = len(per_head) * w.heads * w.batch
    if n <= slots:
        return max(per_head)
    if min(per_head) == max(per_head):
        return -(-n // slots) * per_head[0]
    free = [0] * slots
    for _ in range(w.heads * w.batch):
        for s in per_head:
            heapq.heapreplace(free, free[0] + s)
    return max(free)


def attention_time(w: AttentionWorkload, cfg: AttentionConfig, target: Target) -> float:
    """Estimated seconds of one launch: :func:`raw_attention_time` times the calibration
    factor of the configuration's class, measured on an H100
    (:func:`~.calibration.calibration_factor`)."""
    from .calibration import calibration_factor

    return raw_attention_time(w, cfg, target) * calibration_factor(cfg)


def raw_attention_time(w: AttentionWorkload, cfg: AttentionConfig, target: Target) -> float:
    """The analytical estimate of one launch: the steps of the busiest block slot
    (:func:`busiest_slot_steps`) x the time of a step.

    A step (one K/V tile) costs the larger of its tensor-core work (at the target's
    ``mma_sync_peak_fraction``) and its tile copies (at ``tile_copy_bytes_per_clock``, not
    hidden with one stage), plus the row work of the softmax done by the block's threads
    through shared memory and its barriers. ``wgmma`` configurations:
    :func:`~.knobs_wgmma.wgmma_attention_time`."""
    if cfg.mma == "wgmma":
        from .knobs_wgmma import wgmma_attention_time

        return wgmma_attention_time(w, cfg, target)
    br, bc = cfg.block_q, cfg.block_kv
    per_sm = max(1, int(target.blocks_per_sm(cfg.threads, registers_estimate(w, cfg),
                                             shared_layout(w, cfg).total)))
    clock = target.clock_hz
    mma_flops = 2.0 * br * bc * (w.head_dim + w.v_dim)
    peak = target.peak_flops(w.dtype, tensor_core=True) * target.mma_sync_peak_fraction
    # the blocks resident on one SM share its tensor cores and its L2 bandwidth
    t_mma = mma_flops * per_sm / (peak / target.num_sms)
    copy_bytes = 2.0 * bc * (w.head_dim + w.v_dim)
    t_copy = copy_bytes * per_sm / (target.tile_copy_bytes_per_clock * clock)
    # per thread: the scores stored, read once and the probabilities written (the
    # output's rescaling is rare: only where a row's maximum jumps), plus the warps'
    # votes and the barriers (two a step with two stages, three with one)
    row_work = 3 * br * bc / cfg.threads + cfg.warps
    barriers = 2 if cfg.stages > 1 else 3
    t_rows = (row_work * 4 + barriers * target.barrier_cycles) / clock
    step = (max(t_mma, t_copy) if cfg.stages > 1 else t_mma + t_copy) + t_rows
    steps = busiest_slot_steps(w, cfg, target.num_sms * per_sm)
    return steps * step + target.launch_seconds


def choose_attention_config(w: AttentionWorkload, target: Target) -> AttentionConfig:
    """The candidate :func:`attention_time` ranks first (ties: wgmma, more warps, then
    larger ``block_kv``), but where a measured rule speaks: narrow heads over 128 to 256
    keys (:func:`~.short_keys.short_keys_pick`) or 512 to 1,024 (:data:`NARROW_PICK`)."""
    cands = attention_candidates(w, target)
    # wgmma doubles the products' rate on sm_90a: where it is legal, it runs them
    cands = [c for c in cands if c.mma == "wgmma"] or cands
    # a form no GPU has timed yet is tuned, not chosen (calibration.py)
    from .calibration import is_timed

    cands = [c for c in cands if c.scores == "shared" or is_timed(c)] or cands
    if not cands:
        # the smallest configuration's rule names the reason (dtype, head dim, target)
        check_attention_config(w, AttentionConfig(1, BLOCK_KV[0], 1), target)
        raise AttentionError(f"no fused attention configuration fits {w} on {target.arch}")
    from .short_keys import short_keys_pick

    short = short_keys_pick(w, target)  # narrow heads over 128 to 256 keys (measured)
    if short is not None:
        return short
    narrow = _narrow_head_pick(w, cands)
    if narrow is not None:
        return narrow
    return min(cands, key=lambda c: (round(attention_time(w, c, target), 9),
                                     c.mma != "wgmma", -c.warps, -c.block_kv, -c.stages))


NARROW_HEAD_DIM = 64
NARROW_KEYS = (512, 1024)
NARROW_PICK = AttentionConfig(4, 128, 1, "wgmma", "registers", "registers")
"""Head dims up to :data:`NARROW_HEAD_DIM` over :data:`NARROW_KEYS` keys (the range measured) take
this configuration where it is a candidate: the estimate is calibrated on head dim 128
only (``calibration.py``), and at head dim 64 it ranked 64-key tiles first where 128-key
tiles ran faster on an H200 (2026-11-28, ``bench/bench_attention.py --dim 64``;
``bench/results/attention_d64_b8_h200_2026-11-28.txt``, ``attention_d64_h200_...txt``):
BERT b8 x 12 heads x 512 keys 23.1 us against the chosen 4 x 64 x 1's 24.2; GPT-2's 12
heads x 1,024 keys 13.9 against 4 x 64 x 2's 16.2, causal 14.8 against 15.7."""


def _narrow_head_pick(w: AttentionWorkload, cands: list) -> AttentionConfig | None:
    """:data:`NARROW_PICK` for a narrow head over few keys where it is a candidate."""
    if (w.head_dim <= NARROW_HEAD_DIM and w.v_dim <= NARROW_HEAD_DIM
            and NARROW_KEYS[0] <= w.kv_len <= NARROW_KEYS[1] and NARROW_PICK in cands):
        return NARROW_PICK
    return None
