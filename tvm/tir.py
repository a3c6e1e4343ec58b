"""``tvm.tir``: scalar expressions (``const``, ``Var``)."""

from ..te import Var, const

__all__ = ["const", "Var"]
