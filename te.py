"""``ptxforge.te``: the tensor-expression front end plus ``create_schedule``.

Everything from :mod:`ptxforge.ir.te` (placeholder, compute, reduce_axis, sum, ...) and the
schedule API of :mod:`ptxforge.passes.schedule.schedule`, under the names TVM users know.
"""

from .ir.te import *  # noqa: F401,F403
from .ir.te import TEError
from .ir.te import __all__ as _te_all
from .passes.schedule.schedule import LoopHandle, Schedule, Stage, create_schedule


def create_prim_func(args, name: str = "main"):
    """The unscheduled tensor IR function of the computation whose arguments (inputs and
    outputs, in parameter order) are ``args`` (TVM's ``te.create_prim_func``): a
    :class:`~ptxforge.ir.stmt.PrimFunc` that prints, and that the schedule passes and
    ``ptxforge.lower`` take as a module (``to_ir(args)``)."""
    from .ir.to_ir import to_ir

    args = list(args)
    if not args:
        raise TEError("create_prim_func takes the list of argument tensors, got none")
    return to_ir(args, name).main


__all__ = list(_te_all) + ["create_schedule", "create_prim_func", "Schedule", "Stage",
                           "LoopHandle"]
