"""Launch limits of the GPU, checked before a kernel runs (as the driver would).

The limits are the current target's (:func:`ptxforge.target.current_target`): threads and
extents per block and grid, static shared memory up to the static limit, static plus dynamic
shared memory up to the opt-in limit (the runtime opts in for a kernel that declares dynamic
shared memory, as ``backend_ptx`` does).
"""

from __future__ import annotations

from ..ir.attrs import Level
from ..ir.stmt import PrimFunc, shared_memory
from ..target import Target, as_target
from .errors import SimIRError, SimLaunchError


def launch_config(func: PrimFunc, target: str | Target | None = None) -> tuple[tuple, tuple]:
    """(grid, block) of a kernel, validated against ``target``'s limits (default: the
    current target)."""
    t = as_target(target)
    name = func.name
    if func.level is not Level.KERNEL:
        raise SimIRError(f"function {name} is a {func.level.describe()} function, not a "
                         "kernel; lower the module to device IR first")
    launch = func.launch
    grid, block = launch.grid, launch.block
    threads = launch.threads_per_block
    if threads > t.max_threads_per_block:
        raise SimLaunchError(
            f"too many resources requested for launch: kernel {name} uses {threads} threads "
            f"per block ({block[0]}x{block[1]}x{block[2]}); the GPU allows at most "
            f"{t.max_threads_per_block}"
        )
    for axis, (b, limit) in enumerate(zip(block, t.max_block_dim)):
        if b > limit:
            raise SimLaunchError(
                f"invalid launch configuration: kernel {name} has blockDim.{'xyz'[axis]} = "
                f"{b}; the limit is {limit}"
            )
    for axis, (g, limit) in enumerate(zip(grid, t.max_grid_dim)):
        if g > limit:
            raise SimLaunchError(
                f"invalid launch configuration: kernel {name} has gridDim.{'xyz'[axis]} = "
                f"{g}; the limit is {limit}"
            )
    static, placed = shared_memory(func)
    if static > t.max_shared_memory_per_block:
        raise SimLaunchError(
            f"too many resources requested for launch: kernel {name} declares {static} bytes "
            f"of shared memory per block; the GPU allows {t.max_shared_memory_per_block} "
            "bytes of static shared memory"
        )
    dynamic = launch.dynamic_shared_bytes
    if placed > dynamic:
        raise SimIRError(f"kernel {name} places shared buffers up to byte {placed} of dynamic "
                         f"shared memory but launches with {dynamic} bytes")
    if static + dynamic > t.max_shared_memory_per_block_optin:
        raise SimLaunchError(
            f"too many resources requested for launch: kernel {name} uses {static + dynamic} "
            f"bytes of shared memory per block ({static} static, {dynamic} dynamic); "
            f"{t.arch} allows at most {t.max_shared_memory_per_block_optin} with the opt-in"
        )
    return grid, block


def shared_bytes(func: PrimFunc) -> int:
    """Shared memory per block of a kernel: static allocations plus dynamic shared memory."""
    return func.shared_bytes
