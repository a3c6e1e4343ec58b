"""plan_dynamic_shared: a kernel whose shared buffers exceed the static limit gets them as
one dynamic shared-memory array.

A block may declare at most ``target.max_shared_memory_per_block`` (48 KiB) of ``.shared``
memory statically; tensor-core pipelines need more. Above that limit, every shared buffer of
the kernel is given a byte offset (aligned to 16 bytes, or its element size if larger) in the
kernel's dynamic shared memory, and the kernel's ``launch.dynamic_shared_bytes`` records the
total; the backends then address one ``extern .shared`` array and the runtime opts in to that
much shared memory. The total may reach ``target.max_shared_memory_per_block_optin``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...ir import dtype as dt
from ...ir.attrs import Level
from ...ir.intrin.wgmma import WGMMA_SHARED_ALIGN, wgmma_operand_buffers
from ...ir.stmt import Alloc, PrimFunc, map_stmt, shared_memory, walk
from ...ir.verify import DYNAMIC_SHARED_ALIGN
from ...target import Target
from ..base import Pass
from ..registry import register_pass
from .common import LoweringError, lowering_target


def plan_dynamic_shared(func: PrimFunc, target: Target) -> PrimFunc:
    """``func`` with its shared buffers placed in dynamic shared memory when they exceed the
    static limit (unchanged otherwise)."""
    static, placed = shared_memory(func)
    if static <= target.max_shared_memory_per_block:
        return func
    offsets: dict[int, int] = {}
    end = placed
    wgmma = {id(b) for b in wgmma_operand_buffers(func.body)}
    sizes = []
    for s in walk(func.body):
        b = s.buffer if isinstance(s, Alloc) else None
        if b is None or b.scope != "shared" or s.dyn_offset is not None or id(b) in offsets:
            continue
        align = max(DYNAMIC_SHARED_ALIGN, dt.nbytes(b.dtype))
        if id(b) in wgmma:
            align = WGMMA_SHARED_ALIGN
        end = -(-end // align) * align
        offsets[id(b)] = end
        nbytes = b.size * dt.nbytes(b.dtype)
        sizes.append(f"{b.name}: {nbytes}")
        end += nbytes
    dynamic = max(end, func.launch.dynamic_shared_bytes)
    optin = target.max_shared_memory_per_block_optin
    if dynamic > optin:
        stages = ", ".join(func.launch.stages) or func.name
        raise LoweringError(
            f"kernel {func.name} (stages {stages}) needs {dynamic} bytes of shared memory per "
            f"block ({', '.join(sizes)}); {target.arch} allows at most {optin} even as dynamic "
            "shared memory: use smaller tiles", stage=stages,
            limit=f"max_shared_memory_per_block_optin={optin}")

    def place(x):
        if isinstance(x, Alloc) and id(x.buffer) in offsets and x.dyn_offset is None:
            return x.replace(dyn_offset=offsets[id(x.buffer)])
        return None

    body = map_stmt(func.body, fstmt=place)
    return func.replace(body=body, attrs=func.attrs.with_launch(dynamic_shared_bytes=dynamic))


@register_pass
@dataclass(frozen=True)
class PlanDynamicShared(Pass):
    """Place the shared buffers of a kernel over the static shared-memory limit in dynamic
    shared memory (up to the target's opt-in limit); the target is ``ctx.config["target"]``
    or the current one."""

    name = "plan_dynamic_shared"
    lowering = True
    levels = (Level.KERNEL,)

    def apply(self, module, ctx):
        target = lowering_target(ctx)
        return self.map_functions(module, lambda f: plan_dynamic_shared(f, target))
