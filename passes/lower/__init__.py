"""Lowering passes: scheduled tensor IR -> device IR (kernels and a host function).

The default pipeline, in order:

``check_coverage, cross_thread_reduction, decompose_reduction, lower_blocks,
compact_buffers, inject_vthread, merge_thread_loops, unroll_loops, simplify, split_host_device,
flatten_buffers, widen_index, simplify, inject_async_copy, swizzle_layout, cse,
insert_barriers, inject_software_pipeline, inject_wgmma_sync, plan_dynamic_shared,
validate_gpu``
"""

from __future__ import annotations

from ...ir.simplify_cache import simplify_cache
from ...ir.stmt import Module
from ...stages import stage
from .. import gc_pause
from ..context import PassContext
from ..pipeline import Pipeline
from . import (  # noqa: F401  (importing registers the passes)
    check_coverage,
    compact_buffers,
    cross_thread_reduction,
    cse,
    decompose_reduction,
    flatten_buffers,
    inject_async_copy,
    inject_software_pipeline,
    inject_vthread,
    inject_wgmma_sync,
    insert_barriers,
    lower_blocks,
    merge_thread_loops,
    plan_dynamic_shared,
    simplify,
    split_host_device,
    swizzle_layout,
    unroll_loops,
    validate_gpu,
    widen_index,
)
from .common import LoweringError

LOWERING_PIPELINE = (
    "check_coverage(), cross_thread_reduction(), decompose_reduction(), lower_blocks(), "
    "compact_buffers(), inject_vthread(), merge_thread_loops(), unroll_loops(), simplify(), "
    "split_host_device(), flatten_buffers(), widen_index(), simplify(), inject_async_copy(), "
    "swizzle_layout(), cse(), insert_barriers(), inject_software_pipeline(), "
    "inject_wgmma_sync(), plan_dynamic_shared(), validate_gpu()"
)


class LoweringPipeline(Pipeline):
    """A pipeline of lowering passes: run, it reports its time as the ``"lower"`` stage and
    each pass's as ``"lower.<pass name>"`` (:mod:`ptxforge.stages`). Its passes share one
    :func:`~ptxforge.ir.simplify_cache.simplify_cache`: the index expressions one pass
    simplified come back in the next ones, whole or as parts of bigger ones."""

    __slots__ = ()

    def __call__(self, module: Module, ctx: PassContext | None = None) -> Module:
        ctx = ctx if ctx is not None else PassContext.current()
        # the collector resumes after the cache is gone, not while its tables are alive
        with gc_pause.paused(), stage("lower"), ctx, simplify_cache():
            for p in self.passes:
                with stage("lower." + p.name):
                    module = ctx.run_pass(p, module)
        return module

    def __repr__(self) -> str:
        return f"LoweringPipeline.parse({self.text!r})"


_DEFAULT: LoweringPipeline | None = None


def lowering_pipeline() -> LoweringPipeline:
    """The default lowering pipeline (parsed once; a pipeline is immutable)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = LoweringPipeline.parse(LOWERING_PIPELINE)
    return _DEFAULT


__all__ = ["LOWERING_PIPELINE", "LoweringError", "LoweringPipeline", "lowering_pipeline"]
