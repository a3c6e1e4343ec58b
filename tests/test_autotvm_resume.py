"""AutoTVM resume: ``tuner.load_history(records)`` marks every config of the task in the log
as visited, so a resumed run (and the tutorial run twice on one log) measures none again."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from ptxforge import autotvm
from ptxforge.autotvm.record import load_from_file
from ptxforge.autotvm.tuner import GATuner, GridSearchTuner, RandomTuner, XGBTuner
from ptxforge.measure import BuildResult, MeasureResult, load_records
from ptxforge.measure.measure import Builder, Runner

from .instant import Instant
from .test_autotvm import FAST_SA  # noqa: F401 - registers test/matmul

PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(PKG)


class _Builder(Instant, Builder):
    """Builds nothing: every candidate is ready at once."""

    def __init__(self):
        self._done = []

    def submit(self, key, inp):
        self._done.append((key, BuildResult(None, 0, "", 0.0)))


class _Runner(Instant, Runner):
    """A cost that depends on the schedule text, so tuners have something to learn."""

    def __init__(self):
        self._done = []

    def submit(self, key, inp, build):
        cost = 1e-4 * (1 + hash(inp.pipeline_text) % 97)
        self._done.append((key, MeasureResult((cost,), 0, "", 0.0, 0.0)))


def _option():
    return autotvm.measure_option(builder=_Builder(), runner=_Runner(), batch_size=4)


TUNERS = {
    "random": lambda t: RandomTuner(t, seed=1),
    "grid": lambda t: GridSearchTuner(t),
    "ga": lambda t: GATuner(t, pop_size=8, seed=1),
    "xgb": lambda t: XGBTuner(t, plan_size=8, seed=1, sa_options=FAST_SA),
}


@pytest.mark.parametrize("kind", sorted(TUNERS))
def test_a_resumed_tuner_measures_no_logged_config_again(kind, tmp_path):
    task = autotvm.task.create("test/matmul", args=(64, 32, 64), target="cuda")
    log = tmp_path / "mm.log"
    first = TUNERS[kind](task)
    cb = autotvm.callback.log_to_file(log)
    first.tune(n_trial=12, measure_option=_option(), callbacks=[cb])
    # a record of another workload in the same log must not count
    other = autotvm.task.create("test/matmul", args=(32, 32, 32), target="cuda")
    GridSearchTuner(other).tune(n_trial=3, measure_option=_option(), callbacks=[cb])
    cb.close()
    second = TUNERS[kind](task)
    second.load_history(load_from_file(log))
    assert second.best_config is not None and second.best_flops == first.best_flops
    second.tune(n_trial=12, measure_option=_option(),
                callbacks=[autotvm.callback.log_to_file(log)])
    idx = [inp.payload["autotvm"]["config"]["index"] for inp, _ in load_records(log)
           if inp.payload["autotvm"]["args"] == [64, 32, 64]]
    assert len(idx) == 24 and len(set(idx)) == 24, sorted(idx)


@pytest.mark.slow
def test_the_tutorial_run_twice_on_one_log_measures_nothing_twice(tmp_path):
    example = os.path.join(PKG, "examples", "tune_conv2d_autotvm.py")
    log = tmp_path / "conv2d.log"
    for _ in range(2):
        p = subprocess.run([sys.executable, example, "--runner", "sim", "--trials", "2",
                            "--max-sim-seconds", "0", "--quiet", "--log", str(log)],
                           capture_output=True, text=True, timeout=300, cwd=tmp_path,
                           env={**os.environ, "PYTHONPATH": ROOT})
        assert p.returncode == 0, p.stderr[-3000:]
    idx = [inp.payload["autotvm"]["config"]["index"] for inp, _ in load_records(log)]
    assert len(idx) == 4 and len(set(idx)) == 4, idx
    assert "resuming from" in p.stdout


def test_transfer_learning_skips_a_workload_too_large_to_rebuild():
    import time

    from ptxforge.autotvm.space import ConfigEntity

    task = autotvm.task.create("test/matmul", args=(64, 32, 64), target="cuda")
    absurd = autotvm.task.Task("test/conv2d_no_batching",
                               (1, 7, 7, 3_000_000_000, 512, 3, 3, (1, 1), (1, 1)), "cuda")
    cfg = ConfigEntity.from_json_dict({"index": 0, "entity": []})
    records = [(autotvm.MeasureInput("cuda", absurd, cfg),
                MeasureResult((1e-3,), 0, "", 0.0, 0.0))]
    tuner = XGBTuner(task, plan_size=4, feature_type="itervar", seed=0, sa_options=FAST_SA)
    base = tuner.cost_model.spawn_base_model()
    t0 = time.perf_counter()
    with pytest.warns(RuntimeWarning, match="too large"):
        assert not base.fit_log(records, 4, min_seed_records=1)
    assert time.perf_counter() - t0 < 5.0
