"""``tvm.target``: ``Target`` is :class:`ptxforge.target.Target`."""

from ..target import Target

__all__ = ["Target"]
