"""Lowering passes: scheduled tensor IR -> device IR (kernels and a host function).

The default pipeline, in order:

``check_coverage, cross_thread_reduction, decompose_reduction, lower_blocks,
compact_buffers, inject_vthread, merge_thread_loops, unroll_loops, simplify, split_host_device,
flatten_buffers, widen_index, simplify, inject_async_copy, swizzle_layout, cse,
insert_barriers, inject_software_pipeline, inject_wgmma_sync, plan_dynamic_shared,
validate_gpu``
"""

from __future__ import annotations

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


def lowering_pipeline():
    """The default lowering pipeline as a :class:`~ptxforge.passes.Pipeline`."""
    from ..pipeline import Pipeline

    return Pipeline.parse(LOWERING_PIPELINE)


__all__ = ["LOWERING_PIPELINE", "LoweringError", "lowering_pipeline"]
