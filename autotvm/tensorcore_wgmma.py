"""AutoTVM templates of dense and batch_matmul with wgmma (sm_90a).

Importing this module registers ``dense_wgmma.cuda`` and ``batch_matmul_wgmma.cuda``::

    import ptxforge.autotvm.tensorcore_wgmma  # noqa: F401  (registers the templates)

    task = autotvm.task.create("dense_wgmma.cuda", args=(4096, 4096, 4096, "float16"),
                               target="cuda -arch=sm_90a")

Arguments: ``M, N, K, dtype[, out_dtype]`` (``data [M, K] x weight [N, K]^T``) and
``B, M, N, K, dtype[, out_dtype]`` (``x [B, M, K] x y [B, N, K]^T``); ``dtype`` float16 or
bfloat16, float32 sums cast to ``dtype`` unless ``out_dtype="float32"``. Both run the
default schedule of these products on sm_90a,
:func:`~ptxforge.ops.schedules.tensorcore_wgmma.schedule_gemm_wgmma` (any extents: those
the tiles do not divide are padded with zeros), with the knobs ``block_n`` (64, 128, 256:
the wgmma's N, up to N rounded up to a power of two), ``warpgroups`` (1 or 2: block tiles
of 64 or 128 rows; 2 where M > 64), ``stages`` (1 to 5 cp.async buffers, at most the K
steps of 64), ``in_flight`` (0 or 1 wgmma groups running across K steps) and ``split_k``
(1, 2, 4, 8, 16 parts of the reduction on blockIdx.z, float32 partial sums added up by a
second kernel). A combination the schedule refuses (in_flight 1 with fewer than 3
stages, fewer K steps per split-K part than stages, more shared memory than the target
has) is an :class:`~ptxforge.autotvm.space.InstantiationError` naming the rule. On a
target without wgmma (anything but sm_90a) the templates refuse to instantiate: use
``dense_tensorcore.cuda`` (mma.sync) there. Without a record they take
:func:`default_wgmma_config` (the default schedule's chooser).
"""

from __future__ import annotations

from ..ir.intrin.wgmma import require_wgmma
from ..ops.schedules.tensorcore import tile_limit
from ..ops.schedules.tensorcore_wgmma import (
    B_KN_BLOCK_N,
    BLOCK_K,
    BLOCK_N,
    WgmmaScheduleConfig,
    choose_wgmma_config,
    schedule_gemm_wgmma,
    wgmma_form,
)
from ..passes.schedule.common import ScheduleError
from ..target import Target, as_target
from .dispatch import get_config
from .task import template
from .tensorcore_dense import batch_matmul_declaration, dense_declaration

NAME = "dense_wgmma.cuda"
BATCH_NAME = "batch_matmul_wgmma.cuda"
STAGES = (1, 2, 3, 4, 5)
SPLIT_K = (1, 2, 4, 8, 16)
KNOBS = ("block_n", "warpgroups", "stages", "in_flight", "split_k")


def default_wgmma_config(M: int, N: int, K: int, target: Target | str | None = None,
                         dtype: str = "float16", out_dtype: str | None = None,
                         batch: int = 0) -> WgmmaScheduleConfig:
    """The configuration without a record: the default chooser's
    (:func:`~ptxforge.ops.schedules.tensorcore_wgmma.choose_wgmma_config`) for the
    template's product (128 x 256, 4 stages, one group in flight at 4096^3)."""
    t = as_target(target)
    decl = (dense_declaration(M, N, K, dtype, out_dtype) if not batch
            else batch_matmul_declaration(batch, M, N, K, dtype, out_dtype))
    form = _form(decl[3], t, NAME if not batch else BATCH_NAME)
    cfg = choose_wgmma_config(form, t, epilogue_tile=False)
    if cfg is None:
        raise ScheduleError(f"no wgmma tiles fit {M} x {N} x {K}")
    return cfg


def _form(mm, target, name):
    require_wgmma(target)
    return wgmma_form(mm, target, name)


def _schedule(name, out, mm, flop):
    """Define the knobs, build the configuration and schedule the product."""
    from .. import te

    target = as_target(None)
    form = _form(mm, target, name)
    cfg = get_config()
    cfg.define_knob("block_n", [n for n in BLOCK_N
                                if n <= max(tile_limit(form.N), BLOCK_N[0])
                                and (form.paddable or form.N % n == 0)
                                and (not form.b_kn or n == B_KN_BLOCK_N)] or [BLOCK_N[0]])
    cfg.define_knob("warpgroups", [w for w in (1, 2) if (w == 1 or form.M > 64)
                                   and (form.paddable or form.M % (64 * w) == 0)] or [1])
    steps = -(-form.K // BLOCK_K)
    cfg.define_knob("stages", [s for s in STAGES if s <= max(1, steps)])
    cfg.define_knob("in_flight", [0, 1])
    cfg.define_knob("split_k", [p for p in SPLIT_K if p == 1 or (form.paddable
                                                                and steps >= p)])
    cfg.add_flop(flop)
    if cfg.is_fallback:
        wc = choose_wgmma_config(form, target, epilogue_tile=False)
    else:
        wc = WgmmaScheduleConfig(*(cfg[k].val for k in KNOBS))
    s = te.create_schedule(out.op)
    try:
        schedule_gemm_wgmma(s, mm, None if out.op is mm else out.op, wc, target, form)
    except ScheduleError as e:
        if cfg.is_fallback:
            raise
        cfg.raise_error(str(e))
    return s


@template(NAME)
def dense_wgmma(M, N, K, dtype="float16", out_dtype=None):
    """The wgmma dense template (see the module doc)."""
    data, weight, out, mm = dense_declaration(M, N, K, dtype, out_dtype)
    return _schedule(NAME, out, mm, 2.0 * M * N * K), [data, weight, out]


@template(BATCH_NAME)
def batch_matmul_wgmma(B, M, N, K, dtype="float16", out_dtype=None):
    """The wgmma batch_matmul template (see the module doc)."""
    x, y, out, mm = batch_matmul_declaration(B, M, N, K, dtype, out_dtype)
    return _schedule(BATCH_NAME, out, mm, 2.0 * B * M * N * K), [x, y, out]


def _knobs(c: WgmmaScheduleConfig) -> dict:
    return {k: getattr(c, k) for k in KNOBS}


def _knob_target():
    """The current target, or sm_90a where it has no wgmma: a tuner asks for the default
    knobs outside the task's target (the values only rank; instantiating checks the
    target)."""
    t = as_target(None)
    return t if t.has_wgmma else as_target("cuda -arch=sm_90a")


@dense_wgmma.defaults
def _defaults(M, N, K, dtype="float16", out_dtype=None):
    return _knobs(default_wgmma_config(M, N, K, _knob_target(), dtype, out_dtype))


@batch_matmul_wgmma.defaults
def _batch_defaults(B, M, N, K, dtype="float16", out_dtype=None):
    return _knobs(default_wgmma_config(M, N, K, _knob_target(), dtype, out_dtype, batch=B))
