"""AutoTVM templates for dense and batch_matmul on tensor cores.

Importing this module registers ``dense_tensorcore.cuda`` and
``batch_matmul_tensorcore.cuda``::

    import ptxforge.autotvm.tensorcore_dense  # noqa: F401  (registers the templates)

    task = autotvm.task.create("dense_tensorcore.cuda", args=(49, 1000, 512, "float16"),
                               target="cuda")

Arguments: ``M, N, K, dtype[, out_dtype]`` (``data [M, K] x weight [N, K]^T``) and
``B, M, N, K, dtype[, out_dtype]`` (``x [B, M, K] x y [B, N, K]^T``). ``dtype`` is
``float16`` or ``bfloat16`` (float32 sums, the output cast to ``dtype`` unless
``out_dtype="float32"`` keeps the sums) or ``float32``, which means TF32 products: the
template's name asks for tensor cores, so here float32 inputs are multiplied in TF32.

Both run the default schedule of these products,
:func:`~ptxforge.ops.schedules.gemm.schedule.schedule_gemm_tensorcore`, with the
configuration the knobs give: the block tile (``block_m x block_n``, each at most its
extent rounded up to a power of two), ``block_k``, the warp grid (``warps_m x warps_n``),
the pipeline ``stages`` (1: none; else that many cp.async buffers), ``vec`` (elements per
global -> shared copy), ``layout`` (``"pad"``: shared rows padded by 16 bytes, 8 16-bit
elements or 4 fp32, against ldmatrix bank conflicts; ``"plain"``: unpadded rows, less
shared memory) and ``split_k`` (1, 2, 4, 8, 16 up to ``K / 16``: the reduction split
over that many blocks on ``blockIdx.z`` into float32 partial sums, which a second kernel
adds up with the epilogue; for products with few block tiles and a long reduction, such as
BERT's dense layers at batch 1). A product whose extents the block tile does not divide
is padded with zeros (``implicit_gemm``). A combination that breaks a rule of the schedule
(:func:`~ptxforge.ops.schedules.gemm.rules.check_gemm_config`: warp tiles of whole
m16n8 fragments, copies that do not straddle rows, enough ``block_k`` steps for the
stages in each split-K part, the target's shared memory) is rejected at instantiation
with an
:class:`~ptxforge.autotvm.space.InstantiationError` naming the rule. Without a tuned record
the templates use the default schedule's configuration
(:func:`~ptxforge.ops.schedules.gemm.chooser.choose_gemm_config`).

An XOR-swizzled shared layout is not a knob: the fragment loads (ldmatrix and the
lane-by-lane loads) need shared addresses affine in their loops, which a swizzle is not.
"""

from __future__ import annotations

from .. import te
from ..ops import nn
from ..ops.schedules.gemm.chooser import choose_gemm_config
from ..ops.schedules.gemm.forms import gemm_form
from ..ops.schedules.gemm.knobs import TensorCoreConfig, mma_sync_choices
from ..ops.schedules.gemm.schedule import schedule_gemm_tensorcore
from ..passes.schedule.common import ScheduleError
from ..target import as_target
from .dispatch import get_config
from .task import template

NAME = "dense_tensorcore.cuda"
BATCH_NAME = "batch_matmul_tensorcore.cuda"
LAYOUTS = ("pad", "plain")
LAYOUT_PAD = {"pad": 16, "plain": 0}
"""Bytes added to each shared row of the A and B tiles, by layout knob value (8 16-bit
elements, 4 fp32)."""


def _precision(dtype: str):
    return "tf32" if dtype == "float32" else None


def dense_declaration(M, N, K, dtype="float16", out_dtype=None):
    """``(data, weight, out, product stage)`` of ``dense_tensorcore.cuda``."""
    data = te.placeholder((M, K), dtype, name="data")
    weight = te.placeholder((N, K), dtype, name="weight")
    out = nn.dense(data, weight, out_dtype=out_dtype, precision=_precision(dtype))
    return data, weight, out, _product(out)


def batch_matmul_declaration(B, M, N, K, dtype="float16", out_dtype=None):
    """``(x, y, out, product stage)`` of ``batch_matmul_tensorcore.cuda``."""
    x = te.placeholder((B, M, K), dtype, name="x")
    y = te.placeholder((B, N, K), dtype, name="y")
    out = nn.batch_matmul(x, y, out_dtype=out_dtype, precision=_precision(dtype))
    return x, y, out, _product(out)


def _product(out):
    """The reduction stage of ``out`` (``out`` itself, or the stage its cast reads)."""
    op = out.op
    while not op.reduce_axis:
        op = op.input_tensors[0].op
    return op


def _schedule(name, a, b, out, mm, flop):
    """Define the knobs, build the configuration and schedule the product (see the module
    doc)."""
    target = as_target(None)
    form = gemm_form(mm, target)
    if form is None:
        raise ScheduleError(
            f"{name}: {mm.name} {[int(x) for x in mm.shape]} x K={int(mm.reduce_axis[0].extent)}"
            f" of {a.dtype} is not a product the tensor cores of {target.arch} run "
            "(gemm_form: float16 / bfloat16 / TF32 inputs on sm_80+, N >= 16 and K >= the "
            "mma's k)")
    tf32 = form.tf32
    cfg = get_config()
    # the one knob space of the form (tiles up to each extent rounded up to a power of two,
    # split-K parts of at least one mma_k step each, none over a broadcast batch)
    ch = mma_sync_choices(form)
    for knob in ("block_m", "block_n", "block_k", "warps_m", "warps_n", "stages", "vec"):
        cfg.define_knob(knob, list(ch[knob]))
    cfg.define_knob("layout", list(LAYOUTS))
    cfg.define_knob("split_k", list(ch["split_k"]))
    cfg.add_flop(flop)
    if cfg.is_fallback:
        tc = choose_gemm_config(form, target)
    else:
        tc = TensorCoreConfig(
            cfg["block_m"].val, cfg["block_n"].val, cfg["block_k"].val, cfg["warps_m"].val,
            cfg["warps_n"].val, vec=cfg["vec"].val,
            pad=LAYOUT_PAD[cfg["layout"].val] // form.elem_bytes, stages=cfg["stages"].val,
            async_copy=target.has_cp_async, frag_load="ldmatrix", tf32=tf32,
            split_k=cfg["split_k"].val)
    s = te.create_schedule(out.op)
    epilogue = None if out.op is mm else out.op
    try:
        schedule_gemm_tensorcore(s, mm, epilogue, cfg=tc, target=target, form=form)
    except ScheduleError as e:
        if cfg.is_fallback:
            raise
        cfg.raise_error(str(e))
    return s


@template(NAME)
def dense_tensorcore(M, N, K, dtype="float16", out_dtype=None):
    """The tensor-core dense template (see the module doc)."""
    data, weight, out, mm = dense_declaration(M, N, K, dtype, out_dtype)
    s = _schedule(NAME, data, weight, out, mm, 2.0 * M * N * K)
    return s, [data, weight, out]


@template(BATCH_NAME)
def batch_matmul_tensorcore(B, M, N, K, dtype="float16", out_dtype=None):
    """The tensor-core batch_matmul template (see the module doc)."""
    x, y, out, mm = batch_matmul_declaration(B, M, N, K, dtype, out_dtype)
    s = _schedule(BATCH_NAME, x, y, out, mm, 2.0 * B * M * N * K)
    return s, [x, y, out]


def _default_knobs(mm) -> dict | None:
    target = as_target(None)
    form = gemm_form(mm, target)
    return None if form is None else knob_values(choose_gemm_config(form, target))


@dense_tensorcore.defaults
def _dense_defaults(M, N, K, dtype="float16", out_dtype=None):
    return _default_knobs(dense_declaration(M, N, K, dtype, out_dtype)[3]) or {}


@batch_matmul_tensorcore.defaults
def _batch_matmul_defaults(B, M, N, K, dtype="float16", out_dtype=None):
    return _default_knobs(batch_matmul_declaration(B, M, N, K, dtype, out_dtype)[3]) or {}


def knob_values(tc: TensorCoreConfig) -> dict:
    """The templates' knob values of a tensor-core configuration."""
    eb = 4 if tc.tf32 else 2
    layout = next(k for k, v in LAYOUT_PAD.items() if v == tc.pad * eb)
    return {"block_m": tc.block_m, "block_n": tc.block_n, "block_k": tc.block_k,
            "warps_m": tc.warps_m, "warps_n": tc.warps_n, "stages": tc.stages,
            "vec": tc.vec, "layout": layout, "split_k": tc.split_k}
