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
    assert 0.0 <= st.handover_s < 0.5  # three small messages through a pipe


def test_stats_merge_and_print():
    a = PoolStats(16, 10, 4.0, 0.5, 1.0, 2.0)
    b = PoolStats(16, 5, 2.0, 0.0, 0.5, 1.0)
    m = a.merged(b)
    assert (m.workers, m.jobs, m.job_s, m.lag_s, m.starved_s) == (16, 15, 6.0, 0.5, 1.5)

    class Side:
        pool_stats = m
        stage_totals = {"schedule": 3.0, "lower": 3.0}
        builds = 15
        build_seconds = 6.0

    text = format_profile({"search": 1.0, "measure": 2.0}, Side(), 15, 3.0, Side())
    assert "builders: 16 workers, 15 jobs: working 6.00 worker-s (12% of 16 x 3.0 s)" in text
    assert "runner: 16 workers" in text and "idle with nothing queued 1.50" in text
    assert "taking a job over 0.00; open 3.0 s" in text


def _die(code: int) -> None:
    import os

    os._exit(code)


def _started(pool: WorkerPool) -> WorkerPool:
    """``pool`` once its worker is up (a first job done)."""
    pool.submit("warm", _nap, (0.0,))
    while not pool.poll(None):
        pass
    return pool


def test_prefetch_keeps_workers_busy_while_the_owner_does_not_read():
    pool = _started(WorkerPool(1, "fork", prefetch=1))
    try:
        for k in range(3):
            pool.submit(k, _nap, (0.2,))
        assert pool.poll(0.0) == []  # one job running, one sent ahead
        assert pool.pending == 3
        time.sleep(0.6)  # nobody reads: the worker went on with the job sent ahead
        done = []
        while len(done) < 3:
            done += pool.poll(None)
        st = pool.stats()
    finally:
        pool.close()
    assert sorted(o.key for o in done) == [0, 1, 2]
    assert all(o.status == "ok" for o in done)
    # without the job sent ahead the worker would have waited about 0.4 s for this process
    assert st.lag_s < 0.3 and st.jobs == 4


def test_jobs_sent_ahead_survive_a_dying_worker_and_time_limits():
    pool = WorkerPool(1, "fork", prefetch=1)
    try:
        pool.submit("dies", _die, (3,))
        pool.submit("after", _nap, (0.05,))
        pool.submit("slow", _nap, (5.0,), timeout=0.5)
        out = {}
        end = time.monotonic() + 30
        while len(out) < 3 and time.monotonic() < end:
            out.update((o.key, o) for o in pool.poll(1.0))
    finally:
        pool.close()
    assert out["dies"].status == "died"
    assert out["after"].status == "ok"  # sent ahead to the dead worker, run by the next
    assert out["slow"].status == "timeout"


def test_large_jobs_are_not_sent_ahead():
    from ptxforge.measure import pool as pool_mod

    pool = _started(WorkerPool(1, "fork", prefetch=1))
    assert pool._workers[0].room > 64 * 1024  # the send buffer was widened
    try:
        pool.submit("a", _nap, (0.2,))
        pool.submit("b", len, (b"x" * (pool_mod.PREFETCH_MAX_BYTES + 1),))
        pool.poll(0.0)
        assert len(pool._queue) == 1  # "b" waits for the worker to be idle
        out = {}
        while len(out) < 2:
            out.update((o.key, o) for o in pool.poll(None))
    finally:
        pool.close()
    assert out["b"].value == pool_mod.PREFETCH_MAX_BYTES + 1


def test_idle_time_is_split_into_start_up_between_rounds_and_tail():
    pool = WorkerPool(2, "fork")
    try:
        t0 = time.monotonic()
        pool.submit("a", _nap, (0.3,))
        pool.submit("b", _nap, (0.3,))
        done = []
        while len(done) < 2:
            done += pool.poll(None)
        first_by = time.monotonic() - t0
        time.sleep(0.4)  # both idle between two rounds of work
        pool.submit("c", _nap, (0.1,))
        while not pool.poll(None):
            pass
        time.sleep(0.3)  # the work is over: the tail
        st = pool.stats()
    finally:
        pool.close()
    # both workers took a job as soon as they were up: no start-up idling to speak of
    assert st.startup_starved_s < 0.2
    assert st.between_starved_s == pytest.approx(0.8, abs=0.25)
    assert st.tail_starved_s >= 0.65  # one worker during "c", both for 0.3 s after it
    assert st.startup_starved_s + st.between_starved_s + st.tail_starved_s == pytest.approx(
        st.starved_s)
    assert 0.3 <= st.first_s <= first_by
    merged = st.merged(PoolStats(2, 1, 0.1, 0.0, 0.5, 1.0, 0.0, 0.2, 0.3, 0.05))
    assert merged.startup_starved_s == pytest.approx(st.startup_starved_s + 0.2)
    assert merged.tail_starved_s == pytest.approx(st.tail_starved_s + 0.3)
    assert merged.first_s == st.first_s
    line = format_profile({}, type("Side", (), {"pool_stats": st})(), 3, 2.0)
    assert "; idle at the start-up" in line and "between rounds" in line
    assert "in the tail" in line and "first answer" in line


def test_profile_says_when_the_first_candidate_was_measured():
    from ptxforge.measure.measure import FlowTimes

    times = FlowTimes(10.0, added=10.1, built=10.6, run=10.6, result=14.2)
    text = format_profile({"search": 1.0}, object(), 1, 5.0, None, times)
    assert ("first candidate (s after the measurement opened): added 0.10 s, built 0.60 s, "
            "to the runner 0.60 s, runner's first result 4.20 s") in text
    assert "none added" in FlowTimes(0.0).line()
