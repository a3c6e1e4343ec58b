"""An AutoTVM template for conv2d NHWC on tensor cores (an implicit GEMM).

Importing this module registers ``conv2d_nhwc_tensorcore.cuda``::

    import ptxforge.autotvm.tensorcore_conv  # noqa: F401  (registers the template)

    task = autotvm.task.create("conv2d_nhwc_tensorcore.cuda",
                               args=(1, 7, 7, 512, 512, 3, 3, 1, 1, "float16"), target="cuda")

Arguments: ``N, H, W, CI, CO, KH, KW, stride, padding, dtype`` (``float16`` or
``bfloat16`` inputs, float32 sums, the output cast to ``dtype``; ``float32`` means TF32,
which the template's name asks for explicitly). Knobs: the block tile (``block_m`` output
pixels x ``block_n`` output channels, each at most the product's extent rounded up to a
power of two), ``block_k``, the warp grid (``warps_m x warps_n``),
the pipeline ``stages`` (1: none; else cp.async into that many buffers), ``vec``
(elements per copy) and ``split_k`` (the reduction split over that many blocks into
float32 partial sums, which a second kernel adds up with the epilogue: for layers with few
output tiles, such as 7x7 pixels). A combination that breaks a rule of the schedule
(:func:`~ptxforge.ops.schedules.gemm.rules.check_conv_config`: warp tiles of whole
m16n8 fragments, shared memory of the target, enough reduction steps for the stages, copy
widths) is rejected at instantiation with an :class:`InstantiationError` naming the rule.
Without a tuned record the template uses the default schedule's configuration.
"""

from __future__ import annotations

from .. import te
from ..ir.te import ComputeOp
from ..ops import nn
from ..ops.schedules.gemm.chooser import choose_conv_config
from ..ops.schedules.gemm.forms import conv_gemm_form
from ..ops.schedules.gemm.knobs import TensorCoreConfig, mma_sync_choices
from ..ops.schedules.gemm.rules import check_conv_config
from ..ops.schedules.gemm.schedule import schedule_conv2d_nhwc_tensorcore
from ..passes.schedule.common import ScheduleError
from .dispatch import get_config
from .task import template

NAME = "conv2d_nhwc_tensorcore.cuda"


def conv2d_nhwc_declaration(N, H, W, CI, CO, KH, KW, stride, padding, dtype="float16"):
    """``(data, kernel, out, conv stage)`` of the template's computation: conv2d NHWC
    (kernel HWIO) summed in float32 and cast to ``dtype`` (float32: TF32 products)."""
    data = te.placeholder((N, H, W, CI), dtype, name="data")
    kernel = te.placeholder((KH, KW, CI, CO), dtype, name="kernel")
    precision = "tf32" if dtype == "float32" else None
    out = nn.conv2d_nhwc(data, kernel, stride, padding, out_dtype=dtype, precision=precision)
    conv = next(op for op in _ops(out) if op.reduce_axis)
    return data, kernel, out, conv


def _ops(out) -> list:
    seen, order = set(), []

    def visit(op):
        if id(op) in seen or not isinstance(op, ComputeOp):
            return
        seen.add(id(op))
        for t in op.input_tensors:
            visit(t.op)
        order.append(op)

    visit(out.op)
    return order


def inline_around(out, conv):
    """A schedule of the template's computation with the padding (and the cast, if any)
    inlined, and the epilogue stage of ``conv`` (None where ``out`` is the conv)."""
    s = te.create_schedule(out.op)
    for op in _ops(out):
        if op is not out.op and not op.reduce_axis:
            s[op].compute_inline()
    return s, None if out.op is conv else out.op


@template(NAME)
def conv2d_nhwc_tensorcore(N, H, W, CI, CO, KH, KW, stride, padding, dtype="float16"):
    """The tensor-core conv2d NHWC template (see the module doc)."""
    data, kernel, out, conv = conv2d_nhwc_declaration(N, H, W, CI, CO, KH, KW, stride,
                                                      padding, dtype)
    s, epilogue = inline_around(out, conv)
    tf32 = dtype == "float32"
    M, K = N * out.shape[1] * out.shape[2], KH * KW * CI
    cfg = get_config()
    # the one knob space of the implicit GEMM's form (tiles beyond the product, padded to
    # a power of two, would only compute zeros)
    ch = mma_sync_choices(conv_gemm_form(conv))
    for knob in ("block_m", "block_n", "block_k", "warps_m", "warps_n", "stages", "vec",
                 "split_k"):
        cfg.define_knob(knob, list(ch[knob]))
    cfg.add_flop(2.0 * M * CO * K)
    if cfg.is_fallback:
        tc = choose_conv_config(conv)
    else:
        vec = cfg["vec"].val
        tc = TensorCoreConfig(
            cfg["block_m"].val, cfg["block_n"].val, cfg["block_k"].val, cfg["warps_m"].val,
            cfg["warps_n"].val, vec=vec, pad=4 if tf32 else 8, stages=cfg["stages"].val,
            async_copy=cfg["stages"].val > 1 or vec * (4 if tf32 else 2) in (4, 8, 16),
            frag_load="ldmatrix", tf32=tf32,
            split_k=cfg["split_k"].val)
        try:
            check_conv_config(tc, conv)
        except ScheduleError as e:
            cfg.raise_error(str(e))
    schedule_conv2d_nhwc_tensorcore(s, conv, epilogue, cfg=tc)
    return s, [data, kernel, out]


@conv2d_nhwc_tensorcore.defaults
def _conv_defaults(N, H, W, CI, CO, KH, KW, stride, padding, dtype="float16"):
    conv = conv2d_nhwc_declaration(N, H, W, CI, CO, KH, KW, stride, padding, dtype)[3]
    return knob_values(choose_conv_config(conv))


def knob_values(tc: TensorCoreConfig) -> dict:
    """The template's knob values of a tensor-core configuration."""
    return {"block_m": tc.block_m, "block_n": tc.block_n, "block_k": tc.block_k,
            "warps_m": tc.warps_m, "warps_n": tc.warps_n, "stages": tc.stages,
            "vec": tc.vec, "split_k": tc.split_k}
