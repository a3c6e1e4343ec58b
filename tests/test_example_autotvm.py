"""examples/tune_conv2d_autotvm.py end to end on the simulator, at a tiny budget."""

from __future__ import annotations

import os
import subprocess
import sys

from ptxforge import autotvm
from ptxforge.measure import load_records

EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples",
                       "tune_conv2d_autotvm.py")
WORKLOAD = ("tutorial/conv2d_no_batching", 1, 7, 7, 512, 512, 3, 3, (1, 1), (1, 1))


def test_example_tunes_on_the_simulator_and_logs_records(tmp_path):
    log = tmp_path / "conv2d.log"
    # without the print / parse round trip of every pass that the suite turns on: the
    # tutorial template's schedules round-trip in test_autotvm and test_golden_schedules
    env = {**os.environ, "PTXFORGE_CHECK_ROUNDTRIP": "0"}
    proc = subprocess.run([sys.executable, EXAMPLE, "--runner", "sim", "--trials", "4",
                           "--log", str(log)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env=env)
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ConfigSpace (len=10454400, space_map=" in out
    assert "   0 tile_f: Split(policy=factors, product=512, num_outputs=4) len=220" in out
    assert "No: 4\t" in out and "No: 5\t" not in out
    # every time reported without a GPU is labelled as an estimate
    timed = [line for line in out.splitlines() if "GFLOPS" in line and "error_no=0" in line]
    assert timed and all("estimated" in line for line in timed)
    assert "ESTIMATED" in out.splitlines()[-1]

    records = load_records(log)
    assert len(records) == 4
    assert all(inp.payload["autotvm"]["template"] == WORKLOAD[0] for inp, _ in records)
    ok = [(inp, res) for inp, res in records if res.error_no == 0]
    assert ok and all(res.estimated for _, res in ok)
    best = autotvm.apply_history_best(str(log)).query("cuda", WORKLOAD)
    assert not best.is_fallback
    fastest = min(ok, key=lambda p: p[1].mean)[0]
    assert best.index == fastest.payload["autotvm"]["config"]["index"]
    assert f"Best config:\n{best}\n" in out
    assert "matches numpy" in out or "Correctness not checked" in out
