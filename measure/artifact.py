"""What a builder hands a runner: device IR, cubins and facts about the kernels.

A :class:`BuildArtifact` is plain data: between a builder and the runners of one process it
travels as it is (the device IR as the module object the lowering made, never printed and
parsed again); across processes it travels by pickle (which is exact for IR modules and a
fraction of the cost of printing and parsing them). A GPU runner turns it back into a
loadable module without running LLVM again; the simulator runner runs its device IR.

The heavy parts are pickled into ``bytes`` payloads once, where the artifact is first sent
(in the builder worker): the device IR, and apart from it what a GPU runner reads (the host
function and the compiled kernels). They are unpickled only where they are used: the
tuner's process, which passes every candidate from a builder to the runner, moves byte
strings instead of unpickling the IR and pickling it again on the thread that shares the
interpreter lock with the search, and the GPU runner's worker unpickles the host function
and the cubins only (:meth:`BuildArtifact.for_runner`), not the kernels' IR (a fraction of
a millisecond against several).
"""

from __future__ import annotations

import functools
import pickle
from dataclasses import dataclass, field
from typing import Any

from ..backend_ptx.kernel import CompiledKernel


@dataclass(repr=False)
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
        if "_packed_run" not in state:
            # pickled once, where it was made; a copy passed on sends the same bytes again
            from ..ir.stmt import Module

            module, kernels = state["module"], state["kernels"]
            self._packed = state["_packed"] = pickle.dumps(module, pickle.HIGHEST_PROTOCOL)
            self._packed_run = state["_packed_run"] = pickle.dumps(
                (Module([module.host]), kernels), pickle.HIGHEST_PROTOCOL)
            self._summary = state["_summary"] = _summary(kernels)
        for unpacked in ("module", "kernels", "_host"):
            state.pop(unpacked, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def __getattr__(self, name: str):
        # only called for attributes not set: the parts of an artifact that arrived
        # pickled, unpickled on first use
        d = self.__dict__
        if name == "module" and "_packed_run" in d:
            if d.get("_packed") is None:
                raise AttributeError(
                    "this artifact carries what a GPU runner needs (the host function and "
                    "the cubins: for_runner()), not the kernels' device IR")
            d["module"] = pickle.loads(d["_packed"])
            return d["module"]
        if name in ("kernels", "_host") and "_packed_run" in d:
            d["_host"], d["kernels"] = pickle.loads(d["_packed_run"])
            return d[name]
        raise AttributeError(f"{type(self).__name__!s} has no attribute {name!r}")

    def __repr__(self) -> str:
        return (f"<BuildArtifact for {self.target_sm}: outputs {list(self.output_params)}, "
                f"{len(self.stats)} kernel(s)>")

    @property
    def unpacked(self) -> bool:
        """Whether the device IR or the kernels are objects here (not pickled payloads)."""
        return "module" in self.__dict__ or "kernels" in self.__dict__

    def for_runner(self) -> BuildArtifact:
        """A copy that carries only what a GPU runner reads (the host function, the cubins,
        the facts): it pickles to a fraction of the artifact and unpickles in a fraction of
        the time, as the kernels' device IR stays behind."""
        state = self.__getstate__()
        state["_packed"] = None
        out = object.__new__(type(self))
        out.__setstate__(state)
        return out

    def has_cubins(self) -> bool:
        """Whether there are kernels and every one has its cubin (known without unpickling
        the payload)."""
        summary = self.__dict__.get("_summary") if not self.unpacked else None
        return (summary or _summary(self.kernels))[0]

    def device_module(self):
        """The device-IR module."""
        return self.module

    def host_module(self):
        """A module holding just the host function (what a GPU runner needs besides the
        cubins)."""
        from ..ir.stmt import Module

        if "module" in self.__dict__ or "_packed_run" not in self.__dict__:
            return Module([self.module.host])
        return self._host

    def registers(self) -> dict:
        """Registers per thread of each kernel, where the assembler reported them (known
        without unpickling the payload)."""
        summary = self.__dict__.get("_summary") if not self.unpacked else None
        return dict((summary or _summary(self.kernels))[1])

    def ptx_module(self, device_module=None):
        """A :class:`~ptxforge.backend_ptx.PtxModule` of the cubins (no recompilation)."""
        from ..backend_ptx.module import PtxModule

        module = device_module if device_module is not None else self.host_module()
        return PtxModule(module, dict(self.kernels), self.target_sm, {})


def _summary(kernels: dict) -> tuple:
    """(every kernel has a cubin, registers per kernel) of ``kernels``: what the tuner's
    process asks of an artifact whose kernels it never unpickles."""
    cubins = bool(kernels) and all(getattr(k, "cubin", None) is not None
                                   for k in kernels.values())
    regs = tuple((name, k.resources.registers) for name, k in kernels.items()
                 if isinstance(k, CompiledKernel) and k.resources is not None)
    return cubins, regs
