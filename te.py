"""``ptxforge.te``: the tensor-expression front end plus ``create_schedule``.

Everything from :mod:`ptxforge.ir.te` (placeholder, compute, reduce_axis, sum, ...) and the
schedule API of :mod:`ptxforge.passes.schedule.schedule`, under the names TVM users know.
"""

from .ir.te import *  # noqa: F401,F403
from .ir.te import __all__ as _te_all
from .passes.schedule.schedule import LoopHandle, Schedule, Stage, create_schedule

__all__ = list(_te_all) + ["create_schedule", "Schedule", "Stage", "LoopHandle"]
