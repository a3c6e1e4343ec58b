"""Schedule primitives, one pass per file: split, fuse, reorder, bind, unroll, vectorize,
pragma, compute_inline, compute_at, cache_read, cache_write, set_scope, storage_align,
rfactor, async_copy, software_pipeline, swizzle, layout_panels, tensorize, implicit_gemm.

Code that builds schedules (the te facade, the auto-scheduler's sketches, AutoTVM's
templates, the reference schedule) builds these pass objects; the names of the loops and
stages they create come from :mod:`.names`.
"""

from . import (  # noqa: F401  (importing registers the passes)
    async_copy,
    bind,
    cache_read,
    cache_write,
    compute_at,
    compute_inline,
    fuse,
    implicit_gemm,
    layout_panels,
    pragma,
    reorder,
    rfactor,
    set_scope,
    software_pipeline,
    split,
    storage_align,
    swizzle,
    tensorize,
    unroll,
    vectorize,
)
from .async_copy import AsyncCopy
from .bind import Bind
from .cache_read import CacheRead
from .cache_write import CacheWrite
from .common import ScheduleError
from .compute_at import ComputeAt
from .compute_inline import ComputeInline
from .fuse import Fuse
from .implicit_gemm import ImplicitGemm
from .layout_panels import LayoutPanels
from .pragma import Pragma
from .reorder import Reorder
from .rfactor import RFactor
from .set_scope import SetScope
from .software_pipeline import SoftwarePipeline
from .split import Split
from .storage_align import StorageAlign
from .swizzle import Swizzle
from .tensorize import Tensorize
from .unroll import Unroll
from .vectorize import Vectorize

__all__ = ["AsyncCopy", "Bind", "CacheRead", "CacheWrite", "ComputeAt", "ComputeInline", "Fuse",
           "ImplicitGemm", "LayoutPanels", "Pragma", "RFactor", "Reorder", "ScheduleError",
           "SetScope", "SoftwarePipeline", "Split", "StorageAlign", "Swizzle", "Tensorize",
           "Unroll", "Vectorize"]
