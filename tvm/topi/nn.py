"""``tvm.topi.nn``: ``ptxforge.ops.nn``."""

from ptxforge.ops.nn import *  # noqa: F401,F403
