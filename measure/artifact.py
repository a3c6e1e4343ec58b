"""What a builder hands a runner: device IR, cubins and facts about the kernels.

A :class:`BuildArtifact` is plain data: between a builder and the runners of one process it
travels as it is (the device IR as the module object the lowering made, never printed and
parsed again); across processes it travels by pickle (which is exact for IR modules and a
fraction of the cost of printing and parsing them). A GPU runner turns it back into a
loadable module without running LLVM again; the simulator runner runs its device IR.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from ..backend_ptx.kernel import CompiledKernel


@dataclass
class BuildArtifact:
    """One built candidate.

    ``module`` is the device-IR module (host function and kernels), as an object;
    ``kernels`` the compiled kernels by name (cubin, launch info, the assembler's resource
    report; empty when the builder stopped before codegen); ``stats`` the per-kernel
    :class:`~ptxforge.measure.kernel_stats.KernelStats`; ``output_params`` the indices of the
    host function's parameters that kernels write (the outputs); ``target_sm`` the
    architecture the cubins are for. :attr:`device_ir` is the module's text, printed when
    first asked for (dumps, caches keyed by text).
    """

    module: Any
    kernels: dict
    stats: tuple
    output_params: tuple
    target_sm: str
    stage_seconds: dict = field(default_factory=dict)

    @functools.cached_property
    def device_ir(self) -> str:
        """The printed device-IR module."""
        return str(self.module)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("device_ir", None)  # the module travels; its text is printed where needed
        return state

    def device_module(self):
        """The device-IR module."""
        return self.module

    def host_module(self):
        """A module holding just the host function (what a GPU runner needs besides the
        cubins)."""
        from ..ir.stmt import Module

        return Module([self.module.host])

    def registers(self) -> dict:
        """Registers per thread of each kernel, where the assembler reported them."""
        return {name: k.resources.registers for name, k in self.kernels.items()
                if isinstance(k, CompiledKernel) and k.resources is not None}

    def ptx_module(self, device_module=None):
        """A :class:`~ptxforge.backend_ptx.PtxModule` of the cubins (no recompilation)."""
        from ..backend_ptx.module import PtxModule

        module = device_module if device_module is not None else self.host_module()
        return PtxModule(module, dict(self.kernels), self.target_sm, {})
