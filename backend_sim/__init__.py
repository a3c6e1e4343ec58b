"""The CPU simulator of device IR.

:func:`run` executes a lowered module (a host function launching kernels) on numpy arrays,
with the semantics of the GPU: every thread of every block runs in lock-step as one lane of
numpy arrays, int32 index arithmetic wraps, float32 math stays float32, and what a GPU
would reject raises a :class:`SimError` subclass (illegal memory accesses, launch limits,
shared-memory races between barriers, divergent barriers, warp shuffles run by part of a
warp).

Each kernel is compiled once into a Python function (:func:`compile_kernel`; its
``source`` attribute shows the generated code) and cached per kernel object.
"""

from .codegen import CompiledKernel, compile_kernel
from .errors import (
    SimArgumentError,
    SimBarrierError,
    SimDivergenceError,
    SimError,
    SimIRError,
    SimLaunchError,
    SimMemoryError,
    SimRaceError,
)
from .host import compiled, host_function, run

__all__ = [
    "run",
    "compile_kernel",
    "compiled",
    "host_function",
    "CompiledKernel",
    "SimError",
    "SimMemoryError",
    "SimLaunchError",
    "SimRaceError",
    "SimBarrierError",
    "SimDivergenceError",
    "SimIRError",
    "SimArgumentError",
]
