"""A candidate is checked against the task's reference before it can become the task's
best: a planted kernel that is fast because it computes something else is recorded as
WRONG_ANSWER and never wins, on the simulator runner and on a GPU (LocalRunner's default
``check_correctness="best"``)."""

from __future__ import annotations

import pytest
from ptxforge import autotvm, te
from ptxforge.measure import LocalRunner, SimRunner
from ptxforge.measure.build import BuildOptions, build_candidate
from ptxforge.measure.result import MeasureErrorNo, MeasureInput, TaskSpec

N = 1 << 16


def _tasks():
    a = te.placeholder((N,), name="A")
    task = TaskSpec.from_tensors([a, te.compute((N,), lambda i: a[i] + 1.0, name="B")],
                                 "add_one_big")
    b = te.placeholder((N,), name="A")
    # the planted kernel has the task's parameters but skips the addition
    planted = TaskSpec.from_tensors([b, te.compute((N,), lambda i: b[i], name="B")],
                                    "copy_big")
    return task, planted


SLOW = 'split(B.i, factors=[64]), bind(B.i.inner, "threadIdx.x")'  # one block of 64 threads
FAST = 'split(B.i, factors=[128]), bind(B.i.outer, "blockIdx.x"), bind(B.i.inner, "threadIdx.x")'


def _best(results) -> int:
    """The index the tuners would take as the best: lowest mean among error-free results."""
    ok = [k for k, r in enumerate(results) if int(r.error_no) == 0]
    return min(ok, key=lambda k: results[k].mean)


def _candidates(compile_to: str):
    task, planted = _tasks()
    opts = BuildOptions(compile_to=compile_to)
    slow = MeasureInput(task, SLOW)
    fast = MeasureInput(task, FAST)
    builds = [build_candidate(slow, opts), build_candidate(MeasureInput(planted, FAST), opts),
              build_candidate(fast, opts)]
    assert all(b.error_no == 0 for b in builds), [b.error_msg for b in builds]
    return [slow, fast, fast], builds


def test_planted_wrong_fast_candidate_never_becomes_best_on_the_simulator():
    inputs, builds = _candidates("ir")
    runner = SimRunner()
    try:
        res = runner.run(inputs, builds)
    finally:
        runner.close()
    assert res[1].error_no == MeasureErrorNo.WRONG_ANSWER, res[1]
    assert "differ" in res[1].error_msg
    assert res[0].error_no == 0 and res[2].error_no == 0
    assert _best(res) == 2 and res[2].correctness == "passed"


def test_check_correctness_values_are_checked():
    with pytest.raises(ValueError, match="check_correctness"):
        LocalRunner(check_correctness="sometimes")


@pytest.mark.gpu
def test_planted_wrong_fast_candidate_never_becomes_best_on_the_gpu():
    inputs, builds = _candidates("cubin")
    runner = LocalRunner(timeout=60)  # check_correctness="best" by default
    try:
        first = runner.run(inputs[:1], builds[:1])
        planted_and_fast = runner.run(inputs[1:], builds[1:])
        slow_again = runner.run(inputs[:1], builds[:1])
    finally:
        runner.close()
    res = first + planted_and_fast
    # the first candidate of a task is always checked; the planted one beats it, so it is
    # checked too, and fails; the right fast one is checked and wins
    assert res[0].error_no == 0 and res[0].correctness == "passed"
    assert res[1].error_no == MeasureErrorNo.WRONG_ANSWER, res[1]
    assert res[2].error_no == 0 and res[2].correctness == "passed"
    assert _best(res) == 2
    # a candidate slower than the checked best is timed without the extra run
    assert slow_again[0].error_no == 0 and slow_again[0].correctness == ""


@autotvm.template("test/legality_knob")
def _scale(n):
    a = te.placeholder((n,), name="A")
    b = te.compute((n,), lambda i: a[i] * 2.0, name="B")
    s = te.create_schedule(b.op)
    cfg = autotvm.get_config()
    cfg.define_knob("same_tag", [0, 1])
    xo, xi = s[b].split(s[b].op.axis[0], factor=8)
    s[b].bind(xo, te.thread_axis("blockIdx.x"))
    # same_tag=1 binds both loops to blockIdx.x: only their diagonal would be computed
    s[b].bind(xi, te.thread_axis("blockIdx.x" if cfg["same_tag"].val else "threadIdx.x"))
    return s, [a, b]


def test_a_record_claiming_a_tiny_cost_for_an_illegal_config_is_not_dispatched():
    import numpy as np
    import ptxforge
    from ptxforge.measure.result import MeasureResult

    task = autotvm.task.create("test/legality_knob", args=(64,), target="cuda")
    configs = {task.config_space.get(k)["same_tag"].val: task.config_space.get(k)
               for k in range(len(task.config_space))}
    records = [(autotvm.MeasureInput("cuda", task, configs[1]),
                MeasureResult((1e-9,), 0, "", 0.0, 0.0)),
               (autotvm.MeasureInput("cuda", task, configs[0]),
                MeasureResult((1e-3,), 0, "", 0.0, 0.0))]
    with autotvm.apply_history_best(records), pytest.warns(RuntimeWarning, match="diagonal"):
        s, args = _scale(64)
    f = ptxforge.build(s, args, target="sim")
    x = np.arange(64, dtype="float32")
    dev = ptxforge.sim()
    out = ptxforge.nd.empty((64,), "float32", dev)
    f(ptxforge.nd.array(x, dev), out)
    np.testing.assert_array_equal(out.numpy(), 2 * x)
