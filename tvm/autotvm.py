"""``tvm.autotvm``: template-based tuning (``ptxforge.autotvm``)."""

from ptxforge.autotvm import *  # noqa: F401,F403
from ptxforge.autotvm import callback, feature, record, task, tuner  # noqa: F401
