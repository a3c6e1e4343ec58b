"""Default GPU schedules for the operator library (``ptxforge.ops.schedules``).

``default_schedule(outputs)`` schedules any DAG built from :mod:`ptxforge.ops`: injective
producers inlined, convolutions and matrix products tiled with shared-memory staging and
register accumulators (their bias / activation epilogue fused), pooling, softmax and other
reductions one output per thread, remaining injective stages flat. The schedules respect
the limits of the target (``default_schedule(outputs, target="cuda -arch=sm_80")``; by
default the current one, an H100 / H200 without a GPU): threads and static shared memory
per block, and its SM count and rates steer the tile choice.

``default_schedule_for(tag)`` returns the schedule of one kind of stage, for code that
schedules stage by stage (the network builder); ``register_schedule`` adds or replaces
one.
"""

from .analysis import DagPlan, input_accesses, is_epilogue_of, plan_dag
from .default import default_schedule, plan
from .injective import schedule_injective
from .reduction import schedule_reduce
from .registry import default_schedule_for, register_schedule, registered_tags
from .tiled import schedule_tiled
from .tiling import Tiling, choose_tiling, rank_tilings

__all__ = [
    "DagPlan",
    "Tiling",
    "choose_tiling",
    "default_schedule",
    "default_schedule_for",
    "input_accesses",
    "is_epilogue_of",
    "plan",
    "plan_dag",
    "rank_tilings",
    "register_schedule",
    "registered_tags",
    "schedule_injective",
    "schedule_reduce",
    "schedule_tiled",
]
