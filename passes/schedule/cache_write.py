"""cache_write: a stage computes into a local (or shared) buffer, then copies out."""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.stmt import Buffer, PrimFunc, replace_buffers
from ...ir.traversal import replace_at
from ..params import Ref, positional
from ..registry import register_pass
from .cache_read import copy_block, top_level_index, wrap_allocs
from .common import ScheduleError, SchedulePass, find_block, on_main
from .compute_at import output_buffers
from .names import cache_name


def cache_write(func: PrimFunc, stage: str, scope: str) -> PrimFunc:
    """Stage ``stage`` writes a buffer in ``scope`` and is renamed to
    :func:`~.names.cache_name` of ``stage``; a new copy stage named ``stage`` writes the
    original buffer from it (TVM's ``s.cache_write``).

    A tuple compute's stage caches every output: output buffer ``X`` gets the cache
    ``cache_name(X, scope)``, and the one copy stage writes every output from its cache."""
    if scope not in ("local", "shared", "warp", "warpgroup"):
        raise ScheduleError(f"cache_write {stage}: scope must be local, shared, warp (a "
                            f"matrix fragment) or warpgroup (a wgmma accumulator), got "
                            f"{scope!r}")
    path = find_block(func, stage)
    block = path[-1]
    outs = output_buffers(block)
    name = cache_name(stage, scope)
    if len(outs) == 1:
        caches = [Buffer(name, outs[0].dtype, outs[0].shape, scope)]
    else:
        if scope in ("warp", "warpgroup"):
            raise ScheduleError(f"cache_write {stage}: a tuple compute's outputs cannot be "
                                "matrix fragments (warp scope); use local or shared")
        caches = [Buffer(cache_name(o.name, scope), o.dtype, o.shape, scope) for o in outs]
    new_block = replace_buffers(block, dict(zip(outs, caches))).replace(name=name)
    body = replace_at(path, new_block)
    stmts, k, allocs = top_level_index(body, name)
    stmts.insert(k + 1, copy_block(stage, caches, outs))
    return func.replace(body=wrap_allocs(stmts, allocs + caches))


@register_pass
@dataclass(frozen=True)
class CacheWrite(SchedulePass):
    """A stage computes into a local (or shared) buffer; a copy stage writes the result.

    Parameters:
        stage: the stage.
        scope: ``"local"``, ``"shared"``, ``"warp"`` (mma.sync fragments) or
            ``"warpgroup"`` (wgmma accumulators).
    """

    name = "cache_write"
    stage: Ref = positional()
    scope: str = positional()

    def apply(self, module, ctx):
        return on_main(module, lambda f: cache_write(f, self.stage, self.scope))
