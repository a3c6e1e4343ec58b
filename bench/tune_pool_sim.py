"""The network tuner's builders and runner, simulated on the CPU: how busy the search keeps
16 build workers, without a GPU and without compiling anything.

The real :class:`~ptxforge.autosched.TaskScheduler`, search policies and measure stream run
against a builder of ``--workers`` threads whose builds sleep, and a runner that measures
one candidate at a time. The search of a round holds the interpreter lock for
``--search-ms`` per trial, a real search of small populations included, so the measure
thread competes with it as it does in a run. Times scale by ``--scale`` (0.5: every
duration halved, the run twice as fast, the same shape).

Two sources of build times:

- ``--records DIR --nets bert,resnet_v1-18,...``: the records of GPU runs (``DIR/NET.json``
  with each candidate's ``all_cost``, ``DIR/NET.log`` with its ``--profile`` lines). Task
  ``k`` of the simulation builds in times drawn from the records of the run's task ``k``
  (their ``all_cost`` less the runner's time per candidate): each candidate stands for
  one of the task's sketches in the run, drawn with the share it had there, and builds in
  a time of that sketch, which the stream's estimates see too (:class:`StandIn`); a task
  with fewer records than a round has that many candidates in all (its space: a cast, a
  pooling), and the search's and the runner's costs per trial are the run's. 1,000
  trials, rounds of 64 as ``tune-network`` sizes them. Each mode of ``--modes`` runs every
  network:
  ``old`` the scheduler waiting for the oldest round after its warm-up, and a stream that
  hands every candidate to the builder in the order searched; ``lpt`` that scheduler with
  the stream that builds each round's slowest candidates first and, after the last round,
  every waiting candidate slowest first; ``busy`` the scheduler that searches whenever the
  builders run low (``keep_builders_busy``) with the old stream; ``new`` both.
- otherwise a synthetic network: ``--tasks`` tasks of ``--per-round``, builds lognormal
  around ``--build-ms`` (each task with a median of its own between 0.6x and 1.6x), and
  ``--settings`` (``backlog:search_ms``, the warm-up's ``BACKLOG_PER_WORKER`` and the
  search's cost per trial); ``--search-jitter`` varies each round's search time.

It prints trials/s, the builders' busy share and their idle worker-seconds with nothing
queued (with ``--repeat``, the medians of the runs of each mode, run in turn): before the
first candidate came, between the first and the last handed over, and after it (the
tail).

    PYTHONPATH=<parent of the checkout> python3 bench/tune_pool_sim.py \\
        --records /work/scratch/tune_h200/f --nets bert,resnet_v1-18,resnet_v1-50,mobilenet_v2
    PYTHONPATH=<parent of the checkout> python3 bench/tune_pool_sim.py \\
        [--tasks 19] [--per-round 42] [--settings 3:9.2,8:9.2,8:4.6] [--scale 0.5] \\
        [--search-jitter 0.8]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import queue
import re
import threading
import time
from collections import deque
from dataclasses import dataclass

import numpy as np
from ptxforge import autosched, measure, ops, te
from ptxforge.autosched import task_scheduler
from ptxforge.autosched.search_policy import SketchPolicy
from ptxforge.autosched.state import state_from_payload
from ptxforge.measure import build_times
from ptxforge.measure import stream as measure_stream

POLICY = {"evolutionary_search_population": 128, "evolutionary_search_num_iters": 1}
MODES = {"old": (False, False), "lpt": (False, True), "busy": (True, False),
         "new": (True, True)}  # mode: (keep_builders_busy, the ordering stream)


@autosched.register_workload
def sim_conv(n, h, w, co, ci, k):
    data = te.placeholder((n, ci, h, w), name="data")
    kernel = te.placeholder((co, ci, k, k), name="kernel")
    out = ops.nn.conv2d_nchw(data, kernel, 1, k // 2, dilation=1, out_dtype="float32")
    return [data, kernel, ops.nn.relu(out)]


def sim_tasks(n: int) -> list:
    """``n`` distinct small convolution tasks."""
    shapes = [(co, ci) for co in (8, 16, 24, 32, 48, 64, 96) for ci in (8, 16, 24, 32, 48, 64)]
    if n > len(shapes):
        raise SystemExit(f"at most {len(shapes)} tasks can be simulated, got {n}")
    return [autosched.SearchTask(func=sim_conv, args=(1, 8, 8, co, ci, 3), desc=f"conv{k}")
            for k, (co, ci) in enumerate(shapes[:n])]


@dataclass(frozen=True)
class NetworkRun:
    """What the simulation takes from a GPU run: each task's build times by sketch
    (``{sketch name: seconds}``, tasks in the order they first appear in the run's
    records), the candidates of each task whose space was smaller than a round (else
    None), the search's and the runner's milliseconds per trial."""

    name: str
    builds: list
    spaces: list
    search_ms: float
    run_ms: float


def read_network_run(folder: str, name: str, trials: int, per_round: int) -> NetworkRun:
    by_task: dict = {}
    with open(os.path.join(folder, f"{name}.json")) as f:
        for line in f:
            rec = json.loads(line)
            sketch = (rec.get("payload") or {}).get("sketch") or "-"
            by_task.setdefault(rec["task"]["key"], {}).setdefault(sketch, []).append(
                float(rec["result"]["all_cost"]))
    search_ms, run_ms = 4.0, 10.3
    log = os.path.join(folder, f"{name}.log")
    if os.path.exists(log):
        text = open(log).read()
        if m := re.search(r"main process: search ([0-9.]+) s", text):
            search_ms = float(m.group(1)) * 1e3 / trials
        if m := re.search(r"runner: 1 worker, (\d+) jobs: working ([0-9.]+) worker-s", text):
            run_ms = float(m.group(2)) * 1e3 / int(m.group(1))
    round_size = min(per_round, trials // len(by_task))
    builds = [{sk: np.maximum(np.array(v) - run_ms / 1e3, 0.01) for sk, v in task.items()}
              for task in by_task.values()]
    counts = [sum(len(v) for v in task.values()) for task in by_task.values()]
    spaces = [n if n < round_size else None for n in counts]
    return NetworkRun(name, builds, spaces, search_ms, run_ms)


class StandIn:
    """Which of its GPU run's sketches a simulated candidate stands for: one drawn, by a
    hash of the candidate's state, with the share each sketch had among the task's
    records; its build time is drawn from that sketch's builds. The measure stream sees
    that sketch too (:func:`stand_in_sketches`), so its build-time estimates by sketch
    work as they do in the run."""

    def __init__(self, tasks, builds: list, scale: float, seed: int):
        self.table = {}
        for task, by_sketch in zip(tasks, builds):
            names = sorted(by_sketch, key=lambda k: -len(by_sketch[k]))
            counts = np.array([len(by_sketch[k]) for k in names], dtype=float)
            self.table[task.workload_key] = (names, np.cumsum(counts) / counts.sum(),
                                             [by_sketch[k] * scale for k in names])
        self.rng = np.random.default_rng(seed)

    def sketch(self, inp) -> str:
        names, cum, _ = self.table[inp.task.workload_key]
        digest = hashlib.sha256(json.dumps(inp.payload, sort_keys=True).encode()).digest()
        u = int.from_bytes(digest[:8], "little") / 2 ** 64
        return names[min(int(np.searchsorted(cum, u, side="right")), len(names) - 1)]

    def draw(self, inp) -> float:
        names, _, times = self.table[inp.task.workload_key]
        return float(self.rng.choice(times[names.index(self.sketch(inp))]))


@contextlib.contextmanager
def stand_in_sketches(stand_in: StandIn | None):
    """The measure stream's build-time estimates key candidates by the sketch they stand
    for."""
    if stand_in is None:
        yield
        return
    old = build_times.sketch_of
    build_times.sketch_of = stand_in.sketch
    try:
        yield
    finally:
        build_times.sketch_of = old


class SimBuilder(measure.Builder):
    """``n_parallel`` threads; a build sleeps for ``draw(input)`` seconds. As the
    worker pool of :class:`~ptxforge.measure.LocalBuilder` does, the threads reach at most
    two jobs each (one building, one sent ahead) by themselves; the rest are dispatched
    when the measure thread calls :meth:`submit` or :meth:`collect`. Logs each worker's
    waits with nothing queued and the time it spent building."""

    def __init__(self, n_parallel: int, draw):
        self.n_parallel = n_parallel
        self.draw = draw
        self._backlog: deque = deque()  # submitted, not dispatched to the threads yet
        self._out = 0  # dispatched and not collected
        self._jobs: queue.Queue = queue.Queue()
        self._done: list = []
        self._lock = threading.Lock()
        self._pending = 0
        self.waits: list = []
        self.busy_s = 0.0
        self.submits: list = []
        self._threads = [threading.Thread(target=self._work, daemon=True)
                         for _ in range(n_parallel)]
        for t in self._threads:
            t.start()

    def _work(self):
        while True:
            t0 = time.monotonic()
            job = self._jobs.get()
            self.waits.append((t0, time.monotonic()))
            if job is None:
                return
            key, seconds = job
            time.sleep(seconds)
            with self._lock:
                self.busy_s += seconds
                self._done.append((key, measure.BuildResult("built", 0, "", seconds)))

    def submit(self, key, inp):
        seconds = float(self.draw(inp))
        with self._lock:
            self._pending += 1
        self.submits.append(time.monotonic())
        self._backlog.append((key, seconds))
        self._dispatch()

    def _dispatch(self):
        while self._backlog and self._out < 2 * self.n_parallel:
            self._out += 1
            self._jobs.put(self._backlog.popleft())

    def collect(self, timeout=0.0):
        with self._lock:
            out, self._done = self._done, []
            self._pending -= len(out)
        self._out -= len(out)
        self._dispatch()
        return out

    @property
    def pending(self):
        return self._pending

    def close(self):
        for _ in self._threads:
            self._jobs.put(None)
        for t in self._threads:  # every wait logged before :meth:`idle` reads them
            t.join(5.0)

    def idle(self, start: float, end: float) -> tuple:
        """Worker-s idle with nothing queued: before the first candidate came (the first
        search), between the first and the last, and after the last (the tail)."""
        lo, hi = self.submits[0], self.submits[-1]

        def within(a0, b0):
            return sum(max(0.0, min(b, b0) - max(a, a0)) for a, b in self.waits)

        return within(start, lo), within(lo, hi), within(hi, end)


class SerialRunner(measure.Runner):
    """One candidate at a time, ``run_s`` each; its 'time' is the state's estimate."""

    def __init__(self, tasks, run_s: float):
        self.tasks = {t.workload_key: t for t in tasks}
        self.run_s = run_s
        self.free_at = 0.0
        self._queue: list = []

    def submit(self, key, inp, build):
        now = time.monotonic()
        self.free_at = max(now, self.free_at) + self.run_s
        task = self.tasks[inp.task.workload_key]
        st = state_from_payload(task, inp.payload)
        cost = float(task.features(st.row(task.state_width)[None])[2][0])
        self._queue.append((self.free_at, key, measure.MeasureResult(
            (cost,), 0, "", build.time_cost + self.run_s, time.time(), estimated=True)))

    def collect(self, timeout=0.0):
        now = time.monotonic()
        out = [(k, r) for t, k, r in self._queue if t <= now]
        self._queue = [q for q in self._queue if q[0] > now]
        return out

    @property
    def pending(self):
        return len(self._queue)


def make_policy(search_s_per_trial: float, jitter: float, seed: int, spaces: dict):
    """A sketch policy whose search holds the interpreter lock for ``search_s_per_trial``
    a trial (varied by ``jitter``; its own real search included), and whose task has only
    ``spaces[key]`` candidates in all where given."""
    rng = np.random.default_rng(seed + 1)

    class Policy(SketchPolicy):
        given = 0

        def search_one_round(self, num_measure):
            space = spaces.get(self.task.workload_key)
            if space is not None:
                num_measure = min(num_measure, space - self.given)
                if num_measure <= 0:
                    return np.zeros((0, self.task.state_width), dtype=np.int64)
            t0 = time.perf_counter()
            rows = super().search_one_round(num_measure)
            self.given += len(rows)
            # rounds vary: a task's first search makes its sketches and tile tables, the
            # cost model refits when its samples double
            factor = float(rng.lognormal(-jitter ** 2 / 2, jitter)) if jitter else 1.0
            # the small real search counts in the round's time (on a loaded machine it
            # may take longer than the round's share: then it is the round's time)
            end = t0 + search_s_per_trial * len(rows) * factor
            while time.perf_counter() < end:  # holds the interpreter lock, as a search does
                pass
            return rows
    return Policy


@contextlib.contextmanager
def stream_order(ordered: bool):
    """Without ``ordered``: the stream as it was, every candidate handed to the builder at
    once, in the order searched."""
    if ordered:
        yield
        return
    old = measure_stream.builder_capacity, build_times.BuildTimes.estimate
    measure_stream.builder_capacity = lambda builder: None
    build_times.BuildTimes.estimate = lambda self, inp: 0.0
    try:
        yield
    finally:
        measure_stream.builder_capacity, build_times.BuildTimes.estimate = old


def simulate(tasks, builder, runner, policy, args, trials, per_round, backlog,
             keep_busy=False, ordered=True, stand_in=None) -> dict:
    model = autosched.RandomModel(seed=args.seed)
    policies = [policy(t, model, POLICY, seed=k, verbose=0) for k, t in enumerate(tasks)]
    for t in tasks:  # sketches and tile tables made before the clock starts
        t.state_width  # noqa: B018
    old = task_scheduler.BACKLOG_PER_WORKER
    task_scheduler.BACKLOG_PER_WORKER = backlog
    ts = autosched.TaskScheduler(tasks, callbacks=[], seed=args.seed,
                                 keep_builders_busy=keep_busy)
    opts = autosched.TuningOptions(
        num_measure_trials=trials, num_measures_per_round=per_round, builder=builder,
        runner=runner, verbose=0, search_ahead=args.search_ahead)
    t0 = time.monotonic()
    try:
        with stream_order(ordered), stand_in_sketches(stand_in):
            ts.tune(opts, search_policy=policies)
    finally:
        task_scheduler.BACKLOG_PER_WORKER = old
        end = time.monotonic()
        builder.close()
    wall = end - t0
    first, between, tail = builder.idle(t0, end)
    s = args.scale
    return {"wall": wall / s, "trials": ts.ct, "rate": ts.ct / (wall / s),
            "busy": builder.busy_s / (args.workers * wall), "first": first / s,
            "between": between / s, "tail": tail / s}


def run_synthetic(args, backlog: int, search_ms: float) -> dict:
    rng = np.random.default_rng(args.seed)
    tasks = sim_tasks(args.tasks)
    medians = {t.workload_key: args.scale * args.build_ms / 1e3 * float(m)
               for t, m in zip(tasks, rng.uniform(0.6, 1.6, len(tasks)))}
    # the lognormal's mean is median * exp(sigma^2 / 2): keep the mean at --build-ms
    norm = np.exp(args.sigma ** 2 / 2) * np.mean(list(medians.values())) / (
        args.scale * args.build_ms / 1e3)
    medians = {k: v / norm for k, v in medians.items()}
    draws = np.random.default_rng(args.seed)
    builder = SimBuilder(args.workers, lambda inp: medians[inp.task.workload_key]
                         * draws.lognormal(0.0, args.sigma))
    runner = SerialRunner(tasks, args.scale * args.run_ms / 1e3)
    policy = make_policy(args.scale * search_ms / 1e3, args.search_jitter, args.seed, {})
    return simulate(tasks, builder, runner, policy, args,
                    args.trials or args.tasks * args.per_round, args.per_round, backlog)


def run_network(args, net: NetworkRun, mode: str) -> dict:
    keep_busy, ordered = MODES[mode]
    tasks = sim_tasks(len(net.builds))
    stand_in = StandIn(tasks, net.builds, args.scale, args.seed)
    builder = SimBuilder(args.workers, stand_in.draw)
    runner = SerialRunner(tasks, args.scale * net.run_ms / 1e3)
    spaces = {t.workload_key: n for t, n in zip(tasks, net.spaces) if n is not None}
    policy = make_policy(args.scale * net.search_ms / 1e3, args.search_jitter, args.seed,
                         spaces)
    return simulate(tasks, builder, runner, policy, args, args.trials or 1000, 64,
                    task_scheduler.BACKLOG_PER_WORKER, keep_busy, ordered, stand_in)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", help="a folder of GPU runs' NET.json and NET.log")
    ap.add_argument("--nets", default="bert,resnet_v1-18,resnet_v1-50,mobilenet_v2")
    ap.add_argument("--modes", default="old,lpt,busy,new")
    ap.add_argument("--tasks", type=int, default=19)
    ap.add_argument("--per-round", type=int, default=42)
    ap.add_argument("--trials", type=int, default=0,
                    help="default: 1,000 with --records, else one round per task")
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--build-ms", type=float, default=310.0)
    ap.add_argument("--sigma", type=float, default=0.5, help="lognormal sigma of a build")
    ap.add_argument("--run-ms", type=float, default=11.8)
    ap.add_argument("--search-ahead", type=int, default=2)
    ap.add_argument("--search-jitter", type=float, default=0.0,
                    help="lognormal sigma of a round's search time (mean kept)")
    ap.add_argument("--settings", default="3:9.2,8:9.2,8:4.6",
                    help="comma-separated backlog_per_worker:search_ms_per_trial")
    ap.add_argument("--scale", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=1,
                    help="with --records: runs of each mode (medians printed)")
    args = ap.parse_args(argv)
    if args.records:
        print(f"build times from {args.records}, {args.workers} build workers, search ahead "
              f"{args.search_ahead}, search jitter {args.search_jitter}, time scale "
              f"{args.scale} (figures below in unscaled s)")
        print("| network | mode | trials/s | wall s | builders busy | idle worker-s: "
              "start-up / between rounds / tail |")
        print("| --- | --- | ---: | ---: | ---: | --- |")
        for name in args.nets.split(","):
            net = read_network_run(args.records, name, args.trials or 1000, 64)
            # modes interleaved, repeated: a shared machine's load shifts between runs
            runs: dict = {}
            for _ in range(args.repeat):
                for mode in args.modes.split(","):
                    runs.setdefault(mode, []).append(run_network(args, net, mode))
            for mode, rs in runs.items():
                r = {k: float(np.median([x[k] for x in rs])) for k in rs[0]}
                print(f"| {name} | {mode} | {r['rate']:.1f} | {r['wall']:.1f} | "
                      f"{100 * r['busy']:.0f}% | {r['first']:.1f} / {r['between']:.1f} / "
                      f"{r['tail']:.1f} |", flush=True)
        return
    print(f"{args.tasks} tasks x {args.per_round}, {args.workers} build workers, builds "
          f"{args.build_ms:g} ms (sigma {args.sigma}), runner {args.run_ms:g} ms, search ahead "
          f"{args.search_ahead}, search jitter {args.search_jitter}, time scale {args.scale} "
          "(figures below in unscaled s)")
    print("| backlog per worker | search ms/trial | trials/s | builders busy | idle worker-s: "
          "start-up / between rounds / tail |")
    print("| --- | --- | --- | --- | --- |")
    for item in args.settings.split(","):
        backlog, search_ms = item.split(":")
        r = run_synthetic(args, int(backlog), float(search_ms))
        print(f"| {backlog} | {search_ms} | {r['rate']:.1f} | {100 * r['busy']:.0f}% | "
              f"{r['first']:.1f} / {r['between']:.1f} / {r['tail']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
