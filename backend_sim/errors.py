"""The errors a simulated run raises.

Each class stands for a failure a real GPU run would also hit (a fault, a refused launch, a
race that makes results undefined); :class:`SimIRError` and :class:`SimArgumentError` cover
inputs the simulator cannot run at all.
"""

from __future__ import annotations


class SimError(RuntimeError):
    """Base of every error raised while simulating a module."""


class SimMemoryError(SimError):
    """An access outside a buffer: a GPU reports an illegal memory access."""


class SimLaunchError(SimError):
    """A launch configuration the GPU refuses (threads per block, grid, shared memory)."""


class SimRaceError(SimError):
    """Two threads of a block touch the same shared element with no barrier in between."""


class SimBarrierError(SimError):
    """A barrier reached by only some threads of a block (undefined behaviour on a GPU), or
    a named barrier's protocol broken: a deadlock, mismatched counts, a warp split at it, a
    phase left incomplete at the kernel's end."""


class SimDivergenceError(SimError):
    """A warp shuffle executed by only some lanes of a warp (undefined on a GPU)."""


class SimIRError(SimError):
    """Device IR the simulator cannot execute (a malformed kernel or host function)."""


class SimArgumentError(SimError, ValueError):
    """Arrays handed to :func:`ptxforge.backend_sim.run` that do not match the host params."""
