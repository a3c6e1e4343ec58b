"""Schedule primitives, one pass per file: split, fuse, reorder, bind, unroll, vectorize,
pragma, compute_inline, compute_at, cache_read, cache_write, storage_align, rfactor,
async_copy, software_pipeline."""

from . import (  # noqa: F401  (importing registers the passes)
    async_copy,
    bind,
    cache_read,
    cache_write,
    compute_at,
    compute_inline,
    fuse,
    pragma,
    reorder,
    rfactor,
    software_pipeline,
    split,
    storage_align,
    unroll,
    vectorize,
)
from .common import ScheduleError

__all__ = ["ScheduleError"]
