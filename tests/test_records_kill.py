"""``kill -9`` a tuning run at random moments: every measurement the runner completed is on
disk except at most the batch being handed back when the kill landed (a crash costs the
results in flight, nothing before them), the log loads, and the resumed runs measure
nothing twice that is on disk."""

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


def _batches(path) -> list[list[str]]:
    return [[json.dumps(p) for p in json.loads(line)] for line in _lines(path)]


@pytest.mark.slow
def test_kill_9_loses_no_completed_measurement_and_resume_repeats_none(tmp_path):
    log, counts = tmp_path / "tune.json", tmp_path / "counted.txt"
    rng = random.Random()
    killed, lost = [], set()
    for _ in range(5):
        before = len(_lines(counts))
        killed.append(_run(log, counts, 400, kill_after=rng.uniform(0.2, 1.5)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the line being written may be cut
            on_disk = {json.dumps(i.payload) for i, _ in load_records(log)}
        batches = _batches(counts)[before:]
        for n, batch in enumerate(batches):
            missing = [c for c in batch if c not in on_disk]
            # only the batch in flight at the kill may be lost: it was handed back, not written
            assert not missing or n == len(batches) - 1, \
                f"{len(missing)} completed measurements of an earlier batch are not on disk"
            lost.update(missing)
    assert sum(killed) > 5, killed  # the kills did land while measuring
    assert len(lost) <= 5 * 4, lost  # at most one round (4 measurements) per kill
    before = len(_lines(counts))
    _run(log, counts, 8)
    counted = [c for batch in _batches(counts) for c in batch]
    kept = [c for c in counted if c not in lost]
    assert len(kept) == len(set(kept)), "a resumed run measured a recorded state again"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        recs = load_records(log)
    on_disk = [json.dumps(i.payload) for i, _ in recs]
    assert len(on_disk) == len(set(on_disk)), "a state is recorded twice"
    assert set(on_disk) <= set(counted) and set(counted) - set(on_disk) <= lost
    print(f"\nkilled after {killed} completed batches; {len(lost)} results in flight lost; "
          f"{len(recs)} records on disk, {len(set(counted))} distinct states")
