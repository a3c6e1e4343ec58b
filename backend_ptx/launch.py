"""What launching a compiled kernel needs (its symbol, parameters and extents): plain data,
shared by the code generator that makes it and the runtime that launches it (which needs
no compiler)."""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import dtype as dt

GRID_DEPENDENCY_WAIT = "griddepcontrol.wait;"
"""The first instruction of every kernel for sm_90 and later (backend_ptx.codegen): wait
until the grids this one depends on (the kernel before it in its stream, under
programmatic dependent launch) have finished and their memory is visible. Without such a
launch it returns at once. The runtime launches a kernel whose PTX has it as a dependent
launch: the code generator records that it emitted the wait in
``LaunchInfo.dependent_launch``, which the runtime reads."""

GRID_DEPENDENTS_LAUNCH = "griddepcontrol.launch_dependents;"
"""The second: let the next kernel of the stream launch (it waits in its own first
instruction) once every block of this one has started."""


@dataclass(frozen=True)
class ParamInfo:
    """One buffer parameter of a compiled kernel."""

    name: str
    dtype: str
    size: int
    readonly: bool
    writeonly: bool

    @property
    def nbytes(self) -> int:
        return self.size * dt.nbytes(self.dtype)


@dataclass(frozen=True)
class LaunchInfo:
    """What launching a kernel needs: its PTX symbol, parameters and launch extents.

    ``dependent_launch``: the kernel waits for its grid dependencies before it touches
    memory (:data:`GRID_DEPENDENCY_WAIT` first, emitted by the code generator for sm_90 and
    later), so the runtime may launch it with programmatic stream serialization; a kernel
    without the wait must be launched plainly.
    """

    name: str
    symbol: str
    params: tuple[ParamInfo, ...]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    static_shared_bytes: int
    dynamic_shared_bytes: int
    dependent_launch: bool = False

    @property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]
