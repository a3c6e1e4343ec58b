"""The GPU runner's logic on the CPU, with a fake CUDA driver and device: the graph timer's
pilot and early stop, the reference kept per task in the worker (sent once, sent again to a
worker that lacks it), several tasks' inputs kept at once, the parts of the worker's time,
and the artifact's payload that the tuner's process never unpickles."""

from __future__ import annotations

import math
import pickle
from types import SimpleNamespace

import numpy as np
import pytest

from ptxforge import te
from ptxforge.measure import (
    BuildOptions,
    MeasureInput,
    TaskSpec,
    build_candidate,
    runner_gpu,
    timing,
)
from ptxforge.measure.pool import JobOutcome, PoolStats

# -- a fake driver: a virtual GPU clock ------------------------------------------------------


class FakeDriver:
    """Enough of ``cuda.bindings.driver`` for the timer: launches advance a virtual clock
    by the kernel's time, graphs replay their captured launches, events read the clock."""

    class CUstream_flags:  # noqa: N801 - the binding's names
        CU_STREAM_NON_BLOCKING = 1

    class CUstreamCaptureMode:  # noqa: N801
        CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1

    class CUevent_flags:  # noqa: N801
        CU_EVENT_DEFAULT = 0

    def __init__(self):
        self.clock_ms = 0.0
        self.capturing = None
        self.events: dict = {}
        self.graphs: dict = {}
        self.calls: list = []
        self.live = set()

    def launch(self, stream, ms: float) -> None:
        if self.capturing is not None:
            self.capturing.append(ms)
        else:
            self.clock_ms += ms

    def call(self, name: str, *args):
        self.calls.append(name)
        if name == "cuStreamCreate":
            self.live.add(("stream", len(self.calls)))
            return len(self.calls)
        if name == "cuStreamDestroy":
            self.live.discard(("stream", args[0]))
            return None
        if name == "cuEventCreate":
            h = len(self.calls)
            self.events[h] = 0.0
            return h
        if name == "cuEventRecord":
            self.events[args[0]] = self.clock_ms
            return None
        if name == "cuEventElapsedTime":
            return self.events[args[1]] - self.events[args[0]]
        if name == "cuStreamBeginCapture":
            self.capturing = []
            return None
        if name == "cuStreamEndCapture":
            g, self.capturing = self.capturing, None
            self.live.add(("graph", id(g)))
            return g
        if name == "cuGraphInstantiate":
            self.live.add(("exec", id(args[0])))
            return args[0]
        if name == "cuGraphLaunch":
            self.clock_ms += sum(args[0])
            return None
        if name == "cuGraphExecDestroy":
            self.live.discard(("exec", id(args[0])))
            return None
        if name == "cuGraphDestroy":
            self.live.discard(("graph", id(args[0])))
            return None
        return None  # synchronizations and event destruction: nothing to model


class FakeDevice:
    sm = "sm_90a"
    name = "Fake GPU"
    compute_capability = (9, 0)

    def sync(self):
        pass

    def activate(self):
        pass


@pytest.fixture
def fake(monkeypatch):
    d = FakeDriver()
    for mod in (timing, __import__("ptxforge.backend_ptx.timer", fromlist=["x"])):
        monkeypatch.setattr(mod, "call", d.call)
        monkeypatch.setattr(mod, "driver", lambda: FakeDriver)
    return d


# -- the timer ------------------------------------------------------------------------------


def test_graph_timer_times_replays_and_captures_once_per_size(fake):
    t = timing.GraphTimer(lambda stream: fake.launch(stream, 0.004), FakeDevice(), number=3)
    r = t.run(repeat=2, min_repeat_ms=10.0)
    assert not r.stopped_early
    assert len(r.costs) == 2
    assert all(c == pytest.approx(4e-6) for c in r.costs)
    assert r.number * 0.004 >= 10.0  # a repeat lasts at least min_repeat_ms
    # one small capture to size the graph, one of about GRAPH_CHUNK_MS: never more
    assert fake.calls.count("cuStreamBeginCapture") == 2
    assert not fake.live  # streams, graphs and execs all released


def test_graph_timer_stops_after_the_pilot_when_clearly_slower(fake):
    t = timing.GraphTimer(lambda stream: fake.launch(stream, 0.02), FakeDevice(), number=3)
    r = t.run(repeat=1, min_repeat_ms=10.0, stop_above=1e-5)  # 20 us > 10 us
    assert r.stopped_early
    assert r.costs == (pytest.approx(2e-5),)
    assert r.number * 0.02 < 10.0 and r.number * 0.02 >= timing.PILOT_MS
    spent = fake.clock_ms
    fake.clock_ms = 0.0
    full = t.run(repeat=1, min_repeat_ms=10.0, stop_above=1e-4)  # 20 us < 100 us: on
    assert not full.stopped_early and full.number * 0.02 >= 10.0
    assert spent < fake.clock_ms / 3  # the pilot cost a fraction of the full timing


def test_graph_timer_without_a_graph_launches_directly(fake):
    t = timing.GraphTimer(lambda stream: fake.launch(stream, 0.5), FakeDevice(), number=2,
                          graph=False)
    r = t.run(repeat=1, min_repeat_ms=5.0)
    assert r.costs == (pytest.approx(5e-4),)
    assert "cuStreamBeginCapture" not in fake.calls


def test_graph_timer_rejects_bad_counts():
    with pytest.raises(ValueError, match="number"):
        timing.GraphTimer(lambda s: None, FakeDevice(), number=0)


# -- the worker, in this process, on a fake device -------------------------------------------


def add_task(n: int = 64, name: str = "add") -> TaskSpec:
    a = te.placeholder((n,), name="A")
    b = te.compute((n,), lambda i: a[i] + 1.0, name="B")
    return TaskSpec.from_tensors([a, b], name)


PIPE = 'bind(B.i, "threadIdx.x")'


def artifact(task: TaskSpec):
    res = build_candidate(MeasureInput(task, PIPE), BuildOptions(compile_to="ir"))
    assert not res.error_no, res.error_msg
    art = res.artifact
    art.target_sm = "sm_90a"
    return art


class FakeArray:
    def __init__(self, host: np.ndarray):
        self.host = host.copy()
        self.ptr = id(self)

    def numpy(self):
        return self.host.copy()

    def copyfrom(self, host):
        self.host[...] = host


class FakeLoaded:
    """A loaded module that writes ``A + offset`` into B and takes ``ms`` per run."""

    def __init__(self, driver: FakeDriver, offset: float, ms: float):
        self.driver, self.offset, self.ms = driver, offset, ms

    def __call__(self, *arrays):
        arrays[1].host[...] = arrays[0].host + self.offset

    def _run_ptrs(self, ptrs, stream, dependent):
        self.driver.launch(stream, self.ms)
        self.driver.dependent = getattr(self.driver, "dependent", set()) | {dependent}


@pytest.fixture
def worker(fake, monkeypatch):
    """The worker's state on a fake device; ``speeds[id(artifact)] = (offset, ms)`` says
    what each candidate computes and how long it runs."""
    speeds: dict = {}
    loads: list = []

    def load(art, module):
        loads.append(id(art))
        return FakeLoaded(fake, *speeds.get(id(art), (1.0, 0.01)))

    monkeypatch.setattr(runner_gpu, "_upload", lambda host: [FakeArray(h) for h in host])
    monkeypatch.setattr(runner_gpu, "_load", load)
    monkeypatch.setattr(runner_gpu, "_healthy", lambda: True)
    runner_gpu._state.clear()
    runner_gpu._state.update(device=FakeDevice(), name="Fake GPU (sm_90a)",
                             tasks=runner_gpu.OrderedDict())
    yield speeds, loads
    runner_gpu._state.clear()


def request(task_key, art, ref=None, checked=True, best=math.inf, stop=math.inf,
            check_all=False):
    return runner_gpu.RunRequest(task_key, art, ref, 3, 1, 10.0, True, best=best,
                                 checked=checked, check_all=check_all, stop_factor=stop)


def test_worker_checks_with_the_reference_it_keeps(worker):
    speeds, _ = worker
    task = add_task()
    ref, good, bad = artifact(task), artifact(task), artifact(task)
    speeds[id(bad)] = (2.0, 0.005)  # writes A + 2: wrong, and faster than the best
    r = runner_gpu.gpu_run(request("t", good, ref))
    assert r["error_no"] == 0 and r["correctness"] == "passed"
    assert set(r["parts"]) == set(runner_gpu.RUN_PARTS) and r["parts"]["time"] > 0
    # the reference stays in the worker: later candidates come without it
    r = runner_gpu.gpu_run(request("t", bad, None))
    assert r["error_no"] == int(runner_gpu.MeasureErrorNo.WRONG_ANSWER)
    assert "B:" in r["error_msg"] and "beat the task's best" in r["error_msg"]


def test_worker_asks_for_a_reference_it_does_not_hold(worker):
    task = add_task()
    r = runner_gpu.gpu_run(request("t", artifact(task), None))
    assert r == {"need_reference": True, "parts": r["parts"]}
    # a candidate timed first asks for it only when it would be the best
    speeds, _ = worker
    slow = artifact(task)
    speeds[id(slow)] = (1.0, 0.05)
    r = runner_gpu.gpu_run(request("t", slow, None, best=1e-6))
    assert r["error_no"] == 0 and r["correctness"] == ""
    r = runner_gpu.gpu_run(request("t", slow, None, best=1.0))
    assert r.get("need_reference")


def test_worker_keeps_several_tasks(worker, monkeypatch):
    monkeypatch.setattr(runner_gpu, "TASKS_KEPT", 2)
    tasks = [add_task(64 + 32 * i, f"add{i}") for i in range(3)]
    arts = [artifact(t) for t in tasks]
    for i in (0, 1, 0, 1):  # alternating tasks: each keeps its inputs and its reference
        r = runner_gpu.gpu_run(request(f"t{i}", arts[i], arts[i] if i not in
                                       runner_gpu._state["tasks"] else None, check_all=True))
        assert r["error_no"] == 0 and r["correctness"] == "passed"
    assert list(runner_gpu._state["tasks"]) == ["t0", "t1"]
    runner_gpu.gpu_run(request("t2", arts[2], arts[2], check_all=True))
    assert list(runner_gpu._state["tasks"]) == ["t1", "t2"]  # the oldest went


def test_worker_stops_a_slow_candidate_after_the_pilot(worker):
    speeds, _ = worker
    task = add_task()
    ref, slow = artifact(task), artifact(task)
    speeds[id(slow)] = (1.0, 0.05)
    runner_gpu.gpu_run(request("t", ref, ref))  # checked, and the worker's best: 10 us
    r = runner_gpu.gpu_run(request("t", slow, None, stop=1.5))
    assert r["stopped_early"] and r["error_no"] == 0
    assert r["costs"] == (pytest.approx(5e-5),)
    assert r["correctness"] == ""  # slower than the best: not checked


def test_worker_uses_its_own_best_where_the_runners_is_older(worker):
    """Candidates queue for the worker with the best the runner knew when it sent them;
    the worker checks and stops against the best it measured since."""
    speeds, _ = worker
    task = add_task()
    ref, fast, slow, faster = (artifact(task) for _ in range(4))
    speeds[id(fast)] = (1.0, 0.01)
    speeds[id(slow)] = (1.0, 0.05)
    speeds[id(faster)] = (1.0, 0.005)
    # all four sent while the runner knew no best
    r = runner_gpu.gpu_run(request("t", fast, ref, stop=1.5))
    assert r["correctness"] == "passed" and not r["stopped_early"]
    r = runner_gpu.gpu_run(request("t", slow, None, stop=1.5))
    assert r["correctness"] == "" and r["stopped_early"]  # not checked again: stopped
    r = runner_gpu.gpu_run(request("t", faster, None, stop=1.5))
    assert r["correctness"] == "passed" and not r["stopped_early"]  # a new best: checked
    assert runner_gpu._state["tasks"]["t"].best == pytest.approx(5e-6)


# -- the runner's side, with an in-process pool ---------------------------------------------


class InlinePool:
    """A pool that runs each job in this process when polled."""

    def __init__(self):
        self.queue: list = []
        self.jobs = 0

    def submit(self, key, fn, args, timeout=None, first=False):
        self.queue.insert(0 if first else len(self.queue), (key, fn, args))

    @property
    def pending(self):
        return len(self.queue)

    def poll(self, timeout=0.0):
        out = []
        while self.queue:
            key, fn, args = self.queue.pop(0)
            # the job travels by pickle, as to a worker process
            fn, args = pickle.loads(pickle.dumps((fn, args)))
            self.jobs += 1
            out.append(JobOutcome(key, "ok", value=fn(*args), seconds=0.001))
        return out

    def waitables(self):
        return []

    def next_deadline(self):
        return None

    def stats(self):
        return PoolStats(1, self.jobs)

    def close(self):
        self.queue.clear()


def runner_with(ref_art, monkeypatch, **options):
    monkeypatch.setattr(runner_gpu, "_say_if_no_gpu", lambda: None)
    r = runner_gpu.LocalRunner(min_repeat_ms=10.0, **options)
    r._pool = InlinePool()
    monkeypatch.setattr(r, "_background_reference", lambda *a: ref_art)
    return r


def shipped(art):
    """The artifact as the tuner's process holds it: unpickled from a builder's answer
    (with a stand-in cubin: the fake device loads none)."""
    art.kernels = {"main_kernel": SimpleNamespace(cubin=b"\0", resources=None)}
    return pickle.loads(pickle.dumps(art))


def test_runner_sends_the_reference_once_per_task(worker, fake, monkeypatch):
    from ptxforge.measure.result import BuildResult

    task = add_task()
    runner = runner_with(shipped(artifact(task)), monkeypatch)
    # what a candidate runs as travels with it (its stage times survive the pickling)
    monkeypatch.setattr(runner_gpu, "_load", lambda art, module: FakeLoaded(
        fake, 1.0, art.stage_seconds.get("ms", 0.01)))
    inp = MeasureInput(task, PIPE)

    def submit(key, ms):
        c = artifact(task)
        c.stage_seconds = {"ms": ms}
        runner.submit(key, inp, BuildResult(shipped(c), 0, "", 0.1, {}))
        return runner.collect(0.0)

    results = []
    for i, ms in enumerate((0.01, 0.013, 0.07, 0.1)):
        results += submit(i, ms)
    assert [k for k, _ in results] == [0, 1, 2, 3]
    res = dict(results)
    assert res[0].correctness == "passed" and res[0].error_no == 0, res[0]
    parts = runner.run_parts
    assert parts.references == 1 and parts.resent == 0 and parts.candidates == 4
    # candidates 2 and 3 are far slower than the best (candidate 0): the pilot ended them;
    # candidate 1 is near it, so it was timed in full (and not checked: it is slower)
    assert parts.stopped_early == 2
    assert res[1].correctness == "" and res[1].mean == pytest.approx(1.3e-5)
    assert res[2].mean == pytest.approx(7e-5) and res[3].mean == pytest.approx(1e-4)
    assert "pilot for 2" in parts.line()

    # a fresh worker (it lost every task) asks again, and the candidate comes back with it
    runner_gpu._state["tasks"].clear()
    assert submit(9, 0.001) == []  # asked for the reference: sent again
    assert runner.pending == 1
    (key, r9), = runner.collect(0.0)
    assert key == 9 and r9.correctness == "passed" and r9.error_no == 0
    assert r9.mean == pytest.approx(1e-6)
    assert runner.run_parts.resent == 1 and runner.run_parts.references == 2


def test_runner_without_early_stop_times_every_candidate_fully(worker, fake, monkeypatch):
    from ptxforge.measure.result import BuildResult

    task = add_task()
    runner = runner_with(shipped(artifact(task)), monkeypatch, early_stop=False)
    monkeypatch.setattr(runner_gpu, "_load", lambda art, module: FakeLoaded(
        fake, 1.0, art.stage_seconds.get("ms", 0.01)))
    for i, ms in enumerate((0.01, 0.1)):
        c = artifact(task)
        c.stage_seconds = {"ms": ms}
        runner.submit(i, MeasureInput(task, PIPE), BuildResult(shipped(c), 0, "", 0.1, {}))
        runner.collect(0.0)
    assert runner.run_parts.stopped_early == 0 and runner.run_parts.candidates == 2


@pytest.mark.parametrize("dependent", [True, False])
def test_the_runner_times_its_candidates_in_its_launch_mode(worker, fake, monkeypatch,
                                                           dependent):
    """Timed runs are launched alone unless the runner is told to launch each as a
    dependent of the run before (``dependent_launch=True``), as a network's CUDA graph
    launches its kernels."""
    from ptxforge.measure.result import BuildResult

    task = add_task()
    opts = {"dependent_launch": True} if dependent else {}
    runner = runner_with(shipped(artifact(task)), monkeypatch, **opts)
    assert runner.dependent_launch is dependent
    runner.submit(0, MeasureInput(task, PIPE), BuildResult(shipped(artifact(task)), 0, "",
                                                           0.1, {}))
    ((_, res),) = runner.collect(0.0)
    assert res.error_no == 0
    assert fake.dependent == {dependent}


def test_the_tuners_process_never_unpickles_the_payload():
    task = add_task()
    art = artifact(task)
    once = pickle.dumps(art)
    there = pickle.loads(once)
    assert not there.unpacked
    assert there.registers() == {} and there.has_cubins() is False
    assert there.output_params == art.output_params
    again = pickle.dumps(there)  # passed on to the runner: the same payload, not re-pickled
    assert not there.unpacked
    assert pickle.loads(again)._packed == there._packed
    runner_side = pickle.loads(again)
    assert str(runner_side.module) == str(art.module)  # unpickled where used
    assert runner_side.unpacked
    assert runner_side.host_module().host.params[0].name == "A"


def test_the_runners_copy_leaves_the_kernels_ir_behind():
    task = add_task()
    art = artifact(task)
    there = pickle.loads(pickle.dumps(art))
    slim = there.for_runner()
    assert not there.unpacked and not slim.unpacked
    assert len(pickle.dumps(slim)) < len(pickle.dumps(there))
    runner_side = pickle.loads(pickle.dumps(slim))
    host = runner_side.host_module()
    assert [p.name for p in host.host.params] == [p.name for p in art.module.host.params]
    assert runner_side.kernels == {} and runner_side.output_params == art.output_params
    with pytest.raises(AttributeError, match="what a GPU runner needs"):
        _ = runner_side.module
    assert "sm_90a" in repr(runner_side)
