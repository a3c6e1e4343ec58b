"""What a candidate costs between the builder and the GPU, on the CPU: the tuner's process
(unpickle the builder's answer, pickle the runner's request) and the runner's worker
(unpickle the request, make the host module), per candidate, for real candidates of the fp16
tasks of ResNet-18 and BERT on sm_90a sketches, compiled to cubins.

"Before" handles the artifacts as the runner did before their payloads: the device IR and
kernels unpickled in the tuner's process and pickled again with the task's reference for
every request, all of it unpickled in the worker. "After" is the code as it is: byte payloads
passed on, the runner's copy without the kernels' IR, the reference sent once per task.

    PYTHONPATH=<parent of the checkout> python3 bench/runner_overhead.py [--states 8]
        [--tasks resnet-18:3,bert:1]
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import time
from multiprocessing.reduction import ForkingPickler

from ptxforge import autosched
from ptxforge.autosched.state import State, candidate_input
from ptxforge.measure.build import BuildOptions, build_candidate
from ptxforge.measure.reference_builds import build_reference
from ptxforge.measure.runner_gpu import RunRequest
from trial_cost import tasks_of


def _ms(fn, *args):
    t = time.perf_counter()
    out = fn(*args)
    return out, 1e3 * (time.perf_counter() - t)


def before(reply: bytes, ref) -> tuple:
    """(main ms, worker ms) the old way."""
    def main_side():
        art = pickle.loads(reply)[2].artifact
        module, kernels = art.module, art.kernels  # unpickled with the answer
        return ForkingPickler.dumps((1, None, ((module, kernels), (ref.module, ref.kernels))))

    msg, main = _ms(main_side)

    def worker_side():
        (cand, refp) = pickle.loads(msg)[2]
        return cand[0].host

    _, worker = _ms(worker_side)
    return main, worker


def after(reply: bytes) -> tuple:
    """(main ms, worker ms) now (a later candidate of the task: no reference sent)."""
    def main_side():
        art = pickle.loads(reply)[2].artifact
        req = RunRequest("k", art.for_runner(), None, 3, 1, 10.0, True)
        return ForkingPickler.dumps((1, None, (req,)))

    msg, main = _ms(main_side)

    def worker_side():
        req = pickle.loads(msg)[2][0]
        return req.artifact.host_module(), req.artifact.kernels

    _, worker = _ms(worker_side)
    return main, worker


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--states", type=int, default=8)
    ap.add_argument("--tasks", default="resnet-18:3,bert:1")
    args = ap.parse_args(argv)
    target = "cuda -arch=sm_90a"
    opts = BuildOptions(target_sm="sm_90a", compile_to="cubin")
    print("wall ms per candidate (median), tuner's process / runner's worker")
    for label, task in tasks_of(args.tasks, target):
        policy = autosched.SketchPolicy(task, autosched.RandomModel(seed=0), seed=0, verbose=0)
        ref = pickle.loads(pickle.dumps(build_reference(task.task_spec, opts)))
        ref.module, ref.kernels  # noqa: B018 - the old runner held it unpickled
        rows = {"before": [], "after": []}
        sizes = {"before": [], "after": []}
        for r in policy.search_one_round(args.states):
            res = build_candidate(candidate_input(task, State.from_row(r, task)), opts)
            if res.error_no:
                continue
            reply = ForkingPickler.dumps(("ok", 1, res, 0.1, False, 1.0))
            for _ in range(3):  # the least of three, so one preemption does not decide
                rows["before"].append(before(reply, ref))
                rows["after"].append(after(reply))
            art = pickle.loads(reply)[2].artifact
            sizes["before"].append(len(pickle.dumps(((art.module, art.kernels),
                                                     (ref.module, ref.kernels)))))
            art = pickle.loads(reply)[2].artifact
            sizes["after"].append(len(pickle.dumps(art.for_runner())))
        print(f"{label}: {len(sizes['after'])} candidates")
        for way in ("before", "after"):
            m = statistics.median(x[0] for x in rows[way])
            w = statistics.median(x[1] for x in rows[way])
            kb = statistics.mean(sizes[way]) / 1024
            print(f"  {way}: {m:.2f} / {w:.2f} ms; request {kb:.0f} KiB")


if __name__ == "__main__":
    main()
