"""The AutoTVM template of dense with wgmma (sm_90a).

Importing this module registers ``dense_wgmma.cuda``::

    import ptxforge.autotvm.tensorcore_wgmma  # noqa: F401  (registers the template)

    task = autotvm.task.create("dense_wgmma.cuda", args=(4096, 4096, 4096, "float16"),
                               target="cuda -arch=sm_90a")

Arguments: ``M, N, K, dtype[, out_dtype]`` (``A [M, K] x B [N, K]^T``, ``dtype`` float16
or bfloat16, float32 sums cast to ``dtype`` unless ``out_dtype="float32"``). It runs
:func:`~ptxforge.ops.schedules.tensorcore_wgmma.schedule_dense_wgmma` with the knobs
``block_n`` (64, 128, 256: the wgmma's N, among those dividing N), ``warpgroups`` (1 or 2,
block tiles of 64 or 128 rows, among those dividing M), ``stages`` (1 to 5 cp.async
buffers, at most K / 64) and ``in_flight`` (0 or 1 wgmma groups running across K steps).
A combination the schedule refuses (in_flight 1 with fewer than 3 stages, more shared
memory than the target has) is an
:class:`~ptxforge.autotvm.space.InstantiationError` naming the rule. On a target without
wgmma (anything but sm_90a) the template refuses to instantiate: use
``dense_tensorcore.cuda`` (mma.sync) there. Without a record it takes
:func:`default_wgmma_config`.
"""

from __future__ import annotations

from ..ir.intrin.wgmma import require_wgmma
from ..ops.schedules.tensorcore import dense_tensorcore_compute
from ..ops.schedules.tensorcore_wgmma import (
    BLOCK_K,
    BLOCK_N,
    WgmmaScheduleConfig,
    schedule_dense_wgmma,
    wgmma_shared_bytes,
)
from ..passes.schedule.common import ScheduleError
from ..target import Target, as_target
from .dispatch import get_config
from .task import template

NAME = "dense_wgmma.cuda"
STAGES = (1, 2, 3, 4, 5)
KNOBS = ("block_n", "warpgroups", "stages", "in_flight")


def default_wgmma_config(M: int, N: int, K: int, target: Target | str | None = None
                         ) -> WgmmaScheduleConfig:
    """The configuration without a record: the widest tiles that divide the product (128 x
    256 at 4096^3), as many stages as fit shared memory (at most 4) and K / 64, one group
    in flight when there are 3 stages or more."""
    t = as_target(target)
    bn = next((n for n in reversed(BLOCK_N) if N % n == 0), BLOCK_N[0])
    wgs = 2 if M % 128 == 0 else 1
    stages = 1
    for st in (4, 3, 2):
        cfg = WgmmaScheduleConfig(bn, wgs, st, 0)
        if st <= K // BLOCK_K and wgmma_shared_bytes(cfg) <= t.max_shared_memory_per_block_optin:
            stages = st
            break
    return WgmmaScheduleConfig(bn, wgs, stages, 1 if stages >= 3 else 0)


@template(NAME)
def dense_wgmma(M, N, K, dtype="float16", out_dtype=None):
    """The wgmma dense template (see the module doc)."""
    target = as_target(None)
    require_wgmma(target)
    tensors = dense_tensorcore_compute(M, N, K, dtype, out_dtype or dtype)
    cfg = get_config()
    cfg.define_knob("block_n", [n for n in BLOCK_N if N % n == 0] or [BLOCK_N[0]])
    cfg.define_knob("warpgroups", [w for w in (1, 2) if M % (64 * w) == 0] or [1])
    cfg.define_knob("stages", [s for s in STAGES if s <= max(1, K // BLOCK_K)])
    cfg.define_knob("in_flight", [0, 1])
    cfg.add_flop(2.0 * M * N * K)
    if cfg.is_fallback:
        wc = default_wgmma_config(M, N, K, target)
    else:
        wc = WgmmaScheduleConfig(*(cfg[k].val for k in KNOBS))
    try:
        s = schedule_dense_wgmma(tensors, wc, target)
    except ScheduleError as e:
        if cfg.is_fallback:
            raise
        cfg.raise_error(str(e))
    return s, list(tensors)


@dense_wgmma.defaults
def _defaults(M, N, K, dtype="float16", out_dtype=None):
    c = default_wgmma_config(M, N, K, as_target(None))
    return {k: getattr(c, k) for k in KNOBS}
