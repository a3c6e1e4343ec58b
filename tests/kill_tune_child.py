"""A tuning run for tests/test_records_kill.py to kill: tunes a small matmul with the
simulator runner, appending the payloads of every batch of results the runner hands back
to a count file, one JSON list per batch (before the tuning loop sees them).
Usage: ``kill_tune_child.py LOG COUNTS TRIALS``."""

import json
import os
import sys

from ptxforge import autosched, measure, te
from ptxforge.autosched.search_policy import SketchPolicy


@autosched.register_workload
def kill_matmul(n):
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return [a, b, c]

log, counts, trials = sys.argv[1], sys.argv[2], int(sys.argv[3])

class CountingRunner(measure.SimRunner):
    """Notes every result it hands back, before the tuning loop sees it."""
    def __init__(self):
        super().__init__()
        self._inputs = {}
        self._fd = os.open(counts, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    def submit(self, key, inp, build):
        self._inputs[key] = inp
        super().submit(key, inp, build)
    def collect(self, timeout=0.0):
        out = super().collect(timeout)
        if out:  # one line per batch handed back, written in one call
            batch = [self._inputs.pop(key).payload for key, _ in out]
            os.write(self._fd, (json.dumps(batch) + "\n").encode())
        return out

task = autosched.SearchTask(func=kill_matmul, args=(16,))
cbs = [autosched.PreloadMeasuredStates(log)] if os.path.exists(log) else None
policy = SketchPolicy(task, autosched.RandomModel(seed=os.getpid()), seed=os.getpid(), verbose=0,
                      init_search_callbacks=cbs)
opts = autosched.TuningOptions(num_measure_trials=trials, num_measures_per_round=4,
                               builder=measure.LocalBuilder(n_parallel=1, compile_to="ir"),
                               runner=CountingRunner(), verbose=0,
                               measure_callbacks=[autosched.RecordToFile(log)])
task.tune(opts, search_policy=policy)
print("DONE")
