"""Golden schedules: the pass text that sketches, the te schedule facade and AutoTVM
templates produce is frozen in ``tests/data/golden_schedules.json``, and record logs
written by earlier versions (``tests/data/records_*``) keep loading and replaying.

The golden file holds, for the seed layer, a ResNet 3x3 layer (56x56, 64->64) and a dense
layer, a fixed-seed initial population of the auto-scheduler (each state by sketch name and
explicit slot values, with its pipeline text); the pipeline text of the tutorial's te
schedules; and the text of AutoTVM template instances for fixed config indices. A change
that alters any of these texts on purpose regenerates the file with::

    PYTHONPATH=<parent of the checkout> python3 -m ptxforge.tests.test_golden_schedules --write

and says why in its commit; any other difference is a regression. The record logs are
never regenerated for a change of code: they stand for files users already have
(``--write-record-logs`` exists for a new record format version, next to the old logs).
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest
from ptxforge import autosched, autotvm, ops, te, workloads
from ptxforge.autosched.search_policy import SketchPolicy
from ptxforge.autosched.state import State, state_from_payload, state_payload
from ptxforge.ir.to_ir import to_ir
from ptxforge.passes import PassContext
from ptxforge.passes.pipeline import Pipeline

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
GOLDEN = os.path.join(DATA, "golden_schedules.json")
AUTOSCHED_LOG = os.path.join(DATA, "records_autosched_v1.json")
AUTOTVM_LOG = os.path.join(DATA, "records_autotvm_v1.log")

POPULATION = 32       # states per workload
POPULATION_SEED = 20  # of the policy that samples them
AUTOTVM_CONFIGS = 8   # config indices per template
AUTOTVM_SEED = 3


@autosched.register_workload(override=True)
def golden_dense(M, N, K):
    """A dense layer with bias (the auto-scheduler's matmul-like case)."""
    a = te.placeholder((M, K), name="A")
    w = te.placeholder((N, K), name="W")
    b = te.placeholder((N,), name="b")
    return [a, w, b, ops.nn.dense(a, w, b)]


WORKLOADS = {
    "seed": (workloads.conv2d_layer, workloads.SEED_ARGS),
    "resnet3x3": (workloads.conv2d_layer, (1, 56, 56, 64, 64, 3, 3, (1, 1), (1, 1))),
    "dense": (golden_dense, (1, 1000, 512)),
}
_TASKS: dict = {}


def _task(name: str) -> autosched.SearchTask:
    if name not in _TASKS:
        func, args = WORKLOADS[name]
        _TASKS[name] = autosched.SearchTask(func=func, args=args, target="cuda")
    return _TASKS[name]


def _templates():
    from . import test_autotvm as t  # registers the tutorial's template and a matmul

    return {"test/conv2d_no_batching": ("test/conv2d_no_batching", t.SEED_ARGS),
            "test/matmul": ("test/matmul", (64, 64, 64))}


def _autotvm_task(name: str):
    template, args = _templates()[name]
    return autotvm.task.create(template, args=args, target="cuda")


def _autotvm_text(task, index: int) -> str:
    try:
        return task.measure_input(task.config_space.get(index)).to_measure().pipeline_text
    except Exception as e:  # a config the template rejects: its error is frozen too
        return f"error: {type(e).__name__}"


# -- generation ------------------------------------------------------------------------------
def generate() -> dict:
    """The golden data as the current code makes it."""
    out: dict = {"autosched": {}, "te": {}, "autotvm": {}}
    for name in WORKLOADS:
        task = _task(name)
        pol = SketchPolicy(task, autosched.RandomModel(), seed=POPULATION_SEED)
        pop = pol.sample_initial_population(POPULATION)
        states = []
        for row in pop:
            st = State.from_row(row, task)
            p = state_payload(task, st)
            states.append({"sketch": p["sketch"], "state": p["state"],
                           "pipeline": st.pipeline_text(task)})
        out["autosched"][name] = {"sketches": [sk.name for sk in task.sketches],
                                  "states": states}
    out["te"]["seed_schedule"] = workloads.seed_schedule()[0].pipeline.text
    out["te"]["conv2d_no_batching_schedule"] = \
        workloads.conv2d_no_batching_schedule()[0].pipeline.text
    for name in _templates():
        task = _autotvm_task(name)
        rng = np.random.default_rng(AUTOTVM_SEED)
        idx = sorted(int(i) for i in rng.choice(len(task.config_space), AUTOTVM_CONFIGS,
                                                replace=False))
        out["autotvm"][name] = [{"index": i, "pipeline": _autotvm_text(task, i)} for i in idx]
    return out


def _result(cost: float):
    from ptxforge.measure import MeasureResult

    return MeasureResult((cost,), 0, "", 1.0, 0.0)


def write_record_logs(golden: dict) -> None:
    """Sample record logs: a few auto-scheduler records of the seed and dense layers and a
    few AutoTVM records of the tutorial's template."""
    from ptxforge import measure

    for path in (AUTOSCHED_LOG, AUTOTVM_LOG):
        if os.path.exists(path):
            os.remove(path)
    for name in ("seed", "dense"):
        task = _task(name)
        inputs, results = [], []
        for k, s in enumerate(golden["autosched"][name]["states"][:4]):
            st = state_from_payload(task, {"kind": "autosched", "sketch": s["sketch"],
                                           "state": s["state"]})
            inputs.append(measure.MeasureInput(task.task_spec, st.pipeline_text(task),
                                               state_payload(task, st)))
            results.append(_result(1e-4 * (k + 2) if k != 1 else 5e-5))
        measure.save_records(AUTOSCHED_LOG, inputs, results)
    task = _autotvm_task("test/conv2d_no_batching")
    good = [e["index"] for e in golden["autotvm"]["test/conv2d_no_batching"]
            if not e["pipeline"].startswith("error:")][:3]
    inputs = [task.measure_input(task.config_space.get(i)) for i in good]
    autotvm.record.save(AUTOTVM_LOG, inputs, [_result(1e-3 / (k + 1)) for k in
                                              range(len(inputs))])


def _load_golden() -> dict:
    with open(GOLDEN) as f:
        return json.load(f)


# -- the tests -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_sketch_populations_keep_their_pipeline_text(name):
    want = _load_golden()["autosched"][name]
    task = _task(name)
    assert [sk.name for sk in task.sketches] == want["sketches"]
    assert len(want["states"]) == POPULATION
    assert {s["sketch"] for s in want["states"]} == set(want["sketches"])
    for s in want["states"]:
        st = state_from_payload(task, {"kind": "autosched", "sketch": s["sketch"],
                                       "state": s["state"]})
        assert st is not None, s
        assert st.pipeline_text(task) == s["pipeline"]


def test_te_schedules_keep_their_pipeline_text():
    want = _load_golden()["te"]
    assert workloads.seed_schedule()[0].pipeline.text == want["seed_schedule"]
    assert workloads.conv2d_no_batching_schedule()[0].pipeline.text == \
        want["conv2d_no_batching_schedule"]


@pytest.mark.parametrize("name", ["test/conv2d_no_batching", "test/matmul"])
def test_autotvm_instances_keep_their_pipeline_text(name):
    want = _load_golden()["autotvm"][name]
    task = _autotvm_task(name)
    assert len(want) == AUTOTVM_CONFIGS
    assert any(not e["pipeline"].startswith("error:") for e in want)
    for e in want:
        assert _autotvm_text(task, e["index"]) == e["pipeline"], e["index"]


def test_old_autosched_records_load_and_replay():
    from ptxforge import measure

    recs = measure.load_records(AUTOSCHED_LOG)
    assert len(recs) == 8
    for name in ("seed", "dense"):
        task = _task(name)
        mine = autosched.load_records(AUTOSCHED_LOG, task.workload_key)
        assert len(mine) == 4
        for inp, _ in mine:
            assert state_from_payload(task, inp.payload) is not None
        best, res = autosched.load_best_record(AUTOSCHED_LOG, task.workload_key)
        assert res.mean == pytest.approx(5e-5)
        sch, args = task.apply_best(AUTOSCHED_LOG)
        assert sch.pipeline.text == best.pipeline_text
        ctx = PassContext(verify=False)
        want = str(Pipeline.parse(best.pipeline_text)(to_ir(task.ir_dag), ctx))
        assert str(sch.module) == want
        code = task.print_best(AUTOSCHED_LOG, print_mode="schedule")
        ns = {"te": te, "tensors": task.tensors}
        exec(code, ns)
        assert str(ns["s"].module) == want


def test_old_autotvm_records_load_and_replay():
    records = list(autotvm.record.load_from_file(AUTOTVM_LOG))
    assert len(records) == 3
    inp, res = min(records, key=lambda r: r[1].mean)
    template, args = _templates()["test/conv2d_no_batching"]
    workload = (template,) + tuple(args)
    with autotvm.apply_history_best(AUTOTVM_LOG) as ctx:
        cfg = ctx.query("cuda", workload)
        assert not cfg.is_fallback and cfg.index == inp.config.index
        s, _ = autotvm.task.TEMPLATES[template](*args)
    assert s.pipeline.text == Pipeline.parse(inp.to_measure().pipeline_text).text


if __name__ == "__main__":
    if sys.argv[1:] not in (["--write"], ["--write-record-logs"]):
        sys.exit("usage: python3 -m ptxforge.tests.test_golden_schedules --write | "
                 "--write-record-logs")
    os.makedirs(DATA, exist_ok=True)
    if sys.argv[1] == "--write":
        with open(GOLDEN, "w") as f:
            json.dump(generate(), f, indent=1)
            f.write("\n")
        print(f"wrote {GOLDEN}")
    else:
        write_record_logs(_load_golden())
        print(f"wrote {AUTOSCHED_LOG} and {AUTOTVM_LOG}")
