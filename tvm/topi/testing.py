"""``tvm.topi.testing``: the numpy references of ``ptxforge.ops.testing``."""

from ...ops.testing import *  # noqa: F401,F403
