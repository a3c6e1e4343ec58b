"""``kill -9`` a tuning run at random moments: every measurement the runner completed is on
disk, the log loads, and the resumed runs measure nothing twice."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import warnings

import pytest
from ptxforge.measure import load_records

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def _lines(path) -> list[str]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [x for x in f.read().split("\n") if x]


def _run(log, counts, trials, kill_after=None) -> int:
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "kill_tune_child.py"), str(log),
                          str(counts), str(trials)], env={**os.environ, "PYTHONPATH": ROOT},
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if kill_after is None:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0, out.decode()
        return 0
    start = len(_lines(counts))
    deadline = time.monotonic() + 60
    while len(_lines(counts)) == start:  # kill while it is measuring, not while importing
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()[0].decode()
        time.sleep(0.02)
    time.sleep(kill_after)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    return len(_lines(counts)) - start


@pytest.mark.slow
def test_kill_9_loses_no_completed_measurement_and_resume_repeats_none(tmp_path):
    log, counts = tmp_path / "tune.json", tmp_path / "counted.txt"
    rng = random.Random()
    killed = []
    for _ in range(5):
        killed.append(_run(log, counts, 400, kill_after=rng.uniform(0.0, 1.5)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the line being written may be cut
            on_disk = {json.dumps(i.payload) for i, _ in load_records(log)}
        counted = _lines(counts)
        missing = [c for c in counted if json.dumps(json.loads(c)) not in on_disk]
        assert not missing, f"{len(missing)} completed measurements are not on disk"
    assert sum(killed) > 5, killed  # the kills did land while measuring
    _run(log, counts, 8)
    counted = [json.dumps(json.loads(c)) for c in _lines(counts)]
    assert len(counted) == len(set(counted)), "a resumed run measured a state again"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        recs = load_records(log)
    assert len(recs) == len(counted)
    print(f"\nkilled after {killed} completed measurements; {len(recs)} records on disk, "
          f"{len(set(counted))} distinct states")
