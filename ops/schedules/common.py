"""Small helpers the stage schedules share: splitting into levels and binding."""

from __future__ import annotations

from ...ir import te
from ...passes.schedule.schedule import Schedule
from ...target import Target, as_target


def split_levels(stage, axis, factors):
    """Split ``axis`` into ``len(factors) + 1`` loops whose inner extents are ``factors``
    (innermost last); a factor of 1 makes no loop (None in its place). Returns the loops,
    outermost first."""
    loops = []
    rest = axis
    for f in reversed(factors):
        if f == 1:
            loops.append(None)
            continue
        rest, inner = stage.split(rest, factor=int(f))
        loops.append(inner)
    loops.append(rest)
    return list(reversed(loops))


def fuse_bind(stage, loops, tag: str):
    """Fuse ``loops`` (None entries skipped) and bind the result to ``tag``; returns the
    bound loop, or None when there is nothing to bind."""
    loops = [x for x in loops if x is not None]
    if not loops:
        return None
    fused = stage.fuse(*loops) if len(loops) > 1 else loops[0]
    stage.bind(fused, te.thread_axis(tag))
    return fused


def bind_flat(stage, num_threads: int):
    """Fuse all axes of ``stage``, split by ``num_threads`` and bind the parts to
    blockIdx.x / threadIdx.x; returns the thread loop (None for a 0-d stage)."""
    axes = list(stage.op.axis)
    if not axes:
        return None
    fused = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    outer, inner = stage.split(fused, factor=int(num_threads))
    stage.bind(outer, te.thread_axis("blockIdx.x"))
    stage.bind(inner, te.thread_axis("threadIdx.x"))
    return inner


def threads_for(num_outputs: int, target: Target | str | None = None, cap: int = 256) -> int:
    """Threads per block for a flat one-element-per-thread schedule: ``cap`` (at most the
    GPU's limit) when there is work for every SM at that size, fewer (down to a warp) when
    that keeps more SMs busy, and no more than the elements."""
    target = as_target(target)
    cap = min(cap, target.max_threads_per_block)
    if num_outputs < 32:
        return max(1, min(num_outputs, cap))
    per_sm = -(-num_outputs // target.num_sms)
    t = 32
    while t < cap and t < per_sm:
        t *= 2
    return min(t, cap)


def output_stage(s: Schedule, op, epilogue):
    """``(stage whose loops are tiled, stage computing the reduction)``: the epilogue and
    the reduction when fused, else the copy and the local cache of ``cache_write``."""
    if epilogue is not None:
        return s[epilogue], s[op]
    cached = s.cache_write(op.output(0), "local")
    return s[op], s[cached]
