"""validate_gpu: reject kernels a GPU would refuse, naming the stage, axis and limit.

The limits are the target's (``ctx.config["target"]``, else the current target); a dict
``ctx.config["gpu_limits"]`` of target figures overrides some of them (a smaller GPU in
tests). The pass only checks: it returns its input unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...ir import dtype as dt
from ...ir.attrs import Level
from ...ir.expr import free_vars
from ...ir.stmt import Alloc, Barrier, For, If, Module, Stmt, shared_memory, stmt_children
from ...ir.traversal import walk
from ...target import Target
from ..base import Pass
from ..registry import register_pass
from .common import LoweringError, lowering_target


def validate_gpu(module: Module, target: Target) -> Module:
    """Check every kernel of ``module`` against ``target``'s limits; returns ``module``."""
    for k in module.kernels():
        launch = k.launch
        stages = ", ".join(launch.stages) or k.name
        grid, block = launch.grid, launch.block
        nthreads = launch.threads_per_block
        max_threads = target.max_threads_per_block
        if nthreads > max_threads:
            raise LoweringError(
                f"kernel {k.name} (stages {stages}) uses {nthreads} threads per block "
                f"({block[0]}x{block[1]}x{block[2]}); the GPU allows at most {max_threads}",
                stage=stages, axis="threadIdx", limit=f"max_threads_per_block={max_threads}",
            )
        for i, (b, m) in enumerate(zip(block, target.max_block_dim)):
            if b > m:
                tag = "xyz"[i]
                raise LoweringError(
                    f"kernel {k.name} (stages {stages}): threadIdx.{tag} extent {b} exceeds "
                    f"the limit {m}", stage=stages, axis=f"threadIdx.{tag}",
                    limit=f"max_block_dim_{tag}={m}")
        for i, (g, m) in enumerate(zip(grid, target.max_grid_dim)):
            if g > m:
                tag = "xyz"[i]
                raise LoweringError(
                    f"kernel {k.name} (stages {stages}): blockIdx.{tag} extent {g} exceeds "
                    f"the limit {m}", stage=stages, axis=f"blockIdx.{tag}",
                    limit=f"max_grid_dim_{tag}={m}")
        _check_shared(k, stages, target)
        local = sum(a.buffer.size * dt.nbytes(a.buffer.dtype) for a in walk(k.body)
                    if isinstance(a, Alloc) and a.buffer.scope == "local")
        max_local = target.max_local_memory_per_thread
        if local > max_local:
            raise LoweringError(
                f"kernel {k.name} (stages {stages}) needs {local} bytes of local memory per "
                f"thread; the limit is {max_local}", stage=stages,
                limit=f"max_local_memory_per_thread={max_local}")
        _check_barriers(k.body, block, stages, k.name)
    return module


def _check_shared(k, stages: str, target: Target) -> None:
    static, _ = shared_memory(k)
    dynamic = k.launch.dynamic_shared_bytes
    if static > target.max_shared_memory_per_block:
        more = ("; run plan_dynamic_shared to place them in dynamic shared memory (up to "
                f"{target.max_shared_memory_per_block_optin} bytes on {target.arch})"
                if static <= target.max_shared_memory_per_block_optin else "")
        raise LoweringError(
            f"kernel {k.name} (stages {stages}) declares {static} bytes of static shared "
            f"memory per block; the GPU allows at most {target.max_shared_memory_per_block} "
            f"(static){more}", stage=stages,
            limit=f"max_shared_memory_per_block={target.max_shared_memory_per_block}")
    optin = target.max_shared_memory_per_block_optin
    if static + dynamic > optin:
        raise LoweringError(
            f"kernel {k.name} (stages {stages}) needs {static + dynamic} bytes of shared "
            f"memory per block; {target.arch} allows at most {optin} (with the dynamic "
            "shared-memory opt-in): use smaller tiles", stage=stages,
            limit=f"max_shared_memory_per_block_optin={optin}")


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
    """Check every kernel against the target's limits (threads, grid, static and dynamic
    shared memory, local memory, barriers reached by all threads); the target is
    ``ctx.config["target"]`` or the current one."""

    name = "validate_gpu"
    lowering = True
    levels = (Level.KERNEL,)

    def apply(self, module, ctx):
        self.check_levels(module)
        return validate_gpu(module, lowering_target(ctx))
