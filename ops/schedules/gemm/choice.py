"""The one place that chooses wgmma or mma.sync for a product, asked by every caller:
:func:`wgmma_refusal` (can wgmma run it at all?) and :func:`prefer_wgmma` (is the wgmma pick
expected faster? A tie goes to mma.sync: at the DRAM floor, ``M`` = 1 or 16 of 4096^2,
its 16-row tiles pad less: 12.7 and 12.9 us against wgmma's 16.5 and 15.8 on an H100)."""

from __future__ import annotations

from ....ir.intrin.kinds import WGMMA, WGMMA_FP8
from ....target import Target, as_target

WGMMA_INPUTS = WGMMA.inputs + WGMMA_FP8.inputs
"""The inputs the wgmma GEMM template runs (TF32 stays on mma.sync; fp8 runs on wgmma
only)."""


def wgmma_dtype_refusal(in_dtype: str, acc_dtype: str, target: Target | str | None = None,
                        tf32: bool = False) -> str | None:
    """Why wgmma cannot multiply ``in_dtype`` into ``acc_dtype`` on ``target``, or None."""
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
    """Why wgmma cannot run product ``form`` on ``target`` (it stays on mma.sync), or None."""
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
                 target: Target | str | None = None, reads: int = 0) -> bool:
    """Whether ``wgmma_cfg`` runs ``form`` faster than ``mma_cfg`` by the estimates (either
    None where no tiles fit), each with :func:`~.estimate.epilogue_read_time` of an
    epilogue reading ``reads`` output-sized tensors; a tie goes to mma.sync."""
    from .estimate import epilogue_read_time, gemm_time, wgmma_time

    if wgmma_cfg is None:
        return False
    if mma_cfg is None:
        return True
    target = as_target(target)
    # a convolution's fill is in the wgmma estimate only (it ranks wgmma tiles): the
    # comparison with mma.sync leaves it out, as it was measured on ResNet-50
    mma = gemm_time(mma_cfg, form, target) + epilogue_read_time(mma_cfg, form, reads, target)
    return mma > (wgmma_time(wgmma_cfg, form, target, c_tile, conv_fill=False)
                  + epilogue_read_time(wgmma_cfg, form, reads, target, c_tile))


def wgmma_conv_refusal(op, target: Target | str | None = None) -> str | None:
    """Why the wgmma conv cannot run conv stage ``op`` on ``target``, or None."""
    from .forms import tensorcore_conv_unsupported

    target = as_target(target)
    why = tensorcore_conv_unsupported(op, target)
    if why is None:
        why = wgmma_dtype_refusal(op.input_tensors[0].dtype, "float32", target)
    return why
