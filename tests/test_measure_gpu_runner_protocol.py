"""The GPU runner's protocol with its worker, on the CPU: the real pool (a forked worker)
runs the real worker code on a fake device, so every path between the tuner's process and
the worker is exercised without a GPU. Every candidate gets exactly one result and the run
ends, whatever its candidates do: fail to load, fault the device, hang, answer wrongly, or
ask for the reference again and again; the reference goes to a worker once, and again only
to a worker that lost it."""

from __future__ import annotations

import concurrent.futures
import os
import pickle
import signal
import threading
import time
from multiprocessing.connection import wait as wait_any

import pytest
from ptxforge import measure
from ptxforge.backend_ptx.cuda_driver import CudaError
from ptxforge.backend_ptx.kernel import CompileError
from ptxforge.measure import MeasureErrorNo, MeasureInput, measure_batch, runner_gpu, timing
from ptxforge.measure.pool import WorkerPool
from ptxforge.measure.stream import MeasureStream

from .instant import Instant
from .test_measure_gpu_runner_cpu import (
    PIPE,
    FakeArray,
    FakeDevice,
    FakeDriver,
    FakeLoaded,
    add_task,
    artifact,
    shipped,
)

LIMIT_S = 20.0
"""How long one measurement may take here before the test calls it a stall (a healthy run
of these tests takes well under a second)."""

# -- the worker's side: the real gpu_run on a fake device, in a forked worker ---------------


class Faulting(FakeLoaded):
    """A kernel that faults: the launch fails with a sticky error and the context is lost."""

    def __call__(self, *arrays):
        runner_gpu._state["broken"] = True
        raise CudaError("cuStreamSynchronize", "CUDA_ERROR_ILLEGAL_ADDRESS",
                        "an illegal memory access was encountered", 700)


def _fake_load(driver: FakeDriver, art, module):
    """What a candidate does on the fake device, by the ``fake`` entry of its stage times."""
    how = art.stage_seconds.get("fake", "ok")
    if how == "load":
        raise CompileError("kernel main_kernel0: stage ptx was not run")
    if how == "image":
        raise CudaError("cuModuleLoadData", "CUDA_ERROR_INVALID_IMAGE",
                        "device kernel image is invalid", 200)
    if how == "hang":
        time.sleep(60)
    if how == "fault":
        return Faulting(driver, 1.0, 0.01)
    if how == "wrong":
        return FakeLoaded(driver, 2.0, 0.001)  # wrong, and faster than any best
    return FakeLoaded(driver, 1.0, art.stage_seconds.get("ms", 0.01))


def fake_worker_init() -> None:
    """Runs in each new worker instead of opening a GPU: a fake device and driver."""
    from ptxforge.backend_ptx import timer

    d = FakeDriver()
    for mod in (timing, timer):
        mod.call = d.call
        mod.driver = lambda: FakeDriver
    runner_gpu._upload = lambda host: [FakeArray(h) for h in host]
    runner_gpu._load = lambda art, module: _fake_load(d, art, module)
    runner_gpu._healthy = lambda: not runner_gpu._state.get("broken")
    runner_gpu._state.clear()
    runner_gpu._state.update(device=FakeDevice(), name="Fake GPU (sm_90a)",
                             tasks=runner_gpu.OrderedDict())


def always_asks(req):
    """A worker that never holds a reference, whatever comes with the candidate."""
    return {"need_reference": True, "parts": dict.fromkeys(runner_gpu.RUN_PARTS, 0.0)}


# -- the tuner's side -------------------------------------------------------------------------


class ReadyBuilder(Instant, measure.Builder):
    """Hands back prepared builds at once: the input with payload ``{"i": i}`` gets
    ``builds[i]``."""

    def __init__(self, builds: list):
        self.builds = builds
        self._done: list = []

    def submit(self, key, inp):
        self._done.append((key, self.builds[inp.payload["i"]]))


class PacedBuilder(ReadyBuilder):
    """A :class:`ReadyBuilder` whose builds come back one every ``seconds`` (as real builds
    trickle in, so the runner's worker is often idle when a candidate reaches it)."""

    def __init__(self, builds: list, seconds: float):
        super().__init__(builds)
        self.seconds = seconds
        self._next = 0.0

    def submit(self, key, inp):
        self._next = max(self._next, time.monotonic()) + self.seconds
        self._done.append((self._next, key, self.builds[inp.payload["i"]]))

    def collect(self, timeout=0.0):
        now = time.monotonic()
        out = [(key, b) for at, key, b in self._done if at <= now]
        self._done = [d for d in self._done if d[0] > now]
        return out


@pytest.fixture(scope="module")
def base():
    """One task, its reference and one candidate's artifact as the tuner holds them."""
    task = add_task()
    return task, shipped(artifact(task)), shipped(artifact(task))


def candidates(base, behaviours) -> tuple:
    """Inputs and a builder whose builds do ``behaviours`` (see :func:`_fake_load`)."""
    task, _, art = base
    builds = []
    for how in behaviours:
        c = pickle.loads(pickle.dumps(art))
        c.stage_seconds = {"fake": how}
        builds.append(measure.BuildResult(c, 0, "", 0.01, {}))
    inputs = [MeasureInput(task, PIPE, {"i": i}) for i in range(len(builds))]
    return inputs, ReadyBuilder(builds)


@pytest.fixture
def make_runner(base, monkeypatch):
    """A LocalRunner whose pool forks workers onto the fake device."""
    made = []
    monkeypatch.setattr(runner_gpu, "_say_if_no_gpu", lambda: None)

    def make(**options):
        r = runner_gpu.LocalRunner(min_repeat_ms=1.0, **options)
        r._pool = WorkerPool(1, "fork", initializer=fake_worker_init, prefetch=1,
                             name="fake-gpu-runner")
        monkeypatch.setattr(r, "_background_reference", lambda *a: base[1])
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


class Stalled(BaseException):
    """Raised in the test's thread when a measurement outlives its time limit (a
    BaseException, so that no ``except Exception`` on the way swallows it)."""


def measure_within(inputs, builder, runner, seconds: float = LIMIT_S) -> list:
    """``measure_batch`` (in this thread, as a tuner runs it), failing the test if it has
    not returned within ``seconds``."""

    def stalled(signum, frame):
        raise Stalled

    old = signal.signal(signal.SIGALRM, stalled)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return measure_batch(inputs, builder, runner)
    except Stalled:
        pytest.fail(f"measure_batch of {len(inputs)} candidates did not return within "
                    f"{seconds:g} s: the runner stalled with {runner.pending} candidate(s) "
                    f"pending", pytrace=False)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# -- the pool -----------------------------------------------------------------------------------


def _echo(x):
    return x


def test_a_job_submitted_to_an_idle_worker_starts_at_once():
    """Waiting on the pool's waitables after a submit wakes with the job's answer (a job
    left queued while the worker idles would never wake the waiter)."""
    with WorkerPool(1, "fork") as pool:
        assert pool.run([("warm", _echo, (0,))], timeout=30)[0].status == "ok"
        pool.submit("next", _echo, (1,), timeout=30)
        assert wait_any(pool.waitables(), LIMIT_S), "the idle worker was never given the job"
        (out,) = pool.poll(LIMIT_S)
        assert (out.key, out.status, out.value) == ("next", "ok", 1)


def test_a_job_for_a_worker_that_died_idle_goes_to_its_successor():
    with WorkerPool(1, "fork") as pool:
        assert pool.run([("warm", _echo, (0,))], timeout=30)[0].status == "ok"
        (w,) = pool._workers
        w.process.kill()  # killed while idle: the pool has not noticed yet
        w.process.join(5)
        pool.submit("next", _echo, (2,), timeout=30)
        out = []
        end = time.monotonic() + LIMIT_S
        while not out and time.monotonic() < end:
            out = pool.poll(1.0)
        assert [(o.key, o.status, o.value) for o in out] == [("next", "ok", 2)], out


@pytest.mark.parametrize("method", ["fork", "exec"])
def test_workers_outlive_the_thread_that_started_them(method):
    """Linux kills a worker when the thread that started it ends (PR_SET_PDEATHSIG): a
    MeasureStream's thread, one per tuning call, would take the workers with it. The job
    is ``os.getpid``: an exec'd worker imports a job's function by its module's name, which
    for a function of this file depends on the name of the checkout's folder."""
    with WorkerPool(1, method) as pool:
        box = {}
        t = threading.Thread(target=lambda: box.update(
            first=pool.run([("a", os.getpid, ())], timeout=30)[0]))
        t.start()
        t.join(LIMIT_S)
        assert box["first"].status == "ok", box["first"]
        time.sleep(0.3)  # the worker would be killed as its starting thread ended
        (w,) = pool._workers
        assert w.process.is_alive(), "the worker died with the thread that started it"
        (again,) = pool.run([("b", os.getpid, ())], timeout=30)
        assert again.value == box["first"].value and pool.restarts == 0


# -- the runner ---------------------------------------------------------------------------------


def test_candidates_that_all_fail_to_load_each_get_one_result(base, make_runner):
    runner = make_runner()
    inputs, builder = candidates(base, ["load"] * 20)
    res = measure_within(inputs, builder, runner)
    assert len(res) == 20
    assert all(r.error_no == MeasureErrorNo.COMPILE_DEVICE for r in res), [
        r.error_msg for r in res]
    assert all("stage ptx was not run" in r.error_msg for r in res)
    parts = runner.run_parts
    # the worker kept the task's inputs and its reference: sent once, never asked for again
    assert parts.references == 1 and parts.resent == 0
    assert runner.pending == 0 and runner._inflight == {}


def test_rounds_of_failing_candidates_through_a_stream_all_come_back(base, make_runner):
    """As tune-network measures: rounds queued on a MeasureStream, whose thread waits on the
    runner's pipes between answers (where the H200 run stalled with 149 of 150 records)."""
    runner = make_runner()
    inputs, ready = candidates(base, ["load"] * 150)
    with MeasureStream(PacedBuilder(ready.builds, 0.002), runner) as stream:
        futures = [stream.submit(inputs[i:i + 15]) for i in range(0, 150, 15)]
        for n, fut in enumerate(futures):
            try:
                res = fut.result(timeout=LIMIT_S)
            except concurrent.futures.TimeoutError:
                pytest.fail(f"round {n + 1} of 10 did not come back within {LIMIT_S:g} s: "
                            f"{stream.measured} of 150 measured", pytrace=False)
            assert [r.error_no for r in res] == [MeasureErrorNo.COMPILE_DEVICE] * 15
        assert stream.measured == 150
    assert runner.run_parts.references == 1 and runner.run_parts.resent == 0


def test_a_cubin_the_driver_refuses_is_a_compile_error_and_keeps_the_task(base, make_runner):
    runner = make_runner()
    inputs, builder = candidates(base, ["ok", "image", "image", "ok", "wrong", "ok"])
    res = measure_within(inputs, builder, runner)
    codes = [r.error_no for r in res]
    assert codes == [0, MeasureErrorNo.COMPILE_DEVICE, MeasureErrorNo.COMPILE_DEVICE, 0,
                     MeasureErrorNo.WRONG_ANSWER, 0], [r.error_msg for r in res]
    assert "CUDA_ERROR_INVALID_IMAGE" in res[1].error_msg
    assert res[0].correctness == "passed"
    parts = runner.run_parts
    assert parts.references == 1 and parts.resent == 0


def test_a_fault_in_the_middle_sends_the_reference_to_the_new_worker(base, make_runner):
    runner = make_runner(check_correctness=True)
    inputs, builder = candidates(base, ["ok", "fault", "ok", "load"] + ["ok"] * 16)
    res = measure_within(inputs, builder, runner)
    codes = [r.error_no for r in res]
    assert codes == [0, MeasureErrorNo.RUNTIME_DEVICE, 0, MeasureErrorNo.COMPILE_DEVICE] + [
        0] * 16, [r.error_msg for r in res]
    assert "ILLEGAL_ADDRESS" in res[1].error_msg
    assert all(r.correctness == "passed" for r in res[4:])
    assert runner._pool.restarts == 0  # the faulted worker retired itself after answering
    parts = runner.run_parts
    # the reference went to both workers; to the second with a candidate submitted after
    # the fault, or with the first that asked for it. Only candidates handed to the new
    # worker before the runner saw the first ask asked too (at most two answers read at
    # once, one running and one sent ahead after them); the candidate sent again goes
    # first, and its reference serves the 12 or more queued behind it
    assert parts.resent <= 4, parts.line()
    assert 2 <= parts.references <= 2 + parts.resent, parts.line()
    assert parts.candidates == 20


def test_a_fault_as_the_last_candidate_ends_the_run(base, make_runner):
    runner = make_runner()
    inputs, builder = candidates(base, ["ok", "fault"])
    res = measure_within(inputs, builder, runner)
    assert [r.error_no for r in res] == [0, MeasureErrorNo.RUNTIME_DEVICE]
    # the next batch goes to a fresh worker: the reference goes with it, not asked for
    (again,) = measure_within(*candidates(base, ["ok"]), runner)
    assert again.error_no == 0
    assert runner.run_parts.references == 2 and runner.run_parts.resent == 0


def test_a_task_the_worker_let_go_gets_its_reference_again(base, make_runner, monkeypatch):
    monkeypatch.setattr(runner_gpu, "TASKS_KEPT", 1)  # the forked worker keeps one task
    task_a, ref_a, art_a = base
    task_b = add_task(96, "add96")
    ref_b, art_b = shipped(artifact(task_b)), shipped(artifact(task_b))
    runner = make_runner()
    refs = {task_a.workload_key: ref_a, task_b.workload_key: ref_b}
    monkeypatch.setattr(runner, "_background_reference",
                        lambda key, task, options: refs[task.workload_key])
    faster = pickle.loads(pickle.dumps(art_a))
    faster.stage_seconds = {"ms": 0.005}  # beats A's best: checked, so it needs the reference
    for task, art in ((task_a, art_a), (task_b, art_b), (task_a, faster)):
        build = measure.BuildResult(art, 0, "", 0.01, {})
        (r,) = measure_within([MeasureInput(task, PIPE, {"i": 0})], ReadyBuilder([build]),
                              runner)
        assert r.error_no == 0 and r.correctness == "passed", r
    # B's inputs pushed A's out of the worker, and its answer said so: A's candidate went
    # with the reference instead of being sent back for it
    parts = runner.run_parts
    assert parts.references == 3 and parts.resent == 0, parts.line()


def test_a_hang_replaces_the_worker_and_the_reference_follows(base, make_runner):
    runner = make_runner(timeout=0.5, check_correctness=True)
    for how, code in (("ok", 0), ("hang", MeasureErrorNo.RUN_TIMEOUT), ("ok", 0)):
        (r,) = measure_within(*candidates(base, [how]), runner)
        assert r.error_no == code, r.error_msg
    assert runner._pool.restarts == 1
    parts = runner.run_parts
    assert parts.references == 2 and parts.resent == 0


def test_a_candidate_asked_for_its_reference_twice_gets_an_error(base, make_runner,
                                                                  monkeypatch):
    runner = make_runner()
    monkeypatch.setattr(runner_gpu, "gpu_run", always_asks)
    inputs, builder = candidates(base, ["ok"] * 3)
    res = measure_within(inputs, builder, runner)
    assert all(r.error_no == MeasureErrorNo.UNKNOWN_ERROR for r in res)
    assert all("asked again for the reference" in r.error_msg for r in res), res[0].error_msg
    # each candidate was sent again once (with the reference), never more
    assert runner.run_parts.resent == 3
    assert runner._pool.stats().jobs == 6
