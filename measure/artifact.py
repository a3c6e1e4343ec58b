"""What a builder hands a runner: device IR, cubins and facts about the kernels.

A :class:`BuildArtifact` is plain data (it crosses process boundaries by pickle). A GPU
runner turns it back into a loadable module without running LLVM again; the simulator
runner parses the device IR and runs it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..backend_ptx.kernel import CompiledKernel


@dataclass
class BuildArtifact:
    """One built candidate.

    ``device_ir`` is the printed device-IR module (host function and kernels); ``kernels``
    the compiled kernels by name (cubin, launch info, the assembler's resource report; empty
    when the builder stopped before codegen); ``stats`` the per-kernel
    :class:`~ptxforge.measure.kernel_stats.KernelStats`; ``output_params`` the indices of the
    host function's parameters that kernels write (the outputs); ``target_sm`` the
    architecture the cubins are for; ``host_ir`` the host function alone (what a GPU runner
    needs besides the cubins: it parses in a fraction of the time of the whole module).
    """

    device_ir: str
    kernels: dict
    stats: tuple
    output_params: tuple
    target_sm: str
    stage_seconds: dict = field(default_factory=dict)
    host_ir: str = ""

    def device_module(self):
        """The device-IR module, parsed."""
        from ..ir.parser import parse_module

        return parse_module(self.device_ir)

    def host_module(self):
        """A module holding just the host function (the whole module if not recorded)."""
        if not self.host_ir:
            return self.device_module()
        from ..ir.parser import parse_func
        from ..ir.stmt import Module

        return Module([parse_func(self.host_ir)])

    def registers(self) -> dict:
        """Registers per thread of each kernel, where the assembler reported them."""
        return {name: k.resources.registers for name, k in self.kernels.items()
                if isinstance(k, CompiledKernel) and k.resources is not None}

    def ptx_module(self, device_module=None):
        """A :class:`~ptxforge.backend_ptx.PtxModule` of the cubins (no recompilation)."""
        from ..backend_ptx.module import PtxModule

        module = device_module if device_module is not None else self.host_module()
        return PtxModule(module, dict(self.kernels), self.target_sm, {})
