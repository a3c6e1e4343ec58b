"""Load and run exported modules without the compiler.

``BuiltModule.export_library(path)`` (``ptxforge.build``'s result) writes one file; this
package reads it back with numpy alone (and cuda-python to run on a GPU): importing it
imports neither LLVM (llvmlite) nor the schedule and lowering passes::

    from ptxforge import runtime
    f = runtime.load_module("add.ptxf")
    f(a, b)                      # simulator arrays (or numpy): runs the device IR on the CPU
    f(a_gpu, b_gpu)              # GPU arrays: launches the exported PTX / cubin

The file is a zip archive of data only (no pickle, no code; see :mod:`.archive`):
``manifest.json`` (format, version, kind, entry name, target, parameters, the launch of
every kernel, the SHA-256 of every member), the device IR as text (what the simulator runs)
and each kernel's PTX and cubin for every architecture exported (``archs=``; default the
cuda target's, none for ``"sim"``); on a GPU the build that fits it runs. A network's file
(``lib.export_library`` of ``graph.build``'s result) also holds its memory plan and its
weights as ``.npy``; ``load_module`` gives a :class:`LoadedNetwork` that
:class:`~ptxforge.runtime.graph_executor.GraphModule` runs as it runs a built one.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .archive import FORMAT, VERSION, Archive, ModuleFormatError, array_member, write_archive
from .kernels import (
    ExportedPtx,
    choose_build,
    code_entry,
    compile_builds,
    default_archs,
    read_code,
)
from .plan_check import check_plan


class GraphError(ValueError):
    """A graph that does not make sense (shapes, dtypes, arities, unknown operators), or a
    network run that cannot be done as asked."""


class RuntimeModule:
    """An exported kernel module, loaded: call it with one array per parameter, as the
    built module it was exported from."""

    def __init__(self, manifest: dict, device_module, ptx: ExportedPtx | None, path: str = ""):
        self.path = path
        self.manifest = manifest
        self.entry_name: str = manifest["entry_name"]
        self.target: str = manifest["target"]
        self.params: list = [dict(p) for p in manifest["params"]]
        self.device_module = device_module
        self._ptx = ptx
        self._loaded: dict = {}

    @property
    def archs(self) -> list[str]:
        """The architectures the file holds GPU code for."""
        return [] if self._ptx is None else self._ptx.archs

    def get_function(self, name: str) -> RuntimeModule:
        if name != self.entry_name:
            raise KeyError(f"the module has one function, {self.entry_name!r}, not {name!r}")
        return self

    __getitem__ = get_function

    def get_source(self, fmt: str = "ir", arch: str | None = None) -> str:
        """``"ir"`` (device IR) or ``"ptx"`` (every kernel's, as exported for ``arch``;
        default: the first architecture exported)."""
        if fmt == "ir":
            return str(self.device_module)
        if fmt == "ptx":
            if self._ptx is None:
                raise ValueError(f"{self.path}: exported without GPU code (no PTX); export "
                                 "with archs=['sm_90', ...] or from a cuda build")
            return self._ptx.get_source(arch)
        raise ValueError(f"fmt is 'ir' or 'ptx', not {fmt!r}")

    def __call__(self, *arrays) -> None:
        if len(arrays) != len(self.params):
            names = ", ".join(p["name"] for p in self.params)
            raise TypeError(f"the module takes {len(self.params)} arrays ({names}), got "
                            f"{len(arrays)}")
        if all(isinstance(a, np.ndarray) or hasattr(a, "host_view") for a in arrays):
            from ..backend_sim import run

            run(self.device_module, [a.host_view if hasattr(a, "host_view") else a
                                     for a in arrays])
            return
        dev = arrays[0].device
        key = repr(dev)
        if key not in self._loaded:
            self._loaded[key] = self._load_on(dev)
        self._loaded[key](*arrays)

    def _load_on(self, device):
        if self._ptx is None:
            raise ValueError(f"{self.path} was exported without GPU code; export it from a "
                             "cuda build, or with archs=[...], to run it on a GPU")
        return self._ptx.load(device)

    def time_evaluator(self, func_name: str, dev, number: int = 10, repeat: int = 1,
                       min_repeat_ms: float = 0):
        """CUDA-event timing of the loaded module on a GPU ``dev`` (as ``BuiltModule``)."""
        self.get_function(func_name)
        if getattr(dev, "device_type", "") == "sim":
            raise ValueError("a loaded module times on a GPU only; the simulator's estimate "
                             "needs the compiler: time the built module instead")
        key = repr(dev)
        if key not in self._loaded:
            self._loaded[key] = self._load_on(dev)
        return self._loaded[key].time_evaluator(number=number, repeat=repeat,
                                                min_repeat_ms=min_repeat_ms)

    def __repr__(self):
        return f"<RuntimeModule {self.entry_name} for {self.target} from {self.path}>"


def load_module(path):
    """Load what ``export_library`` wrote (TVM's ``tvm.runtime.load_module``): a kernel
    module (:class:`RuntimeModule`) or a network (:class:`LoadedNetwork`, run it with
    :class:`~ptxforge.runtime.graph_executor.GraphModule`). The manifest is validated
    against its schema (:mod:`.manifest`), every member is checked against its digest
    before use and its size before it is read, the device IR is verified and checked
    against the target's limits, and the GPU code against the device IR;
    :class:`ModuleFormatError` says what is wrong with a file that is not a module, is
    damaged, or has another format version."""
    with Archive(path) as archive:
        manifest = archive.manifest
        if manifest["kind"] == "network":
            return _load_network(archive)
        module, ptx = read_code(archive, manifest["code"], "the kernel module",
                                manifest["target"])
        want = [(list(p["shape"]), p["dtype"]) for p in manifest["params"]]
        have = [(list(b.shape), b.dtype) for b in module.host.params]
        if have != want:
            raise ModuleFormatError(f"{path}: the device IR takes {have}, the manifest lists "
                                    f"{want}")
    return RuntimeModule(manifest, module, ptx, archive.path)


# -- networks ---------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class SlotType:
    """The type of one tensor of a loaded network's memory plan."""

    shape: tuple
    dtype: str
    nbytes: int


@dataclasses.dataclass(frozen=True)
class PlanSlot:
    ty: SlotType
    storage: int
    kind: str
    name: str = ""


@dataclasses.dataclass(frozen=True)
class PlanStorage:
    nbytes: int
    kind: str


@dataclasses.dataclass(frozen=True)
class PlanStep:
    args: tuple
    out: int
    view: bool = False


@dataclasses.dataclass(frozen=True)
class LoadedPlan:
    """A loaded network's memory plan (the fields the executor reads)."""

    slots: list
    storages: list
    steps: list
    inputs: dict
    params: dict
    outputs: list


@dataclasses.dataclass(frozen=True)
class LoadedFunction:
    device_module: object
    ptx: ExportedPtx | None


@dataclasses.dataclass(frozen=True)
class LoadedTarget:
    spec: str
    is_sim: bool

    def __str__(self) -> str:
        return self.spec


class LoadedNetwork:
    """A network loaded from ``export_library``: what ``GraphModule(lib, dev)`` runs, as the
    library ``graph.build`` returned (``lib["default"](dev)`` as in TVM)."""

    def __init__(self, target, plan, functions, call_keys, params, path=""):
        self.target, self.plan, self.functions = target, plan, functions
        self.call_keys, self.params, self.path = call_keys, params, path

    @property
    def input_names(self) -> list:
        return list(self.plan.inputs)

    @property
    def archs(self) -> list[str]:
        """The architectures the file holds GPU code for (for every function)."""
        codes = [[] if f.ptx is None else f.ptx.archs for f in self.functions.values()]
        return [a for a in codes[0] if all(a in c for c in codes)] if codes else []

    def __getitem__(self, name: str):
        if name != "default":
            raise KeyError(f"a network has only the 'default' entry, not {name!r}")
        from .graph_executor import GraphModule

        return lambda dev=None: GraphModule(self, dev)

    def __repr__(self):
        return f"<LoadedNetwork for {self.target} from {self.path}>"


def _load_network(archive: Archive) -> LoadedNetwork:
    # the manifest fits its schema (types and ranges); what is left is its consistency
    manifest = archive.manifest
    p = manifest["plan"]
    plan = LoadedPlan(
        [PlanSlot(SlotType(tuple(s["shape"]), s["dtype"], s["nbytes"]), s["storage"],
                  s["kind"], s.get("name", "")) for s in p["slots"]],
        [PlanStorage(s["nbytes"], s["kind"]) for s in p["storages"]],
        [PlanStep(tuple(s["args"]), s["out"], s.get("view", False)) for s in p["steps"]],
        dict(p["inputs"]), dict(p["params"]), list(p["outputs"]))
    functions = {key: LoadedFunction(*read_code(archive, f, f"function {key[:80]}",
                                                manifest["target"]))
                 for key, f in manifest["functions"].items()}
    call_keys = list(manifest["call_keys"])
    check_plan(archive.path, plan, call_keys, functions, manifest["params"])
    params = {name: archive.array(manifest["params"][name], f"weight {name}")
              for name in plan.params}
    target = LoadedTarget(manifest["target"], manifest["is_sim"])
    return LoadedNetwork(target, plan, functions, call_keys, params, archive.path)


def export_network(lib, path, archs=None) -> str:
    """Write a built network (``graph.build``'s result) to ``path`` as one file: the memory
    plan, each function's device IR and its kernels for each of ``archs`` (default: the
    target's; none for a ``"sim"`` target), and the weights as ``.npy`` (no pickle). Called
    as ``lib.export_library(path, archs=None)``."""
    archs = default_archs(lib.target, archs)
    plan = lib.plan
    files: dict = {}
    functions = {}
    for i, (key, f) in enumerate(lib.functions.items()):
        builds = compile_builds(f.device_module, archs, f.ptx)
        functions[key] = code_entry(f.device_module, builds, f"functions/{i}/", files)
    params = {name: array_member(files, f"params/{i}.npy", lib.params[name])
              for i, name in enumerate(plan.params)}
    manifest = {
        "format": FORMAT, "version": VERSION, "kind": "network",
        "target": lib.target.record_spec, "is_sim": not archs,
        "plan": {"slots": [{"shape": list(s.ty.shape), "dtype": s.ty.dtype,
                            "nbytes": int(s.ty.nbytes), "storage": s.storage, "kind": s.kind,
                            "name": s.name} for s in plan.slots],
                 "storages": [{"nbytes": int(s.nbytes), "kind": s.kind} for s in plan.storages],
                 "steps": [{"args": list(s.args), "out": s.out, "view": bool(s.view)}
                           for s in plan.steps],
                 "inputs": dict(plan.inputs), "params": dict(plan.params),
                 "outputs": list(plan.outputs)},
        "call_keys": list(lib.call_keys), "functions": functions, "params": params}
    return write_archive(path, manifest, files)


def export_kernel_module(built, path, archs=None) -> str:
    """Write ``built`` (a ``ptxforge.build`` result) to ``path`` as one file (see the module
    doc) with its kernels for each of ``archs`` (default: the target's; none for a
    ``"sim"`` target); return the path. Called as ``built.export_library(path)``."""
    archs = default_archs(built.target, archs)
    built_ptx = None if built.target.is_sim else built._compile()
    files: dict = {}
    params = [{"name": p.name, "dtype": p.dtype, "shape": list(p.shape)} for p in built.params]
    manifest = {"format": FORMAT, "version": VERSION, "kind": "kernel",
                "entry_name": built.entry_name, "target": built.target.record_spec,
                "params": params,
                "code": code_entry(built.device_module,
                                   compile_builds(built.device_module, archs, built_ptx), "",
                                   files)}
    return write_archive(path, manifest, files)


__all__ = ["load_module", "RuntimeModule", "LoadedNetwork", "ModuleFormatError", "GraphError",
           "ExportedPtx", "choose_build", "export_kernel_module", "export_network", "FORMAT",
           "VERSION"]
