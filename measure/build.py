"""Building candidates: parse the task, apply the schedule, lower, compile to cubin.

:func:`build_candidate` is the whole job for one :class:`MeasureInput`; it runs in a builder
worker (or in the calling process) and never raises: every failure becomes a
:class:`BuildResult` with an error code. :class:`LocalBuilder` runs it in a pool of forked
processes, one candidate per worker at a time, so a crash or a hang costs one result.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import shutil
import signal
import tempfile
import threading
import time
import traceback
import weakref
from dataclasses import dataclass

from ..ir.expr import IRError
from ..stages import collect, stage
from ..target import Target, TargetError, as_target
from .artifact import BuildArtifact
from .measure import Builder
from .pool import PoolStats, WorkerPool
from .result import BuildResult, MeasureErrorNo, MeasureInput

COMPILE_TO = ("cubin", "ptx", "ir")
BUILD_ASSEMBLERS = ("ptxas", "nvjitlink")


def build_assembler(choice: str) -> str | None:
    """The assembler ``choice`` when it is here (ptxas found, nvJitLink loadable), else
    None."""
    from ..backend_ptx.assemble import find_ptxas, nvjitlink_available

    if choice == "nvjitlink":
        return "nvjitlink" if nvjitlink_available() else None
    return "ptxas" if find_ptxas() is not None else None


@dataclass(frozen=True)
class BuildOptions:
    """How far and how a builder compiles.

    ``compile_to``: ``"cubin"`` (LLVM, PTX and ptxas: what a GPU runner needs),
    ``"ptx"`` (stop before the assembler) or ``"ir"`` (lower only: enough for the
    simulator runner). ``verify`` runs the IR verifier after every pass (slower; off by
    default in tuning, where each pass is already tested). ``keep_sources`` keeps the LLVM
    and PTX text in the artifact. ``kernel_cache_dir``: a folder of compiled kernels
    shared by every process that builds with these options; a kernel some candidate
    already compiled (candidates often share one, e.g. the epilogue after a split
    reduction) is loaded from it instead of compiled again. ``target_sm``: what the kernels
    are compiled for, an sm name (``"sm_90a"``) or a target string
    (``"cuda -arch=sm_80"``); None (the default) compiles for each candidate's task
    target (``"cuda"``: the present GPU, else sm_90). The target's limits are checked.
    ``assembler`` (for ``compile_to="cubin"``): ``"ptxas"`` (one process per candidate) or
    ``"nvjitlink"`` (in the builder's process, no process start; the same flags, through
    ``-Xptxas``). nvJitLink compiles PTX as relocatable code (what ``ptxas -c`` does), which
    allocates registers differently (a wgmma GEMM kernel: 92 registers against ptxas's 64,
    a conv kernel 78 against 40), so the kernels it makes are not those ptxas makes and
    ptxas stays the default.
    """

    target_sm: str | None = None
    compile_to: str = "cubin"
    verify: bool = False
    ptxas_flags: tuple = ()
    keep_sources: bool = False
    kernel_cache_dir: str | None = None
    assembler: str = "ptxas"

    def __post_init__(self):
        if self.compile_to not in COMPILE_TO:
            raise ValueError(f"compile_to must be one of {COMPILE_TO}, got {self.compile_to!r}")
        if self.assembler not in BUILD_ASSEMBLERS:
            raise ValueError(f"assembler must be one of {BUILD_ASSEMBLERS}, got "
                             f"{self.assembler!r}")
        if self.target_sm is not None:
            as_target(self.target_sm)  # a target this project cannot compile for fails here

    def target_for(self, task_target: str) -> Target:
        """The target a candidate of a task for ``task_target`` is built for."""
        return as_target(self.target_sm or task_target)


_kernel_caches: dict = {}


def _cache(directory: str | None = None):
    """This process's kernel cache for builds (a few in memory; backed by ``directory``
    when given). Passing it also lets ``compile_kernels`` reuse, within the process, a
    kernel of the same LLVM IR and an assembler run of the same PTX (of another device
    IR)."""
    cache = _kernel_caches.get(directory)
    if cache is None:
        from ..backend_ptx.cache import KernelCache

        cache = _kernel_caches[directory] = KernelCache(directory=directory, max_entries=16)
    return cache


def _fail(code: MeasureErrorNo, msg: str, t0: float, stages: dict,
          pipeline_text: str = "") -> BuildResult:
    return BuildResult(None, int(code), msg, time.perf_counter() - t0, dict(stages),
                       pipeline_text)


def build_candidate(inp: MeasureInput, options: BuildOptions = BuildOptions()) -> BuildResult:
    """Build one candidate for its task's target (or ``options.target_sm``); every failure
    comes back as an error code and message."""
    from ..passes import PassContext, gc_pause

    t0 = time.perf_counter()
    stages: dict = {}
    ctx = PassContext(verify=options.verify)
    try:
        target = options.target_for(inp.task.target)
    except TargetError as e:
        return _fail(MeasureErrorNo.COMPILE_DEVICE, str(e), t0, stages)
    # the compiler's own stage markers (ptxforge.stages) fill ``collected``; the builder's
    # coarse timings below fill in the stages no marker reported
    # one collector pause for the whole candidate (schedule to cubin), not one per stage:
    # nearly everything a build allocates is freed by reference counting
    with target, collect() as collected, gc_pause.paused():  # lowering checks the limits
        res = _build(inp, options, target, ctx, t0, stages)
    if not collected:
        return res
    times = dict(collected)
    for name, sec in res.stage_seconds.items():
        times.setdefault(name, sec)
    if res.artifact is not None:
        res.artifact.stage_seconds = dict(times)
    return dataclasses.replace(res, stage_seconds=times)


def _build(inp: MeasureInput, options: BuildOptions, target: Target, ctx, t0: float,
           stages: dict) -> BuildResult:
    from ..ir.simplify_cache import simplify_cache
    from ..passes import SchedulePipeline
    from ..passes.lower import lowering_pipeline

    made = ""  # the text of the pipeline made from the input's plan, for the record
    pipeline = None
    try:
        with contextlib.ExitStack() as scope:
            t = time.perf_counter()
            module = inp.task.module()
            if inp.plan is not None and not inp.scheduled_text:
                # the one-way path: the schedule is made here, from the search state, once
                # one simplifier cache for the candidate's schedule and its lowering (which
                # then shares it): compute_at's regions, the tensor-core te schedules and the
                # lowering passes ask the same index questions again and again; it is the
                # candidate's own, so nothing is carried from one candidate to the next
                scope.enter_context(simplify_cache())
                with ctx, stage("schedule"):
                    scheduled, pipeline = inp.plan.schedule(module, ctx)
                stages["schedule"] = time.perf_counter() - t
                made = pipeline.text
            elif inp.scheduled_text:
                # the tuner applied the schedule already: its result, not a second application
                from ..ir.parser import parse_module

                scheduled = parse_module(inp.scheduled_text)
                stages["parse"] = time.perf_counter() - t
                if options.verify:
                    from ..ir.verify import verify

                    verify(scheduled)
            else:
                text = inp.pipeline_text
                pipeline = SchedulePipeline.parse(text) if text.strip() else SchedulePipeline()
                stages["parse"] = time.perf_counter() - t
                t = time.perf_counter()
                scheduled = pipeline(module, ctx)
                stages["apply"] = time.perf_counter() - t
            t = time.perf_counter()
            step = _attention_step(inp, pipeline)
            if step is not None:
                # the fused attention kernel is device IR built whole, not lowered from stages
                device = _attention_device(scheduled, step, target, options)
            else:
                device = lowering_pipeline()(scheduled, ctx)
            stages["lower"] = time.perf_counter() - t
    except IRError as e:
        return _fail(MeasureErrorNo.INSTANTIATION_ERROR, f"{type(e).__name__}: {e}", t0, stages,
                     made)
    except Exception as e:  # not a schedule problem: a defect, reported with its traceback
        return _fail(MeasureErrorNo.UNKNOWN_ERROR,
                     f"{type(e).__name__} while applying or lowering the schedule: {e}\n"
                     f"{traceback.format_exc()}", t0, stages, made)

    try:
        outputs = check_host(device)
    except ValueError as e:
        return _fail(MeasureErrorNo.COMPILE_HOST, str(e), t0, stages, made)

    from .kernel_stats import analyze_module

    t = time.perf_counter()
    stats = analyze_module(device)
    stages["analyze"] = time.perf_counter() - t
    kernels: dict = {}
    if options.compile_to != "ir":
        result = _compile(device, options, target, kernels, stages)
        if result is not None:
            code, msg = result
            return _fail(code, msg, t0, stages, made)
    artifact = BuildArtifact(device, kernels, stats, outputs, target.arch, dict(stages))
    return BuildResult(artifact, int(MeasureErrorNo.NO_ERROR), "", time.perf_counter() - t0,
                       dict(stages), made)


def _attention_step(inp: MeasureInput, pipeline):
    """The ``fused_attention`` step of the candidate's schedule, or None: from the
    pipeline made or parsed here, else (a schedule applied by the tuner) from its text."""
    from ..ops.schedules.attention.schedule_pass import fused_attention_step

    if pipeline is None:
        if "fused_attention(" not in inp.pipeline_text:
            return None
        from ..passes import SchedulePipeline

        pipeline = SchedulePipeline.parse(inp.pipeline_text)
    return fused_attention_step(pipeline)


def _attention_device(scheduled, step, target: Target, options: BuildOptions):
    """The device IR of the fused attention kernel for the candidate's module (which the
    ``fused_attention`` step left as it was); an ``AttentionError`` (an ``IRError``) where
    the target cannot run the configuration."""
    from ..ops.schedules.attention.schedule_pass import fused_attention_device_module

    with stage("lower"):
        device = fused_attention_device_module(scheduled, step, target)
    if options.verify:
        from ..ir.verify import verify

        verify(device)
    return device


_STAGE_NAMES = {"llvm_ir": "llvm_ir", "parse": "llvm_parse", "llvm_opt": "llvm_opt",
                "ptx": "ptx", "cubin": "ptxas"}


def _compile(device, options: BuildOptions, target: Target, kernels: dict, stages: dict):
    """Compile every kernel into ``kernels`` (one assembler run for the candidate's
    kernels); (error code, message) on failure."""
    from ..backend_ptx.compile import compile_kernels

    stop = "cubin" if options.compile_to == "cubin" else "ptx"
    asm = build_assembler(options.assembler) if stop == "cubin" else "auto"
    if asm is None:
        named = {"ptxas": "ptxas was not found", "nvjitlink": "nvJitLink cannot be loaded "
                 "(cuda.bindings.nvjitlink and libnvJitLink)"}[options.assembler]
        return (MeasureErrorNo.COMPILE_DEVICE,
                f"{named}, so kernels cannot be assembled into cubins (the GPU "
                "runner loads cubins only): install the CUDA toolkit, put its bin folder on "
                "PATH or set PTXFORGE_PTXAS; without a GPU use the simulator runner with "
                "LocalBuilder(compile_to='ir')")
    funcs = list(device.kernels())
    try:
        # the optimized LLVM module is printed only for a builder that keeps the sources
        compiled = compile_kernels(funcs, target, stop_after=stop, assembler=asm,
                                   ptxas_flags=tuple(options.ptxas_flags),
                                   cache=_cache(options.kernel_cache_dir),
                                   keep_llvm_opt=options.keep_sources)
    except Exception as e:  # codegen, LLVM and the assembler all fail as device compile
        return (MeasureErrorNo.COMPILE_DEVICE, f"{type(e).__name__}: {e}")
    for k in funcs:
        ck = compiled[k.name]
        for name, sec in ck.stage_seconds.items():
            key = _STAGE_NAMES.get(name, name)
            stages[key] = stages.get(key, 0.0) + sec
        if ck.resources is not None:
            threads = ck.launch.threads_per_block
            regs = ck.resources.registers
            limit = target.registers_per_block
            if regs * threads > limit:
                return (MeasureErrorNo.INSTANTIATION_ERROR,
                        f"kernel {k.name} needs {regs} registers x {threads} threads = "
                        f"{regs * threads} registers per block; {target.arch} has "
                        f"{limit}, so the launch would fail")
        if not options.keep_sources:
            keep = {} if ck.cubin is not None else {"ptx": ck.sources["ptx"]}
            ck = _with_sources(ck, keep)
        kernels[k.name] = ck
    return None


def _with_sources(ck, sources: dict):
    return dataclasses.replace(ck, sources=dict(sources), assembler_log="")


def check_host(device) -> tuple:
    """Check the host function (allocations and launches of known kernels with matching
    arguments); return the indices of its parameters that kernels write."""
    from ..ir.stmt import Alloc, Launch, Seq, Store, walk

    host = device.host
    if host is None:
        raise ValueError("the lowered module has no host function")
    index = {b: i for i, b in enumerate(host.params)}
    written: set = set()

    def visit(s):
        if isinstance(s, Seq):
            for c in s.stmts:
                visit(c)
        elif isinstance(s, Alloc):
            visit(s.body)
        elif isinstance(s, Launch):
            if s.kernel not in device.functions:
                raise ValueError(f"the host function launches {s.kernel}, which is not a "
                                 "kernel of the module")
            k = device.functions[s.kernel]
            if len(s.args) != len(k.params):
                raise ValueError(f"launch of {s.kernel} passes {len(s.args)} buffers for "
                                 f"{len(k.params)} parameters")
            stored = {st.buffer for st in walk(k.body) if isinstance(st, Store)}
            for arg, p in zip(s.args, k.params):
                if p in stored and arg in index:
                    written.add(index[arg])
        else:
            raise ValueError(f"the host function may hold only allocations and launches, "
                             f"not {type(s).__name__}")

    visit(host.body)
    visit = None  # it calls itself: a cycle left to the collector otherwise
    return tuple(sorted(written))


def default_parallelism() -> int:
    """The CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


_TEMP_FOLDERS: set = set()  # folders this process's builders made and still own


def _remove_on_exit(folder: str) -> weakref.finalize:
    """Remove ``folder`` when the builder owning it goes, at exit, and on SIGTERM."""
    _TEMP_FOLDERS.add(folder)
    return weakref.finalize(_TEMP_FOLDERS, _remove, folder)


def _remove(folder: str) -> None:
    _TEMP_FOLDERS.discard(folder)
    shutil.rmtree(folder, True)


_SIGTERM_PID: int | None = None


def _on_sigterm(signum, frame) -> None:
    if os.getpid() == _SIGTERM_PID:  # not in a forked worker: its parent cleans up
        for folder in list(_TEMP_FOLDERS):
            shutil.rmtree(folder, True)
    # then die of the signal as if nothing had caught it
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def remove_temp_folders_on_sigterm() -> None:
    """On SIGTERM, remove the builders' temporary folders before the process dies of the
    signal (installed when nothing else handles SIGTERM, from the main thread). Ctrl-C
    needs nothing: ``KeyboardInterrupt`` unwinds and the exit handlers remove them."""
    global _SIGTERM_PID
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        _SIGTERM_PID = os.getpid()
        signal.signal(signal.SIGTERM, _on_sigterm)


BUILDER_NICENESS = 10
"""How much lower the builder workers' CPU priority is than the tuner's (``os.nice``). The
tuner's search and the GPU runner's worker are on every round's critical path, the builds
are throughput: with as many builders as cores, a search at the builders' priority ran at a
third of its speed (3.2 -> 10.6 s for ResNet-18 on the 16-core H100 machine with
``--search-ahead 2``; on two cores, 1.21 s alone, 3.44 s beside two busy processes, 1.23 s
beside them at niceness 10: ``bench/search_contention.py``). Idle cores still go to the
builders."""


def _use_scratch(folder: str, niceness: int = 0) -> None:
    # a worker's temporary files (the assembler's) go to a folder the parent removes, so a
    # worker killed mid-build leaves nothing behind
    tempfile.tempdir = folder
    # what the worker inherits (tasks, modules, the tuner's tables) lives as long as it
    # does: the collector's full passes between builds skip it (about 40 ms a pass over a
    # ResNet-50 tuner's objects on the development CPU) and leave its pages shared with
    # the parent instead of copying them as they mark objects
    gc.freeze()
    if niceness > 0:
        try:
            os.nice(niceness)
        except (AttributeError, OSError):  # no nice here: builders keep the tuner's priority
            pass


class LocalBuilder(Builder):
    """Builds candidates in ``n_parallel`` forked worker processes (default: one per CPU;
    0 builds in the calling process, without timeouts). A build that takes longer than
    ``timeout`` seconds is killed and recorded as ``BUILD_TIMEOUT``; a worker that dies
    costs its candidate only.

    ``target_sm``, ``compile_to``, ``verify``, ``ptxas_flags``, ``assembler``: see
    :class:`BuildOptions`.
    ``niceness``: how much lower the workers' CPU priority is than this process's (0, the
    default, keeps it; the network tuner's GPU path passes :data:`BUILDER_NICENESS`, so its
    search and runner get the cores they need first). Not the default: a build's
    ``timeout`` is wall time, and niced workers beside other busy processes (a shared
    machine, a parallel test run) can be starved past it.
    ``share_kernels``: the workers share the kernels they compile through a temporary
    folder (removed by :meth:`close`), so a kernel that several candidates have in common
    is compiled once. The workers' temporary files go to a folder of their own, removed
    with the builder, at exit, on Ctrl-C and on SIGTERM (see
    :func:`remove_temp_folders_on_sigterm`), so a killed build leaves no
    ``/tmp/ptxforge-*``.
    """

    def __init__(self, timeout: float = 10, n_parallel: int | None = None,
                 target_sm: str | None = None, compile_to: str = "cubin", verify: bool = False,
                 ptxas_flags: tuple = (), share_kernels: bool = True,
                 assembler: str = "ptxas", niceness: int = 0):
        if niceness < 0:
            raise ValueError(f"niceness must be at least 0 (a lower priority), got {niceness}")
        self.niceness = int(niceness)
        self.timeout = timeout
        self.n_parallel = default_parallelism() if n_parallel is None else int(n_parallel)
        self.options = BuildOptions(target_sm, compile_to, verify, tuple(ptxas_flags),
                                    assembler=assembler)
        self.share_kernels = share_kernels
        self._shared_dir: str | None = None
        self._pool: WorkerPool | None = None
        self._inline: list = []
        self._stage_totals: dict = {}
        self._built = 0
        self._build_seconds = 0.0
        self._kernels = {False: 0, True: 0}  # compiled, reused from a cache
        self._old_stats = PoolStats(self.n_parallel)
        # made here, where the caller usually is the main thread: the workers and their
        # folders are started later from whatever thread feeds the builder (a tuner's
        # measure thread), where no signal handler can be installed
        remove_temp_folders_on_sigterm()

    # -- streaming interface -----------------------------------------------------------------

    def submit(self, key, inp: MeasureInput) -> None:
        if self.n_parallel == 0:
            self._inline.append((key, inp))
            return
        if self._pool is None:
            self._warm_up()
            if self.share_kernels and self.options.compile_to != "ir":
                self._share()
            remove_temp_folders_on_sigterm()
            self._scratch = tempfile.mkdtemp(prefix="ptxforge-build-")
            self._unscratch = _remove_on_exit(self._scratch)
            weakref.finalize(self, self._unscratch)
            # one candidate waits in each busy worker's pipe: a worker that finishes starts
            # the next at once, whenever the tuner's process gets to read its answer
            self._pool = WorkerPool(self.n_parallel, "fork", _use_scratch,
                                    (self._scratch, self.niceness),
                                    name="ptxforge-builder", prefetch=1)
        self._pool.submit(key, build_candidate, (inp, self.options), self.timeout)

    def _share(self) -> None:
        self._shared_dir = tempfile.mkdtemp(prefix="ptxforge-kernels-")
        self.options = dataclasses.replace(self.options, kernel_cache_dir=self._shared_dir)
        self._unshare = _remove_on_exit(self._shared_dir)
        weakref.finalize(self, self._unshare)

    @property
    def pending(self) -> int:
        return len(self._inline) + (self._pool.pending if self._pool else 0)

    def collect(self, timeout: float | None = 0.0) -> list:
        if self._inline:
            key, inp = self._inline.pop(0)
            return [(key, self._account(build_candidate(inp, self.options)))]
        if self._pool is None:
            return []
        out = []
        for o in self._pool.poll(timeout):
            if o.status == "ok":
                out.append((o.key, self._account(o.value)))
            elif o.status == "timeout":
                out.append((o.key, BuildResult(None, int(MeasureErrorNo.BUILD_TIMEOUT),
                                               f"the build took more than {self.timeout:g} s "
                                               "and was stopped", o.seconds)))
            elif o.status in ("died", "unstartable"):
                what = ("the builder process died while building this candidate" if
                        o.status == "died" else "no builder process could be started")
                out.append((o.key, BuildResult(None, int(MeasureErrorNo.UNKNOWN_ERROR),
                                               f"{what}: {o.error}", o.seconds)))
            else:
                out.append((o.key, BuildResult(None, int(MeasureErrorNo.UNKNOWN_ERROR),
                                               f"{o.exc_type}: {o.error}\n{o.traceback}",
                                               o.seconds)))
        return out

    def cancel_queued(self) -> list:
        keys = [key for key, _ in self._inline]
        self._inline.clear()
        return keys + (self._pool.cancel_queued() if self._pool else [])

    def waitables(self) -> list:
        return self._pool.waitables() if self._pool else []

    def next_deadline(self) -> float | None:
        return self._pool.next_deadline() if self._pool else None

    @property
    def pool_stats(self):
        """Where the builder workers' time went (a :class:`~ptxforge.measure.pool.PoolStats`
        summed over the pools this builder had)."""
        if self._pool is None:
            return self._old_stats
        return self._old_stats.merged(self._pool.stats())

    def close(self) -> None:
        if self._pool is not None:
            self._old_stats = self.pool_stats
            self._pool.close()
            self._pool = None
            self._unscratch()
        if self._shared_dir is not None:
            self._unshare()
            self._shared_dir = None
            self.options = dataclasses.replace(self.options, kernel_cache_dir=None)

    def _warm_up(self) -> None:
        """Import the lowering passes and set up LLVM here, once: forked workers inherit
        it all instead of paying for it on their first candidate."""
        from ..passes.lower import lowering_pipeline

        lowering_pipeline()
        if self.options.compile_to != "ir":
            from ..backend_ptx.compile import target_machine

            target_machine(as_target(self.options.target_sm))

    # -- accounting --------------------------------------------------------------------------

    def _account(self, res: BuildResult) -> BuildResult:
        self._built += 1
        self._build_seconds += res.time_cost
        if res.artifact is not None:
            for k in res.artifact.kernels.values():
                self._kernels[k.cache_hit] += 1
        for k, v in res.stage_seconds.items():
            self._stage_totals[k] = self._stage_totals.get(k, 0.0) + v
        return res

    @property
    def stage_totals(self) -> dict:
        """Seconds per build stage, summed over every candidate built so far."""
        return dict(self._stage_totals)

    @property
    def builds(self) -> int:
        """Candidates built so far (failed builds included)."""
        return self._built

    @property
    def build_seconds(self) -> float:
        """Seconds the builds so far took, summed over the workers."""
        return self._build_seconds

    def stage_summary(self) -> str:
        """Mean seconds per candidate of each build stage so far, one line."""
        if not self._built:
            return "no builds yet"
        parts = [f"{k} {v / self._built * 1e3:.1f} ms" for k, v in self._stage_totals.items()]
        compiled, reused = self._kernels[False], self._kernels[True]
        shared = f"; kernels compiled {compiled}, reused {reused}" if compiled + reused else ""
        return f"{self._built} builds, per candidate: " + ", ".join(parts) + shared
