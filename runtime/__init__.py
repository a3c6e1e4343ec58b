"""Load and run exported modules without the compiler.

``BuiltModule.export_library(path)`` (``ptxforge.build``'s result) writes one file; this
package reads it back with numpy alone (and cuda-python to run on a GPU): importing it
imports neither LLVM (llvmlite) nor the schedule and lowering passes::

    from ptxforge import runtime
    f = runtime.load_module("add.ptxf")
    f(a, b)                      # simulator arrays (or numpy): runs the device IR on the CPU
    f(a_gpu, b_gpu)              # GPU arrays: launches the exported PTX / cubin

The file is a zip archive of data only (no pickle, no code): ``manifest.json`` (format,
version, kind, entry name, target, parameters, the launch of every kernel), the device IR
as text (what the simulator runs) and, for a cuda target, each kernel's PTX and cubin. A
network's file (``lib.export_library`` of ``graph.build``'s result) also holds its memory
plan and its weights as ``.npy``; ``load_module`` gives a :class:`LoadedNetwork` that
:class:`~ptxforge.runtime.graph_executor.GraphModule` runs as it runs a built one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import zipfile

import numpy as np

FORMAT = "ptxforge-module"
VERSION = 1


class GraphError(ValueError):
    """A graph that does not make sense (shapes, dtypes, arities, unknown operators), or a
    network run that cannot be done as asked."""


class ModuleFormatError(ValueError):
    """An exported module that cannot be read: not one, another version, or damaged."""


def _read(path) -> tuple[dict, zipfile.ZipFile]:
    try:
        zf = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise
    except (zipfile.BadZipFile, OSError) as e:
        raise ModuleFormatError(f"{path} is not an exported ptxforge module ({e}); write one "
                                "with module.export_library(path)") from None
    try:
        manifest = json.loads(zf.read("manifest.json").decode("utf-8"))
    except (KeyError, UnicodeDecodeError, json.JSONDecodeError, zipfile.BadZipFile) as e:
        zf.close()
        raise ModuleFormatError(f"{path}: no readable manifest.json ({e}); the file is not an "
                                "exported ptxforge module or is damaged") from None
    fmt = manifest.get("format") if isinstance(manifest, dict) else None
    if fmt != FORMAT:
        zf.close()
        raise ModuleFormatError(f"{path}: not an exported ptxforge module (format {fmt!r})")
    if manifest.get("version") != VERSION:
        zf.close()
        raise ModuleFormatError(f"{path}: format version {manifest.get('version')!r}; this "
                                f"ptxforge reads version {VERSION}: export it again")
    return manifest, zf


def _member(zf: zipfile.ZipFile, name: str, path) -> bytes:
    try:
        return zf.read(name)
    except (KeyError, zipfile.BadZipFile) as e:
        raise ModuleFormatError(f"{path}: {name} is missing or damaged ({e}); export the "
                                "module again") from None


class ExportedPtx:
    """The exported kernels of one device-IR module: ``load(device)`` gives the launchable
    module (the cubins where they fit the GPU, else the driver compiles the PTX)."""

    def __init__(self, device_module, kernels: dict):
        self.device_module = device_module
        self.kernels = kernels  # name -> (launch dict, ptx text, cubin bytes | None)

    def load(self, device):
        from ..backend_ptx.kernel import CompiledKernel
        from ..backend_ptx.launch import LaunchInfo, ParamInfo
        from ..backend_ptx.module import LoadedModule, PtxModule, _binary_compatible

        compiled = {}
        for name, (launch, ptx, cubin) in self.kernels.items():
            info = LaunchInfo(
                launch["name"], launch["symbol"],
                tuple(ParamInfo(**p) for p in launch["params"]), tuple(launch["grid"]),
                tuple(launch["block"]), int(launch["static_shared_bytes"]),
                int(launch["dynamic_shared_bytes"]))
            arch = launch["arch"]
            if cubin is not None and not _binary_compatible(arch, device):
                cubin = None  # the driver compiles the PTX for this GPU instead
            compiled[name] = CompiledKernel(name, arch, info, {"ptx": ptx}, cubin,
                                            started_from="export")
        arch = next(iter(self.kernels.values()))[0]["arch"]
        return LoadedModule(PtxModule(self.device_module, compiled, arch, {}), device)


class RuntimeModule:
    """An exported kernel module, loaded: call it with one array per parameter, as the
    built module it was exported from."""

    def __init__(self, manifest: dict, device_ir: str, kernels: dict, path: str = ""):
        from ..ir.parser import parse_module

        self.path = path
        self.manifest = manifest
        self.entry_name: str = manifest["entry_name"]
        self.target: str = manifest["target"]
        self.params: list = [dict(p) for p in manifest["params"]]
        self.device_module = parse_module(device_ir)
        self._kernels = kernels  # name -> (launch dict, ptx text, cubin bytes | None)
        self._ptx = ExportedPtx(self.device_module, kernels) if kernels else None
        self._loaded: dict = {}

    def get_function(self, name: str) -> RuntimeModule:
        if name != self.entry_name:
            raise KeyError(f"the module has one function, {self.entry_name!r}, not {name!r}")
        return self

    __getitem__ = get_function

    def get_source(self, fmt: str = "ir") -> str:
        """``"ir"`` (device IR) or ``"ptx"`` (every kernel's, as exported)."""
        if fmt == "ir":
            return str(self.device_module)
        if fmt == "ptx":
            if not self._kernels:
                raise ValueError(f"{self.path}: exported for {self.target}, without PTX")
            return "\n\n".join(f"// ---- kernel {n} ----\n{k[1]}"
                               for n, k in self._kernels.items())
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
            raise ValueError(f"{self.path} was exported for {self.target}: it has no GPU code; "
                             "build with target='cuda' and export again to run on a GPU")
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


def _read_kernels(zf, entry: dict, path) -> dict:
    kernels = {}
    for name, k in (entry.get("kernels") or {}).items():
        ptx = _member(zf, k["ptx"], path).decode("utf-8")
        cubin = _member(zf, k["cubin"], path) if k.get("cubin") else None
        kernels[name] = (k["launch"], ptx, cubin)
    return kernels


def load_module(path):
    """Load what ``export_library`` wrote (TVM's ``tvm.runtime.load_module``): a kernel
    module (:class:`RuntimeModule`) or a network (:class:`LoadedNetwork`, run it with
    :class:`~ptxforge.runtime.graph_executor.GraphModule`)."""
    manifest, zf = _read(path)
    with zf:
        kind = manifest.get("kind")
        if kind not in ("kernel", "network"):
            raise ModuleFormatError(f"{path}: unknown kind {kind!r} (kernel or network)")
        try:
            if kind == "network":
                return _load_network(zf, manifest, path)
            device_ir = _member(zf, manifest["device_ir"], path).decode("utf-8")
            kernels = _read_kernels(zf, manifest, path)
        except (KeyError, TypeError) as e:
            raise ModuleFormatError(f"{path}: the manifest lacks {e}; export the module "
                                    "again") from None
    return RuntimeModule(manifest, device_ir, kernels, str(path))


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

    def __getitem__(self, name: str):
        if name != "default":
            raise KeyError(f"a network has only the 'default' entry, not {name!r}")
        from .graph_executor import GraphModule

        return lambda dev=None: GraphModule(self, dev)

    def __repr__(self):
        return f"<LoadedNetwork for {self.target} from {self.path}>"


def _load_network(zf, manifest: dict, path) -> LoadedNetwork:
    import io

    from ..ir.parser import parse_module

    p = manifest["plan"]
    plan = LoadedPlan(
        [PlanSlot(SlotType(tuple(s["shape"]), s["dtype"], int(s["nbytes"])), int(s["storage"]),
                  s["kind"], s.get("name", "")) for s in p["slots"]],
        [PlanStorage(int(s["nbytes"]), s["kind"]) for s in p["storages"]],
        [PlanStep(tuple(s["args"]), int(s["out"]), bool(s.get("view"))) for s in p["steps"]],
        {k: int(v) for k, v in p["inputs"].items()},
        {k: int(v) for k, v in p["params"].items()}, [int(v) for v in p["outputs"]])
    functions = {}
    for key, f in manifest["functions"].items():
        module = parse_module(_member(zf, f["device_ir"], path).decode("utf-8"))
        kernels = _read_kernels(zf, f, path)
        functions[key] = LoadedFunction(module, ExportedPtx(module, kernels) if kernels else None)
    params = {}
    for name, member in manifest["params"].items():
        try:
            params[name] = np.load(io.BytesIO(_member(zf, member, path)), allow_pickle=False)
        except ValueError as e:
            raise ModuleFormatError(f"{path}: weight {name} ({member}) is damaged: {e}") from None
    target = LoadedTarget(manifest["target"], bool(manifest["is_sim"]))
    return LoadedNetwork(target, plan, functions, list(manifest["call_keys"]), params,
                         str(path))


def _kernel_entries(ptx_module, prefix: str, files: dict) -> dict:
    """The manifest entries of a compiled module's kernels; their PTX and cubins go into
    ``files`` under ``prefix``."""
    out = {}
    for name, k in ptx_module.kernels.items():
        launch = k.launch
        out[name] = {
            "ptx": f"{prefix}{name}.ptx",
            "cubin": f"{prefix}{name}.cubin" if k.cubin is not None else None,
            "launch": {"name": launch.name, "symbol": launch.symbol, "arch": k.target,
                       "params": [dataclasses.asdict(p) for p in launch.params],
                       "grid": list(launch.grid), "block": list(launch.block),
                       "static_shared_bytes": launch.static_shared_bytes,
                       "dynamic_shared_bytes": launch.dynamic_shared_bytes}}
        files[f"{prefix}{name}.ptx"] = k.get_source("ptx").encode("utf-8")
        if k.cubin is not None:
            files[f"{prefix}{name}.cubin"] = bytes(k.cubin)
    return out


def export_network(lib, path) -> str:
    """Write a built network (``graph.build``'s result) to ``path`` as one file: the memory
    plan, each function's device IR and kernels, and the weights as ``.npy`` (no pickle).
    Called as ``lib.export_library(path)``."""
    import io

    plan = lib.plan
    files: dict = {}
    functions = {}
    for i, (key, f) in enumerate(lib.functions.items()):
        prefix = f"functions/{i}/"
        files[prefix + "device_ir.txt"] = str(f.device_module).encode("utf-8")
        functions[key] = {"device_ir": prefix + "device_ir.txt",
                          "kernels": _kernel_entries(f.ptx, prefix, files) if f.ptx else {}}
    params = {}
    for i, (name, value) in enumerate(lib.params.items()):
        buf = io.BytesIO()
        arr = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
        np.save(buf, arr, allow_pickle=False)
        params[name] = f"params/{i}.npy"
        files[params[name]] = buf.getvalue()
    manifest = {
        "format": FORMAT, "version": VERSION, "kind": "network",
        "target": lib.target.record_spec, "is_sim": bool(lib.target.is_sim),
        "plan": {"slots": [{"shape": list(s.ty.shape), "dtype": s.ty.dtype,
                            "nbytes": int(s.ty.nbytes), "storage": s.storage, "kind": s.kind,
                            "name": s.name} for s in plan.slots],
                 "storages": [{"nbytes": int(s.nbytes), "kind": s.kind} for s in plan.storages],
                 "steps": [{"args": list(s.args), "out": s.out, "view": bool(s.view)}
                           for s in plan.steps],
                 "inputs": dict(plan.inputs), "params": dict(plan.params),
                 "outputs": list(plan.outputs)},
        "call_keys": list(lib.call_keys), "functions": functions, "params": params}
    return _write(path, manifest, files)


def export_kernel_module(built, path) -> str:
    """Write ``built`` (a ``ptxforge.build`` result) to ``path`` as one file (see the module
    doc); return the path. Called as ``built.export_library(path)``."""
    params = [{"name": p.name, "dtype": p.dtype, "shape": list(p.shape)} for p in built.params]
    manifest = {"format": FORMAT, "version": VERSION, "kind": "kernel",
                "entry_name": built.entry_name, "target": built.target.record_spec,
                "params": params, "device_ir": "device_ir.txt", "kernels": {}}
    files = {"device_ir.txt": str(built.device_module).encode("utf-8")}
    if not built.target.is_sim:
        manifest["kernels"] = _kernel_entries(built._compile(), "kernels/", files)
    return _write(path, manifest, files)


def _write(path, manifest: dict, files: dict) -> str:
    tmp = os.fspath(path) + ".tmp"
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("manifest.json", json.dumps(manifest, indent=1))
        for name, data in files.items():
            zf.writestr(name, data)
    os.replace(tmp, path)
    return os.fspath(path)


__all__ = ["load_module", "RuntimeModule", "LoadedNetwork", "ModuleFormatError", "GraphError",
           "ExportedPtx", "export_kernel_module", "export_network", "FORMAT", "VERSION"]
