"""Launch limits of the GPU, checked before a kernel runs (as the driver would)."""

from __future__ import annotations

from ..ir import dtype as dt
from ..ir.stmt import Alloc, PrimFunc, walk
from .errors import SimIRError, SimLaunchError

MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK = (1024, 1024, 64)
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_SHARED_BYTES = 48 * 1024
"""Static shared memory per block (more needs dynamic shared memory and an opt-in)."""


def launch_config(func: PrimFunc) -> tuple[tuple, tuple]:
    """(grid, block) of a kernel, validated against the GPU's limits."""
    name = func.name
    grid = _extents(func, "grid")
    block = _extents(func, "block")
    threads = block[0] * block[1] * block[2]
    if threads > MAX_THREADS_PER_BLOCK:
        raise SimLaunchError(
            f"too many resources requested for launch: kernel {name} uses {threads} threads "
            f"per block ({block[0]}x{block[1]}x{block[2]}); the GPU allows at most "
            f"{MAX_THREADS_PER_BLOCK}"
        )
    for axis, (b, limit) in enumerate(zip(block, MAX_BLOCK)):
        if b > limit:
            raise SimLaunchError(
                f"invalid launch configuration: kernel {name} has blockDim.{'xyz'[axis]} = "
                f"{b}; the limit is {limit}"
            )
    for axis, (g, limit) in enumerate(zip(grid, MAX_GRID)):
        if g > limit:
            raise SimLaunchError(
                f"invalid launch configuration: kernel {name} has gridDim.{'xyz'[axis]} = "
                f"{g}; the limit is {limit}"
            )
    used = shared_bytes(func)
    if used > MAX_SHARED_BYTES:
        raise SimLaunchError(
            f"too many resources requested for launch: kernel {name} declares {used} bytes "
            f"of shared memory per block; the GPU allows {MAX_SHARED_BYTES} bytes of static "
            "shared memory"
        )
    return grid, block


def shared_bytes(func: PrimFunc) -> int:
    """Static shared memory of a kernel: every shared allocation in its body."""
    seen = {}
    for s in walk(func.body):
        if isinstance(s, Alloc) and s.buffer.scope == "shared":
            seen[id(s.buffer)] = s.buffer
    return sum(b.size * dt.nbytes(b.dtype) for b in seen.values())


def _extents(func: PrimFunc, key: str) -> tuple:
    value = func.attrs.get(key)
    ok = (isinstance(value, (tuple, list)) and len(value) == 3
          and all(isinstance(v, int) and not isinstance(v, bool) for v in value))
    if not ok:
        raise SimIRError(
            f"kernel {func.name}: attrs[{key!r}] must be three ints (x, y, z), got {value!r}"
        )
    if any(v < 1 for v in value):
        raise SimLaunchError(
            f"invalid launch configuration: kernel {func.name} has {key} {tuple(value)}; "
            "every extent must be at least 1"
        )
    return tuple(value)
