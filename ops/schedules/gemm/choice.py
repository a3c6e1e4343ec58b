"""The one place that chooses wgmma or mma.sync for a product.

Two questions decide it, and every caller (the default GEMM and conv schedules, the row
epilogues, the auto-scheduler's sketches) asks them here:

- :func:`wgmma_refusal`: can wgmma run the product at all? A target with wgmma (sm_90a),
  16-bit inputs into float32 accumulators, ``N`` at least the narrowest wgmma tile, and a
  product that can be padded to the tile (or that the smallest wgmma tiles divide);
- :func:`prefer_wgmma`: of the configurations each kind's chooser picked, is the wgmma one
  expected faster? A tie goes to mma.sync: both at the floor of reading the inputs from
  DRAM once (``M`` = 1 or 16 of 4096^2), mma.sync's 16-row tiles pad less (measured on an
  H100: 12.7 and 12.9 us against wgmma's 16.5 and 15.8).
"""

from __future__ import annotations

from ....ir.intrin.kinds import WGMMA, WGMMA_FP8
from ....target import Target, as_target

WGMMA_INPUTS = WGMMA.inputs + WGMMA_FP8.inputs
"""The inputs the wgmma GEMM template runs (TF32 stays on mma.sync; fp8 runs on wgmma
only)."""


def wgmma_dtype_refusal(in_dtype: str, acc_dtype: str, target: Target | str | None = None,
                        tf32: bool = False) -> str | None:
    """Why wgmma cannot multiply ``in_dtype`` inputs into ``acc_dtype`` on ``target``, as
    the end of a sentence, or None."""
    t = as_target(target)
    if not t.has_wgmma:
        return f"wgmma needs sm_90a; the target is {t.arch}"
    if tf32 or in_dtype not in WGMMA_INPUTS:
        return (f"wgmma takes float16 or bfloat16 inputs (or fp8: float8_e4m3fn, "
                f"float8_e5m2), not {in_dtype} (TF32)")
    if acc_dtype != "float32":
        return f"wgmma accumulates in float32, not {acc_dtype}"
    return None


def wgmma_refusal(form, target: Target | str | None = None) -> str | None:
    """Why the wgmma GEMM cannot run product ``form`` (a
    :class:`~.forms.GemmForm`) on ``target``, as the end of a sentence, or None.
    Such products stay on mma.sync."""
    from .knobs import BLOCK_N
    from .rules import block_k

    why = wgmma_dtype_refusal(form.in_dtype, form.acc_dtype, target, form.tf32)
    if why is not None:
        return why
    if form.fp8 and form.b_kn:
        return "wgmma reads fp8 operands K-major only: B as [N, K]"
    if form.N < BLOCK_N[0]:
        return f"N = {form.N} is narrower than the smallest wgmma tile ({BLOCK_N[0]})"
    bk = block_k(form)
    if not form.paddable and (form.M % 64 or form.N % 64 or form.K % bk):
        return (f"a broadcast batch is not padded: M, N multiples of 64 and K of {bk} "
                f"(got {form.M} x {form.N} x {form.K})")
    return None


def mma_sync_refusal(form) -> str | None:
    """Why mma.sync cannot run product ``form``, or None: fp8 inputs (Hopper multiplies
    them on wgmma only)."""
    if form.fp8:
        return (f"{form.in_dtype} products run on wgmma only (sm_90a, N >= 64, B as "
                "[N, K])")
    return None


def prefer_wgmma(form, wgmma_cfg, mma_cfg, c_tile: bool,
                 target: Target | str | None = None) -> bool:
    """Whether ``wgmma_cfg`` (None: no wgmma tiles fit) runs ``form`` faster than
    ``mma_cfg`` (None: no mma.sync tiles fit) by the two estimates
    (:func:`~.estimate.wgmma_time`, with the C tile where ``c_tile``, against
    :func:`~.estimate.gemm_time`); a tie goes to mma.sync."""
    from .estimate import gemm_time, wgmma_time

    if wgmma_cfg is None:
        return False
    if mma_cfg is None:
        return True
    target = as_target(target)
    return gemm_time(mma_cfg, form, target) > wgmma_time(wgmma_cfg, form, target, c_tile)


def wgmma_conv_refusal(op, target: Target | str | None = None) -> str | None:
    """Why the wgmma convolution cannot run conv stage ``op`` on ``target``, or None: it
    must qualify for the tensor cores (:func:`~.forms.tensorcore_conv_unsupported`), the
    target have wgmma (sm_90a) and the inputs be float16 or bfloat16 (TF32 stays on
    mma.sync)."""
    from .forms import tensorcore_conv_unsupported

    target = as_target(target)
    why = tensorcore_conv_unsupported(op, target)
    if why is None:
        why = wgmma_dtype_refusal(op.input_tensors[0].dtype, "float32", target)
    return why
