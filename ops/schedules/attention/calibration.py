"""The fused attention kernel's time estimate calibrated on an H100: measured times, and
the factor by which each kind of configuration runs slower than the analytical estimate.

``MEASURED`` is the table of ``bench/bench_attention.py --seqs 512 1024 4096 --all`` on an
NVIDIA H100 80GB HBM3 (batch 1, 16 heads, head dim 128, float16, CUDA graph, medians;
2026-11-27): every legal configuration of the kernel with the base-2 softmax, the position
masks only on the tiles that reach them and the narrowed wgmma output tile
(``bench/results/attention_all_h100_2026-11-27.txt``).

A configuration's *class* is ``(mma, warps, block_kv, stages)`` (``scores`` appended for
the wgmma form with the scores in registers, and ``p_operand`` after it where P is in
registers too; rows of those forms are ``(warps, block_kv, stages, "wgmma", "registers"[,
"registers"])``, timed at 1024 and 4096 keys by ``bench/bench_attention.py --seqs 1024 4096
--registers 6`` (2026-11-28, ``bench/results/attention_registers_h100_2026-11-28.txt``));
its factor is the
geometric mean of measured / estimated over the table's rows of that class (causal or
not). A class the table lacks takes the largest factor of its ``mma`` form: the estimate
does not rank a configuration nobody has timed ahead of one timed fast (AutoTVM and the
auto-scheduler measure them). Re-measure and replace the table when the kernel changes.
"""

from __future__ import annotations

import dataclasses
import functools
import math

MEASURED_ON = ("NVIDIA H100 80GB HBM3, bench/bench_attention.py --seqs 512 1024 4096 "
               "--all: batch 1, 16 heads, head dim 128, float16, CUDA graph medians "
               "(2026-11-27)")
MEASURED_TARGET = "cuda -arch=sm_90a"
MEASURED_SHAPE = (1, 16, 128, "float16")
"""batch, heads, head dim (= v_dim), dtype of every row of :data:`MEASURED`."""

MEASURED = (
    # (seq, causal, (warps, block_kv, stages, mma), microseconds), fastest first per row
    (512, False, (4, 128, 1, "wgmma"), 10.9),
    (512, False, (4, 64, 1, "wgmma"), 12.1),
    (512, False, (4, 64, 2, "wgmma"), 13.1),
    (512, False, (4, 64, 3, "wgmma"), 15.7),
    (512, False, (8, 64, 2, "wgmma"), 18.9),
    (512, False, (4, 64, 2, "mma_sync"), 18.9),
    (512, False, (4, 128, 2, "mma_sync"), 19.2),
    (512, False, (8, 64, 1, "wgmma"), 19.3),
    (512, False, (4, 32, 2, "mma_sync"), 20.0),
    (512, False, (2, 32, 2, "mma_sync"), 21.1),
    (512, False, (4, 64, 1, "mma_sync"), 22.1),
    (512, False, (4, 128, 1, "mma_sync"), 23.9),
    (512, False, (4, 16, 2, "mma_sync"), 24.1),
    (512, False, (2, 64, 1, "mma_sync"), 24.2),
    (512, False, (2, 32, 1, "mma_sync"), 24.5),
    (512, False, (4, 32, 1, "mma_sync"), 24.6),
    (512, False, (2, 128, 1, "mma_sync"), 25.3),
    (512, False, (2, 64, 2, "mma_sync"), 25.3),
    (512, False, (8, 64, 2, "mma_sync"), 26.1),
    (512, False, (8, 32, 2, "mma_sync"), 26.9),
    (512, False, (8, 128, 1, "mma_sync"), 28.4),
    (512, False, (8, 64, 1, "mma_sync"), 29.1),
    (512, False, (2, 16, 1, "mma_sync"), 30.3),
    (512, False, (8, 16, 2, "mma_sync"), 30.9),
    (512, False, (4, 16, 1, "mma_sync"), 31.1),
    (512, False, (8, 32, 1, "mma_sync"), 31.1),
    (512, False, (2, 128, 2, "mma_sync"), 31.5),
    (512, False, (2, 16, 2, "mma_sync"), 32.2),
    (512, False, (1, 16, 2, "mma_sync"), 33.2),
    (512, False, (1, 32, 1, "mma_sync"), 33.7),
    (512, False, (1, 32, 2, "mma_sync"), 33.9),
    (512, False, (1, 64, 1, "mma_sync"), 35.9),
    (512, False, (1, 16, 1, "mma_sync"), 36.3),
    (512, False, (8, 16, 1, "mma_sync"), 38.2),
    (512, False, (1, 64, 2, "mma_sync"), 40.1),
    (512, False, (1, 128, 1, "mma_sync"), 49.7),
    (512, False, (1, 128, 2, "mma_sync"), 64.9),
    (512, True, (4, 128, 1, "wgmma"), 11.5),
    (512, True, (4, 64, 1, "wgmma"), 12.3),
    (512, True, (4, 64, 2, "wgmma"), 12.6),
    (512, True, (4, 64, 3, "wgmma"), 16.1),
    (512, True, (4, 128, 2, "mma_sync"), 18.4),
    (512, True, (4, 64, 2, "mma_sync"), 18.9),
    (512, True, (8, 64, 2, "wgmma"), 19.9),
    (512, True, (8, 64, 1, "wgmma"), 20.1),
    (512, True, (4, 32, 2, "mma_sync"), 20.4),
    (512, True, (4, 64, 1, "mma_sync"), 21.0),
    (512, True, (2, 32, 2, "mma_sync"), 21.5),
    (512, True, (4, 128, 1, "mma_sync"), 22.3),
    (512, True, (2, 128, 1, "mma_sync"), 22.9),
    (512, True, (2, 32, 1, "mma_sync"), 24.2),
    (512, True, (4, 32, 1, "mma_sync"), 24.8),
    (512, True, (2, 64, 1, "mma_sync"), 24.8),
    (512, True, (4, 16, 2, "mma_sync"), 25.5),
    (512, True, (2, 16, 2, "mma_sync"), 25.6),
    (512, True, (8, 64, 2, "mma_sync"), 26.7),
    (512, True, (1, 32, 1, "mma_sync"), 27.7),
    (512, True, (2, 64, 2, "mma_sync"), 27.7),
    (512, True, (1, 16, 2, "mma_sync"), 27.8),
    (512, True, (8, 128, 1, "mma_sync"), 27.9),
    (512, True, (8, 32, 2, "mma_sync"), 27.9),
    (512, True, (8, 64, 1, "mma_sync"), 29.2),
    (512, True, (1, 64, 1, "mma_sync"), 30.9),
    (512, True, (2, 16, 1, "mma_sync"), 31.3),
    (512, True, (8, 32, 1, "mma_sync"), 31.4),
    (512, True, (2, 128, 2, "mma_sync"), 31.5),
    (512, True, (4, 16, 1, "mma_sync"), 31.9),
    (512, True, (1, 32, 2, "mma_sync"), 31.9),
    (512, True, (1, 16, 1, "mma_sync"), 33.2),
    (512, True, (8, 16, 2, "mma_sync"), 33.5),
    (512, True, (1, 64, 2, "mma_sync"), 34.4),
    (512, True, (8, 16, 1, "mma_sync"), 39.2),
    (512, True, (1, 128, 1, "mma_sync"), 40.3),
    (512, True, (1, 128, 2, "mma_sync"), 55.0),
    (1024, False, (4, 64, 1, "wgmma"), 27.0),
    (1024, False, (8, 64, 2, "wgmma"), 30.7),
    (1024, False, (8, 64, 1, "wgmma"), 34.1),
    (1024, False, (4, 128, 1, "wgmma"), 36.0),
    (1024, False, (4, 64, 2, "wgmma"), 42.6),
    (1024, False, (8, 64, 2, "mma_sync"), 45.0),
    (1024, False, (4, 64, 3, "wgmma"), 47.3),
    (1024, False, (8, 32, 2, "mma_sync"), 48.2),
    (1024, False, (4, 32, 2, "mma_sync"), 48.4),
    (1024, False, (4, 64, 1, "mma_sync"), 48.9),
    (1024, False, (4, 32, 1, "mma_sync"), 53.8),
    (1024, False, (8, 64, 1, "mma_sync"), 55.4),
    (1024, False, (4, 16, 2, "mma_sync"), 56.5),
    (1024, False, (8, 16, 2, "mma_sync"), 56.9),
    (1024, False, (8, 128, 1, "mma_sync"), 57.9),
    (1024, False, (8, 32, 1, "mma_sync"), 58.6),
    (1024, False, (4, 64, 2, "mma_sync"), 60.2),
    (1024, False, (2, 32, 1, "mma_sync"), 64.7),
    (1024, False, (4, 16, 1, "mma_sync"), 66.9),
    (1024, False, (2, 16, 1, "mma_sync"), 69.4),
    (1024, False, (4, 128, 2, "mma_sync"), 70.7),
    (1024, False, (8, 16, 1, "mma_sync"), 71.3),
    (1024, False, (2, 16, 2, "mma_sync"), 74.2),
    (1024, False, (4, 128, 1, "mma_sync"), 75.2),
    (1024, False, (2, 128, 1, "mma_sync"), 77.8),
    (1024, False, (2, 64, 2, "mma_sync"), 84.4),
    (1024, False, (2, 64, 1, "mma_sync"), 85.5),
    (1024, False, (2, 32, 2, "mma_sync"), 91.0),
    (1024, False, (2, 128, 2, "mma_sync"), 100.8),
    (1024, False, (1, 16, 1, "mma_sync"), 118.6),
    (1024, False, (1, 64, 1, "mma_sync"), 120.3),
    (1024, False, (1, 32, 2, "mma_sync"), 123.2),
    (1024, False, (1, 64, 2, "mma_sync"), 137.5),
    (1024, False, (1, 32, 1, "mma_sync"), 144.7),
    (1024, False, (1, 16, 2, "mma_sync"), 153.3),
    (1024, False, (1, 128, 1, "mma_sync"), 156.2),
    (1024, False, (1, 128, 2, "mma_sync"), 212.2),
    (1024, True, (4, 64, 1, "wgmma"), 26.5),
    (1024, True, (4, 128, 1, "wgmma"), 33.9),
    (1024, True, (8, 64, 2, "wgmma"), 34.6),
    (1024, True, (8, 64, 1, "wgmma"), 35.8),
    (1024, True, (4, 64, 2, "wgmma"), 37.7),
    (1024, True, (4, 64, 3, "wgmma"), 45.7),
    (1024, True, (8, 64, 2, "mma_sync"), 47.5),
    (1024, True, (4, 64, 1, "mma_sync"), 48.0),
    (1024, True, (4, 32, 2, "mma_sync"), 48.4),
    (1024, True, (8, 32, 2, "mma_sync"), 50.2),
    (1024, True, (8, 128, 1, "mma_sync"), 53.2),
    (1024, True, (2, 32, 1, "mma_sync"), 53.2),
    (1024, True, (4, 32, 1, "mma_sync"), 54.5),
    (1024, True, (2, 16, 2, "mma_sync"), 54.6),
    (1024, True, (8, 64, 1, "mma_sync"), 56.1),
    (1024, True, (4, 64, 2, "mma_sync"), 56.2),
    (1024, True, (2, 32, 2, "mma_sync"), 56.9),
    (1024, True, (8, 32, 1, "mma_sync"), 58.8),
    (1024, True, (2, 64, 1, "mma_sync"), 59.0),
    (1024, True, (4, 16, 2, "mma_sync"), 59.1),
    (1024, True, (8, 16, 2, "mma_sync"), 61.6),
    (1024, True, (4, 128, 1, "mma_sync"), 62.8),
    (1024, True, (2, 128, 1, "mma_sync"), 63.2),
    (1024, True, (2, 16, 1, "mma_sync"), 64.3),
    (1024, True, (4, 16, 1, "mma_sync"), 66.4),
    (1024, True, (8, 16, 1, "mma_sync"), 73.4),
    (1024, True, (4, 128, 2, "mma_sync"), 75.9),
    (1024, True, (2, 64, 2, "mma_sync"), 78.8),
    (1024, True, (2, 128, 2, "mma_sync"), 81.2),
    (1024, True, (1, 32, 1, "mma_sync"), 81.4),
    (1024, True, (1, 16, 1, "mma_sync"), 82.3),
    (1024, True, (1, 16, 2, "mma_sync"), 82.9),
    (1024, True, (1, 64, 1, "mma_sync"), 85.9),
    (1024, True, (1, 64, 2, "mma_sync"), 92.4),
    (1024, True, (1, 32, 2, "mma_sync"), 99.1),
    (1024, True, (1, 128, 1, "mma_sync"), 107.7),
    (1024, True, (1, 128, 2, "mma_sync"), 149.7),
    (4096, False, (4, 64, 1, "wgmma"), 379.5),
    (4096, False, (8, 64, 2, "wgmma"), 419.3),
    (4096, False, (8, 64, 1, "wgmma"), 444.1),
    (4096, False, (4, 128, 1, "wgmma"), 474.3),
    (4096, False, (4, 64, 2, "wgmma"), 599.7),
    (4096, False, (4, 64, 3, "wgmma"), 621.5),
    (4096, False, (8, 64, 2, "mma_sync"), 624.8),
    (4096, False, (4, 64, 1, "mma_sync"), 667.9),
    (4096, False, (4, 32, 2, "mma_sync"), 687.1),
    (4096, False, (8, 32, 2, "mma_sync"), 699.8),
    (4096, False, (4, 16, 2, "mma_sync"), 699.9),
    (4096, False, (8, 128, 1, "mma_sync"), 749.7),
    (4096, False, (8, 64, 1, "mma_sync"), 776.4),
    (4096, False, (4, 64, 2, "mma_sync"), 805.5),
    (4096, False, (8, 16, 2, "mma_sync"), 813.6),
    (4096, False, (4, 32, 1, "mma_sync"), 832.2),
    (4096, False, (4, 16, 1, "mma_sync"), 932.6),
    (4096, False, (8, 32, 1, "mma_sync"), 956.4),
    (4096, False, (4, 128, 2, "mma_sync"), 970.3),
    (4096, False, (2, 32, 1, "mma_sync"), 1008.8),
    (4096, False, (2, 32, 2, "mma_sync"), 1018.2),
    (4096, False, (2, 128, 1, "mma_sync"), 1024.1),
    (4096, False, (2, 16, 1, "mma_sync"), 1035.5),
    (4096, False, (4, 128, 1, "mma_sync"), 1044.2),
    (4096, False, (2, 64, 1, "mma_sync"), 1078.0),
    (4096, False, (2, 64, 2, "mma_sync"), 1101.3),
    (4096, False, (2, 16, 2, "mma_sync"), 1118.0),
    (4096, False, (2, 128, 2, "mma_sync"), 1266.8),
    (4096, False, (8, 16, 1, "mma_sync"), 1309.3),
    (4096, False, (1, 16, 1, "mma_sync"), 1850.6),
    (4096, False, (1, 64, 1, "mma_sync"), 1878.1),
    (4096, False, (1, 32, 2, "mma_sync"), 1880.1),
    (4096, False, (1, 64, 2, "mma_sync"), 1882.9),
    (4096, False, (1, 16, 2, "mma_sync"), 1923.5),
    (4096, False, (1, 32, 1, "mma_sync"), 1932.8),
    (4096, False, (1, 128, 1, "mma_sync"), 2106.7),
    (4096, False, (1, 128, 2, "mma_sync"), 2814.5),
    (4096, True, (4, 64, 1, "wgmma"), 244.4),
    (4096, True, (4, 128, 1, "wgmma"), 297.6),
    (4096, True, (8, 64, 2, "wgmma"), 311.7),
    (4096, True, (8, 64, 1, "wgmma"), 322.6),
    (4096, True, (4, 64, 2, "wgmma"), 342.0),
    (4096, True, (4, 64, 3, "wgmma"), 401.1),
    (4096, True, (4, 64, 1, "mma_sync"), 436.1),
    (4096, True, (8, 64, 2, "mma_sync"), 441.6),
    (4096, True, (4, 32, 2, "mma_sync"), 445.0),
    (4096, True, (8, 128, 1, "mma_sync"), 483.0),
    (4096, True, (8, 32, 2, "mma_sync"), 488.4),
    (4096, True, (4, 16, 2, "mma_sync"), 493.6),
    (4096, True, (4, 64, 2, "mma_sync"), 499.5),
    (4096, True, (8, 64, 1, "mma_sync"), 511.6),
    (4096, True, (4, 32, 1, "mma_sync"), 531.7),
    (4096, True, (4, 128, 1, "mma_sync"), 553.9),
    (4096, True, (2, 32, 2, "mma_sync"), 555.3),
    (4096, True, (2, 64, 1, "mma_sync"), 581.8),
    (4096, True, (2, 32, 1, "mma_sync"), 583.0),
    (4096, True, (2, 16, 2, "mma_sync"), 584.5),
    (4096, True, (2, 128, 1, "mma_sync"), 585.7),
    (4096, True, (4, 16, 1, "mma_sync"), 592.8),
    (4096, True, (8, 16, 2, "mma_sync"), 611.9),
    (4096, True, (8, 32, 1, "mma_sync"), 621.4),
    (4096, True, (2, 16, 1, "mma_sync"), 634.7),
    (4096, True, (4, 128, 2, "mma_sync"), 668.9),
    (4096, True, (2, 64, 2, "mma_sync"), 744.7),
    (4096, True, (2, 128, 2, "mma_sync"), 779.0),
    (4096, True, (8, 16, 1, "mma_sync"), 846.9),
    (4096, True, (1, 64, 1, "mma_sync"), 973.5),
    (4096, True, (1, 32, 1, "mma_sync"), 984.8),
    (4096, True, (1, 16, 2, "mma_sync"), 1004.5),
    (4096, True, (1, 32, 2, "mma_sync"), 1026.8),
    (4096, True, (1, 64, 2, "mma_sync"), 1035.4),
    (4096, True, (1, 16, 1, "mma_sync"), 1044.1),
    (4096, True, (1, 128, 1, "mma_sync"), 1210.0),
    (4096, True, (1, 128, 2, "mma_sync"), 1578.2),
    # the wgmma form with the scores (and P) in registers: bench/bench_attention.py --seqs
    # 1024 4096 --registers 6 on the same kind of H100 (2026-11-28; attention_registers_h100)
    (1024, False, (4, 128, 1, "wgmma", "registers", "registers"), 24.4),
    (1024, False, (4, 64, 2, "wgmma", "registers", "registers"), 25.3),
    (1024, False, (4, 128, 1, "wgmma", "registers"), 25.4),
    (1024, False, (4, 64, 1, "wgmma", "registers"), 25.8),
    (1024, False, (4, 64, 2, "wgmma", "registers"), 26.3),
    (1024, False, (8, 64, 2, "wgmma", "registers", "registers"), 27.3),
    (1024, False, (8, 64, 2, "wgmma", "registers"), 27.6),
    (1024, False, (8, 64, 1, "wgmma", "registers"), 28.4),
    (1024, False, (8, 64, 1, "wgmma", "registers", "registers"), 29.4),
    (1024, True, (4, 64, 2, "wgmma", "registers", "registers"), 21.8),
    (1024, True, (4, 128, 1, "wgmma", "registers", "registers"), 21.9),
    (1024, True, (4, 128, 1, "wgmma", "registers"), 23.3),
    (1024, True, (4, 64, 2, "wgmma", "registers"), 23.5),
    (1024, True, (4, 64, 1, "wgmma", "registers"), 24.0),
    (1024, True, (8, 64, 2, "wgmma", "registers", "registers"), 24.2),
    (1024, True, (8, 64, 1, "wgmma", "registers", "registers"), 26.8),
    (1024, True, (8, 64, 2, "wgmma", "registers"), 28.2),
    (1024, True, (8, 64, 1, "wgmma", "registers"), 28.9),
    (4096, False, (4, 128, 1, "wgmma", "registers", "registers"), 276.8),
    (4096, False, (4, 64, 1, "wgmma", "registers", "registers"), 283.9),
    (4096, False, (4, 64, 2, "wgmma", "registers", "registers"), 304.4),
    (4096, False, (4, 64, 2, "wgmma", "registers"), 305.0),
    (4096, False, (4, 64, 1, "wgmma", "registers"), 306.0),
    (4096, False, (8, 64, 2, "wgmma", "registers", "registers"), 310.7),
    (4096, False, (4, 128, 1, "wgmma", "registers"), 314.7),
    (4096, False, (8, 64, 2, "wgmma", "registers"), 341.6),
    (4096, False, (8, 64, 1, "wgmma", "registers"), 364.7),
    (4096, True, (4, 64, 1, "wgmma", "registers", "registers"), 188.3),
    (4096, True, (4, 128, 1, "wgmma", "registers", "registers"), 189.3),
    (4096, True, (4, 64, 2, "wgmma", "registers", "registers"), 193.2),
    (4096, True, (4, 128, 1, "wgmma", "registers"), 199.9),
    (4096, True, (4, 64, 2, "wgmma", "registers"), 207.6),
    (4096, True, (4, 64, 1, "wgmma", "registers"), 215.8),
    (4096, True, (8, 64, 2, "wgmma", "registers", "registers"), 221.4),
    (4096, True, (8, 64, 2, "wgmma", "registers"), 263.5),
    (4096, True, (8, 64, 1, "wgmma", "registers"), 275.4),
)


def measured_rows() -> list:
    """``(workload, config, seconds)`` of every row of :data:`MEASURED`."""
    from .knobs import AttentionConfig
    from .workload import AttentionWorkload

    b, h, e, dtype = MEASURED_SHAPE
    return [(AttentionWorkload(b, h, h, seq, seq, e, e, dtype, causal),
             AttentionConfig(warps, bc, st, *form), us * 1e-6)
            for seq, causal, (warps, bc, st, *form), us in MEASURED]


def config_class(cfg) -> tuple:
    """``(mma, warps, block_kv, stages)``, with the wgmma form's ``scores`` appended where
    it is not ``"shared"``."""
    base = (cfg.mma, cfg.warps, cfg.block_kv, cfg.stages)
    if cfg.p_operand != "shared":
        return (*base, cfg.scores, cfg.p_operand)
    return base if cfg.scores == "shared" else (*base, cfg.scores)


def is_timed(cfg) -> bool:
    """Whether :data:`MEASURED` has a row of ``cfg``'s class."""
    return config_class(cfg) in class_factors()


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
    (:func:`class_factors`). A ``scores="registers"`` configuration nobody timed takes the
    factor of its ``scores="shared"`` twin (the same copies and products; its estimate
    already counts the row work it saves), and the chooser passes it over
    (:func:`is_timed`) until a GPU run adds its rows to :data:`MEASURED`."""
    factors = class_factors()
    f = factors.get(config_class(cfg))
    if f is None and cfg.scores != "shared":
        f = factors.get(config_class(dataclasses.replace(cfg, scores="shared",
                                                         p_operand="shared")))
    return factors[cfg.mma] if f is None else f
