"""Auto-scheduler search: population operators, cost models, the tuning loop (with in-test
builder and runner fakes, and with the real builder and the simulator runner), records,
resume, apply_best and print_best."""

from __future__ import annotations

import hashlib
import json
import re
import time

import numpy as np
import ptxforge
import pytest
from ptxforge import autosched, measure, ops, te, workloads
from ptxforge.autosched.evolution import crossover, mutate, random_population
from ptxforge.autosched.search_policy import SketchPolicy
from ptxforge.autosched.sketch import TileSlot
from ptxforge.autosched.state import state_from_payload
from ptxforge.ir.to_ir import to_ir
from ptxforge.passes.pipeline import Pipeline

from .instant import Instant


@autosched.register_workload
def small_conv_relu(N, H, W, CO, CI, KH, KW, stride, padding):
    """conv2d + bias + relu with loop names that do not repeat across stages."""
    data = te.placeholder((N, CI, H, W), name="data")
    kernel = te.placeholder((CO, CI, KH, KW), name="kernel")
    bias = te.placeholder((1, CO, 1, 1), name="bias")
    conv = ops.nn.conv2d_nchw(data, kernel, stride, padding, dilation=1, out_dtype="float32")
    out = te.compute(conv.shape, lambda b, o, y, x: te.max(conv[b, o, y, x] + bias[0, o, 0, 0],
                                                           0.0), name="relu")
    return [data, kernel, bias, out]


def seed_task():
    return autosched.SearchTask(func=workloads.conv2d_layer, args=workloads.SEED_ARGS)


# -- in-test builder and runner ---------------------------------------------------------------
class FakeBuilder(Instant, measure.Builder):
    """Builds nothing: every candidate succeeds at once."""

    def __init__(self):
        self._done: list = []

    def submit(self, key, inp):
        self._done.append((key, measure.BuildResult("built", 0, "", 0.0)))


def fake_costs(task, rows):
    """A deterministic 'time' per state: the static estimate times a factor in [0.7, 1.3]
    drawn from a hash of the state."""
    _, _, est = task.features(rows)
    h = np.array([int(hashlib.sha256(r.tobytes()).hexdigest()[:8], 16) / 0xFFFFFFFF
                  for r in np.ascontiguousarray(rows)])
    return est * (0.7 + 0.6 * h)


class FakeRunner(Instant, measure.Runner):
    """A deterministic time per state: the static estimate times a factor from a hash of
    the pipeline; states with many vthreads 'fail' so errors are exercised."""

    def __init__(self, task, estimated=False):
        self.task = task
        self.estimated = estimated
        self._done: list = []
        self.seen: list = []

    def cost(self, inp):
        st = state_from_payload(self.task, inp.payload)
        return float(fake_costs(self.task, st.row(self.task.state_width)[None])[0])

    def submit(self, key, inp, build):
        self.seen.append(inp.pipeline_text)
        if "vthread" in inp.pipeline_text and "factors=[8]" in inp.pipeline_text:
            res = measure.MeasureResult((measure.ERROR_COST,), 4, "fake fault", 0.0, 0.0,
                                        estimated=self.estimated)
        else:
            res = measure.MeasureResult((self.cost(inp),), 0, "", 0.0, 0.0,
                                        estimated=self.estimated)
        self._done.append((key, res))


def options(task, trials, per_round=16, log=None, **kw):
    cbs = [autosched.RecordToFile(log)] if log else []
    kw.setdefault("runner", FakeRunner(task))
    return autosched.TuningOptions(num_measure_trials=trials, num_measures_per_round=per_round,
                                   builder=FakeBuilder(), measure_callbacks=cbs,
                                   verbose=kw.pop("verbose", 0),
                                   measure_default=kw.pop("measure_default", False), **kw)


SMALL_POLICY = {"evolutionary_search_population": 256, "evolutionary_search_num_iters": 2}


# -- operators --------------------------------------------------------------------------------
def test_mutation_changes_one_slot_and_keeps_exact_tiles():
    task = seed_task()
    rng = np.random.default_rng(0)
    pop = random_population(task, 500, rng)
    child = mutate(task, pop, rng)
    changed = (child != pop).sum(axis=1)
    assert (changed <= 1).all() and changed.mean() > 0.9
    assert (child[:, 0] == pop[:, 0]).all()
    for s, sk in enumerate(task.sketches):
        rows = child[child[:, 0] == s, 1: 1 + len(sk.slots)]
        assert ((rows >= 0) & (rows < sk.sizes)).all()
        for j, slot in enumerate(sk.slots):
            if isinstance(slot, TileSlot):
                vals = slot.table.rows[rows[:, j]]
                assert (vals.prod(axis=1) == slot.extent).all()


def test_crossover_takes_every_slot_from_a_parent():
    task = seed_task()
    rng = np.random.default_rng(1)
    a = random_population(task, 300, rng)
    b = random_population(task, 300, rng)
    b[:, 0] = a[:, 0]
    c = crossover(a, b, rng)
    assert ((c == a) | (c == b)).all()
    assert ((c != a).any(axis=1)).mean() > 0.5


def test_scoring_a_generation_of_2048_states_is_fast():
    task = seed_task()
    pol = SketchPolicy(task, autosched.XGBModel(num_warmup_sample=16), seed=0)
    pop = pol.sample_initial_population(2048)
    assert len(pop) == 2048
    train = pop[:256]
    results = [measure.MeasureResult((c,), 0, "", 0.0, 0.0) for c in fake_costs(task, train)]
    pol.cost_model.update(task, train, results)
    pol.cost_model.predict(task, pop[:8])  # trains the trees
    t0 = time.perf_counter()
    feats, valid, est = task.features(pop)
    scores = pol.cost_model.predict(task, pop, feats, est)
    elapsed = time.perf_counter() - t0
    assert valid.all() and scores.shape == (2048,) and np.isfinite(scores).all()
    assert elapsed < 0.5, f"scoring 2048 states took {elapsed:.3f} s"


def test_xgb_model_learns_the_ranking_and_random_model_does_not():
    task = seed_task()
    pol = SketchPolicy(task, autosched.RandomModel(), seed=3)
    pop = pol.sample_initial_population(600)
    costs = fake_costs(task, pop)
    results = [measure.MeasureResult((c,), 0, "", 0.0, 0.0) for c in costs]
    model = autosched.XGBModel(num_warmup_sample=1)
    model.update(task, pop[:400], results[:400])
    pred = model.predict(task, pop[400:])

    def spearman(x, y):
        rx, ry = np.argsort(np.argsort(x)), np.argsort(np.argsort(y))
        return np.corrcoef(rx, ry)[0, 1]

    assert spearman(pred, -costs[400:]) > 0.6
    rand = autosched.RandomModel(seed=0).predict(task, pop[400:])
    assert abs(spearman(rand, -costs[400:])) < 0.3


# -- the tuning loop --------------------------------------------------------------------------
def _pipelines(log):
    with open(log) as f:
        return [json.loads(line)["pipeline"] for line in f]


def test_search_is_reproducible_under_a_fixed_seed(tmp_path):
    task = seed_task()
    runs = []
    for k, seed in enumerate((7, 7, 8)):
        log = str(tmp_path / f"run{k}.json")
        pol = SketchPolicy(task, autosched.XGBModel(num_warmup_sample=16), SMALL_POLICY,
                           seed=seed)
        task.tune(options(task, 32, log=log), search_policy=pol)
        runs.append(_pipelines(log))
    assert len(runs[0]) == 32 and len(set(runs[0])) == 32
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_tune_apply_best_and_resume_without_remeasuring(tmp_path, capsys):
    task = seed_task()
    log = str(tmp_path / "conv2d.json")
    pol = SketchPolicy(task, autosched.XGBModel(num_warmup_sample=16), SMALL_POLICY, seed=1)
    summary = task.tune(options(task, 32, log=log, verbose=1,
                                runner=FakeRunner(task, estimated=True)), search_policy=pol)
    out = capsys.readouterr().out
    assert "round 2: 32 trials" in out and "GFLOP/s (estimated)" in out
    assert summary.trials == 32 and summary.best_cost < 1.0
    first = _pipelines(log)
    inp, res = autosched.load_best_record(log, task.workload_key)
    assert res.mean == pytest.approx(summary.best_cost)
    sch, args = task.apply_best(log)
    assert sch.pipeline.text == Pipeline.parse(inp.pipeline_text).text
    f = ptxforge.build(sch, args, target="sim")
    assert f.device_module.kernels()
    # resume: a trained model and the measured states; nothing is measured twice
    model = autosched.XGBModel(num_warmup_sample=16)
    model.update_from_file(log)
    assert model.num_samples == 32
    pol2 = SketchPolicy(task, model, SMALL_POLICY, seed=2,
                        init_search_callbacks=[autosched.PreloadMeasuredStates(log)])
    assert len(pol2.measured) == 32
    runner = FakeRunner(task)
    task.tune(options(task, 16, log=log, runner=runner), search_policy=pol2)
    assert len(runner.seen) == 16 and not set(runner.seen) & set(first)
    assert len(_pipelines(log)) == 48


def test_print_best_schedule_replays_to_the_same_ir(tmp_path):
    from .test_autosched_sketch import SEED_STATE

    task = seed_task()
    sk = task.sketches[0]
    st = autosched.State(0, sk.row_of(SEED_STATE))
    text = st.pipeline_text(task)
    log = str(tmp_path / "best.json")
    inp = measure.MeasureInput(task.task_spec, text, autosched.state.state_payload(task, st))
    measure.save_records(log, [inp], [measure.MeasureResult((3.4e-4,), 0, "", 1.0, 0.0)])
    code = task.print_best(log, print_mode="schedule")
    assert "s[compute_1].split(compute_1_ff, factor=1)" in code
    assert re.search(r's\[compute\]\.bind\(compute_i0\w*_o_o_i_i1\w*_fused, '
                     r"te\.thread_axis\('vthread'\)\)", code)
    ns = {"te": te, "tensors": task.tensors}
    exec(code, ns)
    want = str(Pipeline.parse(text)(to_ir(task.ir_dag)))
    assert str(ns["s"].module) == want
    sch, _ = task.apply_best(log)
    assert str(sch.module) == want
    with pytest.raises(ValueError, match="print_mode"):
        task.print_best(log, print_mode="opencl")


def test_printed_schedules_write_record_strings_as_data_not_code(tmp_path):
    """A record is data: names and strings from its pipeline reach the printed Python only
    through repr, so a crafted record cannot run code when the printout is executed."""
    import ast

    task = seed_task()
    evil = 'x"), __import__("builtins").setattr(__import__("builtins"), "pwned", 1), ("'
    quoted = evil.replace('"', '\\"')
    text = (f'pragma("compute.i1{quoted}", "auto_unroll_max_step", 4), '
            f'bind(compute.i0, "{quoted}")')
    log = str(tmp_path / "evil.json")
    inp = measure.MeasureInput(task.task_spec, text, None)
    measure.save_records(log, [inp], [measure.MeasureResult((1e-4,), 0, "", 1.0, 0.0)])
    code = task.print_best(log, print_mode="schedule")
    calls = {n.func.id for n in ast.walk(ast.parse(code))
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert "__import__" not in calls and "setattr" not in calls
    import builtins

    with pytest.raises(Exception):  # noqa: B017  (the schedule itself is wrong: any error)
        exec(code, {"te": te, "tensors": task.tensors})
    assert not hasattr(builtins, "pwned")


def test_state_payloads_round_trip_and_foreign_payloads_are_ignored():
    task = seed_task()
    pop = SketchPolicy(task, autosched.RandomModel(), seed=4).sample_initial_population(20)
    for row in pop:
        st = autosched.State.from_row(row, task)
        payload = json.loads(json.dumps(autosched.state.state_payload(task, st)))
        assert state_from_payload(task, payload) == st
    assert state_from_payload(task, {"config": [1, 2]}) is None
    assert state_from_payload(task, {"kind": "autosched", "sketch": "nope", "state": {}}) is None


def test_workload_keys_rebuild_registered_workloads():
    args = (1, 5, 5, 8, 4, 3, 3, (1, 1), (1, 1))
    key = autosched.make_workload_key(small_conv_relu, args)
    assert json.loads(key) == ["small_conv_relu", 1, 5, 5, 8, 4, 3, 3, [1, 1], [1, 1]]
    task = autosched.SearchTask(workload_key=key)
    assert str(task.compute_dag) == str(autosched.SearchTask(func=small_conv_relu,
                                                             args=args).compute_dag)
    with pytest.raises(KeyError, match="not registered"):
        autosched.SearchTask(workload_key='["no_such_workload", 1]')


@pytest.mark.slow
def test_tuning_with_the_builder_and_the_simulator_runner(tmp_path, capsys):
    task = autosched.SearchTask(func=small_conv_relu, args=(1, 6, 6, 8, 32, 3, 3, (1, 1),
                                                           (1, 1)))
    log = str(tmp_path / "sim.json")
    opts = autosched.TuningOptions(
        num_measure_trials=6, num_measures_per_round=3,
        builder=measure.LocalBuilder(n_parallel=2, compile_to="ir"),
        runner=measure.SimRunner(), measure_callbacks=[autosched.RecordToFile(log)], verbose=1)
    pol = SketchPolicy(task, autosched.XGBModel(), SMALL_POLICY, seed=0)
    summary = task.tune(opts, search_policy=pol)
    assert "(estimated)" in capsys.readouterr().out
    recs = measure.load_records(log)
    assert len(recs) == 6 and summary.estimated
    ok = [r for _, r in recs if r.ok]
    assert ok and all(r.correctness == "passed" for r in ok)
    sch, args = task.apply_best(log)
    rng = np.random.default_rng(0)
    ins = [rng.uniform(size=t.shape).astype("float32") for t in args[:3]]
    out = np.zeros(args[3].shape, "float32")
    ptxforge.build(sch, args, target="sim")(*ins, out)
    np.testing.assert_allclose(out, workloads.reference(*ins), rtol=1e-4, atol=1e-5)


def test_xgb_model_without_xgboost_fails_at_once(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "xgboost", None)
    with pytest.raises(ImportError, match="pip install xgboost"):
        autosched.XGBModel()
