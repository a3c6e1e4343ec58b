"""The backend's stages: device IR -> LLVM IR -> optimized LLVM IR -> PTX -> cubin.

Every stage's output is kept on the :class:`~.kernel.CompiledKernel` (and written to
``dump_dir`` if given), and a user may start from any stage by passing its text in
``replace`` (``{"ptx": my_ptx}``): the earlier stages are then skipped. The device IR
function is still required, since it gives the kernel's signature and launch extents.

The whole chain runs in the calling process; parallel builds use worker processes that
each call :func:`compile_kernel` (``measure/``).
"""

from __future__ import annotations

import dataclasses
import re
import threading
import time

from ..ir.stmt import PrimFunc
from ..target import Target, as_target
from . import launch as launch_info
from . import nvptx
from .assemble import (
    ASSEMBLERS,
    AssemblerError,
    find_ptxas,
    nvjitlink_available,
    parse_report,
    run_nvjitlink,
    run_ptxas,
)
from .cache import KernelCache, cache_key, default_cache
from .codegen import codegen_kernel
from .kernel import STAGES, CompiledKernel, CompileError, stage_name

_llvm_lock = threading.Lock()
_llvm_ready = False
_target_machines: dict = {}


def llvm_binding():
    """llvmlite's binding layer with the NVPTX target and asm printer registered (once)."""
    global _llvm_ready
    import llvmlite.binding as llvm

    if not _llvm_ready:
        with _llvm_lock:
            if not _llvm_ready:
                llvm.initialize_all_targets()
                llvm.initialize_all_asmprinters()
                _llvm_ready = True
    return llvm


def target_machine(sm: str | Target, features: str = ""):
    """The (cached) LLVM target machine at O3 for an sm name or a target's architecture
    (``"sm_90a"``, ``Target("cuda -arch=sm_80")``)."""
    sm = as_target(sm).arch
    key = (sm, features)
    tm = _target_machines.get(key)
    if tm is None:
        llvm = llvm_binding()
        with _llvm_lock:
            tm = _target_machines.get(key)
            if tm is None:
                target = llvm.Target.from_triple(nvptx.TRIPLE)
                tm = target.create_target_machine(cpu=sm, features=features, opt=3)
                _target_machines[key] = tm
    return tm


def parse_llvm(text: str, what: str):
    """Parse and verify LLVM IR text; errors name ``what`` and show the offending line."""
    llvm = llvm_binding()
    try:
        module = llvm.parse_assembly(text)
        module.verify()
    except RuntimeError as e:
        msg = str(e)
        m = re.search(r":(\d+):\d+:", msg)
        if m:
            lines = text.splitlines()
            n = int(m.group(1))
            if 0 < n <= len(lines):
                msg += f"\n  {n:5d} | {lines[n - 1]}"
        raise CompileError(f"{what}: invalid LLVM IR: {msg}") from e
    return module


_HALF_TYPES = re.compile(r"\b(half|bfloat)\b")


def optimize(module, sm: str, pair_halves: bool = False) -> None:
    """Run LLVM's O3 pipeline (new pass manager, NVPTX-aware) on ``module`` in place.

    ``pair_halves`` turns on the SLP vectorizer, which packs neighbouring 16-bit float
    operations of an unrolled (``vectorize``) loop into ``<2 x half>`` / ``<2 x bfloat>``:
    ``add.f16x2``, ``fma.rn.f16x2`` (and ``bf16x2``) on 32-bit registers loaded and stored
    as ``.b32`` / ``.v2.b32`` / ``.v4.b32``. Off for other kernels: PTX has no paired
    float32 arithmetic before sm_100, and it costs compile time.
    """
    llvm = llvm_binding()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_unrolling = True
    pto.slp_vectorization = pair_halves
    pb = llvm.create_pass_builder(target_machine(sm), pto)
    pb.getModulePassManager().run(module, pb)


def emit_ptx(module, sm: str) -> str:
    """PTX assembly of an (optimized) LLVM module."""
    return target_machine(sm).emit_assembly(module)


_MEMORY_ACCESS = re.compile(r"^\s*(?:@!?%?\w+\s+)?(?:ld|st|atom|red|cp|ldmatrix|stmatrix|wgmma)"
                            r"\.(?!param|async\.bulk\.prefetch\.L2)", re.M)
"""A PTX instruction that reads or writes memory (predicated or not); parameter loads and
L2 prefetches, which see no data, excepted."""


def check_grid_dependency_wait(ptx: str, what: str) -> None:
    """A kernel that waits for its grid dependencies (``griddepcontrol.wait``, so that it
    may start before the kernel before it finishes) must touch no memory before the wait;
    raise :class:`CompileError` if the PTX does (nothing may be read before it is written).
    Only parameter loads and L2 prefetches (of weights, ``prefetch_l2``) may come first."""
    wait = ptx.find(launch_info.GRID_DEPENDENCY_WAIT)
    if wait < 0:
        return
    entry = ptx.rfind(".entry", 0, wait)
    early = _MEMORY_ACCESS.search(ptx, entry, wait)
    if early is not None:
        line = ptx[early.start():ptx.find("\n", early.start())].strip()
        raise CompileError(f"{what}: the PTX accesses memory before griddepcontrol.wait "
                           f"({line!r}); the kernel could read its inputs before they are "
                           "written under dependent launch")


def choose_assembler(assembler: str) -> str | None:
    """``"auto"`` -> ptxas if found, else nvJitLink if loadable, else None (the driver's JIT
    assembles the PTX at load time). Named assemblers are returned as they are."""
    if assembler == "auto":
        if find_ptxas():
            return "ptxas"
        if nvjitlink_available():
            return "nvjitlink"
        return None
    if assembler == "driver":
        return None
    if assembler not in ASSEMBLERS:
        raise CompileError(
            f"unknown assembler {assembler!r}; use 'auto', 'driver' or one of {ASSEMBLERS}")
    return assembler


def _print_device_ir(func: PrimFunc) -> str:
    from ..ir.printer import print_func

    return print_func(func)


def compile_kernel(
    kernel_func: PrimFunc,
    target: Target | str | None = None,
    *,
    replace: dict | None = None,
    stop_after: str = "cubin",
    assembler: str = "auto",
    ptxas_flags: tuple[str, ...] = (),
    dump_dir: str | None = None,
    cache: KernelCache | bool | None = True,
    prefetch_l2: tuple[str, ...] = (),
) -> CompiledKernel:
    """Compile one device-IR kernel for ``target``.

    Args:
        kernel_func: a ``PrimFunc`` of level ``Level.KERNEL``.
        target: a :class:`~ptxforge.target.Target`, a target string
            (``"cuda -arch=sm_90a"``) or an sm name (``"sm_80"``); default: the current
            target. Its architecture sets LLVM's CPU (hence the PTX ``.target`` and
            ``.version``) and the assembler's ``-arch``; its limits are checked.
        replace: at most one ``{stage: text}`` to start from instead of generating it
            (``"llvm_ir"``, ``"llvm_opt"``, ``"ptx"`` as text, ``"cubin"`` as bytes).
        stop_after: the last stage to run (``"ptx"`` skips assembling).
        assembler: ``"auto"``, ``"ptxas"``, ``"nvjitlink"`` or ``"driver"`` (keep the PTX and
            let the driver assemble it at load).
        ptxas_flags: extra flags for the assembler (``("-maxrregcount=64",)``).
        dump_dir: write every stage's output there.
        cache: True for the process-wide cache, a :class:`KernelCache`, or False/None.
        prefetch_l2: read-only parameters (by name) that no kernel writes while this one
            may run (a network's weights): each block prefetches its share into L2 before
            the kernel waits for its grid dependencies (sm_90 and later; codegen).
    """
    replace = dict(replace or {})
    if len(replace) > 1:
        raise CompileError(f"replace one stage at most; got {sorted(replace)}")
    start = stage_name(next(iter(replace))) if replace else "device_ir"
    if replace and start == "device_ir":
        raise CompileError("replace the device IR by passing another kernel function")
    stop = stage_name(stop_after)
    if STAGES.index(stop) < STAGES.index(start):
        raise CompileError(f"stop_after={stop} comes before the replaced stage {start}")
    replacement = replace.get(next(iter(replace))) if replace else None
    asm = choose_assembler(assembler) if stop == "cubin" else None

    target = as_target(target)
    device_ir = _print_device_ir(kernel_func)
    store = default_cache() if cache is True else (
        cache if isinstance(cache, KernelCache) else None)
    key = None
    if store is not None:
        limits = (target.max_threads_per_block, target.max_shared_memory_per_block,
                  target.max_shared_memory_per_block_optin)
        key = cache_key(device_ir, target.arch, limits, start, replacement, stop, asm,
                        tuple(ptxas_flags), tuple(prefetch_l2))
        hit = store.get(key)
        if hit is not None:
            hit = dataclasses.replace(hit, cache_hit=True, stage_seconds={})
            if dump_dir:
                hit.dump(dump_dir)
            return hit

    seconds: dict = {}
    t0 = time.perf_counter()
    llvm_text, launch = codegen_kernel(kernel_func, target, tuple(prefetch_l2))
    seconds["llvm_ir"] = time.perf_counter() - t0
    kernel = CompiledKernel(kernel_func.name, target.arch, launch, {"device_ir": device_ir},
                            started_from=start, stage_seconds=seconds)
    what = f"kernel {kernel_func.name}"
    try:
        _run_stages(kernel, start, stop, llvm_text, replacement, asm, tuple(ptxas_flags), what)
    finally:
        if dump_dir:
            kernel.dump(dump_dir)
    if store is not None:
        store.put(key, kernel)
    return kernel


def _run_stages(kernel: CompiledKernel, start: str, stop: str, llvm_text: str,
                replacement, asm: str | None, flags: tuple, what: str) -> None:
    seconds = kernel.stage_seconds
    sm = kernel.target
    order = STAGES.index
    if start == "cubin":
        if not isinstance(replacement, (bytes, bytearray)):
            raise CompileError(f"{what}: a replacement cubin must be bytes")
        kernel.cubin = bytes(replacement)
        return
    if start in ("llvm_ir", "llvm_opt", "ptx") and not isinstance(replacement, str):
        raise CompileError(f"{what}: a replacement {start} must be text")

    module = None
    if order(start) <= order("llvm_ir"):
        text = llvm_text if start == "device_ir" else replacement
        kernel.sources["llvm_ir"] = text
        t0 = time.perf_counter()
        module = parse_llvm(text, what)
        seconds["parse"] = time.perf_counter() - t0
        if stop == "llvm_ir":
            return
    if order(start) <= order("llvm_opt"):
        if module is None:
            kernel.sources["llvm_opt"] = replacement
            t0 = time.perf_counter()
            module = parse_llvm(replacement, what)
            seconds["parse"] = time.perf_counter() - t0
        else:
            t0 = time.perf_counter()
            optimize(module, sm, pair_halves=bool(_HALF_TYPES.search(text)))
            seconds["llvm_opt"] = time.perf_counter() - t0
            kernel.sources["llvm_opt"] = str(module)
        if stop == "llvm_opt":
            return
    if order(start) <= order("ptx"):
        if module is None:
            ptx = replacement
        else:
            t0 = time.perf_counter()
            ptx = emit_ptx(module, sm)
            seconds["ptx"] = time.perf_counter() - t0
        if not re.search(rf"\.entry\s+{re.escape(kernel.symbol)}\s*\(", ptx):
            raise CompileError(
                f"{what}: the PTX has no entry named {kernel.symbol}; a replacement must "
                "keep the kernel's symbol")
        check_grid_dependency_wait(ptx, what)
        if kernel.launch.dependent_launch and module is None and (
                launch_info.GRID_DEPENDENCY_WAIT not in ptx):
            # a replacement PTX without the wait must be launched after the kernel before it
            kernel.launch = dataclasses.replace(kernel.launch, dependent_launch=False)
        kernel.sources["ptx"] = ptx
        if stop == "ptx" or asm is None:
            return
    assemble(kernel, asm, flags)


def assemble(kernel: CompiledKernel, assembler: str = "auto", flags: tuple = ()) -> None:
    """Assemble ``kernel``'s PTX into its cubin in place and parse the resource report."""
    asm = choose_assembler(assembler)
    if asm is None:
        raise CompileError(
            "no assembler: ptxas was not found and nvJitLink cannot be loaded; load the "
            "kernel from PTX (the driver assembles it) or install the CUDA toolkit")
    ptx = kernel.get_source("ptx")
    t0 = time.perf_counter()
    try:
        if asm == "ptxas":
            cubin, log = run_ptxas(ptx, kernel.target, flags)
        else:
            cubin, log = run_nvjitlink(ptx, kernel.target, flags)
    except AssemblerError as e:
        raise CompileError(f"kernel {kernel.name}: {e}") from e
    kernel.stage_seconds["cubin"] = time.perf_counter() - t0
    kernel.cubin = cubin
    kernel.assembler = asm
    kernel.assembler_log = log
    kernel.resources = parse_report(log, kernel.symbol, asm)
