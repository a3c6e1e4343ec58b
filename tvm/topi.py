"""``tvm.topi``: operator library (``ptxforge.ops``): ``topi.nn``, ``topi.testing``."""

from ptxforge.ops import *  # noqa: F401,F403
from ptxforge.ops import nn, testing  # noqa: F401
