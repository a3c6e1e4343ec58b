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

from .. import stages
from ..ir.stmt import PrimFunc
from ..passes import gc_pause
from ..target import Target, as_target
from . import launch as launch_info
from . import nvptx
from .assemble import (
    ASSEMBLERS,
    AssemblerError,
    assembly_cache,
    find_ptxas,
    nvjitlink_available,
    parse_report,
    run_nvjitlink,
    run_nvjitlink_many,
    run_ptxas,
    run_ptxas_many,
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

    The loop vectorizer stays: it made no difference to the 229 kernels sampled from four
    networks' sketches (``bench/llvm_opt_cost.py --wide``), but it does pair the 16-bit
    and 8-bit elements of a loop each thread runs serially (``tests/test_buildspeed.py``),
    and it costs about 3% of this pipeline.
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
    job = _Job(kernel_func, dict(replace or {}), tuple(prefetch_l2))
    return _compile([job], target, stop_after, assembler, tuple(ptxas_flags), dump_dir,
                    cache)[0]


def compile_kernels(
    kernel_funcs,
    target: Target | str | None = None,
    *,
    stop_after: str = "cubin",
    assembler: str = "auto",
    ptxas_flags: tuple[str, ...] = (),
    dump_dir: str | None = None,
    cache: KernelCache | bool | None = True,
    prefetch_l2: dict | None = None,
    keep_llvm_opt: bool = True,
) -> dict[str, CompiledKernel]:
    """Compile the kernels of one module for ``target``: ``{name: CompiledKernel}``.

    Each kernel goes through its own LLVM stages (and cache entry), as with
    :func:`compile_kernel`; with ptxas, the kernels not found in the cache are assembled by
    one ptxas process (its start-up is a good part of a small kernel's assembly), into one
    cubin that every one of them keeps and loads by its symbol. Kernels whose PTX define the
    same top-level name are assembled one by one. ``prefetch_l2``: ``{kernel name: names}``
    as :func:`compile_kernel`'s. ``keep_llvm_opt=False`` leaves the optimized LLVM module
    out of each kernel's ``sources`` (printing it costs a few ms a kernel: a builder that
    keeps only PTX and cubins need not pay it; kept anyway with ``dump_dir`` or
    ``stop_after="llvm_opt"``). The other arguments as :func:`compile_kernel`'s.
    """
    prefetch = prefetch_l2 or {}
    jobs = [_Job(f, {}, tuple(prefetch.get(f.name, ()))) for f in kernel_funcs]
    out = _compile(jobs, target, stop_after, assembler, tuple(ptxas_flags), dump_dir, cache,
                   keep_llvm_opt)
    return {k.name: k for k in out}


@dataclasses.dataclass
class _Job:
    """One kernel to compile, and its state between the stages."""

    func: PrimFunc
    replace: dict
    prefetch_l2: tuple
    kernel: CompiledKernel | None = None
    key: str | None = None
    llvm_key: str | None = None


def _compile(jobs: list, target, stop_after: str, assembler: str, flags: tuple,
             dump_dir: str | None, cache, keep_llvm_opt: bool = True) -> list[CompiledKernel]:
    with gc_pause.paused():  # the LLVM IR text is built from many short-lived objects
        return _compile_jobs(jobs, target, stop_after, assembler, flags, dump_dir, cache,
                             keep_llvm_opt)


def _compile_jobs(jobs: list, target, stop_after: str, assembler: str, flags: tuple,
                  dump_dir: str | None, cache, keep_llvm_opt: bool) -> list[CompiledKernel]:
    stop = stage_name(stop_after)
    keep_llvm_opt = keep_llvm_opt or bool(dump_dir) or stop == "llvm_opt"
    # a kernel kept without its optimized module is its own cache entry
    partial = () if keep_llvm_opt else (("sources", "no llvm_opt"),)
    asm = choose_assembler(assembler) if stop == "cubin" else None
    target = as_target(target)
    store = default_cache() if cache is True else (
        cache if isinstance(cache, KernelCache) else None)
    limits = (target.max_threads_per_block, target.max_shared_memory_per_block,
              target.max_shared_memory_per_block_optin)
    to_assemble = []
    for job in jobs:
        replace = job.replace
        if len(replace) > 1:
            raise CompileError(f"replace one stage at most; got {sorted(replace)}")
        start = stage_name(next(iter(replace))) if replace else "device_ir"
        if replace and start == "device_ir":
            raise CompileError("replace the device IR by passing another kernel function")
        if STAGES.index(stop) < STAGES.index(start):
            raise CompileError(f"stop_after={stop} comes before the replaced stage {start}")
        replacement = replace.get(next(iter(replace))) if replace else None
        device_ir = _print_device_ir(job.func)
        if store is not None:
            job.key = cache_key(device_ir, target.arch, limits, start, replacement, stop, asm,
                                flags, job.prefetch_l2, *partial)
            hit = store.get(job.key)
            if hit is not None:
                job.kernel = dataclasses.replace(hit, cache_hit=True, stage_seconds={})
                if dump_dir:
                    job.kernel.dump(dump_dir)
                continue
        seconds: dict = {}
        t0 = time.perf_counter()
        with stages.stage("llvm_ir"):
            llvm_text, launch = codegen_kernel(job.func, target, job.prefetch_l2)
        seconds["llvm_ir"] = time.perf_counter() - t0
        if store is not None and start == "device_ir" and not dump_dir:
            job.llvm_key = cache_key(llvm_text, "llvm_ir", target.arch, stop, asm, flags,
                                     *partial)
            hit = _same_llvm.get(job.llvm_key)
            if hit is not None:
                # another device IR, the same LLVM IR: the same PTX and cubin, with this
                # kernel's own launch (grid extents are not in the LLVM IR)
                job.kernel = dataclasses.replace(
                    hit, launch=launch, sources={**hit.sources, "device_ir": device_ir},
                    cache_hit=True, stage_seconds=seconds)
                _finish(job, store, None)
                continue
        kernel = CompiledKernel(job.func.name, target.arch, launch, {"device_ir": device_ir},
                                started_from=start, stage_seconds=seconds)
        job.kernel = kernel
        what = f"kernel {job.func.name}"
        later = asm is not None and start != "cubin"  # assembled below, with the others
        try:
            _run_stages(kernel, start, stop, llvm_text, replacement, asm, flags, what,
                        assemble_now=not later, keep_llvm_opt=keep_llvm_opt)
        except BaseException:
            if dump_dir:
                kernel.dump(dump_dir)
            raise
        if later:
            to_assemble.append(job)
        else:
            _finish(job, store, dump_dir)
    try:
        if to_assemble:
            # with a kernel cache, an assembler run of the same PTX is reused as well
            assemble_many([j.kernel for j in to_assemble], asm, flags,
                          reuse=store is not None)
    finally:
        if dump_dir:
            for j in to_assemble:
                j.kernel.dump(dump_dir)
    for j in to_assemble:
        _finish(j, store, None)
    return [j.kernel for j in jobs]


_same_llvm = KernelCache(max_entries=64)
"""Kernels compiled in this process by their LLVM IR (and the options after it): two
device IRs that differ (a loop's name, an index spelled otherwise) may generate the same
LLVM IR, whose optimization, PTX and assembly are then done once. Only with a kernel cache
(``cache`` not False), in memory."""


def forget_compiled() -> None:
    """Empty this process's tables of kernels by LLVM IR and of assembler runs by PTX, so
    that the same kernels are compiled again (benchmarks of the compile cost)."""
    _same_llvm.clear()
    assembly_cache().clear()


def _finish(job: _Job, store: KernelCache | None, dump_dir: str | None) -> None:
    if dump_dir:
        job.kernel.dump(dump_dir)
    if store is not None:
        store.put(job.key, job.kernel)
        if job.llvm_key is not None and not job.kernel.cache_hit:
            _same_llvm.put(job.llvm_key, job.kernel)


def _run_stages(kernel: CompiledKernel, start: str, stop: str, llvm_text: str,
                replacement, asm: str | None, flags: tuple, what: str,
                assemble_now: bool = True, keep_llvm_opt: bool = True) -> None:
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
        with stages.stage("llvm_ir"):
            module = parse_llvm(text, what)
        seconds["parse"] = time.perf_counter() - t0
        if stop == "llvm_ir":
            return
    if order(start) <= order("llvm_opt"):
        if module is None:
            kernel.sources["llvm_opt"] = replacement
            t0 = time.perf_counter()
            with stages.stage("llvm_ir"):
                module = parse_llvm(replacement, what)
            seconds["parse"] = time.perf_counter() - t0
        else:
            t0 = time.perf_counter()
            with stages.stage("opt"):
                optimize(module, sm, pair_halves=bool(_HALF_TYPES.search(text)))
            seconds["llvm_opt"] = time.perf_counter() - t0
            if keep_llvm_opt:
                kernel.sources["llvm_opt"] = str(module)
        if stop == "llvm_opt":
            return
    if order(start) <= order("ptx"):
        if module is None:
            ptx = replacement
        else:
            t0 = time.perf_counter()
            with stages.stage("ptx"):
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
    if assemble_now:
        assemble(kernel, asm, flags)


_TOP_LEVEL_NAME = re.compile(
    r"^(?:\.visible\s+|\.weak\s+)?(?:\.entry|\.func|\.global|\.shared|\.const)\b"
    r"[^\n(;]*?([A-Za-z_$%][\w$]*)\s*(?:\[[^\]]*\]\s*)?[(;={]", re.M)
"""A definition at the top level of a PTX text (``.extern`` declarations excepted) and its
name."""


def _defined_names(ptx: str) -> list[str]:
    return [m.group(1) for m in _TOP_LEVEL_NAME.finditer(ptx)]


def _run_assembler(asm: str, ptxs: list[str], sm: str, flags: tuple,
                   reuse: bool) -> tuple[bytes, str]:
    """(cubin, report) of one assembler run over ``ptxs``; with ``reuse``, the output of
    an earlier run of the same input in this process when there was one."""
    run = (run_ptxas_many if asm == "ptxas" else run_nvjitlink_many) if len(ptxs) > 1 else (
        run_ptxas if asm == "ptxas" else run_nvjitlink)
    args = (ptxs if len(ptxs) > 1 else ptxs[0], sm, flags)
    if not reuse:
        return run(*args)
    cache = assembly_cache()
    key = cache.key(asm, sm, flags, ptxs)
    out = cache.get(key)
    if out is None:
        out = run(*args)
        cache.put(key, out)
    return out


def assemble_many(kernels: list, assembler: str = "auto", flags: tuple = (),
                  reuse: bool = False) -> None:
    """Assemble the PTX of every kernel (of one target) into its cubin in place: with
    ptxas, in one process for all whose PTX define distinct top-level names (each keeps the
    cubin holding them all), with nvJitLink in one link of them all; one by one
    otherwise. ``reuse``: take the output of an earlier run of the same PTX in this process
    (:class:`~.assemble.AssemblyCache`) instead of running the assembler again."""
    asm = choose_assembler(assembler)
    together = []
    if asm in ASSEMBLERS and len(kernels) > 1 and len({k.target for k in kernels}) == 1:
        seen: set = set()
        for k in kernels:
            names = set(_defined_names(k.get_source("ptx")))
            if names & seen:
                together = []
                break
            seen |= names
            together.append(k)
    if len(together) < 2:
        for k in kernels:
            assemble(k, asm, flags, reuse=reuse)
        return
    t0 = time.perf_counter()
    try:
        with stages.stage("ptxas"):
            cubin, log = _run_assembler(asm, [k.get_source("ptx") for k in together],
                                        together[0].target, flags, reuse)
    except AssemblerError as e:
        names = ", ".join(k.name for k in together)
        raise CompileError(f"kernels {names}: {e}") from e
    share = (time.perf_counter() - t0) / len(together)  # the process's time, split evenly
    for k in together:
        k.stage_seconds["cubin"] = share
        k.cubin = cubin
        k.assembler = asm
        k.assembler_log = log
        k.resources = parse_report(log, k.symbol, asm)


def assemble(kernel: CompiledKernel, assembler: str = "auto", flags: tuple = (),
             reuse: bool = False) -> None:
    """Assemble ``kernel``'s PTX into its cubin in place and parse the resource report
    (``reuse``: as :func:`assemble_many`'s)."""
    asm = choose_assembler(assembler)
    if asm is None:
        raise CompileError(
            "no assembler: ptxas was not found and nvJitLink cannot be loaded; load the "
            "kernel from PTX (the driver assembles it) or install the CUDA toolkit")
    ptx = kernel.get_source("ptx")
    t0 = time.perf_counter()
    try:
        with stages.stage("ptxas"):
            cubin, log = _run_assembler(asm, [ptx], kernel.target, flags, reuse)
    except AssemblerError as e:
        raise CompileError(f"kernel {kernel.name}: {e}") from e
    kernel.stage_seconds["cubin"] = time.perf_counter() - t0
    kernel.cubin = cubin
    kernel.assembler = asm
    kernel.assembler_log = log
    kernel.resources = parse_report(log, kernel.symbol, asm)
