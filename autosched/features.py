"""Cost-model features of states, computed from the slot values and the ComputeDAG (never
by lowering), vectorized over a population.

A population is an int array ``[n, 1 + max slots]``: column 0 the sketch index, then the
sketch's slot values (padded with zeros). :func:`population_features` groups it by sketch,
runs each sketch's :class:`~ptxforge.autosched.kernel_model.SketchModel` once over its
group, and returns one fixed-length feature row per state (the same columns for every
sketch and task, so one model can learn across them).
"""

from __future__ import annotations

import numpy as np

FEATURE_NAMES = (
    "is_tile", "is_split_k", "is_cross_thread", "is_simple",
    "log_blocks", "log_threads", "log_vthreads", "log_accum", "log_fma_thread",
    "log_shared_bytes", "log_global_bytes", "log_unique_bytes", "lds_per_fma",
    "log_conflict", "log_fetch_iters", "log_fetch_run", "log_unroll", "log_inner_steps",
    "unrolled", "log_r0", "log_split_k", "log_regs", "log_store_threads", "log_store_inner",
    "blocks_per_sm", "log_waves", "wave_eff", "log_warps_per_sm", "sm_fraction",
    "log_main_est", "extra_kernels", "log_extra_est", "log_total_est", "log_flop",
    "log_arith_intensity", "threads_mod_warp",
    # tensor-core states: intrinsic k, warps per block, pipeline stages, bytes of fragments
    # loaded per MMA, the ldmatrix bank-conflict ways, blocks resident per SM
    "is_tensor_core", "tc_mma_k", "log_tc_warps", "tc_stages", "log_tc_bytes_per_mma",
    "log_tc_conflict", "tc_occupancy",
)

_LOG_KEYS = {
    "log_blocks": "blocks", "log_threads": "threads", "log_vthreads": "vthreads",
    "log_accum": "accum", "log_fma_thread": "fma_thread", "log_shared_bytes": "shared_bytes",
    "log_global_bytes": "global_bytes", "log_unique_bytes": "unique_bytes",
    "log_conflict": "conflict", "log_fetch_iters": "fetch_iters",
    "log_fetch_run": "fetch_run", "log_unroll": "unroll", "log_inner_steps": "inner_steps",
    "log_r0": "r0", "log_split_k": "split_k", "log_regs": "regs",
    "log_store_threads": "store_threads", "log_store_inner": "store_inner",
    "log_waves": "waves", "log_warps_per_sm": "warps_per_sm",
}
_COL = {name: k for k, name in enumerate(FEATURE_NAMES)}


def kernel_features(kernels: list, n: int, flop: float, num_sms: int) -> np.ndarray:
    """Feature rows ``[n, len(FEATURE_NAMES)]`` of one sketch's kernel statistics."""
    out = np.zeros((n, len(FEATURE_NAMES)))
    if not kernels:
        return out
    kind, main = kernels[0]
    out[:, _COL["is_tile"]] = kind == "tile"
    out[:, _COL["is_cross_thread"]] = kind == "cross_thread"
    out[:, _COL["is_simple"]] = kind == "simple"
    if kind == "tensorcore":
        out[:, _COL["is_tensor_core"]] = 1.0
        out[:, _COL["tc_mma_k"]] = main["tc_mma_k"]
        out[:, _COL["log_tc_warps"]] = np.log2(main["tc_warps"])
        out[:, _COL["tc_stages"]] = main["tc_stages"]
        out[:, _COL["log_tc_bytes_per_mma"]] = np.log2(main["tc_bytes_per_mma"] + 1.0)
        out[:, _COL["log_tc_conflict"]] = np.log2(main["conflict"])
        out[:, _COL["tc_occupancy"]] = main["blocks_per_sm"]
    if "split_k" in main:
        out[:, _COL["is_split_k"]] = main["split_k"] > 1
    for col, key in _LOG_KEYS.items():
        if key in main:
            out[:, _COL[col]] = np.log2(np.asarray(main[key], dtype=np.float64) + 1.0)
    for key in ("lds_per_fma", "unrolled", "blocks_per_sm", "wave_eff"):
        if key in main:
            out[:, _COL[key]] = main[key]
    out[:, _COL["sm_fraction"]] = np.asarray(main["sms_used"]) / num_sms
    out[:, _COL["threads_mod_warp"]] = (np.asarray(main["threads"]) % 32) / 32.0
    main_est = np.asarray(main["est"], dtype=np.float64)
    extra = np.zeros(n)
    for _, k in kernels[1:]:
        extra = extra + k["est"]
    out[:, _COL["log_main_est"]] = np.log2(main_est * 1e9)
    out[:, _COL["extra_kernels"]] = len(kernels) - 1
    out[:, _COL["log_extra_est"]] = np.log2(extra * 1e9 + 1.0)
    out[:, _COL["log_total_est"]] = np.log2((main_est + extra) * 1e9)
    out[:, _COL["log_flop"]] = np.log2(flop + 1.0)
    if "global_bytes" in main:
        out[:, _COL["log_arith_intensity"]] = np.log2(
            flop / (np.asarray(main["global_bytes"], dtype=np.float64) + 1.0) + 1.0)
    return out


def population_features(models: list, pop: np.ndarray, flop: float,
                        num_sms: int) -> tuple:
    """``(features [n, F], valid [n], estimate [n])`` for the population ``pop`` of a task
    whose sketches' models are ``models``."""
    n = len(pop)
    feats = np.zeros((n, len(FEATURE_NAMES)))
    valid = np.zeros(n, dtype=bool)
    est = np.full(n, np.inf)
    if n == 0:
        return feats, valid, est
    sk = pop[:, 0]
    for s in np.unique(sk):
        idx = np.nonzero(sk == s)[0]
        model = models[int(s)]
        rows = pop[idx, 1: 1 + len(model.sketch.slots)]
        kernels = model.kernels(rows)
        feats[idx] = kernel_features(kernels, len(idx), flop, num_sms)
        valid[idx] = model.valid(rows, kernels)
        est[idx] = model.estimate(rows, kernels)
    return feats, valid, est
