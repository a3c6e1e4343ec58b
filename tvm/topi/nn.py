"""``tvm.topi.nn``: ``ptxforge.ops.nn``."""

from ...ops.nn import *  # noqa: F401,F403
