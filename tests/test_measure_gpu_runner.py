"""The GPU runner on a GPU: a candidate far slower than its task's best ends after the
pilot, the reference goes to the worker once per task and again after a fault, the
worker's time is split by part, and candidates that all fail to load each get their error
and the run ends."""

from __future__ import annotations

import dataclasses

import pytest

from ptxforge import measure, te
from ptxforge.measure import (
    LocalBuilder,
    LocalRunner,
    MeasureErrorNo,
    MeasureInput,
    TaskSpec,
    measure_batch,
)
from ptxforge.measure.artifact import BuildArtifact
from ptxforge.measure.runner_gpu import RUN_PARTS

from .test_measure_gpu_runner_protocol import measure_within

pytestmark = pytest.mark.gpu


def matmul_task(n: int = 256) -> TaskSpec:
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return TaskSpec.from_tensors([a, b, c], f"runner_matmul{n}")


FAST = ('split(C.j, factors=[64]), bind(C.i, "blockIdx.y"), bind(C.j.outer, "blockIdx.x"), '
        'bind(C.j.inner, "threadIdx.x")')
SLOW = 'bind(C.j, "threadIdx.x")'  # one block: every row in turn, 256 threads


def test_a_far_slower_candidate_ends_after_the_pilot():
    task = matmul_task()
    fast, slow = MeasureInput(task, FAST), MeasureInput(task, SLOW)
    runner = LocalRunner(min_repeat_ms=10, timeout=60)
    builder = LocalBuilder(n_parallel=2)
    try:
        # the fast one first, so it is the task's best when the slow one is timed
        res = measure_batch([fast], builder, runner) + measure_batch([slow, fast], builder,
                                                                     runner)
    finally:
        runner.close()
        builder.close()
    assert [r.error_no for r in res] == [0, 0, 0], [r.error_msg for r in res]
    assert res[0].correctness == "passed"
    assert res[1].mean > 1.5 * res[0].mean
    parts = runner.run_parts
    assert parts.candidates == 3 and parts.stopped_early == 1
    assert parts.references == 1 and parts.resent == 0
    assert parts.seconds["time"] > 0 and set(parts.seconds) == set(RUN_PARTS)
    assert abs(res[2].mean - res[0].mean) < 0.5 * res[0].mean


def test_without_early_stop_every_candidate_is_timed_in_full():
    task = matmul_task()
    runner = LocalRunner(min_repeat_ms=10, timeout=60, early_stop=False)
    builder = LocalBuilder(n_parallel=2)
    try:
        res = measure_batch([MeasureInput(task, FAST), MeasureInput(task, SLOW)], builder,
                            runner)
    finally:
        runner.close()
        builder.close()
    assert [r.error_no for r in res] == [0, 0]
    assert runner.run_parts.stopped_early == 0


def test_the_reference_goes_again_to_a_worker_that_replaced_a_faulted_one():
    from .test_measure import oob_input

    task = matmul_task(128)
    good = MeasureInput(task, FAST)
    runner = LocalRunner(check_correctness=True, timeout=30)
    builder = LocalBuilder(n_parallel=2)
    try:
        res = measure_batch([good, oob_input(), good], builder, runner)
    finally:
        runner.close()
        builder.close()
    assert [r.error_no for r in res] == [0, MeasureErrorNo.RUNTIME_DEVICE, 0], [
        r.error_msg for r in res]
    assert res[0].correctness == res[2].correctness == "passed"
    # the task's reference went with its first candidate, and again to the worker that
    # replaced the faulted one (with the third candidate, or when it asked for it)
    parts = runner.run_parts
    assert parts.references + parts.resent >= 2 and parts.candidates >= 2


class UnloadableBuilder(measure.Builder):
    """A :class:`LocalBuilder` whose cubins the GPU cannot load: replaced by bytes the
    driver refuses (``"corrupt"``), or assembled for another architecture (``"other_arch"``:
    the builder's ``target_sm``)."""

    def __init__(self, how: str, **options):
        self.how = how
        self.inner = LocalBuilder(**options)

    def submit(self, key, inp):
        self.inner.submit(key, inp)

    def collect(self, timeout=0.0):
        return [(key, self._spoil(res)) for key, res in self.inner.collect(timeout)]

    def _spoil(self, res):
        if res.error_no or self.how != "corrupt":
            return res
        art = res.artifact
        kernels = {name: dataclasses.replace(k, cubin=b"\x7fELF" + bytes(range(64)) * 4)
                   for name, k in art.kernels.items()}
        spoilt = BuildArtifact(art.module, kernels, art.stats, art.output_params,
                               art.target_sm, dict(art.stage_seconds))
        return dataclasses.replace(res, artifact=spoilt)

    @property
    def pending(self):
        return self.inner.pending

    def waitables(self):
        return self.inner.waitables()

    def next_deadline(self):
        return self.inner.next_deadline()

    def close(self):
        self.inner.close()


def _other_arch() -> str:
    from ptxforge.backend_ptx import cuda

    return "sm_80" if cuda(0).compute_capability[0] != 8 else "sm_90a"


@pytest.mark.parametrize("how", ["corrupt", "other_arch"])
def test_candidates_that_all_fail_to_load_each_get_their_error(how):
    """What stalled tune-network on an H200 (149 of 150 records): every candidate failing
    to load, each then sent back for its task's reference until one was never answered."""
    small, large = matmul_task(128), matmul_task(256)
    inputs = [MeasureInput(t, FAST) for _ in range(10) for t in (small, large)]
    runner = LocalRunner(min_repeat_ms=10, timeout=30)
    options = {"target_sm": _other_arch()} if how == "other_arch" else {}
    builder = UnloadableBuilder(how, n_parallel=2, **options)
    plain = LocalBuilder(n_parallel=1)
    try:
        res = measure_within(inputs, builder, runner, seconds=240)
        assert len(res) == 20
        assert all(r.error_no == MeasureErrorNo.COMPILE_DEVICE for r in res), [
            r.error_msg for r in res]
        word = "cuModuleLoadData" if how == "corrupt" else "does not run on this GPU"
        assert all(word in r.error_msg for r in res), res[0].error_msg
        # the worker kept each task's inputs and reference through the failures
        parts = runner.run_parts
        assert parts.references == 2 and parts.resent == 0, parts.line()
        if how == "corrupt":  # a good candidate after them: measured and checked as usual
            (good,) = measure_within([MeasureInput(large, FAST)], plain, runner, seconds=120)
            assert good.error_no == 0 and good.correctness == "passed", good.error_msg
            assert runner.run_parts.references == 2 and runner.run_parts.resent == 0
    finally:
        runner.close()
        builder.close()
        plain.close()
