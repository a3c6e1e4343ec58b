"""The GPU runner on a GPU: a candidate far slower than its task's best ends after the
pilot, the reference goes to the worker once per task and again after a fault, and the
worker's time is split by part."""

from __future__ import annotations

import pytest

from ptxforge import te
from ptxforge.measure import (
    LocalBuilder,
    LocalRunner,
    MeasureErrorNo,
    MeasureInput,
    TaskSpec,
    measure_batch,
)
from ptxforge.measure.runner_gpu import RUN_PARTS

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
