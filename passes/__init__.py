"""The pass infrastructure: passes, pipelines, contexts, instruments and the registry.

The passes themselves live in ``schedule/`` (schedule primitives) and ``lower/`` (lowering),
one per file; they register by name and are imported on the first lookup by name::

    from ptxforge.passes import Pipeline, PassContext

    pipeline = Pipeline.parse('inline(pad_temp), split(conv.ff, factors=[1, 2, 2])')
    with PassContext(print_after=["split"], dump_dir="dump"):
        scheduled = pipeline(module)

See ``docs/custom_pass.md`` for writing a pass of your own.
"""

from .base import FunctionPass, Pass
from .context import PassContext
from .errors import (
    LoweringPassInScheduleError,
    PassArgumentError,
    PassError,
    PassLevelError,
    PassRegistryError,
    PipelineParseError,
    UnknownPassError,
    UnknownPassParseError,
)
from .instruments import (
    CheckRoundTrip,
    DumpIR,
    PassInstrument,
    PassTiming,
    PrintAfter,
    PrintBefore,
    Verify,
    read_dump,
)
from .params import REF, ParamSpec, Ref, positional
from .pipeline import Pipeline, SchedulePipeline, parse_pass
from .registry import (
    DEFAULT_REGISTRY,
    ENTRY_POINT_GROUP,
    PassRegistry,
    get_pass,
    list_passes,
    register_function_pass,
    register_pass,
)

__all__ = [
    "CheckRoundTrip",
    "DEFAULT_REGISTRY",
    "ENTRY_POINT_GROUP",
    "REF",
    "DumpIR",
    "FunctionPass",
    "LoweringPassInScheduleError",
    "ParamSpec",
    "Pass",
    "PassArgumentError",
    "PassContext",
    "PassError",
    "PassInstrument",
    "PassLevelError",
    "PassRegistry",
    "PassRegistryError",
    "PassTiming",
    "Pipeline",
    "PipelineParseError",
    "PrintAfter",
    "PrintBefore",
    "Ref",
    "SchedulePipeline",
    "UnknownPassError",
    "UnknownPassParseError",
    "Verify",
    "get_pass",
    "list_passes",
    "parse_pass",
    "read_dump",
    "positional",
    "register_function_pass",
    "register_pass",
]
