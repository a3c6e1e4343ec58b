"""The GPU code of one exported device-IR module: every kernel's launch, and its PTX and
cubin for each architecture it was built for.

In the manifest a module's code is ``{"device_ir": member, "builds": {arch: {kernel:
{"ptx": member, "cubin": member | null, "launch": {...}}}}}``. Reading it checks each build
against the device IR (the same kernels, launch extents and parameters, a PTX entry of the
kernel's symbol); loading on a GPU picks the build that fits it (:func:`choose_build`).
"""

from __future__ import annotations

import dataclasses
import re

from .archive import Archive, ModuleFormatError


def default_archs(target, archs) -> list[str]:
    """The architectures to export GPU code for: ``archs`` as given, else the target's (none
    for a ``"sim"`` target)."""
    if archs is None:
        return [] if target.is_sim else [target.arch]
    archs = [archs] if isinstance(archs, str) else list(archs)
    for a in archs:
        arch_version(a)
    return archs


def compile_builds(device_module, archs, built=None) -> dict:
    """``{arch: PtxModule}`` of ``device_module`` for each of ``archs``, reusing ``built``
    (a compiled module of it, or None) for its own architecture. Needs the compiler."""
    from ..backend_ptx.module import compile_module

    return {a: built.for_target(a) if built is not None else compile_module(device_module, a)
            for a in archs}


def kernel_entries(ptx_module, prefix: str, files: dict) -> dict:
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
                       "dynamic_shared_bytes": launch.dynamic_shared_bytes,
                       "dependent_launch": launch.dependent_launch}}
        files[f"{prefix}{name}.ptx"] = k.get_source("ptx").encode("utf-8")
        if k.cubin is not None:
            files[f"{prefix}{name}.cubin"] = bytes(k.cubin)
    return out


def code_entry(device_module, builds: dict, prefix: str, files: dict) -> dict:
    """The manifest entry of ``device_module`` and its ``{arch: PtxModule}`` builds."""
    files[prefix + "device_ir.txt"] = str(device_module).encode("utf-8")
    return {"device_ir": prefix + "device_ir.txt",
            "builds": {arch: kernel_entries(ptx, f"{prefix}{arch}/", files)
                       for arch, ptx in builds.items()}}


def arch_version(arch: str) -> tuple[int, int, bool]:
    """``"sm_90a"`` -> ``(9, 0, True)``: major, minor, and whether the code is for that exact
    architecture only."""
    m = re.fullmatch(r"sm_(\d+)(\d)(a?)", str(arch))
    if not m:
        raise ValueError(f"{arch!r} is not an architecture name such as 'sm_90'")
    return int(m.group(1)), int(m.group(2)), bool(m.group(3))


def choose_build(builds: dict[str, bool], capability: tuple[int, int]) -> tuple[str, bool]:
    """The build that runs on a GPU of compute ``capability``, and whether from its cubins.

    ``builds`` maps each architecture to whether its kernels have cubins. A cubin runs on
    GPUs of its major version and at least its minor one (an ``a`` cubin on its exact GPU
    only); otherwise the driver compiles PTX written for the GPU's architecture or an older
    one. The newest fitting cubin wins, then the newest fitting PTX. ValueError, naming the
    builds, when none fits.
    """
    cap = tuple(capability)
    cubins, ptx = [], []
    for arch, has_cubin in builds.items():
        major, minor, exact = arch_version(arch)
        fits = (major, minor) == cap if exact else (major, minor) <= cap
        if fits and has_cubin and major == cap[0]:
            cubins.append(((major, minor), arch))
        if fits:
            ptx.append(((major, minor), arch))
    if cubins:
        return max(cubins)[1], True
    if ptx:
        return max(ptx)[1], False
    have = ", ".join(builds) or "none"
    raise ValueError(f"no GPU code for compute capability {cap[0]}.{cap[1]}: the module's "
                     f"builds are for {have}; export it with archs=[..., "
                     f"'sm_{cap[0]}{cap[1]}']")


class ExportedPtx:
    """The exported kernels of one device-IR module, for each architecture:
    ``load(device)`` gives the launchable module from the build that fits the GPU."""

    def __init__(self, device_module, builds: dict):
        self.device_module = device_module
        self.builds = builds  # arch -> {kernel name: (launch dict, ptx text, cubin | None)}

    @property
    def archs(self) -> list[str]:
        return list(self.builds)

    def get_source(self, arch: str | None = None) -> str:
        """Every kernel's PTX for ``arch`` (default: the first build)."""
        arch = arch or self.archs[0]
        if arch not in self.builds:
            raise ValueError(f"no build for {arch}; the module has {', '.join(self.archs)}")
        return "\n\n".join(f"// ---- kernel {n} ----\n{k[1]}"
                           for n, k in self.builds[arch].items())

    def load(self, device):
        from ..backend_ptx.kernel import CompiledKernel
        from ..backend_ptx.launch import LaunchInfo, ParamInfo
        from ..backend_ptx.module import LoadedModule, PtxModule

        try:
            arch, use_cubin = choose_build(
                {a: all(k[2] is not None for k in ks.values()) for a, ks in self.builds.items()},
                device.compute_capability)
        except ValueError as e:
            raise ValueError(f"{device} ({device.sm}): {e}") from None
        compiled = {}
        for name, (launch, ptx, cubin) in self.builds[arch].items():
            info = LaunchInfo(
                launch["name"], launch["symbol"],
                tuple(ParamInfo(**p) for p in launch["params"]), tuple(launch["grid"]),
                tuple(launch["block"]), int(launch["static_shared_bytes"]),
                int(launch["dynamic_shared_bytes"]),
                # files written before the field existed launch plainly (always correct)
                bool(launch.get("dependent_launch", False)))
            compiled[name] = CompiledKernel(name, arch, info, {"ptx": ptx},
                                            cubin if use_cubin else None,
                                            started_from="export")
        return LoadedModule(PtxModule(self.device_module, compiled, arch, {}), device)


def read_code(archive: Archive, entry: dict, what: str, target: str):
    """The device module of a manifest ``entry`` (validated by the manifest's schema) and
    its :class:`ExportedPtx` (None without builds), checked against each other; the device
    IR is verified and checked against ``target``'s limits (:func:`.device_check.
    check_device_module`); ``what`` names the module in errors."""
    from ..ir.parser import parse_module
    from .device_check import check_device_module

    text = archive.text(entry["device_ir"])
    builds = {}
    for arch, kernels in entry["builds"].items():
        builds[arch] = {
            name: (k["launch"], archive.text(k["ptx"]),
                   archive.member(k["cubin"]) if k["cubin"] is not None else None)
            for name, k in kernels.items()}
    try:
        module = parse_module(text)
    except RecursionError:
        raise ModuleFormatError(f"{archive.path}: the device IR of {what} is nested too "
                                "deeply to parse") from None
    except Exception as e:  # noqa: BLE001 - any parse failure means a damaged file
        raise ModuleFormatError(f"{archive.path}: the device IR of {what} does not parse: "
                                f"{e}") from None
    if module.host is None or not module.kernels():
        raise ModuleFormatError(f"{archive.path}: the device IR of {what} has no host "
                                "function or no kernels")
    t = check_device_module(archive.path, module, target, what)
    for arch, kernels in builds.items():
        _check_build(archive, what, arch, kernels, {f.name: f for f in module.kernels()},
                     t.max_shared_memory_per_block_optin)
    return module, (ExportedPtx(module, builds) if builds else None)


def _check_build(archive: Archive, what: str, arch: str, kernels: dict, funcs: dict,
                 max_shared: int) -> None:
    """The build has exactly the device IR's kernels, each with the IR's launch extents,
    name and parameters, its architecture, shared memory within ``max_shared`` bytes and a
    PTX entry of its symbol."""
    if set(kernels) != set(funcs):
        raise ModuleFormatError(f"{archive.path}: the {arch} build of {what} has kernels "
                                f"{sorted(kernels)}, its device IR {sorted(funcs)}")
    for name, (launch, ptx, _) in kernels.items():
        func = funcs[name]
        # every launch field the GPU uses is compared (the schema checked their types)
        have = (tuple(launch["grid"]), tuple(launch["block"]),
                launch["dynamic_shared_bytes"], launch["name"],
                [(p["name"], p["dtype"], p["size"]) for p in launch["params"]])
        symbol = launch["symbol"]
        want = (func.launch.grid, func.launch.block, func.launch.dynamic_shared_bytes,
                name, [(b.name, b.dtype, b.size) for b in func.params])
        if launch["arch"] != arch:
            raise ModuleFormatError(f"{archive.path}: kernel {name} ({what}) of the {arch} "
                                    f"build says it was compiled for {launch['arch']}")
        shared = launch["static_shared_bytes"] + launch["dynamic_shared_bytes"]
        if shared > max_shared:
            raise ModuleFormatError(f"{archive.path}: kernel {name} ({what}) of the {arch} "
                                    f"build uses {shared} bytes of shared memory; the "
                                    f"target allows {max_shared}")
        if have != want:
            raise ModuleFormatError(
                f"{archive.path}: the {arch} launch of kernel {name} ({what}) does not match "
                f"its device IR: grid, block, dynamic shared bytes, name, parameters {have} "
                f"against "
                f"{want}")
        if not re.search(rf"\.entry\s+{re.escape(str(symbol))}\s*\(", ptx):
            raise ModuleFormatError(f"{archive.path}: the {arch} PTX of kernel {name} ({what}) "
                                    f"has no entry {symbol}")
