"""``scaled_mm``: the FP8 matrix product with per-tensor scales (``torch._scaled_mm``).

``out[i, j] = cast_out(scale_a * scale_b * sum_k f32(A[i, k]) * f32(B[j, k]))``: ``A``
``[M, K]`` and ``B`` ``[N, K]`` (``B`` transposed, as ``torch._scaled_mm``'s column-major
second operand) of ``float8_e4m3fn`` or ``float8_e5m2``, products accumulated in float32,
the two scales float32 tensors of one element (the factors that dequantize each operand,
:func:`~ptxforge.ir.float8.quantize`), the output float32, float16 or bfloat16. The
product stage is tagged ``dense``, so the tensor-core GEMM template schedules it (on
wgmma: Hopper multiplies fp8 there only), the scales and the cast in its epilogue.
:func:`scaled_mm_reference` is the numpy meaning.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..ir.float8 import FORMATS, float8_from_bits
from . import tag

OUT_DTYPES = ("float32", "float16", "bfloat16")


class ScaledMMError(ValueError):
    """Operands that ``scaled_mm`` does not take."""


def scaled_mm(a: te.Tensor, b: te.Tensor, scale_a: te.Tensor, scale_b: te.Tensor,
              out_dtype: str = "float16") -> te.Tensor:
    """``scale_a * scale_b * (A x B^T)`` in ``out_dtype`` (see the module doc)."""
    for name, t in (("A", a), ("B", b)):
        if t.dtype not in FORMATS:
            raise ScaledMMError(f"scaled_mm: {name} is {t.dtype}; it takes fp8 "
                                f"({', '.join(FORMATS)})")
        if len(t.shape) != 2:
            raise ScaledMMError(f"scaled_mm: {name} must be 2-D, got shape {t.shape}")
    if a.dtype != b.dtype:
        raise ScaledMMError(f"scaled_mm: A is {a.dtype} and B {b.dtype}; both must be the "
                            "same fp8 format")
    for name, t in (("scale_a", scale_a), ("scale_b", scale_b)):
        if t.dtype != "float32" or tuple(int(x) for x in t.shape) != (1,):
            raise ScaledMMError(f"scaled_mm: {name} must be a float32 tensor of one element, "
                                f"got {t.dtype} of shape {t.shape}")
    if out_dtype not in OUT_DTYPES:
        raise ScaledMMError(f"scaled_mm: out_dtype is one of {OUT_DTYPES}, not {out_dtype!r}")
    (M, K), (N, K2) = a.shape, b.shape
    if int(K) != int(K2):
        raise ScaledMMError(f"scaled_mm: A has {K} columns but B has {K2} (B is [N, K])")
    k = te.reduce_axis((0, K), name="k")
    mat = te.compute((M, N), lambda i, j: te.sum(
        a[i, k].astype("float32") * b[j, k].astype("float32"), axis=k),
        name="T_scaled_mm", tag="dense")

    def epilogue(i, j):
        v = mat[i, j] * (scale_a[0] * scale_b[0])
        return v if out_dtype == "float32" else v.astype(out_dtype)

    return te.compute((M, N), epilogue, name="T_scaled_mm_out", tag=tag.ELEMWISE)


def scaled_mm_reference(a_bits: np.ndarray, b_bits: np.ndarray, scale_a: float,
                        scale_b: float, dtype: str, out_dtype: str = "float16") -> np.ndarray:
    """The numpy meaning of :func:`scaled_mm` on fp8 bit patterns: the decoded values'
    product in float64, scaled, then rounded once to ``out_dtype`` (float32 arrays for
    bfloat16, as the simulator holds them)."""
    from ..ir.dtype import round_to

    prod = (float8_from_bits(a_bits, dtype).astype(np.float64)
            @ float8_from_bits(b_bits, dtype).astype(np.float64).T)
    out = (prod.astype(np.float32) * np.float32(scale_a * scale_b)).astype(np.float32)
    return out if out_dtype == "float32" else round_to(out, out_dtype)
