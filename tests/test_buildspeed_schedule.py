"""Cheaper schedule and lowering stages in the builder, with the same kernels.

The builder makes a candidate's schedule and lowers it inside one simplifier cache of the
candidate's own (never shared with another candidate), and the IR walks that call themselves
no longer leave reference cycles for the cyclic collector. The whole
effect on kernels is checked byte for byte by ``bench/build_profile.py --check`` (90 states of
four networks, to cubins); these tests keep the mechanisms honest.
"""

from __future__ import annotations

import gc

import pytest

from ptxforge import autosched
from ptxforge.autosched.state import State, StatePlan, candidate_input
from ptxforge.ir import simplify_cache as sc
from ptxforge.ir.stmt import map_stmt
from ptxforge.measure import MeasureInput
from ptxforge.measure.build import BuildOptions, build_candidate
from ptxforge.measure.plan import SchedulePlan
from ptxforge.passes import PassContext
from ptxforge.passes.lower import lowering_pipeline
from ptxforge.target import as_target

from .test_autosched_tensorcore import tc_dense_layer  # registered there

TARGET = "cuda -arch=sm_90a"
_TASK: list = []


def _task():
    if not _TASK:
        _TASK.append(autosched.SearchTask(func=tc_dense_layer, args=(64, 128, 64, "float16"),
                                          target=TARGET))
    return _TASK[0]


def _states(per_sketch: int = 1) -> list:
    """Valid random states, ``per_sketch`` of every sketch sampled (seed 5)."""
    task = _task()
    policy = autosched.SketchPolicy(task, autosched.RandomModel(seed=5), seed=5, verbose=0)
    pop = policy.sample_initial_population(16 * len(task.sketches))
    out, seen = [], {}
    for r in pop:
        k = int(r[0])
        if seen.get(k, 0) < per_sketch:
            seen[k] = seen.get(k, 0) + 1
            out.append(State.from_row(r, task))
    return out


class _Recording(SchedulePlan):
    """A plan that schedules as a state's plan does and notes the simplifier cache open
    while it does, and the one open when its module is lowered."""

    def __init__(self, plan: StatePlan, seen: list):
        self.plan, self.seen = plan, seen

    def pipeline(self):
        return self.plan.pipeline()

    def schedule(self, module, ctx):
        self.seen.append(sc.current())
        return self.plan.schedule(module, ctx)


def test_each_candidate_is_scheduled_and_lowered_in_a_cache_of_its_own(monkeypatch):
    import ptxforge.passes.lower as lower_mod

    task = _task()
    states = _states()[:2]  # two different states, of two sketches
    seen: list = []
    lowered: list = []
    real = lower_mod.lowering_pipeline

    def recording_pipeline():
        pipe = real()

        def run(module, ctx):
            lowered.append(sc.current())
            return pipe(module, ctx)

        return run

    monkeypatch.setattr(lower_mod, "lowering_pipeline", recording_pipeline)
    for st in states:
        inp = MeasureInput(task.task_spec, "", plan=_Recording(StatePlan(task, st), seen))
        res = build_candidate(inp, BuildOptions(target_sm="sm_90a", compile_to="ir"))
        assert res.error_no == 0, res.error_msg
    assert all(c is not None for c in seen), "the schedule ran without a simplifier cache"
    assert lowered == seen, "the lowering did not share its candidate's cache"
    assert seen[0] is not seen[1], "two candidates shared a simplifier cache"
    assert sc.current() is None  # closed when the build ends


def test_a_cached_schedule_and_its_lowering_are_those_made_without_one():
    task = _task()
    module = task.task_spec.module()
    kinds = ("tile", "wgmma_gemm")  # CUDA cores and tensor cores
    states = [s for s in _states() if task.sketches[s.sketch].name.startswith(kinds)]
    assert len(states) >= 2
    for st in states:
        plan = StatePlan(task, st)
        with as_target(TARGET):
            ctx = PassContext(verify=False)
            plain, pipe = plan.schedule(module, ctx)
            plain_device = lowering_pipeline()(plain, ctx)  # in a cache of its own
            with sc.simplify_cache():
                cached, pipe2 = plan.schedule(module, ctx)
                cached_device = lowering_pipeline()(cached, ctx)
            assert pipe.text == pipe2.text
            name = task.sketches[st.sketch].name
            assert str(cached) == str(plain), name
            assert str(cached_device) == str(plain_device), name


@pytest.fixture
def collector_off():
    was = gc.isenabled()
    gc.disable()
    gc.collect()
    yield
    if was:
        gc.enable()


def test_map_stmt_leaves_no_reference_cycle(collector_off):
    body = _task().task_spec.module().functions["main"].body
    for _ in range(3):
        map_stmt(body, fstmt=lambda s: None, fexpr=lambda e: e)
    assert gc.collect() == 0


def test_a_cuda_core_build_leaves_nothing_to_the_collector(collector_off):
    task = _task()
    st = next(s for s in _states() if task.sketches[s.sketch].name.startswith("tile"))
    opts = BuildOptions(target_sm="sm_90a", compile_to="ptx")
    assert build_candidate(candidate_input(task, st), opts).error_no == 0
    gc.collect()  # what the first build sets up once (imports, tables) is not counted
    res = build_candidate(candidate_input(task, st), opts)
    assert res.error_no == 0, res.error_msg
    assert gc.collect() == 0, "a build left reference cycles behind"


def _freeze_count() -> int:
    return gc.get_freeze_count()


def test_builder_workers_freeze_what_they_inherit(tmp_path):
    from ptxforge.measure.build import _use_scratch
    from ptxforge.measure.pool import WorkerPool

    pool = WorkerPool(1, "fork", _use_scratch, (str(tmp_path),), name="freeze-test")
    try:
        pool.submit("n", _freeze_count, (), 60)
        outcomes = []
        while not outcomes:
            outcomes = pool.poll(None)
    finally:
        pool.close()
    (o,) = outcomes
    assert o.status == "ok", o.error
    # the worker's inherited objects (this test process's, at least the modules) are frozen
    assert o.value > 1000
    assert gc.get_freeze_count() == 0  # the parent's collector is left as it was



def test_the_schedules_read_analysis_leaves_no_reference_cycle(collector_off):
    """``tensor_reads`` and ``reads_through`` (the tensor-core schedules' analysis of what a
    stage reads, inlined stages substituted) walk without self-referencing closures."""
    from ptxforge import te
    from ptxforge.ops.schedules.analysis import reads_through, tensor_reads

    a = te.placeholder((8, 8), "float16", name="a")
    b = te.compute((8, 8), lambda i, j: a[i, j] * 2, name="b")
    c = te.compute((8, 8), lambda i, j: b[i, j] + a[j, i], name="c")
    gc.collect()
    for _ in range(3):
        reads = reads_through(c.op, {id(b.op)})
        assert [t.name for t, _ in reads] == ["a", "a"]
        assert [r.tensor.name for r in tensor_reads(c.op.bodies[0])] == ["b", "a"]
    assert gc.collect() == 0
