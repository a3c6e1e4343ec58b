"""MultiGPURunner: the work queue across GPUs, device naming, the GPU-model check and the
CUDA_VISIBLE_DEVICES mapping (fake GPUs and fake per-GPU runners), plus a GPU test."""

from __future__ import annotations

import time

import pytest
from ptxforge import measure
from ptxforge.measure.multi_gpu import check_same_model, physical_gpu_ids


class FakeGPURunner(measure.Runner):
    """One fake GPU: takes a candidate, finishes it after ``seconds`` (by ordinal)."""

    log: list = []

    def __init__(self, ordinal, visible_id, seconds=None, **options):
        self.ordinal, self.visible_id = ordinal, visible_id
        self.seconds = (seconds or {}).get(ordinal, 0.0)
        self.options = options
        self.job = None
        self.closed = False

    def submit(self, key, inp, build):
        assert self.job is None, "a GPU got a second candidate while busy"
        self.job = (key, time.monotonic() + self.seconds)
        FakeGPURunner.log.append((self.ordinal, key))

    @property
    def pending(self):
        return int(self.job is not None)

    def collect(self, timeout=0.0):
        if self.job is None or time.monotonic() < self.job[1]:
            return []
        key, self.job = self.job[0], None
        return [(key, measure.MeasureResult((1e-3 * (self.ordinal + 1),), 0, "", 0.1,
                                            time.time(), device="Fake GPU (sm_90)"))]

    def close(self):
        self.closed = True


def make(names, devices=None, seconds=None, **options):
    FakeGPURunner.log = []
    return measure.MultiGPURunner(
        devices, device_names=lambda: list(names),
        make_runner=lambda d, vid, **o: FakeGPURunner(d, vid, seconds, **o), **options)


def test_candidates_spread_over_free_gpus_and_results_name_their_gpu():
    runner = make(["Fake GPU"] * 3, seconds={0: 0.0, 1: 0.05, 2: 0.05}, number=2)
    assert runner.devices == [0, 1, 2] and runner._runners[0].options == {"number": 2}
    results = runner.run(list(range(8)), [None] * 8)
    assert len(results) == 8 and runner.pending == 0
    by_key = dict((k, d) for d, k in FakeGPURunner.log)
    assert sorted(by_key) == list(range(8))
    # the first three go one to each GPU; the fast GPU 0 then takes most of the rest
    assert [by_key[k] for k in range(3)] == [0, 1, 2]
    assert runner.measured[0] > runner.measured[1] and sum(runner.measured) == 8
    for k, r in enumerate(results):
        assert r.device == f"cuda:{by_key[k]} Fake GPU (sm_90)"
        assert r.mean == pytest.approx(1e-3 * (by_key[k] + 1))
    runner.close()
    assert all(r.closed for r in runner._runners)


def test_a_device_subset_and_its_visible_ids():
    runner = make(["Fake GPU"] * 4, devices=[3, 1])
    assert [r.ordinal for r in runner._runners] == [3, 1]
    assert [r.visible_id for r in runner._runners] == ["3", "1"]
    assert runner.device == "cuda:3,1 Fake GPU"
    assert physical_gpu_ids([0, 1], {"CUDA_VISIBLE_DEVICES": "4,6"}) == ["4", "6"]
    assert physical_gpu_ids([1], {"CUDA_VISIBLE_DEVICES": "GPU-a, GPU-b"}) == ["GPU-b"]
    with pytest.raises(ValueError, match="not visible"):
        physical_gpu_ids([2], {"CUDA_VISIBLE_DEVICES": "4,6"})


def test_mixed_gpu_models_are_refused_before_any_worker_starts():
    names = ["NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA H200"]
    with pytest.raises(ValueError, match="one GPU model") as e:
        make(names)
    assert "cuda:1 NVIDIA H100 80GB HBM3" in str(e.value)
    assert FakeGPURunner.log == []
    assert make(names, devices=[0, 2]).model == "NVIDIA H200"
    with pytest.raises(ValueError, match="no GPU 5"):
        check_same_model([5], names)
    with pytest.raises(ValueError, match="at least one GPU"):
        make([])
    with pytest.raises(ValueError, match="twice"):
        make(names, devices=[0, 0])
    with pytest.raises(TypeError, match="devices="):
        make(names, device_id=1)
    with pytest.raises(ValueError, match="number and repeat"):
        make(["Fake GPU"], number=0)


def test_the_tuners_take_it_as_their_runner():
    from ptxforge import autosched, autotvm

    runner = make(["Fake GPU"] * 2)
    assert autosched.TuningOptions(runner=runner).make_runner() is runner
    assert autotvm.measure_option(builder="local", runner=runner)["runner"] is runner


@pytest.mark.gpu
def test_every_gpu_measures_the_seed_schedule():
    from ptxforge import autosched, workloads

    runner = measure.MultiGPURunner(number=2)
    task = autosched.SearchTask(func=workloads.conv2d_layer, args=workloads.SEED_ARGS)
    from ptxforge.measure.reference import reference_pipeline

    inp = measure.MeasureInput(task.task_spec, reference_pipeline(task.task_spec).text)
    n = 2 * len(runner.devices)
    results = measure.measure_batch([inp] * n, measure.LocalBuilder(), runner)
    runner.close()
    assert all(r.ok for r in results), [r.error_msg for r in results]
    seen = {r.device.split()[0] for r in results}
    assert seen == {f"cuda:{d}" for d in runner.devices}
