"""Which schedule each kind of stage gets, by its tag.

A stage schedule is a function ``(s, op, epilogue, target) -> None`` that schedules stage
``op`` of schedule ``s`` for the GPU ``target`` (a :class:`~ptxforge.target.Target`);
``epilogue`` is the element-wise consumer fused into it (tiled in its place, with ``op``
computed at its thread loop) or None.
:func:`default_schedule_for` looks a tag up: the full tag first (``"conv2d_nchw"``), then
its pattern (the part before the first comma: ``"injective"`` for ``"injective,pad"``);
a tag it does not know gets the generic schedule of reductions or of injective stages.
"""

from __future__ import annotations

from collections.abc import Callable

from ...ir.te import ComputeOp
from .. import tag as _tag
from .gemm.schedule import schedule_conv2d_nhwc, schedule_matmul
from .injective import schedule_injective
from .reduction import schedule_reduce
from .tiled import schedule_tiled

StageSchedule = Callable[..., object]

_REGISTRY: dict[str, StageSchedule] = {}


def register_schedule(tag: str, fn: StageSchedule | None = None, override: bool = False):
    """Register ``fn`` as the default schedule of stages tagged ``tag`` (usable as a
    decorator: ``@register_schedule("my_tag")``)."""

    def add(f: StageSchedule) -> StageSchedule:
        if tag in _REGISTRY and not override and _REGISTRY[tag] is not f:
            raise ValueError(f"a default schedule for tag {tag!r} is already registered "
                             f"({_REGISTRY[tag].__name__}); pass override=True to replace it")
        _REGISTRY[tag] = f
        return f

    return add if fn is None else add(fn)


def registered_tags() -> list[str]:
    """The tags with a registered schedule."""
    return sorted(_REGISTRY)


def _schedule_any(s, op: ComputeOp, epilogue=None, target=None):
    """Reductions get :func:`schedule_reduce`, everything else :func:`schedule_injective`."""
    if op.reduce_axis:
        return schedule_reduce(s, op, epilogue, target=target)
    return schedule_injective(s, op, epilogue, target=target)


def default_schedule_for(tag: str) -> StageSchedule:
    """The stage schedule for stages tagged ``tag`` (see the module doc)."""
    if tag in _REGISTRY:
        return _REGISTRY[tag]
    pattern = tag.split(",")[0]
    if pattern in _REGISTRY:
        return _REGISTRY[pattern]
    return _schedule_any


for _t in (_tag.CONV2D_NCHW, _tag.DEPTHWISE_CONV2D_NCHW, _tag.DEPTHWISE_CONV2D_NHWC):
    register_schedule(_t, schedule_tiled)
# tensor cores where the dtypes, the target and the shapes allow, else schedule_tiled
register_schedule(_tag.CONV2D_NHWC, schedule_conv2d_nhwc)
for _t in (_tag.DENSE, _tag.MATMUL, _tag.BATCH_MATMUL):
    register_schedule(_t, schedule_matmul)
for _t in (_tag.POOL_MAX, _tag.POOL_SUM, _tag.ADAPTIVE_POOL_MAX, _tag.ADAPTIVE_POOL_SUM,
           _tag.COMM_REDUCE):
    register_schedule(_t, schedule_reduce)
for _t in (_tag.ELEMWISE, _tag.BROADCAST, _tag.INJECTIVE):
    register_schedule(_t, schedule_injective)
register_schedule(_tag.SOFTMAX, _schedule_any)
