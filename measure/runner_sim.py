"""Measuring without a GPU: correctness on the CPU simulator, time from an analytical model.

Every result of :class:`SimRunner` is **estimated** (``MeasureResult.estimated``): its cost is
the figure of :mod:`ptxforge.measure.estimate` for the kernels the builder made, not a
measurement. What the simulator adds is the check: the candidate runs on random inputs and
its outputs are compared with the task's reference schedule, also simulated. A kernel that
would take too long to simulate (estimated from the lowered IR) is not simulated; its
result says so in ``correctness``. A kernel that faults, races on shared memory or is
refused at launch gets ``RUNTIME_DEVICE``; a wrong result ``WRONG_ANSWER``; a kernel whose
estimated time exceeds the timeout ``RUN_TIMEOUT``, as it would on a GPU.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from ..target import Target, as_target
from .build import BuildOptions
from .check import compare, poisoned, random_array
from .estimate import module_seconds, simulation_seconds
from .measure import PooledRunner
from .pool import WorkerPool
from .reference_builds import PENDING
from .result import BuildResult, MeasureErrorNo, MeasureInput, MeasureResult, error_result


@dataclass(frozen=True)
class SimRequest:
    """One candidate for a simulator worker: the artifacts of the candidate and of the
    task's reference (pickled to the worker as they arrived from the builders: their
    device IR is unpickled there, not in the tuner's process)."""

    task_key: str
    artifact: object
    reference: object
    seed: int = 0

    @property
    def module(self):
        """The candidate's device-IR module."""
        return self.artifact.module

    @property
    def output_params(self) -> tuple:
        return self.artifact.output_params


_state: dict = {}

TASKS_KEPT = 8
"""Tasks whose inputs and reference outputs a simulator worker keeps."""


def _host(module):
    from ..backend_sim import host_function

    return host_function(module)


def sim_check(req: SimRequest) -> dict:
    """Run a candidate and (once per task) the reference on the simulator; compare."""
    from ..backend_sim import SimError, run

    module = req.module
    params = _host(module).params
    outputs = req.output_params
    tasks = _state.setdefault("tasks", OrderedDict())
    task = tasks.get(req.task_key)
    if task is None:
        # a task's inputs and reference outputs stay while candidates of a few tasks
        # interleave (rounds in flight with a search ahead)
        rng = np.random.default_rng(req.seed)
        inputs = [random_array(p, rng) for p in params]
        arrays = _arrays(inputs, params, outputs)
        try:
            run(req.reference.module, arrays)
            reference = [arrays[i] for i in outputs]
        except SimError as e:
            reference = f"skipped: the reference schedule failed: {e}"
        task = tasks[req.task_key] = (inputs, reference)
        while len(tasks) > TASKS_KEPT:
            tasks.popitem(last=False)
    tasks.move_to_end(req.task_key)
    inputs, ref = task
    arrays = _arrays(inputs, params, outputs)
    t0 = time.perf_counter()
    try:
        run(module, arrays)
    except SimError as e:
        return {"error_no": int(MeasureErrorNo.RUNTIME_DEVICE),
                "error_msg": f"{type(e).__name__}: {e}", "seconds": time.perf_counter() - t0}
    seconds = time.perf_counter() - t0
    if isinstance(ref, str):
        return {"error_no": 0, "correctness": ref, "seconds": seconds}
    msg = compare([arrays[i] for i in outputs], ref, [params[i].name for i in outputs],
                  [p.dtype for p in params])
    if msg:
        return {"error_no": int(MeasureErrorNo.WRONG_ANSWER), "error_msg": msg,
                "seconds": seconds}
    return {"error_no": 0, "correctness": "passed", "seconds": seconds}


def _arrays(inputs: list, params, outputs) -> list:
    out = set(outputs)
    return [poisoned(p) if i in out else inputs[i].copy() for i, p in enumerate(params)]


class SimRunner(PooledRunner):
    """Estimated times from the analytical model of ``target`` (a string or a
    :class:`~ptxforge.target.Target`; default: the current target), and correctness checks
    on the simulator.

    ``check_correctness``: simulate candidates whose simulation is estimated to take at
    most ``max_sim_seconds`` (others are reported with ``correctness="skipped: ..."``); a
    simulation is stopped after three times that (plus the reference's share).
    ``timeout``: a candidate whose estimated run time exceeds it gets ``RUN_TIMEOUT``.
    ``n_parallel``: simulator worker processes.
    """

    def __init__(self, check_correctness: bool = True, max_sim_seconds: float = 5.0,
                 timeout: float = 10, target: Target | str | None = None,
                 n_parallel: int = 1):
        self.check_correctness = check_correctness
        self.max_sim_seconds = max_sim_seconds
        self.timeout = timeout
        self.target = as_target(target)
        self.n_parallel = n_parallel
        self._pool: WorkerPool | None = None
        self._ready: list = []
        self._jobs: dict = {}

    @property
    def device(self) -> str:
        return f"{self.target.arch} model (estimated)"

    def prepare(self, inp: MeasureInput) -> None:
        """Start building the reference of ``inp``'s task while its candidate is built."""
        if self.check_correctness:
            self._background_reference(*self._reference_args(inp.task))

    def _reference(self, task):
        """(device-IR module, estimated simulation seconds) of the task's reference, or why
        there is none (a string), waiting for its build."""
        ref = self._wait_reference(*self._reference_args(task))
        return ref if isinstance(ref, str) else (ref.module, simulation_seconds(ref.stats))

    @staticmethod
    def _reference_args(task) -> tuple:
        return ((task.workload_key, task.text_hash), task, BuildOptions(compile_to="ir"))

    def submit(self, key, inp: MeasureInput, build: BuildResult) -> None:
        art = build.artifact
        est = module_seconds(art.stats, art.registers(), self.target)
        if math.isinf(est):
            self._ready.append((key, error_result(
                MeasureErrorNo.RUNTIME_DEVICE,
                "too many resources requested for launch: no block of a kernel fits on an "
                f"SM of the {self.target.label} model (threads, shared memory and registers)",
                build.time_cost, self.device, estimated=True)))
            return
        if est > self.timeout:
            self._ready.append((key, error_result(
                MeasureErrorNo.RUN_TIMEOUT,
                f"the estimated run time ({est:.3g} s) exceeds the timeout ({self.timeout:g} "
                "s); on a GPU the run would have been stopped", build.time_cost, self.device,
                estimated=True)))
            return
        done = MeasureResult((est,), 0, "", build.time_cost, time.time(), estimated=True,
                             device=self.device)
        if not self.check_correctness:
            self._ready.append((key, done))
            return
        ref_args = self._reference_args(inp.task)
        ref = self._background_reference(*ref_args)
        if ref is PENDING:  # built in the background: the candidate waits for it
            self._hold(ref_args[0], key, inp, build)
            return
        if isinstance(ref, str):
            self._ready.append((key, _with(done, correctness=ref)))
            return
        ref_sim = simulation_seconds(ref.stats)
        sim = simulation_seconds(art.stats)
        if sim > self.max_sim_seconds or ref_sim > 3 * self.max_sim_seconds:
            what = "candidate" if sim > self.max_sim_seconds else "reference"
            secs = sim if what == "candidate" else ref_sim
            self._ready.append((key, _with(done, correctness=(
                f"skipped: simulating the {what} would take about {secs:.3g} s "
                f"(max_sim_seconds={self.max_sim_seconds:g})"))))
            return
        if self._pool is None:
            self._pool = WorkerPool(self.n_parallel, "fork", name="ptxforge-sim-runner",
                                    prefetch=1)
        req = SimRequest(f"{inp.task.workload_key}/{inp.task.text_hash}", art, ref)
        limit = 3 * self.max_sim_seconds + 3 * ref_sim + 5.0
        self._jobs[key] = (done, limit)
        self._pool.submit(key, sim_check, (req,), limit)

    def _result(self, o) -> MeasureResult:
        done, limit = self._jobs.pop(o.key)
        if o.status == "ok":
            r = o.value
            cost = done.all_cost + r.get("seconds", o.seconds)
            if r["error_no"]:
                return error_result(r["error_no"], r["error_msg"], cost, self.device, True)
            return _with(done, all_cost=cost, correctness=r["correctness"])
        if o.status == "timeout":
            return _with(done, all_cost=done.all_cost + o.seconds, correctness=(
                f"skipped: the simulation took more than {limit:.3g} s and was stopped"))
        return error_result(MeasureErrorNo.UNKNOWN_ERROR,
                            f"the simulator worker failed: {o.exc_type} {o.error}\n"
                            f"{o.traceback}", done.all_cost + o.seconds, self.device, True)


def _with(res: MeasureResult, **changes) -> MeasureResult:
    import dataclasses

    return dataclasses.replace(res, timestamp=time.time(), **changes)
