"""The result of compiling one kernel: its sources per stage, its cubin and its resources."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from .assemble import ResourceUsage
from .launch import LaunchInfo

STAGES = ("device_ir", "llvm_ir", "llvm_opt", "ptx", "cubin")
"""The backend's stages, in order. Each one's output can be dumped or replaced."""

TEXT_STAGES = STAGES[:-1]

STAGE_ALIASES = {"ir": "device_ir", "tir": "device_ir", "llvm": "llvm_ir", "ll": "llvm_ir",
                 "opt": "llvm_opt", "asm": "ptx"}

STAGE_SUFFIX = {"device_ir": ".ir.txt", "llvm_ir": ".ll", "llvm_opt": ".opt.ll",
                "ptx": ".ptx", "cubin": ".cubin"}


class CompileError(RuntimeError):
    """A compilation stage failed; the message names the stage and the kernel."""


def stage_name(stage: str) -> str:
    """Canonical stage name (``"llvm"`` -> ``"llvm_ir"``) or a :class:`CompileError`."""
    s = STAGE_ALIASES.get(stage, stage)
    if s not in STAGES:
        raise CompileError(
            f"unknown stage {stage!r}; stages are {', '.join(STAGES)} "
            f"(aliases: {', '.join(f'{a}={b}' for a, b in STAGE_ALIASES.items())})")
    return s


@dataclass
class CompiledKernel:
    """One kernel after the backend: sources of every stage it ran, cubin, resource report.

    ``cubin`` is None when compilation stopped at PTX (``stop_after="ptx"``, or no assembler
    was found); the loader then hands the PTX to the driver's JIT. ``stage_seconds`` holds
    the wall time of each stage run in this process (empty for a cache hit).
    """

    name: str
    target: str
    launch: LaunchInfo
    sources: dict = field(default_factory=dict)
    cubin: bytes | None = None
    resources: ResourceUsage | None = None
    assembler: str = ""
    assembler_log: str = ""
    stage_seconds: dict = field(default_factory=dict)
    started_from: str = "device_ir"
    cache_hit: bool = False

    @property
    def symbol(self) -> str:
        """The kernel's entry name in PTX and cubin."""
        return self.launch.symbol

    def get_source(self, stage: str = "ptx") -> str:
        """The text of ``stage``: ``"device_ir"``, ``"llvm_ir"`` (or ``"llvm"``),
        ``"llvm_opt"`` or ``"ptx"``."""
        s = stage_name(stage)
        if s == "cubin":
            raise CompileError("the cubin is binary; read CompiledKernel.cubin instead")
        if s not in self.sources:
            raise CompileError(
                f"kernel {self.name}: stage {s} was not run (compilation started from "
                f"{self.started_from}); available: {', '.join(self.sources)}")
        return self.sources[s]

    def dump(self, folder: str) -> list[str]:
        """Write every stage's output (and the assembler log) to ``folder``; return paths."""
        os.makedirs(folder, exist_ok=True)
        base = os.path.join(folder, self.name)
        paths = []
        for stage, text in self.sources.items():
            paths.append(base + STAGE_SUFFIX[stage])
            with open(paths[-1], "w") as f:
                f.write(text)
        if self.cubin is not None:
            paths.append(base + STAGE_SUFFIX["cubin"])
            with open(paths[-1], "wb") as f:
                f.write(self.cubin)
        if self.assembler_log:
            paths.append(base + f".{self.assembler or 'assembler'}.log")
            with open(paths[-1], "w") as f:
                f.write(self.assembler_log)
        paths.append(base + ".json")
        with open(paths[-1], "w") as f:
            json.dump(self.summary(), f, indent=1)
        return paths

    def summary(self) -> dict:
        """A JSON-able description: target, launch, resources, stage times."""
        la = self.launch
        return {
            "name": self.name, "symbol": la.symbol, "target": self.target,
            "grid": list(la.grid), "block": list(la.block),
            "static_shared_bytes": la.static_shared_bytes,
            "dynamic_shared_bytes": la.dynamic_shared_bytes,
            "dependent_launch": la.dependent_launch,
            "params": [{"name": p.name, "dtype": p.dtype, "size": p.size,
                        "readonly": p.readonly, "writeonly": p.writeonly} for p in la.params],
            "resources": None if self.resources is None else vars(self.resources),
            "assembler": self.assembler, "started_from": self.started_from,
            "stage_seconds": dict(self.stage_seconds),
        }

    def __repr__(self):
        res = "" if self.resources is None else f", {self.resources}"
        return (f"<CompiledKernel {self.name} for {self.target}, grid {self.launch.grid}, "
                f"block {self.launch.block}{res}>")
