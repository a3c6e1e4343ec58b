"""The simulator runner's worker keeps the inputs and reference outputs of several tasks, so
candidates of interleaved tasks (rounds in flight with a search ahead) do not run the
reference again at every switch."""

from __future__ import annotations

import pytest

from ptxforge import te
from ptxforge.measure import BuildOptions, MeasureInput, TaskSpec, build_candidate, runner_sim


def add_task(n: int, c: float) -> TaskSpec:
    a = te.placeholder((n,), name="A")
    b = te.compute((n,), lambda i: a[i] + c, name="B")
    return TaskSpec.from_tensors([a, b], f"sim_add{n}")


def built(task: TaskSpec):
    res = build_candidate(MeasureInput(task, 'bind(B.i, "threadIdx.x")'),
                          BuildOptions(compile_to="ir"))
    assert not res.error_no, res.error_msg
    return res.artifact


@pytest.fixture
def worker(monkeypatch):
    runs = []
    from ptxforge import backend_sim

    original = backend_sim.run

    def counting(module, arrays):
        runs.append(module)
        return original(module, arrays)

    monkeypatch.setattr(backend_sim, "run", counting)
    monkeypatch.setattr(runner_sim, "TASKS_KEPT", 2)
    runner_sim._state.clear()
    yield runs
    runner_sim._state.clear()


def test_interleaved_tasks_keep_their_reference(worker):
    runs = worker
    tasks = [add_task(32 * (i + 1), 1.0) for i in range(3)]
    arts = [built(t) for t in tasks]
    for i in (0, 1, 0, 1, 0):
        r = runner_sim.sim_check(runner_sim.SimRequest(f"t{i}", arts[i], arts[i]))
        assert r["error_no"] == 0 and r["correctness"] == "passed"
    # two references and five candidates: no reference ran twice
    assert len(runs) == 2 + 5
    runner_sim.sim_check(runner_sim.SimRequest("t2", arts[2], arts[2]))
    assert list(runner_sim._state["tasks"]) == ["t0", "t2"]  # the least recent went


def test_a_wrong_candidate_is_caught_against_the_kept_reference(worker):
    good, other = add_task(64, 1.0), add_task(64, 2.0)
    ref = built(good)
    assert runner_sim.sim_check(runner_sim.SimRequest("t", ref, ref))["correctness"] == "passed"
    wrong = runner_sim.sim_check(runner_sim.SimRequest("t", built(other), ref))
    assert wrong["error_no"] == int(runner_sim.MeasureErrorNo.WRONG_ANSWER)
