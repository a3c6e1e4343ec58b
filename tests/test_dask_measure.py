"""Measuring on a Dask cluster: an auto-scheduler search through DaskBuilder and DaskRunner
(simulator on the workers), a worker killed in the middle of a round, and the retry-once
rule for jobs whose workers keep dying."""

from __future__ import annotations

import operator
import os

import pytest

distributed = pytest.importorskip("distributed")

from ptxforge import autosched, measure, ops, te  # noqa: E402
from ptxforge.autosched.search_policy import SketchPolicy  # noqa: E402
from ptxforge.measure.dask_backend import WORKER_DIED, FutureQueue  # noqa: E402

SMALL_POLICY = {"evolutionary_search_population": 128, "evolutionary_search_num_iters": 1}


@autosched.register_workload
def dask_conv_relu(N, H, W, CO, CI, KH, KW, stride, padding):
    data = te.placeholder((N, CI, H, W), name="data")
    kernel = te.placeholder((CO, CI, KH, KW), name="kernel")
    bias = te.placeholder((1, CO, 1, 1), name="bias")
    conv = ops.nn.conv2d_nchw(data, kernel, stride, padding, dilation=1, out_dtype="float32")
    return [data, kernel, bias, ops.nn.relu(conv + bias)]


@pytest.fixture(scope="module")
def cluster():
    import dask

    # lost jobs come back to the client after one death, so the client's own retry shows
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                      dashboard_address=None, silence_logs=40) as c:
            with distributed.Client(c) as client:
                yield c, client


class KillingRunner(measure.DaskRunner):
    """A DaskRunner that kills one worker right after handing out the n-th candidate."""

    def __init__(self, *args, kill_after: int, **kw):
        super().__init__(*args, **kw)
        self.kill_after = kill_after
        self.submitted = 0
        self.killed = None

    def submit(self, key, inp, build):
        super().submit(key, inp, build)
        self.submitted += 1
        if self.submitted == self.kill_after:
            pids = self.client.run(os.getpid)
            addr = sorted(pids)[0]
            os.kill(pids[addr], 9)
            self.killed = addr


@pytest.mark.slow
def test_tuning_on_a_dask_cluster_survives_a_dying_worker(cluster, tmp_path):
    _, client = cluster
    client.wait_for_workers(2, timeout=60)
    task = autosched.SearchTask(func=dask_conv_relu,
                                args=(1, 6, 6, 8, 16, 3, 3, (1, 1), (1, 1)))
    log = str(tmp_path / "dask.json")
    runner = KillingRunner(client, runner="sim", kill_after=5, max_sim_seconds=1.0)
    builder = measure.DaskBuilder(client, compile_to="ir", timeout=30)
    opts = autosched.TuningOptions(num_measure_trials=8, num_measures_per_round=4,
                                   builder=builder, runner=runner,
                                   measure_callbacks=[autosched.RecordToFile(log)], verbose=0)
    summary = task.tune(opts, search_policy=SketchPolicy(task, autosched.RandomModel(),
                                                         SMALL_POLICY, seed=0))
    assert runner.killed is not None
    recs = measure.load_records(log)
    assert summary.trials == 8 and len(recs) == 8
    assert len({inp.pipeline_text for inp, _ in recs}) == 8
    ok = [r for _, r in recs if r.ok]
    assert ok and all(r.estimated for r in ok)
    for _, r in recs:  # a lost candidate is retried, or recorded as lost: never missing
        assert r.ok or WORKER_DIED in r.error_msg or r.error_no != 0
    assert builder.pending == 0 and runner.pending == 0


def test_a_job_whose_workers_keep_dying_is_retried_once_then_reported(cluster):
    _, client = cluster
    client.wait_for_workers(1, timeout=60)
    q = FutureQueue(client, no_worker_timeout=60)
    q.submit("dies", os._exit, 3)
    q.submit("fine", operator.mul, 7, 7)
    got = {}
    while q.pending:
        for o in q.collect(None):
            got[o.key] = o
    assert got["fine"].status == "ok" and got["fine"].value == 49
    assert got["dies"].status == "died" and WORKER_DIED in got["dies"].message
    assert q.resubmitted == 1


def test_no_suitable_worker_fails_the_job_instead_of_hanging(cluster):
    _, client = cluster
    q = FutureQueue(client, resources={"GPU": 1}, no_worker_timeout=1.0)
    q.submit("k", operator.mul, 3, 3)
    out = []
    while q.pending:
        out += q.collect(5.0)
    assert [o.status for o in out] == ["no_worker"]
    assert "GPU" in out[0].message


def test_dask_runner_reports_a_lost_run_as_a_device_error(cluster):
    _, client = cluster
    client.wait_for_workers(1, timeout=60)
    runner = measure.DaskRunner(client, runner="sim")
    runner._queue.submit("x", os._exit, 3)
    runner._build_time["x"] = 0.5
    out = []
    while runner.pending:
        out += runner.collect(None)
    (key, res), = out
    assert key == "x" and res.error_no == int(measure.MeasureErrorNo.RUNTIME_DEVICE)
    assert WORKER_DIED in res.error_msg and res.all_cost >= 0.5
