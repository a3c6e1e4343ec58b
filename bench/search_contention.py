"""What slows the tuner's search while rounds are in flight, on the CPU: busy builder
processes beside it, and the measure thread's work.

First the search beside ``--burners`` busy processes (as many as the cores: builders at
work), at the search's priority and at the builders' niceness
(:data:`ptxforge.measure.build.BUILDER_NICENESS`). Then the measure thread:

With ``--search-ahead`` above 0 the tuner's process searches the next round while its
measure thread moves the rounds in flight from the builders to the runner: it unpickles
every build result and pickles every candidate for the runner's worker, under the same
interpreter lock as the search. This runs search rounds of a task in the main thread, alone
and then beside a thread doing that work for real build results at a given rate (the
candidates per second of a tuning run), the artifacts handled as they were before their
payloads (the device IR unpickled and pickled again, the reference sent with every
candidate) and as they are now (byte payloads passed on; the runner's copy without the
kernels' IR).

    PYTHONPATH=<parent of the checkout> python3 bench/search_contention.py [--rate 30]
        [--rounds 6] [--task resnet-18:3] [--burners 2]
"""

from __future__ import annotations

import argparse
import os
import pickle
import subprocess
import sys
import threading
import time
from multiprocessing.reduction import ForkingPickler

from ptxforge import autosched
from ptxforge.autosched.state import State, candidate_input
from ptxforge.measure.build import BUILDER_NICENESS, BuildOptions, build_candidate
from ptxforge.measure.reference_builds import build_reference
from ptxforge.measure.runner_gpu import RunRequest
from trial_cost import tasks_of


def old_way(reply: bytes, ref) -> None:
    """The measure thread's work per candidate before the payloads: the build result
    unpickled whole (device IR and kernels), the request pickled with the reference."""
    res = pickle.loads(reply)[2]
    art = res.artifact
    module, kernels = art.module, art.kernels  # as the eager unpickling made them
    ForkingPickler.dumps((1, None, ((module, kernels), (ref.module, ref.kernels))))


def new_way(reply: bytes, ref) -> None:
    """Now: the result's payloads stay bytes; the runner's copy goes without the IR and the
    reference goes once per task (not at all here)."""
    res = pickle.loads(reply)[2]
    ForkingPickler.dumps((1, None, (RunRequest("k", res.artifact.for_runner(), None, 3, 1,
                                               10, True),)))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--task", default="resnet-18:3")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--per-round", type=int, default=42)
    ap.add_argument("--rate", type=float, default=30.0, help="candidates per second")
    ap.add_argument("--states", type=int, default=6, help="distinct build results used")
    ap.add_argument("--burners", type=int, default=os.cpu_count() or 2,
                    help="busy processes beside the search (default: one per core)")
    args = ap.parse_args(argv)
    target = "cuda -arch=sm_90a"
    opts = BuildOptions(target_sm="sm_90a", compile_to="cubin")
    (label, task), = tasks_of(args.task, target)
    policy = autosched.SketchPolicy(task, autosched.RandomModel(seed=0), seed=0, verbose=0)
    replies = []
    for r in policy.search_one_round(args.states * 2):
        res = build_candidate(candidate_input(task, State.from_row(r, task)), opts)
        if not res.error_no:
            replies.append(ForkingPickler.dumps(("ok", 1, res, 0.1, False, 1.0)))
        if len(replies) == args.states:
            break
    ref = pickle.loads(pickle.dumps(build_reference(task.task_spec, opts)))
    ref.module, ref.kernels  # noqa: B018 - the old runner held it unpickled
    print(f"{label}: {len(replies)} build results, {args.rounds} rounds of "
          f"{args.per_round}, beside {args.rate:g} candidates/s")

    def search_time(work) -> tuple:
        stop = threading.Event()
        done = [0, 0.0]

        def mover():
            i = 0
            period = 1.0 / args.rate
            nxt = time.perf_counter()
            while not stop.is_set():
                nxt += period
                t = time.perf_counter()
                work(replies[i % len(replies)], ref)
                done[0] += 1
                done[1] += time.perf_counter() - t
                i += 1
                time.sleep(max(0.0, nxt - time.perf_counter()))

        th = threading.Thread(target=mover, daemon=True) if work else None
        if th:
            th.start()
        t = time.perf_counter()
        for _ in range(args.rounds):
            policy.search_one_round(args.per_round)
        took = time.perf_counter() - t
        stop.set()
        if th:
            th.join()
        return took, done[0], done[1]

    def beside_burners(niceness: int) -> float:
        burn = [subprocess.Popen(["nice", "-n", str(niceness), sys.executable, "-c",
                                  "while True: pass"]) for _ in range(args.burners)]
        try:
            time.sleep(0.3)
            return search_time(None)[0]
        finally:
            for p in burn:
                p.kill()
                p.wait()

    per = args.rounds * args.per_round
    alone = search_time(None)[0]
    same = beside_burners(0)
    nicer = beside_burners(BUILDER_NICENESS)
    print(f"  search alone {alone:.2f} s ({1e3 * alone / per:.2f} ms per trial); beside "
          f"{args.burners} busy processes at its priority {same:.2f} s, at niceness "
          f"{BUILDER_NICENESS} {nicer:.2f} s")
    for name, work in (("alone", None), ("beside the old measure thread", old_way),
                       ("beside the new measure thread", new_way), ("alone", None)):
        took, n, busy = search_time(work)
        per = 1e3 * took / (args.rounds * args.per_round)
        extra = (f"; the thread moved {n} candidates, {1e3 * busy / n:.2f} ms each"
                 if n else "")
        print(f"  search {name}: {took:.2f} s, {per:.2f} ms per trial{extra}")


if __name__ == "__main__":
    main()
