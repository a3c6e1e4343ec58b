"""``tvm.te``: the tensor expression language and schedules (``ptxforge.te``)."""

from ptxforge.te import *  # noqa: F401,F403
from ptxforge.te import __all__  # noqa: F401
