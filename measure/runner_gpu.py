"""Timing candidates on a GPU from an isolated worker process.

The worker is a fresh interpreter (it never inherits a CUDA context from a forked parent;
by default it is started as ``python -m ptxforge.measure.worker``, which unlike
multiprocessing's ``spawn`` does not re-run the user's script) and owns the device's
context. It loads the cubins a builder
made, runs them on random inputs kept on the device per task, and times them with CUDA
events, replaying the launches from a CUDA graph so the host's launch overhead stays out of
the figure. A kernel that faults leaves the context unusable: the worker answers, then ends,
and the next candidate gets a fresh one. A kernel that hangs is stopped by killing the
worker at the time limit. Any other failure (cubins the driver refuses, a launch refused
before it ran, a wrong answer) leaves the worker and what it keeps per task as they were.

The runner sends a task's reference with the first candidate of the task only, so it keeps
track of what the worker holds: each answer lists the tasks whose reference the worker
holds (``holds``), and a worker that lacks one (it was replaced, or it let the task go)
answers ``need_reference``, after which the candidate comes once more with the reference.
A candidate that asks again gets an error result: every candidate gets exactly one.
"""

from __future__ import annotations

import math
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from ..target import as_target
from .artifact import BuildArtifact
from .build import BuildOptions
from .check import compare, poisoned, random_array
from .measure import PooledRunner
from .pool import Retire, WorkerPool
from .reference_builds import PENDING
from .result import ERROR_COST, BuildResult, MeasureErrorNo, MeasureInput, MeasureResult
from .timing import EARLY_STOP_FACTOR


@dataclass(frozen=True)
class RunRequest:
    """One candidate for the worker: the artifact and how to time it.

    ``checked``: the task has a reference to check against. The worker keeps a task's
    reference (its artifact, and its outputs once run) with the task's inputs, so
    ``reference`` travels with the first candidate of a task only; a worker that does not
    hold it (a fresh one, or one that let the task go) answers ``need_reference`` and the
    candidate comes again with it. ``best``: the task's best checked mean cost the runner
    knows of; the worker takes the lower of it and the best it saw itself (candidates queue
    for the worker, so the runner's figure may be older than the candidates before this
    one). ``check_all``: check before timing, whatever the best; else a candidate is
    checked before timing while its task has no best, and after timing when it beats the
    best. ``stop_factor``: a candidate whose pilot is slower than this times the best ends
    the timing there (:mod:`.timing`; ``inf``: never). ``dependent_launch``: each timed run's
    kernels are launched as dependents of the run before (:class:`LocalRunner`'s)."""

    task_key: str
    artifact: BuildArtifact
    reference: BuildArtifact | None
    number: int
    repeat: int
    min_repeat_ms: float
    enable_cuda_graph: bool
    seed: int = 0
    best: float = math.inf
    checked: bool = False
    check_all: bool = False
    stop_factor: float = math.inf
    dependent_launch: bool = False


RUN_PARTS = ("unpack", "inputs", "load", "check", "time")
"""Where the worker's time per candidate goes (seconds in each reply's ``parts``):
``unpack`` the candidate's device IR and cubins out of its message, ``inputs`` the task's
random inputs made and copied to the device (once per task), ``load`` the cubins loaded,
``check`` the reference run and the comparison, ``time`` the timing itself."""

TASKS_KEPT = 8
"""Tasks whose inputs and reference the worker keeps (candidates of several tasks are in
flight at once: a deeper search ahead, rounds that follow each other)."""

TASK_BYTES_KEPT = 1 << 30
"""...and at most this many bytes of their device inputs in all (the oldest go first)."""


class _TaskState:
    """What the worker keeps of one task: its device arrays (random inputs, poisoned
    outputs), the reference artifact and its outputs once run, and the best mean cost it
    measured (checked, where the task has a reference)."""

    __slots__ = ("arrays", "nbytes", "reference", "ref_outputs", "best")

    def __init__(self, arrays: list, nbytes: int):
        self.arrays = arrays
        self.nbytes = nbytes
        self.reference = None
        self.ref_outputs = None
        self.best = math.inf


@dataclass
class RunParts:
    """Where a GPU runner's worker time went: seconds per part of :data:`RUN_PARTS` summed
    over the candidates, the worker's seconds per job in all (``job_s``, the parts and what
    lies between them: the reply, the bookkeeping), the candidates measured, those whose
    timing ended after the pilot, the references sent to the worker and the candidates
    sent again because the worker lacked their reference."""

    seconds: dict = field(default_factory=lambda: dict.fromkeys(RUN_PARTS, 0.0))
    job_s: float = 0.0
    candidates: int = 0
    stopped_early: int = 0
    references: int = 0
    resent: int = 0

    def add(self, parts: dict, job_s: float, stopped_early: bool = False,
            resent: bool = False) -> None:
        """Count one reply of the worker."""
        for k, v in parts.items():
            self.seconds[k] = self.seconds.get(k, 0.0) + v
        self.job_s += job_s
        self.candidates += not resent
        self.stopped_early += bool(stopped_early)
        self.resent += bool(resent)

    def line(self) -> str:
        """One line for ``--profile``: milliseconds per candidate of each part."""
        n = max(self.candidates, 1)
        parts = ", ".join(f"{k} {1e3 * v / n:.1f}" for k, v in self.seconds.items())
        other = self.job_s - sum(self.seconds.values())
        return (f"{self.candidates} candidates, {1e3 * self.job_s / n:.1f} ms each in the "
                f"worker: {parts}, other {1e3 * other / n:.1f}; timing ended after the pilot "
                f"for {self.stopped_early}; references sent {self.references}, candidates "
                f"sent again for one {self.resent}")


_state: dict = {}


def gpu_worker_init(device_id: int) -> None:
    """Runs once in a new worker: open the device and make its context current."""
    from ..backend_ptx import cuda

    dev = cuda(device_id)
    dev.activate()
    _state.clear()
    _state["device"] = dev
    _state["name"] = f"{dev.name} ({dev.sm})"
    _state["tasks"] = OrderedDict()


def _upload(host: list) -> list:
    """Device copies of host arrays (the worker's device)."""
    from ..backend_ptx import array

    dev = _state["device"]
    return [array(h, dev) for h in host]


def _task(req: RunRequest, host_params) -> _TaskState:
    """The task's state, made on its first candidate (random inputs from the request's
    seed, so a task dropped and made again gets the same ones)."""
    tasks: OrderedDict = _state["tasks"]
    st = tasks.get(req.task_key)
    if st is not None:
        tasks.move_to_end(req.task_key)
        return st
    rng = np.random.default_rng(req.seed)
    outputs = set(req.artifact.output_params)
    host = [poisoned(p) if i in outputs else random_array(p, rng)
            for i, p in enumerate(host_params)]
    st = _TaskState(_upload(host), sum(h.nbytes for h in host))
    tasks[req.task_key] = st
    while len(tasks) > 1 and (len(tasks) > TASKS_KEPT or sum(
            t.nbytes for t in tasks.values()) > TASK_BYTES_KEPT):
        tasks.popitem(last=False)
    return st


def _poison_outputs(arrays: list, host_params, outputs) -> None:
    for i in outputs:
        arrays[i].copyfrom(poisoned(host_params[i]))


def _load(artifact: BuildArtifact, module):
    """The candidate's cubins loaded on the worker's device."""
    return artifact.ptx_module(module).load(_state["device"])


def _run_once(loaded, arrays: list) -> None:
    loaded(*arrays)
    _state["device"].sync()


def _timer(loaded, arrays: list, req: RunRequest):
    """A :class:`~.timing.GraphTimer` of the loaded module's launches on ``arrays``."""
    from .timing import GraphTimer

    loaded(*arrays)  # checks the arrays against the parameters once, and warms up
    ptrs = [a.ptr for a in arrays]
    dependent = req.dependent_launch
    return GraphTimer(lambda stream: loaded._run_ptrs(ptrs, stream, dependent),
                      _state["device"], req.number, req.enable_cuda_graph)


def _reference_outputs(st: _TaskState, req: RunRequest, host_params, outputs) -> list:
    if st.ref_outputs is None:
        ref = st.reference
        _poison_outputs(st.arrays, host_params, outputs)
        _run_once(_load(ref, ref.host_module()), st.arrays)
        st.ref_outputs = [st.arrays[i].numpy() for i in outputs]
    return st.ref_outputs


def _healthy() -> bool:
    """Whether the context still works after an error (a fault makes it unusable)."""
    from ..backend_ptx import empty

    try:
        dev = _state["device"]
        dev.sync()
        empty((1,), "float32", dev)
        dev.sync()
        return True
    except Exception:  # any failure here means the context is gone
        return False


STICKY_ERRORS = frozenset({700, 702, 714, 715, 716, 717, 718, 719, 999})
"""CUDA driver errors after which the context is unusable (an illegal address, a launch
that timed out or failed, an illegal instruction, a misaligned or invalid address, an
invalid program counter, an unknown error): the worker retires whatever its health check
says."""


def _faulted(e: Exception) -> bool:
    """Whether error ``e`` left the worker's context unusable (the worker must end)."""
    from ..backend_ptx.cuda_driver import CudaError

    if isinstance(e, CudaError) and e.code in STICKY_ERRORS:
        return True
    return not _healthy()


def _holds() -> tuple:
    """The tasks whose reference the worker holds (what the runner's bookkeeping follows)."""
    return tuple(k for k, st in _state["tasks"].items() if st.reference is not None)


def _error_code(stage: str, e: Exception, faulted: bool) -> MeasureErrorNo:
    """The error of a candidate that raised ``e`` in ``stage`` of :func:`gpu_run`."""
    from ..backend_ptx.kernel import CompileError

    if isinstance(e, CompileError) or (stage == "load" and not faulted):
        return MeasureErrorNo.COMPILE_DEVICE  # the cubins were refused: nothing ran
    return MeasureErrorNo.RUNTIME_DEVICE


def gpu_run(req: RunRequest):
    """Measure one candidate in the worker; returns a dict (wrapped in :class:`Retire` when
    the CUDA context did not survive).

    The task's inputs and reference stay in the worker after any error that cannot have
    damaged them or the context (cubins that fail to load, a launch refused before it ran,
    a wrong answer): only a fault, which ends the worker, loses them. The reference that
    comes with a candidate is kept whatever becomes of the candidate."""
    from ..backend_ptx.module import _binary_compatible

    dev = _state["device"]
    parts = dict.fromkeys(RUN_PARTS, 0.0)
    out = {"device": _state["name"], "correctness": "", "parts": parts}
    clock = time.perf_counter
    stage = "unpack"
    try:
        t = clock()
        module = req.artifact.host_module()
        host_params = module.host.params
        outputs = req.artifact.output_params
        names = [host_params[i].name for i in outputs]
        t1 = clock()
        parts["unpack"] = t1 - t
        stage = "inputs"
        st = _task(req, host_params)
        if req.reference is not None:
            st.reference = req.reference
            st.ref_outputs = None
        arrays = st.arrays
        t = clock()
        parts["inputs"] = t - t1
        stage = "load"
        if not _binary_compatible(req.artifact.target_sm, dev):
            out.update(error_no=int(MeasureErrorNo.COMPILE_DEVICE), error_msg=(
                f"the cubins are for {req.artifact.target_sm}, which does not run on this GPU "
                f"({dev.sm}): build with LocalBuilder(target_sm={dev.sm!r})"), holds=_holds())
            return out
        best = min(req.best, st.best)
        check_first = req.checked and (req.check_all or math.isinf(best))
        if check_first and st.reference is None:
            return {"need_reference": True, "parts": parts}
        loaded = _load(req.artifact, module)
        parts["load"] = clock() - t
        stage = "run"

        def wrong_answer() -> str | None:
            """What differs from the reference ("" when nothing); None when the worker does
            not hold the reference."""
            if st.reference is None:
                return None
            t0 = clock()
            refs = _reference_outputs(st, req, host_params, outputs)
            _poison_outputs(arrays, host_params, outputs)
            _run_once(loaded, arrays)
            msg = compare([arrays[i].numpy() for i in outputs], refs, names,
                          [p.dtype for p in host_params])
            parts["check"] += clock() - t0
            return msg

        if check_first:
            msg = wrong_answer()
            if msg:
                out.update(error_no=int(MeasureErrorNo.WRONG_ANSWER), error_msg=msg,
                           holds=_holds())
                return out
            out["correctness"] = "passed"
        t = clock()
        stop_above = req.stop_factor * best if math.isfinite(best) else math.inf
        timing = _timer(loaded, arrays, req).run(req.repeat, req.min_repeat_ms, stop_above)
        dev.sync()
        parts["time"] = clock() - t
        costs = tuple(float(c) for c in timing.costs)
        out["stopped_early"] = timing.stopped_early
        mean = sum(costs) / len(costs)
        if not check_first and req.checked and mean < best:
            # it would be the task's best: a kernel that skips work is fast, so check it
            msg = wrong_answer()
            if msg is None:
                return {"need_reference": True, "parts": parts}
            if msg:
                out.update(error_no=int(MeasureErrorNo.WRONG_ANSWER), error_msg=(
                    f"{msg} (checked because it beat the task's best)"), holds=_holds())
                return out
            out["correctness"] = "passed"
        if out["correctness"] == "passed" or not (req.checked or timing.stopped_early):
            st.best = min(st.best, mean)
        out.update(error_no=0, error_msg="", costs=costs, holds=_holds())
        return out
    except Exception as e:  # reported as the candidate's error; the context is checked
        faulted = _faulted(e)
        out.update(error_no=int(_error_code(stage, e, faulted)),
                   error_msg=f"{type(e).__name__}: {e}")
    if faulted:
        # the context is gone, and with it every task's inputs: the worker ends
        _state["tasks"].clear()
        out["holds"] = ()
        return Retire(out)
    # nothing ran that could damage the inputs: the task keeps them, and its reference
    out["holds"] = _holds()
    return out


_NO_GPU_SAID = False


def _say_if_no_gpu() -> None:
    """Say on the console, once per process and before any tuning starts, that this machine
    has no GPU (every measurement would fail) and how to measure on the simulator instead."""
    global _NO_GPU_SAID
    if _NO_GPU_SAID:
        return
    from ..backend_ptx.cuda_driver import NoGPUError, device_count

    try:
        device_count()
        return
    except NoGPUError as e:
        reason = str(e)
    _NO_GPU_SAID = True
    print(f"ptxforge: no GPU on this machine ({reason}); LocalRunner's measurements will all "
          f"fail. To tune without a GPU use the simulator runner, which checks each candidate "
          f"on the CPU simulator and reports estimated GPU times: "
          f"runner=ptxforge.measure.SimRunner() (autotvm.measure_option(runner=\"sim\") or "
          f"auto_scheduler.TuningOptions(runner=ptxforge.measure.SimRunner()))",
          file=sys.stderr, flush=True)


class LocalRunner(PooledRunner):
    """Times built candidates on GPU ``device_id`` in one worker process.

    Each candidate runs ``number`` times per repeat (more when a repeat is shorter than
    ``min_repeat_ms``), ``repeat`` times; its costs are the mean seconds per run of each
    repeat. ``timeout`` bounds one candidate (load, check, timing): past it the worker is
    killed and the candidate gets ``RUN_TIMEOUT``. ``check_correctness`` compares a
    candidate's outputs with the task's reference schedule (run once per task on the same
    inputs; a mismatch is ``WRONG_ANSWER``): ``"best"`` (the default) checks, once, every
    candidate that is faster than the task's best checked result so far, so no unchecked
    kernel becomes a task's best; ``True`` checks every candidate, ``False`` none.
    ``enable_cuda_graph`` replays the timed runs from a CUDA graph. ``start_method``: how
    the worker process starts (``"exec"`` or ``"spawn"``; never ``fork``, which could inherit
    a CUDA context).

    ``dependent_launch``: each timed run's kernels that wait for their grid dependencies
    are launched as dependents of the run before (programmatic dependent launch), as a
    network's CUDA graph launches them where that is faster, so a kernel is timed with
    some of the overlap it gets there (its start behind the end of the run before). Off by
    default (each run after the one before has ended): on an H200 it helped MobileNetV2
    (tuned network 0.1261 -> 0.1105 ms against the default's 0.12) and hurt GPT-2 (0.9746
    -> 1.0441 against 0.98), one run each; a kernel overlapped with itself is not a kernel
    between its neighbours.
    """

    def __init__(self, number: int = 3, repeat: int = 1, min_repeat_ms: float = 0,
                 timeout: float = 10, check_correctness: bool | str = "best",
                 enable_cuda_graph: bool = True, device_id: int = 0,
                 start_method: str = "exec", early_stop: bool = True,
                 dependent_launch: bool = False):
        if start_method not in ("exec", "spawn"):
            raise ValueError(f"start_method must be 'exec' or 'spawn', got {start_method!r}")
        if check_correctness not in (True, False, "best"):
            raise ValueError(f"check_correctness must be True, False or 'best', got "
                             f"{check_correctness!r}")
        if number < 1 or repeat < 1:
            raise ValueError(f"number and repeat must be at least 1, got {number}, {repeat}")
        _say_if_no_gpu()
        self.number = number
        self.repeat = repeat
        self.min_repeat_ms = min_repeat_ms
        self.timeout = timeout
        self.check_correctness = check_correctness
        self.enable_cuda_graph = enable_cuda_graph
        self.device_id = device_id
        self.start_method = start_method
        self.early_stop = bool(early_stop)
        self.dependent_launch = bool(dependent_launch)
        self._pool: WorkerPool | None = None
        self._ready: list = []
        self._build_time: dict = {}
        self._notes: dict = {}
        self._tasks: dict = {}  # key -> task key of a candidate in flight
        self._inflight: dict = {}  # key -> (input, build) of a candidate in flight
        self._best_checked: dict = {}  # task key -> lowest mean cost that passed the check
        # task keys whose reference the worker holds, by its last answer, or is sent with a
        # candidate in flight: a candidate of one of them goes without the reference
        self._ref_sent: set = set()
        self._carrying: set = set()  # keys of candidates in flight sent with the reference
        self._asked: set = set()  # keys of candidates sent again because the worker asked
        self._parts = RunParts()

    def prepare(self, inp: MeasureInput) -> None:
        """Start building the reference of ``inp``'s task (for the architecture its task
        targets) while its candidate is built."""
        if not self.check_correctness:
            return
        try:
            sm = as_target(inp.task.target).arch
        except Exception:  # a target the builder will refuse: nothing to prepare
            return
        self._background_reference(*self._reference_args(inp.task, sm))

    def _reference(self, task, target_sm: str):
        """The task's reference artifact, or why there is none (a string), waiting for its
        build."""
        return self._wait_reference(*self._reference_args(task, target_sm))

    @staticmethod
    def _reference_args(task, target_sm: str) -> tuple:
        return ((task.workload_key, task.text_hash, target_sm), task,
                BuildOptions(target_sm=target_sm, compile_to="cubin"))

    @property
    def run_parts(self) -> RunParts:
        """Where the worker's time per candidate went so far (:class:`RunParts`)."""
        return self._parts

    def submit(self, key, inp: MeasureInput, build: BuildResult) -> None:
        if not build.artifact.has_cubins():
            self._ready.append((key, MeasureResult(
                (ERROR_COST,), int(MeasureErrorNo.COMPILE_DEVICE),
                "the build has no cubin (the builder stopped before the assembler): the GPU "
                "runner needs LocalBuilder(compile_to='cubin')", build.time_cost, time.time())))
            return
        if self._pool is None:
            # the next candidate waits in the worker's pipe: the GPU goes on with it at
            # once, whenever the tuner's process gets to read the last answer
            self._pool = WorkerPool(1, self.start_method, initializer=gpu_worker_init, prefetch=1,
                                    init_args=(self.device_id,), name="ptxforge-gpu-runner")
            self._ref_sent.clear()
        ref = None
        if self.check_correctness:
            ref_args = self._reference_args(inp.task, build.artifact.target_sm)
            ref = self._background_reference(*ref_args)
            if ref is PENDING:  # built in the background: the candidate waits for it
                self._hold(ref_args[0], key, inp, build)
                return
            if isinstance(ref, str):
                self._notes[key] = ref
                ref = None
        task_key = f"{inp.task.workload_key}/{inp.task.text_hash}/{build.artifact.target_sm}"
        best = self._best_checked.get(task_key, math.inf)
        # a candidate the worker asked for the reference goes with it, whatever the books say
        wanted = task_key not in self._ref_sent or key in self._asked
        send = ref.for_runner() if ref is not None and wanted else None
        if send is not None:
            self._ref_sent.add(task_key)
            self._carrying.add(key)
            self._parts.references += 1
        req = RunRequest(task_key, build.artifact.for_runner(), send, self.number, self.repeat,
                         self.min_repeat_ms, self.enable_cuda_graph, best=best,
                         checked=ref is not None,
                         check_all=self.check_correctness is True,
                         stop_factor=EARLY_STOP_FACTOR if self.early_stop else math.inf,
                         dependent_launch=self.dependent_launch)
        self._tasks[key] = task_key
        self._inflight[key] = (inp, build)
        self._build_time.setdefault(key, build.time_cost)
        # a candidate sent again goes first: it was submitted before those queued, and the
        # reference it brings spares them asking for it too
        self._pool.submit(key, gpu_run, (req,), self.timeout, first=key in self._asked)

    def _follow(self, holds) -> None:
        """The worker holds the references of ``holds`` (its answer's list; empty for a
        worker that was replaced): the books say so, plus the tasks whose reference travels
        with a candidate still in flight."""
        self._ref_sent = set(holds) | {self._tasks[k] for k in self._carrying}

    def _result(self, o) -> MeasureResult | None:
        task_key = self._tasks.pop(o.key, "")
        self._carrying.discard(o.key)
        inp, build = self._inflight.pop(o.key, (None, None))
        if o.status == "ok" and o.value.get("need_reference"):
            # the worker does not hold the task's reference (a fresh worker, or one that let
            # the task go): the candidate goes once more, with it
            self._ref_sent.discard(task_key)
            if o.key not in self._asked and inp is not None:
                self._parts.add(o.value["parts"], o.seconds, resent=True)
                self._asked.add(o.key)
                self.submit(o.key, inp, build)
                return None
            self._parts.add(o.value["parts"], o.seconds)
            return self._failed(o, MeasureErrorNo.UNKNOWN_ERROR, (
                f"the GPU runner's worker asked again for the reference of task {task_key}, "
                "which came with the candidate; the candidate was not measured (the runner "
                "and its worker disagree on what the worker holds)") if inp is not None else (
                "the GPU runner's worker asked for the reference of a candidate the runner "
                "no longer knows; it was not measured"))
        self._asked.discard(o.key)
        if o.status == "ok":
            r = o.value
            self._parts.add(r.get("parts", {}), o.seconds,
                            stopped_early=r.get("stopped_early", False))
            if "holds" in r:
                self._follow(r["holds"])
            if r["error_no"]:
                return self._failed(o, r["error_no"], r["error_msg"], r["device"])
            if r["correctness"] == "passed" or (
                    not self.check_correctness and not r.get("stopped_early")):
                mean = sum(r["costs"]) / len(r["costs"])
                self._best_checked[task_key] = min(
                    mean, self._best_checked.get(task_key, math.inf))
            note = self._notes.pop(o.key, "")
            all_cost = self._build_time.pop(o.key, 0.0) + o.seconds
            return MeasureResult(r["costs"], 0, "", all_cost, time.time(), device=r["device"],
                                 correctness=r["correctness"] or note)
        if o.status == "error":  # the job raised in a worker that lives on, holding what it did
            return self._failed(o, MeasureErrorNo.UNKNOWN_ERROR,
                                f"{o.exc_type}: {o.error}\n{o.traceback}")
        self._follow(())  # the worker was replaced: the new one holds no reference
        if o.status == "timeout":
            return self._failed(o, MeasureErrorNo.RUN_TIMEOUT,
                                f"the run took more than {self.timeout:g} s (the kernel may "
                                "hang); the runner process was restarted")
        if o.status == "died":
            return self._failed(o, MeasureErrorNo.RUNTIME_DEVICE,
                                f"the runner process died during the run: {o.error}")
        return self._failed(o, MeasureErrorNo.RUNTIME_DEVICE,
                            f"the GPU runner could not start on GPU {self.device_id}: "
                            f"{o.error}")

    def _failed(self, o, error_no: int, msg: str, device: str = "") -> MeasureResult:
        """The error result of the candidate of pool outcome ``o``."""
        self._notes.pop(o.key, None)
        all_cost = self._build_time.pop(o.key, 0.0) + o.seconds
        return MeasureResult((ERROR_COST,), int(error_no), msg, all_cost, time.time(),
                             device=device)

    def close(self) -> None:
        """Stop the worker; candidates in flight are dropped (they get no result)."""
        super().close()
        for books in (self._tasks, self._inflight, self._carrying, self._asked,
                      self._ref_sent, self._build_time, self._notes):
            books.clear()
