"""Kernels built on the tensor memory accelerator and mbarriers (``docs/tma.md``)."""

from .copy import TmaCopy, tma_copy_module, tma_copy_reference
from .gemm import TmaGemm, tma_gemm_module, tma_gemm_reference

__all__ = ["TmaCopy", "TmaGemm", "tma_copy_module", "tma_copy_reference", "tma_gemm_module",
           "tma_gemm_reference"]
