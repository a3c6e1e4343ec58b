"""The network tuner's builders and runner, simulated on the CPU: how busy the search keeps
16 build workers, without a GPU and without compiling anything.

The real :class:`~ptxforge.autosched.TaskScheduler`, search policies and measure stream run
against a builder of ``--workers`` threads whose builds sleep for a time drawn from the
builds measured on the 16-core H100 machine (lognormal, mean ``--build-ms`` 310 ms, each task
with a median of its own between 0.6x and 1.6x of that: convolutions of other shapes
unroll more or less), and a runner that measures one candidate at a time in
``--run-ms`` (11.8 ms). The search of a round holds the interpreter lock for
``--search-ms`` per trial (the main process's cost on the H100 machine: 9.2 ms before the
search was made cheaper) on top of a real search of small populations, so the measure
thread competes with it as it does in a run. Times scale by ``--scale`` (0.5: every
duration halved, the run twice as fast, the same shape).

It prints the builders' busy share, their idle worker-seconds with nothing queued (between
the first and the last candidate handed over, and in the tail after it) and trials/s, for
each setting given in ``--settings`` (``backlog:search_ms``, the warm-up's
``BACKLOG_PER_WORKER`` and the search's cost per trial). ``--search-jitter`` varies each
round's search time (lognormal, the mean kept), as real rounds vary.

    PYTHONPATH=<parent of the checkout> python3 bench/tune_pool_sim.py \\
        [--tasks 19] [--per-round 42] [--settings 3:9.2,8:9.2,8:4.6] [--scale 0.5] \\
        [--search-jitter 0.8]
"""

from __future__ import annotations

import argparse
import queue
import threading
import time

import numpy as np
from ptxforge import autosched, measure, ops, te
from ptxforge.autosched import task_scheduler
from ptxforge.autosched.search_policy import SketchPolicy
from ptxforge.autosched.state import state_from_payload

POLICY = {"evolutionary_search_population": 128, "evolutionary_search_num_iters": 1}


@autosched.register_workload
def sim_conv(n, h, w, co, ci, k):
    data = te.placeholder((n, ci, h, w), name="data")
    kernel = te.placeholder((co, ci, k, k), name="kernel")
    out = ops.nn.conv2d_nchw(data, kernel, 1, k // 2, dilation=1, out_dtype="float32")
    return [data, kernel, ops.nn.relu(out)]


class SimBuilder(measure.Builder):
    """``n_parallel`` threads; a build sleeps for a lognormal time around its task's median.
    Logs each worker's waits with nothing queued and the time it spent building."""

    def __init__(self, n_parallel: int, medians: dict, sigma: float, seed: int):
        self.n_parallel = n_parallel
        self.medians, self.sigma = medians, sigma
        self.rng = np.random.default_rng(seed)
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
        median = self.medians[inp.task.workload_key]
        seconds = float(median * self.rng.lognormal(0.0, self.sigma))
        with self._lock:
            self._pending += 1
        self.submits.append(time.monotonic())
        self._jobs.put((key, seconds))

    def collect(self, timeout=0.0):
        with self._lock:
            out, self._done = self._done, []
            self._pending -= len(out)
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


def make_policy(search_s_per_trial: float, jitter: float, seed: int):
    rng = np.random.default_rng(seed + 1)

    class Policy(SketchPolicy):
        def search_one_round(self, num_measure):
            rows = super().search_one_round(num_measure)
            # rounds vary: a task's first search makes its sketches and tile tables, the
            # cost model refits when its samples double
            factor = float(rng.lognormal(-jitter ** 2 / 2, jitter)) if jitter else 1.0
            end = time.perf_counter() + search_s_per_trial * len(rows) * factor
            while time.perf_counter() < end:  # holds the interpreter lock, as a search does
                pass
            return rows
    return Policy


def run(args, backlog: int, search_ms: float) -> dict:
    rng = np.random.default_rng(args.seed)
    shapes = [(co, ci) for co in (8, 16, 24, 32, 48) for ci in (8, 16, 24, 32)][:args.tasks]
    tasks = [autosched.SearchTask(func=sim_conv, args=(1, 8, 8, co, ci, 3), desc=f"conv{k}")
             for k, (co, ci) in enumerate(shapes)]
    medians = {t.workload_key: args.scale * args.build_ms / 1e3 * float(m)
               for t, m in zip(tasks, rng.uniform(0.6, 1.6, len(tasks)))}
    # the lognormal's mean is median * exp(sigma^2 / 2): keep the mean at --build-ms
    norm = np.exp(args.sigma ** 2 / 2) * np.mean(list(medians.values())) / (
        args.scale * args.build_ms / 1e3)
    medians = {k: v / norm for k, v in medians.items()}
    builder = SimBuilder(args.workers, medians, args.sigma, args.seed)
    runner = SerialRunner(tasks, args.scale * args.run_ms / 1e3)
    policy = make_policy(args.scale * search_ms / 1e3, args.search_jitter, args.seed)
    model = autosched.RandomModel(seed=args.seed)
    policies = [policy(t, model, POLICY, seed=k, verbose=0) for k, t in enumerate(tasks)]
    for t in tasks:  # sketches and tile tables made before the clock starts
        t.state_width  # noqa: B018
    old = task_scheduler.BACKLOG_PER_WORKER
    task_scheduler.BACKLOG_PER_WORKER = backlog
    ts = autosched.TaskScheduler(tasks, callbacks=[], seed=args.seed)
    opts = autosched.TuningOptions(
        num_measure_trials=args.trials or args.tasks * args.per_round,
        num_measures_per_round=args.per_round, builder=builder, runner=runner, verbose=0,
        search_ahead=args.search_ahead)
    t0 = time.monotonic()
    try:
        ts.tune(opts, search_policy=policies)
    finally:
        task_scheduler.BACKLOG_PER_WORKER = old
        end = time.monotonic()
        builder.close()
    wall = end - t0
    first, between, tail = builder.idle(t0, end)
    return {"wall": wall, "trials": ts.ct, "busy": builder.busy_s / (args.workers * wall),
            "first": first, "between": between, "tail": tail}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=19)
    ap.add_argument("--per-round", type=int, default=42)
    ap.add_argument("--trials", type=int, default=0, help="default: one round per task")
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
    args = ap.parse_args(argv)
    print(f"{args.tasks} tasks x {args.per_round}, {args.workers} build workers, builds "
          f"{args.build_ms:g} ms (sigma {args.sigma}), runner {args.run_ms:g} ms, search ahead "
          f"{args.search_ahead}, search jitter {args.search_jitter}, time scale {args.scale} "
          "(figures below in unscaled s)")
    print("| backlog per worker | search ms/trial | trials/s | builders busy | idle worker-s: "
          "start-up / between rounds / tail |")
    print("| --- | --- | --- | --- | --- |")
    for item in args.settings.split(","):
        backlog, search_ms = item.split(":")
        r = run(args, int(backlog), float(search_ms))
        s = args.scale
        print(f"| {backlog} | {search_ms} | {r['trials'] / (r['wall'] / s):.1f} | "
              f"{100 * r['busy']:.0f}% | {r['first'] / s:.1f} / {r['between'] / s:.1f} / "
              f"{r['tail'] / s:.1f} |",
              flush=True)


if __name__ == "__main__":
    main()
