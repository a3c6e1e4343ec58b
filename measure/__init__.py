"""What both tuners share: measure inputs and results, builders, runners, record files.

A candidate is a :class:`TaskSpec` (the unscheduled tensor IR of a computation) plus a
schedule as pass pipeline text. :class:`LocalBuilder` applies, lowers and compiles candidates
in forked worker processes; :class:`LocalRunner` times them on a GPU from a worker process
that owns the CUDA context; :class:`SimRunner` checks them on the CPU simulator and
estimates their time with an analytical model. :func:`measure_batch` drives a builder and a
runner together. Records are JSON lines (:class:`RecordWriter`, :func:`load_records`,
:func:`distill`). See ``docs/measure.md``.
"""

from .artifact import BuildArtifact
from .build import BuildOptions, LocalBuilder, build_candidate
from .dask_backend import DaskBuilder, DaskRunner
from .kernel_stats import KernelStats, analyze_module
from .measure import Builder, Runner, measure_batch
from .multi_gpu import MultiGPURunner
from .record import (
    RecordWriter,
    best_records,
    distill,
    iter_records,
    load_records,
    save_records,
)
from .reference import default_reference_pipeline
from .result import (
    ERROR_COST,
    BuildResult,
    MeasureErrorNo,
    MeasureInput,
    MeasureResult,
    TaskSpec,
)
from .runner_gpu import LocalRunner
from .runner_sim import SimRunner

__all__ = [
    "ERROR_COST",
    "DaskBuilder",
    "DaskRunner",
    "MultiGPURunner",
    "BuildArtifact",
    "BuildOptions",
    "BuildResult",
    "Builder",
    "KernelStats",
    "LocalBuilder",
    "LocalRunner",
    "MeasureErrorNo",
    "MeasureInput",
    "MeasureResult",
    "RecordWriter",
    "Runner",
    "SimRunner",
    "TaskSpec",
    "analyze_module",
    "best_records",
    "build_candidate",
    "default_reference_pipeline",
    "distill",
    "iter_records",
    "load_records",
    "measure_batch",
    "save_records",
]
