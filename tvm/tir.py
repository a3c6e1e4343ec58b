"""``tvm.tir``: scalar expressions (``const``, ``Var``)."""

from ptxforge.te import Var, const

__all__ = ["const", "Var"]
