"""The GPU a default schedule is written for: launch limits and the figures the tile
chooser's cost model uses.

The limits are the ones lowering enforces (``passes.lower.validate_gpu``): 1,024 threads
and 48 KiB of static shared memory per block. The throughput figures describe one
streaming multiprocessor of an H100 / H200 (sm_90); they steer tile choices, they do not
have to be exact.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GPUSpec:
    """A GPU as the default schedules see it.

    Attributes:
        name: a label for messages.
        sm_count: streaming multiprocessors (blocks run concurrently on this many).
        max_threads_per_block: the launch limit on threads per block.
        max_shared_bytes: static shared memory one block may declare.
        shared_bytes_per_sm: shared memory one SM divides among its resident blocks.
        max_warps_per_sm: resident warps per SM.
        max_blocks_per_sm: resident blocks per SM.
        registers_per_sm: 32-bit registers per SM.
        schedulers_per_sm: warp schedulers per SM (instructions issued per cycle).
        global_latency: cycles from a global (L2) load to its use, paid once per
            reduction chunk (the chunk's loads are issued together).
        l2_bytes_per_cycle: L2 read bandwidth of the whole GPU, in bytes per SM clock
            cycle; what all blocks load from global memory together must pass through it.
        sm_bytes_per_cycle: what one SM can receive from L2 per cycle; what the blocks of
            the busiest SM load must pass through it.
    """

    name: str = "H100"
    sm_count: int = 132
    max_threads_per_block: int = 1024
    max_shared_bytes: int = 48 * 1024
    shared_bytes_per_sm: int = 228 * 1024
    max_warps_per_sm: int = 64
    max_blocks_per_sm: int = 32
    registers_per_sm: int = 65536
    schedulers_per_sm: int = 4
    global_latency: int = 700
    l2_bytes_per_cycle: int = 3000
    sm_bytes_per_cycle: int = 64


H100 = GPUSpec()
"""An NVIDIA H100 SXM (132 SMs); the H200 has the same SM count and per-SM figures."""
