"""The auto-scheduler on a GPU: the tutorial's flow on the seed layer, measured with the
GPU runner; the best schedule must match numpy. Prints the best time and trials/s."""

from __future__ import annotations

import os
import time

import numpy as np
import ptxforge
import pytest
from ptxforge import autosched, workloads

TRIALS = int(os.environ.get("PTXFORGE_AUTOSCHED_TRIALS", "128"))


@pytest.mark.gpu
def test_tuning_the_seed_layer_on_the_gpu(tmp_path):
    task = autosched.SearchTask(func=workloads.conv2d_layer, args=workloads.SEED_ARGS,
                                target="cuda")
    log = str(tmp_path / "conv2d.json")
    ctx = autosched.LocalRPCMeasureContext(min_repeat_ms=10, repeat=3, timeout=10,
                                           check_correctness=True)
    opts = autosched.TuningOptions(num_measure_trials=TRIALS, num_measures_per_round=64,
                                   runner=ctx.runner,
                                   measure_callbacks=[autosched.RecordToFile(log)], verbose=1)
    t0 = time.perf_counter()
    summary = task.tune(opts, search_policy=autosched.SketchPolicy(task, autosched.XGBModel(),
                                                                   seed=0))
    elapsed = time.perf_counter() - t0
    ctx.close()
    print(f"seed layer: best {summary.best_cost * 1e3:.4f} ms after {summary.trials} trials, "
          f"{summary.trials / elapsed:.2f} trials/s (search {summary.search_s:.1f} s, "
          f"waited for measurements {summary.measure_s:.1f} s), {summary.errors} errors")
    assert not summary.estimated
    assert summary.best_cost < 2e-3
    assert summary.errors < summary.trials / 2
    sch, args = task.apply_best(log)
    f = ptxforge.build(sch, args, target="cuda")
    dev = ptxforge.cuda(0)
    rng = np.random.default_rng(0)
    host = [rng.uniform(size=t.shape).astype("float32") for t in args[:3]]
    arrays = [ptxforge.nd.array(h, dev) for h in host]
    out = ptxforge.nd.empty(args[3].shape, "float32", dev)
    f(*arrays, out)
    np.testing.assert_allclose(out.numpy(), workloads.reference(*host), rtol=1e-3, atol=1e-3)
    ms = f.time_evaluator(f.entry_name, dev, number=20, repeat=5)(*arrays, out).median * 1e3
    print(f"seed layer, best schedule re-timed: {ms:.4f} ms")
