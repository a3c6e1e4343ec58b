"""The command line: demo, inspect, records and plot, as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from ptxforge.measure import MeasureInput, MeasureResult, TaskSpec, save_records


def run_cli(*args, cwd=None) -> str:
    proc = subprocess.run([sys.executable, "-m", "ptxforge", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_demo_auto_schedules_on_the_simulator_and_says_so(tmp_path):
    log = tmp_path / "seed.json"
    out = run_cli("demo", "--sim", "--trials", "16", "--log", str(log))
    assert "compute(nn, ff, yy, xx) += " in out
    assert "ESTIMATE" in out and "(estimated)" in out
    assert "Searched 16 candidates" in out
    assert "ran on the simulator" in out and "matches numpy" in out
    assert ".target sm_90" in out
    assert len(log.read_text().splitlines()) == 16


def test_inspect_prints_each_pass(tmp_path):
    out = run_cli("inspect", "--print-after", "inject_vthread,insert_barriers")
    assert ";; IR after inject_vthread()" in out
    assert ";; IR after insert_barriers()" in out and "barrier" in out
    run_cli("inspect", "--dump-dir", str(tmp_path / "dump"))
    files = sorted(p.name for p in (tmp_path / "dump").iterdir())
    assert files[0] == "000_input.txt" and any("validate_gpu" in f for f in files)


@pytest.fixture
def log(tmp_path):
    path = tmp_path / "log.json"
    task = TaskSpec(workload_key='["w"]', target="cuda", module_text="", flop=2e9,
                    name="conv")
    other = TaskSpec(workload_key='["v"]', target="cuda", module_text="", flop=1e9,
                     name="dense")
    inputs, results = [], []
    for k, (t, cost) in enumerate([(task, 2e-3), (task, 1e-3), (other, 5e-4), (task, 4e-3)]):
        inputs.append(MeasureInput(t, f"split(x.i, factors=[{k + 1}])", None))
        results.append(MeasureResult((cost,), 0, "", 0.1, 1000.0 + k))
    save_records(str(path), inputs, results)
    with open(path, "a") as f:
        f.write('{"v": 1, "task": {"key": \n')  # a truncated line is skipped with a warning
    return path


def test_records_best_list_distill(log, tmp_path):
    best = run_cli("records", "best", str(log))
    assert "conv: 1.0000 ms, 2000.0 GFLOP/s" in best
    assert "dense: 0.5000 ms, 2000.0 GFLOP/s" in best
    listing = run_cli("records", "list", str(log))
    assert len([ln for ln in listing.splitlines()[1:] if ln.strip()]) == 4
    out = tmp_path / "best.json"
    run_cli("records", "distill", str(log), "-o", str(out))
    lines = out.read_text().splitlines()
    assert len(lines) == 2
    assert {json.loads(ln)["pipeline"] for ln in lines} == {
        "split(x.i, factors=[2])", "split(x.i, factors=[3])"}


def test_plot_writes_a_png(log, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "curve.png"
    run_cli("plot", str(log), "-o", str(png))
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
