"""Whole-tensor tensor-core schedules of :func:`~ptxforge.ops.schedules.gemm.schedule.
dense_tensorcore_compute`'s untagged product, for tests and benchmarks that schedule a
product at explicit knobs whose tiles divide it (the library schedules tagged product
stages: ``schedule_gemm_tensorcore``, ``schedule_gemm_wgmma``, ``default_schedule``)."""

from __future__ import annotations

from ptxforge import te
from ptxforge.ir.dtype import nbytes
from ptxforge.ir.expr import Cast, TensorRead, children
from ptxforge.ir.intrin.kinds import mma_kind
from ptxforge.ir.intrin.wgmma import require_wgmma
from ptxforge.ir.te import ComputeOp
from ptxforge.ops.schedules.gemm.forms import GemmForm
from ptxforge.ops.schedules.gemm.knobs import TensorCoreConfig, WgmmaScheduleConfig
from ptxforge.ops.schedules.gemm.rules import first_broken, knob_rules_mma, wgmma_rules
from ptxforge.ops.schedules.gemm.schedule import schedule_gemm
from ptxforge.passes.schedule.common import ScheduleError


def check_mma_knobs(cfg: TensorCoreConfig, M: int, N: int, K: int, mma_k: int = 16,
                    elem_bytes: int = 2, split_k_ok: bool = False) -> None:
    """Raise :class:`ScheduleError` naming the rule ``cfg`` breaks on an ``M x N x K``
    product whose tiles divide it (:func:`~ptxforge.ops.schedules.gemm.rules.knob_rules_mma`)."""
    why = first_broken(knob_rules_mma(cfg, M, N, K, mma_k, elem_bytes, split_k_ok))
    if why is not None:
        raise ScheduleError(f"tensor-core dense {M}x{N}x{K} with {cfg}: need {why}")


def check_wgmma_knobs(cfg: WgmmaScheduleConfig, M: int, N: int, K: int, target=None) -> None:
    """Raise :class:`ScheduleError` naming the rule ``cfg`` breaks on an ``M x N x K``
    fp16/bf16 product whose tiles divide it, without split-K (``wgmma_rules`` on a product
    that is not padded, fewer steps than stages allowed)."""
    form = GemmForm(1, M, N, K, "float16", "float32", False, False, broadcast=True)
    why = first_broken(wgmma_rules(cfg, form, target, c_tile=False, steps=False))
    if why is not None:
        raise ScheduleError(f"wgmma dense {M}x{N}x{K} with {cfg}: {why}")


def _is_cast(t) -> bool:
    """Whether tensor ``t`` is a cast of one tensor."""
    return (isinstance(t.op, ComputeOp) and isinstance(t.op.body, Cast)
            and len(t.op.input_tensors) == 1)


def _b_is_kn(c, b) -> bool:
    """Whether product ``c`` reads B as ``[k, n]`` (its first index is the reduce axis)."""
    red = {ax.var for ax in c.op.reduce_axis}
    stack = [c.op.body]
    while stack:
        x = stack.pop()
        if isinstance(x, TensorRead) and x.tensor is b:
            return x.indices[0] in red
        stack.extend(children(x))
    raise ScheduleError(f"tensor-core dense: {c.name} does not read {b.name}")


def _dense_form(tensors):
    """``(schedule, product op, cast op or None, form)`` of the tensors of
    ``dense_tensorcore_compute`` (a float16 accumulator too, which ``gemm_form`` does not
    take)."""
    a, b, out = tensors
    c = out if not _is_cast(out) else out.op.input_tensors[0]
    M, K = (int(x) for x in a.shape)
    form = GemmForm(1, M, int(out.shape[1]), K, a.dtype, c.dtype, _b_is_kn(c, b),
                    a.dtype == "float32")
    return te.create_schedule(out.op), c.op, (None if out is c else out.op), form


def schedule_dense_tensorcore(tensors, cfg: TensorCoreConfig | None = None):
    """The mma.sync schedule of ``tensors`` (from ``dense_tensorcore_compute``), its tiles
    dividing the product (:func:`check_mma_knobs`)."""
    cfg = cfg or TensorCoreConfig()
    s, op, cast, form = _dense_form(tensors)
    ab = form.in_dtype
    if ab not in ("float16", "bfloat16", "float32"):
        raise ScheduleError(f"tensor-core dense: inputs must be float16, bfloat16 or float32 "
                            f"(TF32), got {ab}")
    if ab == "float32":
        if not cfg.tf32:
            raise ScheduleError("tensor-core dense of float32 inputs multiplies them in TF32 "
                                "(10 mantissa bits): ask for it with TensorCoreConfig(tf32="
                                "True)")
        if form.b_kn:
            raise ScheduleError("tensor-core dense in TF32 takes B as [N, K]")
    check_mma_knobs(cfg, form.M, form.N, form.K, mma_kind(ab).k, nbytes(ab))
    schedule_gemm(s, op, cast, form, cfg)
    return s


def schedule_dense_wgmma(tensors, cfg: WgmmaScheduleConfig | None = None,
                         target="cuda -arch=sm_90a"):
    """The wgmma schedule of ``tensors`` (``[A, B, out]`` from ``dense_tensorcore_compute``
    with ``b_layout="nk"``) for ``target``, which must have wgmma (sm_90a; the simulator as
    ``"sim -arch=sm_90a"``), its tiles dividing the product (:func:`check_wgmma_knobs`)."""
    cfg = cfg or WgmmaScheduleConfig()
    require_wgmma(target)
    s, op, cast, form = _dense_form(tensors)
    ab, out = form.in_dtype, tensors[2]
    if ab not in ("float16", "bfloat16") or tensors[1].dtype != ab:
        raise ScheduleError(f"wgmma dense takes float16 or bfloat16 inputs, not {ab} x "
                            f"{tensors[1].dtype} (TF32 runs on the mma.sync schedule)")
    if form.acc_dtype != "float32":
        raise ScheduleError(f"wgmma dense accumulates in float32, not {form.acc_dtype}")
    if out.dtype not in ("float32", "float16", "bfloat16"):
        raise ScheduleError(f"wgmma dense writes float32, float16 or bfloat16, not {out.dtype}")
    if form.b_kn:
        raise ScheduleError("wgmma dense takes B as [N, K] (K-major operands)")
    check_wgmma_knobs(cfg, form.M, form.N, form.K, target)
    schedule_gemm(s, op, cast, form, cfg, target, bind_after_split=True)
    return s
