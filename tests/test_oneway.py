"""The one-way candidate path: the tuner sends search states, the builder makes the schedule.

The main process of a tuning run never builds a te schedule for a candidate; the builder
worker makes it from the state (a :class:`~ptxforge.autosched.state.StatePlan`), applies it
once and returns its pipeline text, which the records hold. Old records still replay to the
same kernels; device IR travels between builder and runners as objects; ``graph.build``
lowers each function to te once; ``--profile`` says where a tuning run's time went.
"""

from __future__ import annotations

import json
import os
import pickle

import numpy as np
import ptxforge
import pytest
from ptxforge import autosched, graph, measure, te
from ptxforge.autosched.state import TASKS, State, StatePlan, candidate_input, state_from_payload
from ptxforge.autosched.tensorcore import migrate_payload
from ptxforge.measure.build import BuildOptions, build_candidate
from ptxforge.passes.pipeline import Pipeline
from ptxforge.tests.test_tensorcore_records import tc_records_dense  # noqa: F401  (registers)

DATA = os.path.join(os.path.dirname(__file__), "data")
OLD_TC_LOG = os.path.join(DATA, "records_tensorcore_autosched_v1.json")


@autosched.register_workload(override=True)
def oneway_dense_fp16(M, N, K):
    """A float16 product summed in float32: it gets tensor-core sketches on sm_80."""
    a = te.placeholder((M, K), name="A", dtype="float16")
    b = te.placeholder((N, K), name="B", dtype="float16")
    k = te.reduce_axis((0, K), name="k")
    c = te.compute((M, N), lambda i, j: te.sum(
        a[i, k].astype("float32") * b[j, k].astype("float32"), axis=k), name="C")
    return [a, b, c]


@pytest.fixture(scope="module")
def tc_task():
    task = autosched.SearchTask(func=oneway_dense_fp16, args=(64, 64, 64),
                                target="cuda -arch=sm_80")
    assert any(sk.name.startswith("tensorcore") for sk in task.sketches)
    return task


def tc_states(task, n: int = 3) -> list:
    """The default state of every tensor-core sketch, and a few sampled ones."""
    states = [State(k, sk.default_row()) for k, sk in enumerate(task.sketches)
              if sk.name.startswith("tensorcore")]
    pol = autosched.SketchPolicy(task, autosched.RandomModel(seed=1), seed=1, verbose=0)
    rows = pol.search_one_round(n)
    return states + [State.from_row(r, task) for r in rows]


class _Counted:
    """Counts the te schedules made in this process (the class is patched, so forked
    builder workers count in their own memory, which this process never sees)."""

    def __init__(self, monkeypatch):
        from ptxforge.passes.schedule import schedule as mod

        self.calls = 0
        init = mod.Schedule.__init__

        def counted(sch, *a, **kw):
            self.calls += 1
            init(sch, *a, **kw)

        monkeypatch.setattr(mod.Schedule, "__init__", counted)


# -- the plan ---------------------------------------------------------------------------------


def test_a_plan_builds_the_schedule_the_state_describes(tc_task):
    opts = BuildOptions(compile_to="ir")
    for st in tc_states(tc_task, 1):
        inp = candidate_input(tc_task, st)
        assert inp._pipeline_text == "" and isinstance(inp.plan, StatePlan)
        res = build_candidate(inp, opts)
        assert res.error_no == 0, res.error_msg
        want = st.pipeline_text(tc_task)
        assert res.pipeline_text == want
        assert "schedule" in res.stage_seconds and "apply" not in res.stage_seconds
        # the same kernels as a record of that text replays to
        replay = build_candidate(measure.MeasureInput(tc_task.task_spec, want), opts)
        assert replay.artifact.device_ir == res.artifact.device_ir
        inp.learn_pipeline(res.pipeline_text)
        assert inp.pipeline_text == want


def test_a_plan_rebuilds_its_task_in_a_process_that_lacks_it(tc_task):
    st = next(s for s in tc_states(tc_task, 0))
    data = pickle.dumps(StatePlan(tc_task, st))
    token = tc_task._plan_token
    # a process that never saw the task (a remote builder, a worker started later)
    del TASKS._mine[token]
    try:
        plan = pickle.loads(data)
        assert plan.task is not tc_task
        assert plan.task.workload_key == tc_task.workload_key
        assert plan.pipeline().text == st.pipeline_text(tc_task)
        assert pickle.loads(data).task is plan.task  # rebuilt once, then kept
    finally:
        TASKS.register(tc_task)


def test_a_plan_that_does_not_schedule_is_an_instantiation_error(tc_task):
    class Broken(StatePlan):
        def pipeline(self):
            from ptxforge.passes.schedule.common import ScheduleError

            raise ScheduleError("this state does not schedule")

    st = next(s for s in tc_states(tc_task, 0))
    inp = measure.MeasureInput(tc_task.task_spec, "", {}, plan=Broken(tc_task, st))
    res = build_candidate(inp, BuildOptions(compile_to="ir"))
    assert res.error_no == measure.MeasureErrorNo.INSTANTIATION_ERROR
    assert "does not schedule" in res.error_msg and res.pipeline_text == ""
    inp.learn_pipeline(res.pipeline_text, failed=True)
    assert inp.pipeline_text == ""  # not made again in this process


# -- the tuning loop --------------------------------------------------------------------------


def test_the_main_process_never_builds_a_schedule_for_a_candidate(tc_task, tmp_path,
                                                                   monkeypatch):
    tc_task.task_spec.module()
    _ = tc_task.sketches, tc_task.models
    log = str(tmp_path / "tc.json")
    counted = _Counted(monkeypatch)
    builder = measure.LocalBuilder(n_parallel=1, compile_to="ir", timeout=120)
    runner = measure.SimRunner(check_correctness=False, target="cuda -arch=sm_80")
    opts = autosched.TuningOptions(num_measure_trials=4, num_measures_per_round=2,
                                   builder=builder, runner=runner, verbose=0,
                                   measure_default=False,
                                   measure_callbacks=[autosched.RecordToFile(log)])
    pol = autosched.SketchPolicy(tc_task, autosched.RandomModel(seed=3), seed=3, verbose=0)
    try:
        summary = tc_task.tune(opts, search_policy=pol)
    finally:
        builder.close()
        runner.close()
    assert summary.trials == 4
    assert counted.calls == 0
    assert builder.stage_totals["schedule"] > 0 and builder.builds == 4
    # every record holds the pipeline its state gives (made by the builder)
    with open(log) as f:
        lines = [json.loads(line) for line in f]
    assert len(lines) == 4
    sketches = set()
    for rec in lines:
        inp = measure.MeasureInput(tc_task.task_spec, rec["pipeline"], rec["payload"])
        st = state_from_payload(tc_task, inp.payload)
        sketches.add(tc_task.sketches[st.sketch].name)
        assert rec["pipeline"] and rec["pipeline"] == st.pipeline_text(tc_task)
    assert any(n.startswith("tensorcore") for n in sketches), sketches
    # the records replay: apply_best builds the best one
    sch, args = tc_task.apply_best(log)
    assert sch.pipeline.text


def test_a_builder_that_ignores_plans_still_gets_records_with_pipelines(tc_task):
    st = next(s for s in tc_states(tc_task, 0))
    inp = candidate_input(tc_task, st)
    line = measure.record.encode(inp, measure.MeasureResult((1e-3,), 0, "", 0.0, 0.0))
    assert json.loads(line)["pipeline"] == st.pipeline_text(tc_task)


def test_old_tensor_core_records_build_the_same_kernels_from_their_states():
    # records of live sketches (a retired sketch's record replays its stored pipeline and
    # maps its state onto another sketch: tests/test_tensorcore_records.py)
    recs = [(i, r) for i, r in measure.load_records(OLD_TC_LOG)
            if i.task.target == "cuda -arch=sm_80"
            and migrate_payload(i.payload["sketch"], i.payload["state"]) is None][:1]
    assert recs
    opts = BuildOptions(compile_to="ir")
    for inp, _ in recs:
        task = autosched.SearchTask(workload_key=inp.task.workload_key, target=inp.task.target)
        st = state_from_payload(task, inp.payload)
        old = build_candidate(measure.MeasureInput(task.task_spec, inp.pipeline_text), opts)
        new = build_candidate(candidate_input(task, st), opts)
        assert old.error_no == new.error_no == 0, (old.error_msg, new.error_msg)
        assert Pipeline.parse(new.pipeline_text).text == Pipeline.parse(inp.pipeline_text).text
        assert new.artifact.device_ir == old.artifact.device_ir


# -- device IR as objects ---------------------------------------------------------------------


def test_device_ir_reaches_the_simulator_runner_without_a_parse(monkeypatch):
    from ptxforge.ir import parser

    task = autosched.SearchTask(func=oneway_dense_fp16, args=(16, 16, 16), target="sim")
    states = [State.from_row(r, task) for r in autosched.SketchPolicy(
        task, autosched.RandomModel(seed=0), seed=0, verbose=0).search_one_round(2)]
    inputs = [candidate_input(task, s) for s in states]
    builds = measure.LocalBuilder(n_parallel=0, compile_to="ir").build(inputs)
    assert all(inp.pipeline_text for inp in inputs)  # learned from the builds
    runner = measure.SimRunner(check_correctness=True)
    runner._reference(task.task_spec)

    def refuse(*a, **kw):
        raise AssertionError("device IR was parsed on its way to the runner")

    # the simulator's worker is forked from here, so it refuses parsing too
    monkeypatch.setattr(parser, "parse_module", refuse)
    monkeypatch.setattr(parser, "parse_func", refuse)
    try:
        results = runner.run(inputs, builds)
    finally:
        runner.close()
    for res in results:
        assert res.error_no == 0 and res.correctness == "passed", res.error_msg
    art = builds[0].artifact
    back = pickle.loads(pickle.dumps(art))  # across processes: the module object, pickled
    assert "device_ir" not in back.__dict__ and back.module is not art.module
    monkeypatch.undo()
    assert str(back.module) == art.device_ir


# -- graph.build --------------------------------------------------------------------------------


def test_graph_build_lowers_each_call_to_te_once(monkeypatch):
    from ptxforge.graph import fused, nn

    x = graph.var("x", (1, 8, 8, 4))
    w = graph.const(np.random.default_rng(0).standard_normal((3, 3, 4, 4)).astype("float32"))
    y = nn.relu(nn.conv2d(x, w, padding=1, data_layout="NHWC"))
    net = graph.function(nn.softmax(nn.batch_flatten(nn.relu(nn.conv2d(
        y, w, padding=1, data_layout="NHWC")))))
    calls = []
    lower = fused.lower_function

    def counted(func):
        calls.append(func)
        return lower(func)

    monkeypatch.setattr(fused, "lower_function", counted)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lib = graph.build(net, target="sim")
    n_calls = len(fused.fused_calls(lib.graph))
    # once per call, to hash it into its workload key; never again to compile it
    assert len(calls) == n_calls
    assert len(lib.functions) < n_calls  # the two convolutions share a function
    a = np.random.default_rng(1).standard_normal((1, 8, 8, 4)).astype("float32")
    module = graph.GraphModule(lib, ptxforge.sim())
    module.set_input(x=a)
    module.run()
    np.testing.assert_allclose(module.get_output(0).numpy(), graph.evaluate(net, {"x": a}),
                               rtol=1e-4, atol=1e-5)


# -- the profile --------------------------------------------------------------------------------


def test_tune_op_profile_says_where_the_time_went(tmp_path, capsys):
    from ptxforge.cli.main import main

    log = str(tmp_path / "dense.json")
    rc = main(["tune-op", "dense", "--trials", "4", "--per-round", "4", "--runner", "sim",
               "--no-sim-check", "--log", log, "--profile", "--model", "random"])
    out = capsys.readouterr().out
    assert rc == 0
    prof = out[out.index("profile:"):]
    assert "main process: search" in prof and "measure" in prof
    assert "build:" in prof and "for 4 candidates" in prof
    assert "schedule" in prof and "lower" in prof
    assert "trials/s" in prof


# -- AutoTVM ------------------------------------------------------------------------------------


def test_autotvm_candidates_are_instantiated_by_the_builder_only(tmp_path):
    from ptxforge import autotvm
    from ptxforge.autotvm.task import TASKS as AUTOTVM_TASKS
    from ptxforge.tests.test_autotvm import COUNTED_CALLS

    task = autotvm.task.create("test/counted_matmul", args=(64, 32, 64), target="cuda")
    cfgs = [task.config_space.get(i) for i in (5, 17)]
    COUNTED_CALLS.clear()
    cands = [task.candidate(c) for c in cfgs]
    raws = [c.to_measure() for c in cands]
    assert not COUNTED_CALLS and all(not r.scheduled_text for r in raws)
    builds = measure.LocalBuilder(n_parallel=0, compile_to="ir").build(raws)
    assert len(COUNTED_CALLS) == 2  # once per candidate, in the builder
    for cfg, cand, b in zip(cfgs, cands, builds):
        assert b.error_no == 0, b.error_msg
        want = task.pipeline(cfg).text
        assert b.pipeline_text == want and cand.pipeline_text == want
        assert cand.to_measure().pipeline_text == want
        eager = build_candidate(task.measure_input(cfg).to_measure(), BuildOptions("sim", "ir"))
        assert eager.artifact.device_ir == b.artifact.device_ir
    # the record of a candidate holds the text its build returned
    log = str(tmp_path / "at.log")
    autotvm.record.save(log, cands, [measure.MeasureResult((1e-3,), 0, "", 0.0, 0.0)] * 2)
    assert [i.pipeline_text for i, _ in autotvm.record.load_from_file(log)] == [
        c.pipeline_text for c in cands]
    # a process without the task rebuilds it from the plan's bytes
    data = pickle.dumps(cands[0].plan)
    del AUTOTVM_TASKS._mine[task._plan_token]
    try:
        plan = pickle.loads(data)
        assert plan.task is not task and plan.config == cfgs[0]
        assert plan.pipeline().text == cands[0].pipeline_text
    finally:
        AUTOTVM_TASKS.register(task)


def _picky(n):
    """A template that refuses half of its configs (knob ``refuse``)."""
    from ptxforge import autotvm

    a = te.placeholder((n,), name="A")
    b = te.compute((n,), lambda i: a[i] * 2.0, name="B")
    s = te.create_schedule(b.op)
    cfg = autotvm.get_config()
    cfg.define_knob("refuse", [0, 1])
    if cfg["refuse"].val:
        raise autotvm.InstantiationError("this template refuses refuse=1")
    (i,) = s[b].op.axis
    s[b].bind(i, te.thread_axis("threadIdx.x"))
    return s, [a, b]


def test_an_autotvm_config_the_template_rejects_is_an_instantiation_error():
    from ptxforge import autotvm

    autotvm.template("test/oneway_picky", _picky)
    task = autotvm.task.create("test/oneway_picky", args=(32,), target="cuda")
    good, bad = (task.candidate(task.config_space.get(i)) for i in (0, 1))
    opts = BuildOptions(compile_to="ir")
    assert build_candidate(good.to_measure(), opts).error_no == 0
    res = build_candidate(bad.to_measure(), opts)
    assert res.error_no == measure.MeasureErrorNo.INSTANTIATION_ERROR
    assert "refuses refuse=1" in res.error_msg and res.pipeline_text == ""
