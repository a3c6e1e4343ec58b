"""Runners build a task's reference schedule in a worker process of their own, started when
the task's first candidate goes to the builders, and hold candidates whose reference is still
being built: the thread that moves candidates from the builders to the runner never builds."""

from __future__ import annotations

import dataclasses
import time

from ptxforge import autosched, measure, te
from ptxforge.autosched.state import State, candidate_input
from ptxforge.measure.build import BuildOptions
from ptxforge.measure.reference_builds import PENDING, ReferenceBuilds, build_reference


@autosched.register_workload(override=True)
def refbuild_dense(M, N, K):
    """A float32 dense product with a relu."""
    a = te.placeholder((M, K), name="A")
    w = te.placeholder((N, K), name="W")
    k = te.reduce_axis((0, K), name="k")
    c = te.compute((M, N), lambda i, j: te.sum(a[i, k] * w[j, k], axis=k), name="C")
    return [a, w, te.compute((M, N), lambda i, j: te.max(c[i, j], 0.0), name="relu")]


def _task():
    return autosched.SearchTask(func=refbuild_dense, args=(16, 16, 16), target="sim")


def _inputs(task, n: int) -> list:
    rows = autosched.SketchPolicy(task, autosched.RandomModel(seed=0), seed=0,
                                  verbose=0).search_one_round(n)
    return [candidate_input(task, State.from_row(r, task)) for r in rows]


def test_references_build_in_the_background():
    task = _task().task_spec
    refs = ReferenceBuilds()
    try:
        refs.request("a", task, BuildOptions(compile_to="ir"))
        refs.request("a", task, BuildOptions(compile_to="ir"))  # once per key
        assert refs.known("a") and not refs.known("b")
        assert refs.pending == 1 and refs.waitables()
        end = time.monotonic() + 120
        while refs.get("a") is PENDING and time.monotonic() < end:
            refs.poll(1.0)
        art = refs.get("a")
        assert art is not PENDING and not isinstance(art, str)
        want = build_reference(task, BuildOptions(compile_to="ir"))
        assert art.device_ir == want.device_ir  # the same kernels as built here
        assert refs.pending == 0 and refs.waitables() == []
    finally:
        refs.close()


def test_a_reference_that_does_not_build_says_why():
    spec = _task().task_spec
    bad = dataclasses.replace(spec, reference_pipeline_text="split(nothing.here, factors=[2])")
    got = build_reference(bad, BuildOptions(compile_to="ir"))
    assert isinstance(got, str) and got.startswith("skipped: the reference schedule did not "
                                                   "build")
    refs = ReferenceBuilds(in_process=True)
    refs.request("bad", bad, BuildOptions(compile_to="ir"))
    assert refs.get("bad") == got


def test_sim_runner_holds_candidates_until_their_reference_is_built():
    task = _task()
    inputs = _inputs(task, 3)
    builds = measure.LocalBuilder(n_parallel=0, compile_to="ir").build(inputs)
    runner = measure.SimRunner(check_correctness=True)
    try:
        runner.prepare(inputs[0])  # the flow does this when the candidate goes to a builder
        assert runner._refs.pending == 1
        t0 = time.perf_counter()
        for i, (inp, b) in enumerate(zip(inputs, builds)):
            runner.submit(i, inp, b)
        submit_s = time.perf_counter() - t0
        assert runner.pending == len(inputs)
        if runner._refs.pending:  # still building: the candidates wait, submit did not
            assert sum(len(v) for v in runner._held.values()) == len(inputs)
        out: dict = {}
        end = time.monotonic() + 120
        while len(out) < len(inputs) and time.monotonic() < end:
            out.update(runner.collect(None))
        assert len(out) == len(inputs)
        for res in out.values():
            assert res.error_no == 0 and res.correctness == "passed", res.error_msg
        assert runner.pending == 0
        assert submit_s < 5.0
    finally:
        runner.close()


def test_measure_batch_checks_candidates_against_the_background_reference():
    task = _task()
    inputs = _inputs(task, 4)
    builder = measure.LocalBuilder(n_parallel=1, compile_to="ir")
    runner = measure.SimRunner(check_correctness=True)
    try:
        results = measure.measure_batch(inputs, builder, runner)
    finally:
        builder.close()
        runner.close()
    assert len(results) == 4
    for res in results:
        assert res.error_no == 0 and res.correctness == "passed", res.error_msg


def test_closing_a_runner_drops_held_candidates():
    task = _task()
    inputs = _inputs(task, 1)
    builds = measure.LocalBuilder(n_parallel=0, compile_to="ir").build(inputs)
    runner = measure.SimRunner(check_correctness=True)
    runner.submit(0, inputs[0], builds[0])
    runner.close()
    assert runner.pending == 0
