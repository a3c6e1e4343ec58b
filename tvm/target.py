"""``tvm.target``: ``Target`` is :class:`ptxforge.target.Target`."""

from ptxforge.target import Target

__all__ = ["Target"]
