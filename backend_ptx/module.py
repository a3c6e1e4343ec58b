"""Compiled modules and their loaded form: kernels in GPU memory and the host plan.

:func:`compile_module` compiles every kernel of a device-IR module into a
:class:`PtxModule` (no GPU needed). ``PtxModule.load(device)`` loads the cubins (or lets the
driver assemble the PTX) and returns a :class:`LoadedModule`, which runs the module's host
function: it allocates the global temporaries once, then launches the kernels in order with
the caller's arrays and the temporaries as arguments.
"""

from __future__ import annotations

import ctypes
import weakref
from collections.abc import Callable

from ..ir.stmt import Alloc, Launch, Module, PrimFunc, Seq, Stmt
from ..target import Target, as_target
from .cuda_driver import CudaError, Device, call, cuda, driver, release_failed
from .kernel import CompiledKernel, CompileError, stage_name
from .launch import LaunchInfo
from .ndarray import NDArray, empty, from_dlpack
from .tensor_map import TensorMapSlots, tensor_map_params
from .timer import ProfileResult, time_evaluator


def _unload(device: Device, handle) -> None:
    try:
        device.activate()
        call("cuModuleUnload", handle)
    except CudaError as e:
        release_failed(e)


def _binary_compatible(target: str, device: Device) -> bool:
    """Whether a cubin for ``target`` runs on ``device`` (same major, minor not newer)."""
    major, minor = device.compute_capability
    digits = target[3:].rstrip("a")
    t_major, t_minor = int(digits[:-1]), int(digits[-1])
    if target.endswith("a"):
        return (t_major, t_minor) == (major, minor)
    return t_major == major and t_minor <= minor


class LoadedKernel:
    """One kernel loaded on a device; launch it with arrays (or raw device pointers)."""

    def __init__(self, compiled: CompiledKernel, device: Device,
                 tensor_maps: dict | None = None):
        """``tensor_maps``: parameter index -> the kernel's
        :class:`~ptxforge.ir.stmt_tma.TensorMap` parameter there (what
        :class:`LoadedModule` reads off the device IR); every by-value tensor map parameter
        of the PTX needs one."""
        self.compiled = compiled
        self.device = device
        launch = compiled.launch
        device.activate()
        if compiled.cubin is not None:
            if not _binary_compatible(compiled.target, device):
                raise CompileError(
                    f"kernel {compiled.name} was assembled for {compiled.target}, which does not "
                    f"run on {device} ({device.sm}); compile with target={device.sm!r}")
            image = compiled.cubin
        else:
            image = compiled.get_source("ptx").encode() + b"\0"
        self.module = call("cuModuleLoadData", image)
        weakref.finalize(self, _unload, device, self.module)
        self.function = call("cuModuleGetFunction", self.module, launch.symbol.encode())
        if launch.dynamic_shared_bytes:
            attr = driver().CUfunction_attribute
            call("cuFuncSetAttribute", self.function,
                 attr.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                 launch.dynamic_shared_bytes)
        self._grid, self._block = launch.grid, launch.block
        self._smem = launch.dynamic_shared_bytes
        # a kernel that waits for its grid dependencies first (codegen, sm_90 and later) may
        # start while the kernel before it in the stream finishes
        self.dependent_launch = launch.dependent_launch
        self._config = None
        n = len(launch.params)
        self._values = (ctypes.c_uint64 * max(n, 1))()
        base = ctypes.addressof(self._values)
        self._slots = (ctypes.c_void_p * max(n, 1))(*[base + 8 * i for i in range(n)])
        self._slots_addr = ctypes.addressof(self._slots)
        self._maps = TensorMapSlots(compiled, tensor_maps or {}, self._slots)

    @property
    def launch_info(self) -> LaunchInfo:
        return self.compiled.launch

    @property
    def name(self) -> str:
        return self.compiled.name

    def driver_resources(self) -> dict:
        """What the driver says about the loaded kernel (registers, local/shared bytes)."""
        attr = driver().CUfunction_attribute
        names = {"registers": "CU_FUNC_ATTRIBUTE_NUM_REGS",
                 "local_bytes": "CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES",
                 "static_shared_bytes": "CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES",
                 "max_threads_per_block": "CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK"}
        return {k: int(call("cuFuncGetAttribute", getattr(attr, v), self.function))
                for k, v in names.items()}

    def check_args(self, args) -> list[int]:
        """Device pointers of ``args`` after checking them against the kernel's params."""
        params = self.compiled.launch.params
        if len(args) != len(params):
            raise TypeError(
                f"kernel {self.name} takes {len(params)} arrays "
                f"({', '.join(p.name for p in params)}), got {len(args)}")
        ptrs = []
        for a, p in zip(args, params):
            if isinstance(a, int):
                ptrs.append(a)
                continue
            a = _as_ndarray(a)
            if a.device != self.device:
                raise ValueError(f"kernel {self.name}: {p.name} is on {a.device}, the kernel "
                                 f"on {self.device}")
            if a.dtype != p.dtype or a.size != p.size:
                raise ValueError(
                    f"kernel {self.name}: parameter {p.name} needs {p.size} x {p.dtype}, got "
                    f"{list(a.shape)} {a.dtype}")
            ptrs.append(_aligned_ptr(a, p.name))
        return ptrs

    def launch_ptrs(self, ptrs, grid=None, block=None, shared_bytes=None, stream=0,
                    dependent: bool = True) -> None:
        """Launch with device pointers (no checks): the fast path of a loaded module.

        ``dependent``: launch a kernel that waits for its grid dependencies
        (``dependent_launch``) with programmatic stream serialization, so that it starts as
        the kernel before it in ``stream`` finishes; False: after it, as a plain launch."""
        gx, gy, gz = grid or self._grid
        bx, by, bz = block or self._block
        self._values[:len(ptrs)] = ptrs
        if self._maps.maps:
            self._maps.fill(ptrs)
        smem = self._smem if shared_bytes is None else shared_bytes
        if not (dependent and self.dependent_launch):
            call("cuLaunchKernel", self.function, gx, gy, gz, bx, by, bz, smem, stream,
                 self._slots_addr, 0)
            return
        cfg = self._config or self._dependent_config()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = gx, gy, gz
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = bx, by, bz
        cfg.sharedMemBytes = smem
        cfg.hStream = stream
        call("cuLaunchKernelEx", cfg, self.function, self._slots_addr, 0)

    def _dependent_config(self):
        d = driver()
        attr = d.CUlaunchAttribute()
        attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        self._config = d.CUlaunchConfig()
        self._config.attrs = [attr]
        self._config.numAttrs = 1
        return self._config

    def launch(self, *args, grid=None, block=None, shared_bytes=None, stream=0) -> None:
        """Launch on ``args`` (NDArrays, DLPack tensors, or raw pointers as ints); ``grid`` and
        ``block`` override the compiled launch extents (the kernel may then misbehave)."""
        self.device.activate()
        self.launch_ptrs(self.check_args(args), grid, block, shared_bytes, stream)

    __call__ = launch

    def time_evaluator(self, number: int = 10, repeat: int = 1, min_repeat_ms: float = 0.0,
                       warmup: int = 1, graph: bool = False) -> Callable[..., ProfileResult]:
        """Time this kernel alone: ``f(*arrays) -> ProfileResult`` (seconds); ``graph`` replays
        the launches from a CUDA graph (no host launch overhead)."""
        # plain launches: each run times the kernel alone, not overlapped with the next run
        timed = time_evaluator(lambda *ptrs, stream=0: self.launch_ptrs(ptrs, stream=stream,
                                                                        dependent=False),
                               self.device, number, repeat, min_repeat_ms, warmup, graph)

        def evaluate(*args) -> ProfileResult:
            self.device.activate()
            return timed(*self.check_args(args))

        return evaluate

    def __repr__(self):
        return f"<LoadedKernel {self.name} on {self.device}>"


def _as_ndarray(a) -> NDArray:
    if isinstance(a, NDArray):
        return a
    if hasattr(a, "__dlpack__"):
        return from_dlpack(a)
    raise TypeError(
        f"expected a GPU array (ptxforge NDArray or a DLPack tensor), got {type(a).__name__}; "
        "copy host data with ptxforge.nd.array(x, device) first")


def _aligned_ptr(a: NDArray, what: str) -> int:
    if a.ptr % 16:
        raise ValueError(
            f"{what}: the array's data pointer {a.ptr:#x} is not 16-byte aligned; kernels "
            "assume aligned buffers (pass a fresh contiguous copy)")
    return a.ptr


class PtxModule:
    """Every kernel of a device-IR module compiled; load it on a device to run it."""

    def __init__(self, device_module: Module, kernels: dict, target: str, options: dict):
        """``target``: the sm name the kernels were compiled for."""
        self.device_module = device_module
        self.kernels: dict[str, CompiledKernel] = kernels
        self.target = target
        self.options = dict(options)
        self.host: PrimFunc | None = device_module.host

    def get_source(self, fmt: str = "ptx") -> str:
        """``"ptx"``, ``"llvm"``/``"llvm_ir"``, ``"llvm_opt"`` of every kernel, or
        ``"device_ir"`` (the whole module)."""
        stage = stage_name(fmt)
        if stage == "device_ir":
            return str(self.device_module)
        if stage == "cubin":
            raise CompileError("cubins are binary; read module.kernels[name].cubin")
        return "\n\n".join(f"// ---- kernel {name} ----\n{k.get_source(stage)}"
                           for name, k in self.kernels.items())

    def dump(self, folder: str) -> list[str]:
        """Write every kernel's stages to ``folder``."""
        paths = []
        for k in self.kernels.values():
            paths += k.dump(folder)
        return paths

    def for_target(self, sm: str) -> PtxModule:
        """This module compiled for another sm (self when it already is)."""
        if sm == self.target:
            return self
        return compile_module(self.device_module, sm, **self.options)

    def load(self, device: Device | None = None) -> LoadedModule:
        """Load on ``device`` (default ``cuda(0)``); recompiles first if the module was
        compiled for another architecture than the device's."""
        device = device or cuda(0)
        mod = self if _binary_compatible(self.target, device) else self.for_target(device.sm)
        return LoadedModule(mod, device)

    def __repr__(self):
        return f"<PtxModule {list(self.kernels)} for {self.target}>"


class LoadedModule:
    """A :class:`PtxModule` on a device: call it with one array per host parameter."""

    entry_name = "main"

    def __init__(self, module: PtxModule, device: Device):
        self.module = module
        self.device = device
        funcs = {f.name: f for f in module.device_module.kernels()}
        self.kernels = {name: LoadedKernel(k, device, tensor_map_params(funcs.get(name)))
                        for name, k in module.kernels.items()}
        self.params = () if module.host is None else module.host.params
        self._temps: list[NDArray] = []
        self._plan: list[tuple[LoadedKernel, list[tuple[str, int]]]] = []
        if module.host is not None:
            self._build_plan(module.host)
        self._temp_ptrs = [t.ptr for t in self._temps]

    def _build_plan(self, host: PrimFunc) -> None:
        params = {b: i for i, b in enumerate(host.params)}
        temps: dict = {}

        def visit(s: Stmt) -> None:
            if isinstance(s, Alloc):
                temps[s.buffer] = len(self._temps)
                self._temps.append(empty((s.buffer.size,), s.buffer.dtype, self.device))
                visit(s.body)
            elif isinstance(s, Seq):
                for c in s.stmts:
                    visit(c)
            elif isinstance(s, Launch):
                if s.kernel not in self.kernels:
                    raise CompileError(f"host function launches unknown kernel {s.kernel}")
                lk = self.kernels[s.kernel]
                slots = []
                for arg, p in zip(s.args, lk.compiled.launch.params):
                    if arg in params:
                        slots.append(("p", params[arg]))
                    elif arg in temps:
                        slots.append(("t", temps[arg]))
                    else:
                        raise CompileError(
                            f"launch of {s.kernel}: argument {arg.name} is neither a host "
                            "parameter nor an allocated temporary")
                    if arg.size != p.size or arg.dtype != p.dtype:
                        raise CompileError(
                            f"launch of {s.kernel}: host buffer {arg.name} ({arg.size} x "
                            f"{arg.dtype}) does not match kernel parameter {p.name} "
                            f"({p.size} x {p.dtype})")
                if len(s.args) != len(lk.compiled.launch.params):
                    raise CompileError(
                        f"launch of {s.kernel} passes {len(s.args)} arguments, the kernel "
                        f"takes {len(lk.compiled.launch.params)}")
                self._plan.append((lk, slots))
            else:
                raise CompileError(
                    f"the host function may hold only Alloc, Seq and Launch; found "
                    f"{type(s).__name__}")

        visit(host.body)

    def _param_ptrs(self, arrays) -> list[int]:
        if self.module.host is None:
            raise CompileError("this module has no host function; launch its kernels with "
                               "loaded.kernels[name](...)")
        if len(arrays) != len(self.params):
            raise TypeError(
                f"the module takes {len(self.params)} arrays "
                f"({', '.join(p.name for p in self.params)}), got {len(arrays)}")
        ptrs = []
        for a, p in zip(arrays, self.params):
            a = _as_ndarray(a)
            if a.device != self.device:
                raise ValueError(f"{p.name} is on {a.device}; the module is on {self.device}")
            if a.dtype != p.dtype or a.size != p.size or (a.shape != p.shape and a.ndim == p.ndim):
                raise ValueError(
                    f"parameter {p.name} needs shape {list(p.shape)} {p.dtype}, got "
                    f"{list(a.shape)} {a.dtype}")
            ptrs.append(_aligned_ptr(a, p.name))
        return ptrs

    def __call__(self, *arrays, stream=0, dependent: bool = True) -> None:
        """Run the host function (asynchronously; read results with ``.numpy()``);
        ``dependent`` as for :meth:`LoadedKernel.launch_ptrs`."""
        self.device.activate()
        self._run_ptrs(self._param_ptrs(arrays), stream, dependent)

    def _run_ptrs(self, ptrs, stream=0, dependent: bool = True) -> None:
        temps = self._temp_ptrs
        for lk, slots in self._plan:
            lk.launch_ptrs([ptrs[i] if kind == "p" else temps[i] for kind, i in slots],
                           stream=stream, dependent=dependent)

    def time_evaluator(self, func_name: str = "main", dev: Device | None = None,
                       number: int = 10, repeat: int = 1, min_repeat_ms: float = 0.0,
                       warmup: int = 1, graph: bool = False) -> Callable[..., ProfileResult]:
        """``f(*arrays) -> ProfileResult``: seconds per run of the whole module (or of kernel
        ``func_name`` when it names one). ``graph=True`` replays the runs from a CUDA graph,
        excluding the host's launch overhead."""
        if dev is not None and dev != self.device:
            raise ValueError(f"the module is loaded on {self.device}, not {dev}")
        if func_name in self.kernels:
            return self.kernels[func_name].time_evaluator(number, repeat, min_repeat_ms, warmup,
                                                          graph)
        # plain launches: each run times the module alone, not overlapped with the next run
        timed = time_evaluator(lambda *ptrs, stream=0: self._run_ptrs(ptrs, stream, False),
                               self.device, number, repeat, min_repeat_ms, warmup, graph)

        def evaluate(*arrays) -> ProfileResult:
            self.device.activate()
            return timed(*self._param_ptrs(arrays))

        return evaluate

    def get_kernel(self, name: str) -> LoadedKernel:
        return self.kernels[name]

    def __repr__(self):
        return f"<LoadedModule {list(self.kernels)} on {self.device}>"


def compile_module(device_module: Module, target: Target | str | None = None, *,
                   constant_params: tuple[str, ...] = (), **options) -> PtxModule:
    """Compile every kernel of a device-IR module for ``target`` (a Target, a target string
    or an sm name; default: the current target; options as for ``compile_kernel``).

    ``constant_params``: parameters of the host function (by name) that hold data no kernel
    writes while the module may run, such as a network's weights. Where the target has
    ``cp.async.bulk.prefetch`` (sm_90a and later) each kernel prefetches the ones it reads
    into L2 before it waits for the kernel before it (``compile_kernel``'s
    ``prefetch_l2``)."""
    from .compile import compile_kernels  # the compiler (LLVM) only where compiling

    target = as_target(target)
    prefetch = (kernel_params_of(device_module, constant_params)
                if constant_params and target.has_l2_prefetch else {})
    kernels = compile_kernels(device_module.kernels(), target, prefetch_l2=prefetch,
                              **options)
    if not kernels:
        raise CompileError(
            "the module has no kernels (functions of level kernel); lower it "
            "to device IR first")
    if constant_params:  # kept for a rebuild for another architecture (for_target)
        options["constant_params"] = tuple(constant_params)
    return PtxModule(device_module, kernels, target.arch, options)


def kernel_params_of(device_module: Module, host_params) -> dict[str, tuple[str, ...]]:
    """For each kernel, the names of its parameters that its launches in the host function
    bind to one of ``host_params`` (host parameter names), in every launch of it."""
    host = device_module.host
    if host is None:
        return {}
    wanted = {id(p) for p in host.params if p.name in set(host_params)}
    kernels = {f.name: f for f in device_module.kernels()}
    found: dict[str, set[str]] = {}

    def visit(s: Stmt) -> None:
        if isinstance(s, Seq):
            for c in s.stmts:
                visit(c)
        elif isinstance(s, Alloc):
            visit(s.body)
        elif isinstance(s, Launch) and s.kernel in kernels:
            names = {p.name for arg, p in zip(s.args, kernels[s.kernel].params)
                     if id(arg) in wanted}
            found[s.kernel] = found[s.kernel] & names if s.kernel in found else names
    visit(host.body)
    return {k: tuple(sorted(v)) for k, v in found.items() if v}
