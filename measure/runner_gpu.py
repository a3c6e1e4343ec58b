"""Timing candidates on a GPU from an isolated worker process.

The worker is a fresh interpreter (it never inherits a CUDA context from a forked parent;
by default it is started as ``python -m ptxforge.measure.worker``, which unlike
multiprocessing's ``spawn`` does not re-run the user's script) and owns the device's
context. It loads the cubins a builder
made, runs them on random inputs kept on the device per task, and times them with CUDA
events, replaying the launches from a CUDA graph so the host's launch overhead stays out of
the figure. A kernel that faults leaves the context unusable: the worker answers, then ends,
and the next candidate gets a fresh one. A kernel that hangs is stopped by killing the
worker at the time limit.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass

import numpy as np

from ..target import as_target
from .artifact import BuildArtifact
from .build import BuildOptions
from .check import compare, poisoned, random_array
from .measure import PooledRunner
from .pool import Retire, WorkerPool
from .reference_builds import PENDING
from .result import ERROR_COST, BuildResult, MeasureErrorNo, MeasureInput, MeasureResult


@dataclass(frozen=True)
class RunRequest:
    """One candidate for the worker: the artifact, how to time it, and (when checking) the
    task's reference artifact; ``check_below``: compare with the reference when the mean
    cost is below it (``inf``: always, before timing)."""

    task_key: str
    artifact: BuildArtifact
    reference: BuildArtifact | None
    number: int
    repeat: int
    min_repeat_ms: float
    enable_cuda_graph: bool
    seed: int = 0
    check_below: float = math.inf


_state: dict = {}


def gpu_worker_init(device_id: int) -> None:
    """Runs once in a new worker: open the device and make its context current."""
    from ..backend_ptx import cuda

    dev = cuda(device_id)
    dev.activate()
    _state.clear()
    _state["device"] = dev
    _state["name"] = f"{dev.name} ({dev.sm})"


def _task_arrays(req: RunRequest, host_params) -> list:
    """Device arrays for the task's host parameters (random inputs, made once per task)."""
    from ..backend_ptx import array

    dev = _state["device"]
    if _state.get("task") != req.task_key:
        _state.pop("arrays", None)
        _state.pop("reference", None)
        rng = np.random.default_rng(req.seed)
        outputs = set(req.artifact.output_params)
        host = [poisoned(p) if i in outputs else random_array(p, rng)
                for i, p in enumerate(host_params)]
        _state["arrays"] = [array(h, dev) for h in host]
        _state["task"] = req.task_key
    return _state["arrays"]


def _poison_outputs(arrays: list, host_params, outputs) -> None:
    for i in outputs:
        arrays[i].copyfrom(poisoned(host_params[i]))


def _run_once(artifact: BuildArtifact, module, arrays: list):
    dev = _state["device"]
    loaded = artifact.ptx_module(module).load(dev)
    loaded(*arrays)
    dev.sync()
    return loaded


def _reference_outputs(req: RunRequest, arrays: list, host_params) -> list:
    ref = _state.get("reference")
    if ref is None:
        module = req.reference.host_module()
        outputs = req.artifact.output_params
        _poison_outputs(arrays, host_params, outputs)
        _run_once(req.reference, module, arrays)
        ref = [arrays[i].numpy() for i in outputs]
        _state["reference"] = ref
    return ref


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


def gpu_run(req: RunRequest):
    """Measure one candidate in the worker; returns a dict (wrapped in :class:`Retire` when
    the CUDA context did not survive)."""
    from ..backend_ptx.cuda_driver import CudaError
    from ..backend_ptx.kernel import CompileError
    from ..backend_ptx.module import _binary_compatible

    dev = _state["device"]
    out = {"device": _state["name"], "correctness": ""}
    if not _binary_compatible(req.artifact.target_sm, dev):
        out.update(error_no=int(MeasureErrorNo.COMPILE_DEVICE), error_msg=(
            f"the cubins are for {req.artifact.target_sm}, which does not run on this GPU "
            f"({dev.sm}): build with LocalBuilder(target_sm={dev.sm!r})"))
        return out
    try:
        module = req.artifact.host_module()
        host_params = module.host.params
        arrays = _task_arrays(req, host_params)
        outputs = req.artifact.output_params
        names = [host_params[i].name for i in outputs]

        def wrong_answer() -> str:
            refs = _reference_outputs(req, arrays, host_params)
            _poison_outputs(arrays, host_params, outputs)
            loaded = _run_once(req.artifact, module, arrays)
            return compare([arrays[i].numpy() for i in outputs], refs, names), loaded

        checked = req.reference is not None and math.isinf(req.check_below)
        if checked:
            msg, loaded = wrong_answer()
            if msg:
                out.update(error_no=int(MeasureErrorNo.WRONG_ANSWER), error_msg=msg)
                return out
            out["correctness"] = "passed"
        else:
            loaded = req.artifact.ptx_module(module).load(dev)
        evaluator = loaded.time_evaluator("main", dev, number=req.number, repeat=req.repeat,
                                          min_repeat_ms=req.min_repeat_ms,
                                          graph=req.enable_cuda_graph)
        prof = evaluator(*arrays)
        dev.sync()
        costs = tuple(float(c) for c in prof.results)
        if not checked and req.reference is not None and (
                sum(costs) / len(costs) < req.check_below):
            # it would be the task's best: a kernel that skips work is fast, so check it
            msg, _ = wrong_answer()
            if msg:
                out.update(error_no=int(MeasureErrorNo.WRONG_ANSWER), error_msg=(
                    f"{msg} (checked because it beat the task's best)"))
                return out
            out["correctness"] = "passed"
        out.update(error_no=0, error_msg="", costs=costs)
        return out
    except CudaError as e:
        out.update(error_no=int(MeasureErrorNo.RUNTIME_DEVICE), error_msg=f"CudaError: {e}")
    except CompileError as e:
        out.update(error_no=int(MeasureErrorNo.COMPILE_DEVICE), error_msg=f"CompileError: {e}")
    except Exception as e:  # anything else is reported, and the context is checked below
        out.update(error_no=int(MeasureErrorNo.RUNTIME_DEVICE),
                   error_msg=f"{type(e).__name__}: {e}")
    _state.pop("task", None)  # the inputs may be damaged: make them again
    return out if _healthy() else Retire(out)


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
    """

    def __init__(self, number: int = 3, repeat: int = 1, min_repeat_ms: float = 0,
                 timeout: float = 10, check_correctness: bool | str = "best",
                 enable_cuda_graph: bool = True, device_id: int = 0,
                 start_method: str = "exec"):
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
        self._pool: WorkerPool | None = None
        self._ready: list = []
        self._build_time: dict = {}
        self._notes: dict = {}
        self._tasks: dict = {}  # key -> task key of a candidate in flight
        self._best_checked: dict = {}  # task key -> lowest mean cost that passed the check

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

    def submit(self, key, inp: MeasureInput, build: BuildResult) -> None:
        if not build.artifact.kernels or any(
                k.cubin is None for k in build.artifact.kernels.values()):
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
        task_key = f"{inp.task.workload_key}/{inp.task.text_hash}"
        below = (self._best_checked.get(task_key, math.inf)
                 if self.check_correctness == "best" else math.inf)
        req = RunRequest(task_key, build.artifact, ref, self.number, self.repeat,
                         self.min_repeat_ms, self.enable_cuda_graph, check_below=below)
        self._tasks[key] = task_key
        self._build_time[key] = build.time_cost
        self._pool.submit(key, gpu_run, (req,), self.timeout)

    def _result(self, o) -> MeasureResult:
        build_time = self._build_time.pop(o.key, 0.0)
        note = self._notes.pop(o.key, "")
        task_key = self._tasks.pop(o.key, "")
        all_cost = build_time + o.seconds
        now = time.time()
        if o.status == "ok":
            r = o.value
            if r["error_no"]:
                return MeasureResult((ERROR_COST,), r["error_no"], r["error_msg"], all_cost, now,
                                     device=r["device"])
            if r["correctness"] == "passed":
                mean = sum(r["costs"]) / len(r["costs"])
                self._best_checked[task_key] = min(
                    mean, self._best_checked.get(task_key, math.inf))
            return MeasureResult(r["costs"], 0, "", all_cost, now, device=r["device"],
                                 correctness=r["correctness"] or note)
        if o.status == "timeout":
            return MeasureResult((ERROR_COST,), int(MeasureErrorNo.RUN_TIMEOUT),
                                 f"the run took more than {self.timeout:g} s (the kernel may "
                                 "hang); the runner process was restarted", all_cost, now)
        if o.status == "died":
            return MeasureResult((ERROR_COST,), int(MeasureErrorNo.RUNTIME_DEVICE),
                                 f"the runner process died during the run: {o.error}",
                                 all_cost, now)
        if o.status == "unstartable":
            return MeasureResult((ERROR_COST,), int(MeasureErrorNo.RUNTIME_DEVICE),
                                 f"the GPU runner could not start on GPU {self.device_id}: "
                                 f"{o.error}", all_cost, now)
        return MeasureResult((ERROR_COST,), int(MeasureErrorNo.UNKNOWN_ERROR),
                             f"{o.exc_type}: {o.error}\n{o.traceback}", all_cost, now)
