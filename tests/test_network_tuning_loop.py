"""The network-tuning loop below the command line (``autosched.network_tuning``): the trial
plan of a resumed log, a short run on the simulator, and ``ptxforge records show``, which
took over ``python -m ptxforge.measure show``."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np
import pytest

from ptxforge import autosched, graph
from ptxforge.autosched.network_tuning import (
    Measurement,
    default_table,
    plan_trials,
    tune_network,
)
from ptxforge.cli.records import records_command
from ptxforge.measure import MeasureErrorNo, MeasureInput, MeasureResult, TaskSpec, save_records


@dataclass(frozen=True)
class _Task:
    workload_key: str


def _spec(key: str, name: str, flop: float = 2e9) -> TaskSpec:
    return TaskSpec(workload_key=key, target="cuda", module_text="", flop=flop, name=name)


def _save(path, rows) -> None:
    inputs, results = [], []
    for k, (spec, cost, error) in enumerate(rows):
        inputs.append(MeasureInput(spec, f"split(x.i, factors=[{k + 1}])", None))
        results.append(MeasureResult((cost,), error, "boom" if error else "", 0.1,
                                     1000.0 + k))
    save_records(str(path), inputs, results)


def test_plan_counts_the_earlier_trials_of_these_tasks_only(tmp_path):
    log = tmp_path / "net.json"
    tasks = [_Task('["a"]'), _Task('["b"]')]
    plan = plan_trials(tasks, str(log), 10)
    assert (plan.earlier, plan.todo, plan.resume) == (0, 10, False)
    a, other = _spec('["a"]', "a"), _spec('["zzz"]', "other")
    _save(log, [(a, 1e-3, 0), (a, 2e-3, 0), (a, 1e10, 1), (other, 1e-3, 0)])
    # the failed trial counts (it was measured); the other workload's does not
    plan = plan_trials(tasks, str(log), 10)
    assert (plan.earlier, plan.todo, plan.resume) == (3, 7, True)
    # at least one trial per task, while any is missing; none once the log holds enough
    assert plan_trials(tasks, str(log), 4).todo == 2
    assert plan_trials(tasks, str(log), 3).todo == 0
    with pytest.raises(ValueError, match=r"at least the number of tasks \(2\)"):
        plan_trials(tasks, str(log), 1)


def test_default_table_sits_beside_the_log():
    assert default_table("runs/bert.json") == "runs/bert.tasks.txt"
    assert default_table("bert.log") == "bert.log.tasks.txt"


def test_measurement_names_a_bad_runner():
    with pytest.raises(ValueError, match=r"runner must be one of \('gpu', 'sim'\)"):
        Measurement("cpu", 5.0, False)


@pytest.mark.slow  # a builder pool starts: a few seconds
def test_tune_network_resumes_and_reports(tmp_path):
    # one task: a dense layer with its bias and relu fused in
    rng = np.random.default_rng(0)
    x, w, b = graph.var("x", (4, 16)), graph.var("w", (8, 16)), graph.var("b", (8,))
    net = graph.function(graph.nn.relu(graph.nn.bias_add(graph.nn.dense(x, w), b)))
    params = {"w": rng.standard_normal((8, 16)).astype("float32"),
              "b": rng.standard_normal(8).astype("float32")}
    tasks, weights = autosched.extract_tasks(net, params, "cuda")
    log = tmp_path / "net.json"
    run = tune_network(tasks, weights, str(log), len(tasks), runner="sim", sim_check=False,
                       per_round=4)
    assert run.trials == len(tasks) and not run.resumed
    assert len(log.read_text().splitlines()) == len(tasks)
    report = run.report()
    assert "[ Task Scheduler ]" in report and f"{len(tasks)} trials in" in report
    assert str(tmp_path / "net.tasks.txt") in report and (tmp_path / "net.tasks.txt").exists()
    assert set(run.stages) >= {"search", "learn"} and run.builder.builds >= 1
    again = tune_network(tasks, weights, str(log), len(tasks), runner="sim", sim_check=False,
                         per_round=4)
    assert again.resumed and f"resumed from {log}" in again.report()
    assert len(log.read_text().splitlines()) == 2 * len(tasks)
    with pytest.raises(ValueError, match="at least 1 trial"):
        tune_network(tasks, weights, str(log), 0)


def test_records_show_prints_one_line_per_record(tmp_path, capsys):
    log = tmp_path / "log.json"
    conv = _spec('["w"]', "conv\x1b[2J")
    _save(log, [(conv, 1e-3, 0), (conv, 1e10, int(MeasureErrorNo.COMPILE_DEVICE)),
                (conv, 1e10, 99)])
    args = argparse.Namespace(action="show", log=str(log), output=None)
    assert records_command(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["conv\\x1b[2J: 1.0000 ms, 2000.00 GFLOPS",
                     "conv\\x1b[2J: COMPILE_DEVICE", "conv\\x1b[2J: error 99"]
