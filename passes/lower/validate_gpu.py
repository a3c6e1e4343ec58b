"""validate_gpu: reject kernels a GPU would refuse, naming the stage, axis and limit."""

from __future__ import annotations

from dataclasses import dataclass

from ...ir import dtype as dt
from ...ir.expr import free_vars
from ...ir.stmt import Alloc, Barrier, For, If, Module, Stmt, stmt_children
from ..base import Pass
from ..registry import register_pass
from .common import LoweringError, walk_all

MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK = (1024, 1024, 64)
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_SHARED_BYTES = 48 * 1024
MAX_LOCAL_BYTES = 64 * 1024


def validate_gpu(module: Module, limits: dict | None = None) -> Module:
    limits = limits or {}
    max_threads = limits.get("max_threads_per_block", MAX_THREADS_PER_BLOCK)
    max_shared = limits.get("max_shared_memory_per_block", MAX_SHARED_BYTES)
    max_local = limits.get("max_local_memory_per_thread", MAX_LOCAL_BYTES)
    for k in module.kernels():
        stages = ", ".join(k.attrs.get("stages", ())) or k.name
        grid, block = k.attrs["grid"], k.attrs["block"]
        nthreads = block[0] * block[1] * block[2]
        if nthreads > max_threads:
            raise LoweringError(
                f"kernel {k.name} (stages {stages}) uses {nthreads} threads per block "
                f"({block[0]}x{block[1]}x{block[2]}); the GPU allows at most {max_threads}",
                stage=stages, axis="threadIdx", limit=f"max_threads_per_block={max_threads}",
            )
        for i, (b, m) in enumerate(zip(block, MAX_BLOCK)):
            if b > m:
                tag = "xyz"[i]
                raise LoweringError(
                    f"kernel {k.name} (stages {stages}): threadIdx.{tag} extent {b} exceeds "
                    f"the limit {m}", stage=stages, axis=f"threadIdx.{tag}",
                    limit=f"max_block_dim_{tag}={m}")
        for i, (g, m) in enumerate(zip(grid, MAX_GRID)):
            if g > m:
                tag = "xyz"[i]
                raise LoweringError(
                    f"kernel {k.name} (stages {stages}): blockIdx.{tag} extent {g} exceeds "
                    f"the limit {m}", stage=stages, axis=f"blockIdx.{tag}",
                    limit=f"max_grid_dim_{tag}={m}")
        shared = sum(a.buffer.size * dt.nbytes(a.buffer.dtype) for a in walk_all(k.body)
                     if isinstance(a, Alloc) and a.buffer.scope == "shared")
        if shared > max_shared:
            raise LoweringError(
                f"kernel {k.name} (stages {stages}) needs {shared} bytes of shared memory per "
                f"block; the GPU allows at most {max_shared} (static)", stage=stages,
                limit=f"max_shared_memory_per_block={max_shared}")
        local = sum(a.buffer.size * dt.nbytes(a.buffer.dtype) for a in walk_all(k.body)
                    if isinstance(a, Alloc) and a.buffer.scope == "local")
        if local > max_local:
            raise LoweringError(
                f"kernel {k.name} (stages {stages}) needs {local} bytes of local memory per "
                f"thread; the limit is {max_local}", stage=stages,
                limit=f"max_local_memory_per_thread={max_local}")
        _check_barriers(k.body, block, stages, k.name)
        k.attrs["shared_bytes"] = shared
    return module


def _check_barriers(s: Stmt, block: tuple, stages: str, kname: str,
                    thread_vars: frozenset = frozenset(), guarded: str = ""):
    """A barrier must be reached by every thread of the block."""
    if isinstance(s, Barrier):
        if guarded:
            raise LoweringError(
                f"kernel {kname} (stages {stages}): a barrier sits under {guarded}, which not "
                "every thread of the block reaches; give the thread loops around shared-memory "
                "stages the block's full thread extent, or split evenly",
                stage=stages, limit="barrier under divergent control flow")
        return
    if isinstance(s, For) and s.kind == "thread" and s.thread.startswith("threadIdx"):
        ext = block["xyz".index(s.thread[-1])]
        g = guarded or (f"'{s.var.name} < {s.extent}'" if s.extent < ext else "")
        _check_barriers(s.body, block, stages, kname, thread_vars | {s.var}, g)
        return
    if isinstance(s, If):
        dep = free_vars(s.cond) & thread_vars
        g = guarded or (f"the thread-dependent condition '{s.cond}'" if dep else "")
        for c in stmt_children(s):
            _check_barriers(c, block, stages, kname, thread_vars, g)
        return
    for c in stmt_children(s):
        _check_barriers(c, block, stages, kname, thread_vars, guarded)


@register_pass
@dataclass(frozen=True)
class ValidateGPU(Pass):
    """Check every kernel against the GPU's limits (threads, grid, shared and local memory,
    barriers reached by all threads); the limits come from ``ctx.config["gpu_limits"]``.
    """

    name = "validate_gpu"

    def apply(self, module, ctx):
        return validate_gpu(module, (ctx.config or {}).get("gpu_limits") if ctx else None)
