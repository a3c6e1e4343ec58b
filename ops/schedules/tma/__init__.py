"""Kernels built on the tensor memory accelerator and mbarriers (``docs/tma.md``)."""

from .copy import TmaCopy, tma_copy_module, tma_copy_reference

__all__ = ["TmaCopy", "tma_copy_module", "tma_copy_reference"]
