"""AutoTVM templates of dense, batch_matmul and conv2d NHWC with wgmma (sm_90a).

Importing this module registers ``dense_wgmma.cuda``, ``batch_matmul_wgmma.cuda`` and
``conv2d_nhwc_wgmma.cuda``::

    import ptxforge.autotvm.tensorcore_wgmma  # noqa: F401  (registers the templates)

    task = autotvm.task.create("dense_wgmma.cuda", args=(4096, 4096, 4096, "float16"),
                               target="cuda -arch=sm_90a")

Arguments: ``M, N, K, dtype[, out_dtype]`` (``data [M, K] x weight [N, K]^T``) and
``B, M, N, K, dtype[, out_dtype]`` (``x [B, M, K] x y [B, N, K]^T``); ``dtype`` float16 or
bfloat16, float32 sums cast to ``dtype`` unless ``out_dtype="float32"``. Both run the
default schedule of these products on sm_90a,
:func:`~ptxforge.ops.schedules.gemm.schedule.schedule_gemm_wgmma` (any extents: those
the tiles do not divide are padded with zeros), with the knobs ``block_n`` (64, 128, 256:
the wgmma's N, up to N rounded up to a power of two), ``warpgroups`` (1 or 2: block tiles
of 64 or 128 rows; 2 where M > 64), ``stages`` (1 to 5 cp.async buffers, at most the K
steps of 64), ``in_flight`` (0 or 1 wgmma groups running across K steps) and ``split_k``
(1, 2, 4, 8, 16 parts of the reduction on blockIdx.z, float32 partial sums added up by a
second kernel) and ``raster`` (1, 2, 4, 8: the block order, groups of that many row
blocks under each column block; 1 where M <= 128 and on convolutions). A combination the
schedule refuses (in_flight 1 with fewer than 3
stages, fewer K steps per split-K part than stages, more shared memory than the target
has) is an :class:`~ptxforge.autotvm.space.InstantiationError` naming the rule. On a
target without wgmma (anything but sm_90a) the templates refuse to instantiate: use
``dense_tensorcore.cuda`` (mma.sync) there. Without a record they take
:func:`default_wgmma_config` (the default schedule's chooser).

``conv2d_nhwc_wgmma.cuda`` takes the arguments of ``conv2d_nhwc_tensorcore.cuda``
(``N, H, W, CI, CO, KH, KW, stride, padding, dtype``; float16 or bfloat16) and runs
:func:`~ptxforge.ops.schedules.gemm.schedule.schedule_conv2d_nhwc_wgmma` with the same
knobs over its implicit GEMM (the HWIO kernel is B read as ``[K, N]``, in 64-column
panels; ``split_k`` up to the K steps of 64), checked by
:func:`~ptxforge.ops.schedules.gemm.rules.check_wgmma_conv`; without a record it
takes :func:`~ptxforge.ops.schedules.gemm.chooser.choose_wgmma_conv_config`.
"""

from __future__ import annotations

from ..ir.intrin.wgmma import require_wgmma
from ..ops.schedules.gemm.chooser import choose_wgmma_config
from ..ops.schedules.gemm.knobs import (
    RASTER_MIN_M,
    WGMMA_SPACE,
    WgmmaScheduleConfig,
    wgmma_choices,
)
from ..ops.schedules.gemm.schedule import schedule_gemm_wgmma, wgmma_form
from ..passes.schedule.common import ScheduleError
from ..target import Target, as_target
from .dispatch import get_config
from .task import template
from .tensorcore_dense import batch_matmul_declaration, dense_declaration

NAME = "dense_wgmma.cuda"
BATCH_NAME = "batch_matmul_wgmma.cuda"
CONV_NAME = "conv2d_nhwc_wgmma.cuda"
KNOBS = ("block_n", "warpgroups", "stages", "in_flight", "split_k")
RASTER = "raster"
"""The block-order knob, defined after :data:`KNOBS` and only where it has a choice (more
than 128 rows, no convolution): the first knob varies fastest in a config index, so every
index of a space from before it is the configuration it was, and a record without it
replays with ``raster`` 1."""


def default_wgmma_config(M: int, N: int, K: int, target: Target | str | None = None,
                         dtype: str = "float16", out_dtype: str | None = None,
                         batch: int = 0) -> WgmmaScheduleConfig:
    """The configuration without a record: the default chooser's
    (:func:`~ptxforge.ops.schedules.gemm.chooser.choose_wgmma_config`) for the
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
    s = te.create_schedule(out.op)
    tune_wgmma(form, flop, lambda: choose_wgmma_config(form, target, epilogue_tile=False),
               lambda wc: schedule_gemm_wgmma(s, mm, None if out.op is mm else out.op, wc,
                                              target, form))
    return s


def tune_wgmma(form, flop: float, default, schedule) -> None:
    """The knobs of a wgmma template over product ``form`` (see the module doc), then
    ``schedule(config)`` with the configuration they give (``default()`` without a record);
    a configuration the schedule refuses is the instantiation error naming the rule."""
    cfg = get_config()
    ch = wgmma_choices(form)  # the one knob space of the form
    ch["block_n"] = ch["block_n"] or (WGMMA_SPACE.block_n[0],)
    ch["warpgroups"] = ch["warpgroups"] or (1,)
    for knob in KNOBS:
        cfg.define_knob(knob, list(ch[knob]))
    if len(ch[RASTER]) > 1:
        cfg.define_knob(RASTER, list(ch[RASTER]))
    cfg.add_flop(flop)
    if cfg.is_fallback:
        wc = default()
        if wc is None:
            raise ScheduleError(f"no wgmma tiles fit {form.M} x {form.N} x {form.K}")
    else:
        # a record from before the raster knob replays in the plain order
        raster = cfg[RASTER].val if RASTER in set(cfg) else 1
        wc = WgmmaScheduleConfig(*(cfg[k].val for k in KNOBS), raster)
    try:
        schedule(wc)
    except ScheduleError as e:
        if cfg.is_fallback:
            raise
        cfg.raise_error(str(e))


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


def _knobs(c: WgmmaScheduleConfig, M: int = 0) -> dict:
    """The knob values of ``c`` (``raster`` too where ``M`` rows give the space that knob)."""
    out = {k: getattr(c, k) for k in KNOBS}
    if M > RASTER_MIN_M:
        out[RASTER] = c.raster
    return out


def _knob_target():
    """The current target, or sm_90a where it has no wgmma: a tuner asks for the default
    knobs outside the task's target (the values only rank; instantiating checks the
    target)."""
    t = as_target(None)
    return t if t.has_wgmma else as_target("cuda -arch=sm_90a")


@dense_wgmma.defaults
def _defaults(M, N, K, dtype="float16", out_dtype=None):
    return _knobs(default_wgmma_config(M, N, K, _knob_target(), dtype, out_dtype), M)


@batch_matmul_wgmma.defaults
def _batch_defaults(B, M, N, K, dtype="float16", out_dtype=None):
    return _knobs(default_wgmma_config(M, N, K, _knob_target(), dtype, out_dtype, batch=B),
                  M)


# -- conv2d NHWC: the implicit GEMM on wgmma ----------------------------------------------------


@template(CONV_NAME)
def conv2d_nhwc_wgmma(N, H, W, CI, CO, KH, KW, stride, padding, dtype="float16"):
    """The wgmma conv2d NHWC template (see the module doc)."""
    from ..ops.schedules.gemm.choice import wgmma_conv_refusal
    from ..ops.schedules.gemm.chooser import choose_wgmma_conv_config
    from ..ops.schedules.gemm.forms import conv_gemm_form
    from ..ops.schedules.gemm.schedule import schedule_conv2d_nhwc_wgmma
    from .tensorcore_conv import conv2d_nhwc_declaration, inline_around

    target = as_target(None)
    require_wgmma(target)
    data, kernel, out, conv = conv2d_nhwc_declaration(N, H, W, CI, CO, KH, KW, stride,
                                                      padding, dtype)
    why = wgmma_conv_refusal(conv, target)
    if why is not None:
        raise ScheduleError(f"{CONV_NAME}: {why}")
    s, epilogue = inline_around(out, conv)
    form = conv_gemm_form(conv)
    tune_wgmma(form, 2.0 * form.M * form.N * form.K,
               lambda: choose_wgmma_conv_config(conv, target),
               lambda wc: schedule_conv2d_nhwc_wgmma(s, conv, epilogue, target, wc))
    return s, [data, kernel, out]


@conv2d_nhwc_wgmma.defaults
def _conv_defaults(N, H, W, CI, CO, KH, KW, stride, padding, dtype="float16"):
    from ..ops.schedules.gemm.chooser import choose_wgmma_conv_config
    from .tensorcore_conv import conv2d_nhwc_declaration

    conv = conv2d_nhwc_declaration(N, H, W, CI, CO, KH, KW, stride, padding, dtype)[3]
    return _knobs(choose_wgmma_conv_config(conv, _knob_target()))
