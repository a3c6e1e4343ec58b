"""``tvm.autotvm``: template-based tuning (``ptxforge.autotvm``)."""

from ..autotvm import *  # noqa: F401,F403
from ..autotvm import callback, feature, record, task, tuner  # noqa: F401
