"""A worker pool says where its workers' time went: working, idle with nothing queued, and
finished but not yet answered by the process that owns the pool; ``--profile`` prints it for
the builders and the runner."""

from __future__ import annotations

import time

import pytest

from ptxforge.cli.profile import format_profile
from ptxforge.measure.pool import PoolStats, WorkerPool


def _nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def test_pool_stats_split_working_starved_and_lag():
    pool = WorkerPool(2, "fork")
    try:
        pool.submit("a", _nap, (0.3,))
        pool.submit("b", _nap, (0.3,))
        done = []
        while len(done) < 2:
            done += pool.poll(None)
        time.sleep(0.4)  # both workers idle, nothing queued: starved
        pool.submit("c", _nap, (0.1,))
        assert pool.poll(0.0) == []  # hands "c" to a worker
        time.sleep(0.3)  # "c" finishes while nobody reads its answer: lag
        while not pool.poll(None):
            pass
        st = pool.stats()
    finally:
        pool.close()
    assert st.workers == 2 and st.jobs == 3
    assert st.job_s == pytest.approx(0.7, abs=0.15)
    assert st.starved_s >= 0.7  # two workers for at least 0.4 s, one for 0.3 s more
    assert st.lag_s >= 0.15
    assert st.open_s >= 1.0


def test_stats_merge_and_print():
    a = PoolStats(16, 10, 4.0, 4.5, 1.0, 2.0)
    b = PoolStats(16, 5, 2.0, 2.0, 0.5, 1.0)
    m = a.merged(b)
    assert (m.workers, m.jobs, m.job_s, m.held_s, m.starved_s) == (16, 15, 6.0, 6.5, 1.5)
    assert m.lag_s == pytest.approx(0.5)

    class Side:
        pool_stats = m
        stage_totals = {"schedule": 3.0, "lower": 3.0}
        builds = 15
        build_seconds = 6.0

    text = format_profile({"search": 1.0, "measure": 2.0}, Side(), 15, 3.0, Side())
    assert "builders: 16 workers, 15 jobs: working 6.00 worker-s (12% of 16 x 3.0 s)" in text
    assert "runner: 16 workers" in text and "idle with nothing queued 1.50" in text
