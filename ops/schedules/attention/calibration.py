"""The fused attention kernel's time estimate calibrated on an H100: measured times, and
the factor by which each kind of configuration runs slower than the analytical estimate.

``MEASURED`` is the table of ``bench/bench_attention.py --seqs 512 1024 4096 --configs 3``
on an NVIDIA H100 80GB HBM3 (batch 1, 16 heads, head dim 128, float16, CUDA graph,
medians; 2026-11-27), of the kernel before its softmax took each thread's own score
elements (:mod:`.banks`): the kernel was latency-bound (one block per SM, 39 % of the
issue slots busy), its steps 3 to 5x the estimate's, most of all for one warpgroup.

A configuration's *class* is ``(mma, warps, block_kv, stages)``; its factor is the
geometric mean of measured / estimated over the table's rows of that class (causal or
not). A class the table lacks takes the largest factor of its ``mma`` form: the estimate
does not rank a configuration nobody has timed ahead of one timed fast (AutoTVM and the
auto-scheduler measure them). Re-measure and replace the table when the kernel changes.
"""

from __future__ import annotations

import functools
import math

MEASURED_ON = ("NVIDIA H100 80GB HBM3, bench/bench_attention.py --seqs 512 1024 4096 "
               "--configs 3: batch 1, 16 heads, head dim 128, float16, CUDA graph medians "
               "(2026-11-27)")
MEASURED_TARGET = "cuda -arch=sm_90a"
MEASURED_SHAPE = (1, 16, 128, "float16")
"""batch, heads, head dim (= v_dim), dtype of every row of :data:`MEASURED`."""

MEASURED = (
    # (seq, causal, (warps, block_kv, stages, mma), microseconds)
    (512, False, (4, 64, 3, "wgmma"), 33.5),
    (512, False, (4, 64, 2, "wgmma"), 33.7),
    (512, False, (4, 128, 1, "wgmma"), 32.2),
    (512, False, (4, 128, 2, "mma_sync"), 40.6),
    (512, True, (4, 64, 3, "wgmma"), 33.3),
    (512, True, (4, 64, 2, "wgmma"), 33.6),
    (512, True, (4, 128, 1, "wgmma"), 31.7),
    (512, True, (4, 128, 2, "mma_sync"), 39.9),
    (1024, False, (4, 64, 3, "wgmma"), 125.6),
    (1024, False, (8, 64, 1, "wgmma"), 80.8),
    (1024, False, (4, 64, 2, "wgmma"), 124.9),
    (1024, False, (8, 64, 2, "mma_sync"), 94.2),
    (1024, True, (4, 64, 3, "wgmma"), 111.5),
    (1024, True, (8, 64, 1, "wgmma"), 79.7),
    (1024, True, (4, 64, 2, "wgmma"), 112.7),
    (1024, True, (4, 32, 2, "mma_sync"), 102.9),
    (4096, False, (4, 64, 3, "wgmma"), 1886.9),
    (4096, False, (8, 64, 1, "wgmma"), 1262.1),
    (4096, False, (4, 64, 2, "wgmma"), 1926.0),
    (4096, False, (8, 64, 2, "mma_sync"), 1374.5),
    (4096, True, (4, 64, 3, "wgmma"), 1085.0),
    (4096, True, (8, 64, 1, "wgmma"), 829.2),
    (4096, True, (4, 64, 2, "wgmma"), 1114.6),
    (4096, True, (8, 64, 2, "mma_sync"), 936.7),
)


def measured_rows() -> list:
    """``(workload, config, seconds)`` of every row of :data:`MEASURED`."""
    from .knobs import AttentionConfig
    from .workload import AttentionWorkload

    b, h, e, dtype = MEASURED_SHAPE
    return [(AttentionWorkload(b, h, h, seq, seq, e, e, dtype, causal),
             AttentionConfig(warps, bc, st, mma), us * 1e-6)
            for seq, causal, (warps, bc, st, mma), us in MEASURED]


def config_class(cfg) -> tuple:
    return (cfg.mma, cfg.warps, cfg.block_kv, cfg.stages)


@functools.lru_cache(maxsize=1)
def class_factors() -> dict:
    """``config_class -> factor`` from :data:`MEASURED` against the uncalibrated estimate
    on :data:`MEASURED_TARGET`, and ``mma -> the largest factor`` of each form."""
    from ....target import as_target
    from .knobs import raw_attention_time

    target = as_target(MEASURED_TARGET)
    logs: dict = {}
    for w, cfg, seconds in measured_rows():
        logs.setdefault(config_class(cfg), []).append(
            math.log(seconds / raw_attention_time(w, cfg, target)))
    out = {k: math.exp(sum(v) / len(v)) for k, v in logs.items()}
    for (mma, *_), f in list(out.items()):
        out[mma] = max(out.get(mma, 0.0), f)
    return out


def calibration_factor(cfg) -> float:
    """How many times the analytical estimate a configuration of ``cfg``'s class ran
    (:func:`class_factors`)."""
    factors = class_factors()
    return factors.get(config_class(cfg), factors[cfg.mma])
