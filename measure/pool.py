"""A pool of worker processes that outlives its workers.

Each job runs in one worker under its own time limit. A job that raises comes back as an
error; a job that hangs past its limit, or kills its worker (a segfault, an abort, a GPU
fault that takes the process down), costs that job only: the worker is killed or buried and
a fresh one takes its place. The standard library's pools cannot do this (one dead worker
breaks a ``ProcessPoolExecutor``; a ``multiprocessing.Pool`` job cannot be timed out).

Workers are started with ``fork`` (cheap, inherit the parent's imports), ``spawn`` or
``exec``. The last two give a clean interpreter, as a process that will own a CUDA context
needs; ``exec`` starts ``python -m ptxforge.measure.worker`` directly, which unlike
``spawn`` does not import the parent's main script again (tuning scripts, like TVM's
tutorials, often run at module level without a ``__main__`` guard). A job's function and
arguments travel by pickle, so the function must be importable at module level.
"""

from __future__ import annotations

import functools
import multiprocessing as mp
import os
import subprocess
import sys
import time
import traceback
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import wait as wait_any
from typing import Any

from .pool_start import start_for_good
from .pool_stats import PoolStats

START_FAILURES_ALLOWED = 3
"""Consecutive worker start failures after which queued jobs fail instead of waiting."""


class Retire:
    """Return ``Retire(value)`` from a job to hand back ``value`` and then end the worker
    (used when the job left the process unusable, e.g. a broken CUDA context)."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


@dataclass
class JobOutcome:
    """How one job ended.

    ``status``: ``"ok"`` (``value`` holds the result), ``"error"`` (the job raised:
    ``exc_type``, ``error`` and ``traceback`` describe it), ``"timeout"`` (the worker was
    killed after ``timeout`` seconds), ``"died"`` (the worker process ended during the
    job; ``error`` says how) or ``"unstartable"`` (no worker could be started to run it;
    ``error`` holds the start-up failure). ``seconds`` is the job's run time.
    """

    key: Any
    status: str
    value: Any = None
    error: str = ""
    exc_type: str = ""
    traceback: str = ""
    seconds: float = 0.0


def _die_with_parent() -> None:
    """Ask Linux to kill this process when its parent dies (so a killed tuner leaves no
    workers behind); elsewhere, the closed pipe ends the worker instead. Linux means the
    thread that started the process: the pool starts its workers from a thread that lives
    as long as the process (:mod:`.pool_start`)."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except Exception:  # not Linux, or no prctl: nothing to do
        pass


def _listen_to_stop_signals() -> None:
    """Unblock SIGINT and SIGTERM in this worker: a worker forked from a thread that had
    them blocked would inherit the mask, and a ``terminate()`` (SIGTERM) at the tuner's
    exit, which joins its daemonic children, would then wait for it forever."""
    try:
        import signal

        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    except (AttributeError, OSError, ValueError):  # no signal masks here
        pass


def _worker_main(conn, initializer, init_args, inherited=()) -> None:
    _die_with_parent()
    _listen_to_stop_signals()
    for c in inherited:  # pipes of sibling workers copied by fork: keep only our own
        try:
            c.close()
        except OSError:
            pass
    try:
        if initializer is not None:
            initializer(*init_args)
    except BaseException as e:  # report any start failure to the parent, then give up
        _send(conn, ("init_error", f"{type(e).__name__}: {e}", traceback.format_exc()))
        return
    _send(conn, ("ready",))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        if msg is None:
            return
        key, fn, args = msg
        t0 = time.perf_counter()
        retire = False
        try:
            value = fn(*args)
            if isinstance(value, Retire):
                value, retire = value.value, True
            reply = ("ok", key, value, time.perf_counter() - t0, retire, time.monotonic())
        except BaseException as e:  # a job's failure is data for the parent, never fatal here
                reply = ("error", key, type(e).__name__, str(e), traceback.format_exc(),
                     time.perf_counter() - t0, False, time.monotonic())
        if not _send(conn, reply):
            return
        if retire:
            return


def _send(conn, msg) -> bool:
    try:
        conn.send(msg)
        return True
    except (OSError, EOFError):
        return False
    except Exception as e:  # an unpicklable result: say so instead of the value
        if msg[0] == "ok":
            try:
                conn.send(("error", msg[1], type(e).__name__,
                           f"the job's result could not be sent back: {e}",
                           traceback.format_exc(), msg[3], msg[4], msg[5]))
                return True
            except Exception:
                return False
        return False


class _ExecProcess:
    """A worker started as ``python -m ptxforge.measure.worker FD`` (the ``exec`` method),
    with the part of ``multiprocessing.Process``'s interface the pool uses."""

    def __init__(self, fd: int, name: str):
        paths = [p for p in sys.path if isinstance(p, str)]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            paths + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        self.name = name
        self._popen = subprocess.Popen(
            [sys.executable, "-m", "ptxforge.measure.worker", str(fd)], pass_fds=(fd,),
            stdin=subprocess.DEVNULL, env=env)
        self.pid = self._popen.pid
        try:
            self._pidfd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):  # no pidfd: a dead worker shows up as a closed pipe
            self._pidfd = None

    @property
    def sentinel(self):
        return self._pidfd

    @property
    def exitcode(self):
        return self._popen.poll()

    def is_alive(self) -> bool:
        return self._popen.poll() is None

    def kill(self) -> None:
        if self._popen.poll() is None:
            self._popen.kill()

    def join(self, timeout: float | None = None) -> None:
        try:
            self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


class _Worker:
    __slots__ = ("process", "conn", "state", "job", "started", "deadline", "next", "room")

    def __init__(self, process, conn, start_timeout: float):
        self.process = process
        self.conn = conn
        self.state = "starting"  # starting -> idle <-> busy; retiring; dead
        self.job = None  # (key, fn, args, timeout)
        self.next: deque = deque()  # jobs sent ahead, waiting in the pipe (``prefetch``)
        self.room = 0  # the largest message that may be sent ahead to this worker
        self.started = time.monotonic()
        self.deadline = self.started + start_timeout


def _stop(workers: list) -> None:
    for w in workers:
        try:
            if w.state == "idle":
                w.conn.send(None)
        except Exception:  # the pipe may already be gone; the kill below handles it
            pass
    end = time.monotonic() + 1.0
    for w in workers:
        w.process.join(max(0.0, end - time.monotonic()))
        if w.process.is_alive():
            w.process.kill()
            w.process.join(1.0)
        try:
            w.conn.close()
        except OSError:
            pass
    workers.clear()


class WorkerPool:
    """Up to ``size`` worker processes running submitted jobs, each under a time limit.

    ``method``: how workers start, ``"fork"``, ``"spawn"`` or ``"exec"`` (see the module
    docstring);
    ``initializer(*init_args)`` runs once in each new worker before it takes jobs (a
    worker's start-up time never counts against a job). ``start_timeout`` bounds that
    start-up. ``prefetch``: jobs sent ahead to a busy worker (waiting in its pipe), so that
    it starts the next one the moment it finishes instead of waiting for this process to
    read its answer and send another; a job's time limit starts when the worker finishes
    the job before it, a job sent ahead to a worker that dies or is stopped goes back to the
    queue, and only jobs whose message is at most :data:`PREFETCH_MAX_BYTES` are sent ahead
    (a larger one could fill the pipe and block this process).
    """

    def __init__(self, size: int, method: str = "fork", initializer: Callable | None = None,
                 init_args: tuple = (), start_timeout: float = 120.0,
                 name: str = "ptxforge-worker", prefetch: int = 0):
        if size < 1:
            raise ValueError(f"a pool needs at least one worker, got size={size}")
        self.size = size
        if method not in ("fork", "spawn", "exec"):
            raise ValueError(f"unknown start method {method!r}; use fork, spawn or exec")
        self.method = method
        self._ctx = mp.get_context("spawn" if method == "exec" else method)
        self.initializer = initializer
        self.init_args = tuple(init_args)
        self.start_timeout = start_timeout
        self.name = name
        self._workers: list[_Worker] = []
        self._queue: deque = deque()
        self._start_failures = 0
        self._last_start_error = ""
        self.restarts = 0
        self._found_gone = 0  # idle workers found dead when handed a job
        self.prefetch = max(0, int(prefetch))
        self._too_big: set = set()  # keys of jobs too large to send ahead
        self._stats = PoolStats(size)
        self._first: float | None = None  # when the first job was submitted
        self._tick_at: float | None = None  # when starvation was last accounted
        # the starved worker-seconds when the first answer was read and when the last job
        # was submitted: where the start-up ends and the tail begins
        self._starved_at_first_answer: float | None = None
        self._starved_at_last_submit = 0.0
        self._finalizer = weakref.finalize(self, _stop, self._workers)

    # -- submitting -------------------------------------------------------------------------

    def submit(self, key: Any, fn: Callable, args: tuple = (), timeout: float | None = None,
               first: bool = False):
        """Queue ``fn(*args)`` under ``key`` with a limit of ``timeout`` seconds (None: no
        limit). Results come back from :meth:`poll`. ``first``: ahead of the jobs queued
        (a job sent again goes before those submitted after it).

        The job goes at once to an idle worker (or ahead to a busy one, see ``prefetch``),
        and a worker is started for it if there is room: so after a submit, as after a
        :meth:`poll`, waiting on :meth:`waitables` misses nothing. A job left queued while
        its worker sat idle would wake no one (a caller that submits while handling answers,
        as a runner resending a candidate does, then waits forever)."""
        self._tick()
        if self._first is None:
            self._first = time.monotonic()
        self._starved_at_last_submit = self._stats.starved_s
        job = (key, fn, tuple(args), timeout)
        if first:
            self._queue.appendleft(job)
        else:
            self._queue.append(job)
        self._feed()

    def stats(self) -> PoolStats:
        """Where the workers' time went so far (:class:`PoolStats`)."""
        self._tick()
        st = self._stats
        last = self._starved_at_last_submit
        first = st.starved_s if self._starved_at_first_answer is None else (
            self._starved_at_first_answer)
        st.startup_starved_s = min(first, last)
        st.tail_starved_s = max(0.0, st.starved_s - last)
        return st

    def _tick(self) -> None:
        """Add the time since the last call during which started workers sat idle with
        nothing queued."""
        now = time.monotonic()
        if self._tick_at is not None and not self._queue:
            idle = sum(1 for w in self._workers if w.state == "idle")
            self._stats.starved_s += idle * (now - self._tick_at)
        self._tick_at = now

    @property
    def pending(self) -> int:
        """Jobs queued or running."""
        return len(self._queue) + sum((w.state == "busy") + len(w.next) for w in self._workers)

    def run(self, jobs, timeout: float | None = None) -> list[JobOutcome]:
        """Run ``(key, fn, args)`` jobs and return their outcomes in the order given."""
        jobs = list(jobs)
        for key, fn, args in jobs:
            self.submit(key, fn, args, timeout)
        by_key = {}
        while len(by_key) < len(jobs):
            for o in self.poll(None):
                by_key[o.key] = o
        return [by_key[k] for k, _, _ in jobs]

    # -- waiting ----------------------------------------------------------------------------

    def waitables(self) -> list:
        """What :func:`multiprocessing.connection.wait` can wait on for this pool."""
        out = []
        for w in self._workers:
            if w.state != "dead":
                out.append(w.conn)
                if w.process.sentinel is not None:
                    out.append(w.process.sentinel)
        return out

    def next_deadline(self) -> float | None:
        """The earliest ``time.monotonic()`` at which a job or a start times out."""
        ds = [w.deadline for w in self._workers
              if w.state == "starting" or (w.state == "busy" and w.deadline is not None)]
        return min(ds) if ds else None

    def poll(self, timeout: float | None = 0.0) -> list[JobOutcome]:
        """Start and feed workers, then collect finished jobs: return as soon as some are
        done, or after ``timeout`` seconds (``None``: wait until at least one is done or
        nothing is pending). On return every message that arrived has been handled and
        every job that can run has been handed to a worker, so waiting on
        :meth:`waitables` afterwards misses nothing."""
        end = None if timeout is None else time.monotonic() + timeout
        outcomes: list[JobOutcome] = []
        while True:
            self._tick()
            outcomes += self._fail_queue_if_unstartable()
            self._feed()
            outcomes += self._collect()
            outcomes += self._expire()
            outcomes += self._fail_queue_if_unstartable()
            self._feed()
            if outcomes or self.pending == 0:
                return outcomes
            now = time.monotonic()
            if end is not None and now >= end:
                return outcomes
            wait_for = None if end is None else end - now
            dl = self.next_deadline()
            if dl is not None:
                wait_for = max(0.0, dl - now) if wait_for is None else min(wait_for,
                                                                           max(0.0, dl - now))
            handles = self.waitables()
            if handles:
                wait_any(handles, wait_for)
            else:
                time.sleep(min(wait_for if wait_for is not None else 0.01, 0.01))

    def cancel_queued(self) -> list:
        """Drop the jobs not yet handed to a worker (the jobs being run, and those sent
        ahead to a busy worker, go on); their keys, in queue order."""
        keys = [job[0] for job in self._queue]
        self._queue.clear()
        return keys

    def close(self) -> None:
        """Stop every worker (queued jobs are dropped)."""
        self._queue.clear()
        _stop(self._workers)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- internals --------------------------------------------------------------------------

    def _feed(self) -> None:
        """Start the workers the queue needs and hand queued jobs over; a worker found gone
        on the way is replaced at once, so that waiting on :meth:`waitables` afterwards
        misses nothing (every queued job has a worker that will take it or a starting one
        that will say it is ready)."""
        while True:
            if self._start_failures < START_FAILURES_ALLOWED:  # else poll() fails the queue
                self._top_up()
            gone = self._found_gone
            self._dispatch()
            if self._found_gone == gone:
                return

    def _top_up(self) -> None:
        live = [w for w in self._workers if w.state in ("starting", "idle", "busy")]
        free = sum(1 for w in live if w.state in ("idle", "starting"))
        wanted = min(self.size, len(live) + max(0, len(self._queue) - free))
        while len(live) < wanted:
            parent, child = self._ctx.Pipe(duplex=True)
            name = f"{self.name}-{len(self._workers)}"
            # started from a thread that outlives this one (see pool_start): a worker dies
            # with the thread that started it
            if self.method == "exec":
                p = start_for_good(functools.partial(_ExecProcess, child.fileno(), name))
                child.close()
                parent.send((self.initializer, self.init_args))
            else:
                inherited = tuple(w.conn for w in self._workers if w.state != "dead") + (
                    parent,) if self.method == "fork" else ()
                p = self._ctx.Process(target=_worker_main, args=(child, self.initializer,
                                                                self.init_args, inherited),
                                      name=name, daemon=True)
                start_for_good(p.start)
                child.close()
            w = _Worker(p, parent, self.start_timeout)
            if self.prefetch:
                w.room = _send_buffer(parent)
            self._workers.append(w)
            live.append(w)

    def _dispatch(self) -> None:
        self._dispatch_idle()
        if not self.prefetch:
            return
        for w in self._workers:
            if not self._queue:
                return
            if w.state == "busy" and len(w.next) < self.prefetch:
                self._send_ahead(w)

    def _send_ahead(self, w: _Worker) -> None:
        """Send the next queued job to busy worker ``w`` (it waits in the pipe)."""
        from multiprocessing.reduction import ForkingPickler

        key, fn, args, timeout = self._queue[0]
        if _hashable(key) in self._too_big:
            return
        try:
            data = ForkingPickler.dumps((key, fn, args))
        except Exception:  # unpicklable: an idle worker's dispatch reports it
            return
        if len(data) > min(PREFETCH_MAX_BYTES, w.room):
            self._too_big.add(_hashable(key))
            return
        try:
            w.conn.send_bytes(data)
        except (OSError, EOFError):  # the worker is gone; _collect sees it die
            return
        self._queue.popleft()
        w.next.append((key, fn, args, timeout))

    def _requeue_ahead(self, w: _Worker) -> None:
        """The jobs sent ahead to ``w`` go back to the front of the queue, in order."""
        while w.next:
            self._queue.appendleft(w.next.pop())

    def _dispatch_idle(self) -> None:
        for w in self._workers:
            if not self._queue:
                return
            if w.state != "idle":
                continue
            key, fn, args, timeout = self._queue.popleft()
            try:
                w.conn.send((key, fn, args))
            except (OSError, EOFError):
                # the worker is gone (killed while idle): the job waits for its successor
                self._queue.appendleft((key, fn, args, timeout))
                self._bury(w)
                self._found_gone += 1
                continue
            except Exception as e:  # pickling the arguments failed: fail only this job
                self._queue.appendleft((key, _raise, (f"cannot send the job to a worker: "
                                                      f"{type(e).__name__}: {e}",), timeout))
                continue
            w.state = "busy"
            w.job = (key, fn, args, timeout)
            w.started = time.monotonic()
            w.deadline = None if timeout is None else w.started + timeout

    def _collect(self) -> list[JobOutcome]:
        out = []
        for w in list(self._workers):
            if w.state == "dead":
                continue
            try:
                while w.state != "dead" and w.conn.poll():
                    out += self._handle(w, w.conn.recv())
            except (EOFError, OSError):
                pass
            if w.state != "dead" and not w.process.is_alive():
                out += self._on_death(w)
        self._workers[:] = [w for w in self._workers if w.state != "dead"]
        return out

    def _handle(self, w: _Worker, msg) -> list[JobOutcome]:
        kind = msg[0]
        if kind == "ready":
            w.state = "idle"
            w.deadline = None
            self._start_failures = 0
            return []
        if kind == "init_error":
            self._start_failures += 1
            self._last_start_error = f"{msg[1]}\n{msg[2]}"
            self._bury(w)
            return []
        key = msg[1]
        now = time.monotonic()
        if self._starved_at_first_answer is None:
            self._tick()
            self._starved_at_first_answer = self._stats.starved_s
            if self._first is not None:
                self._stats.first_s = now - self._first
        self._stats.jobs += 1
        self._stats.job_s += msg[3] if kind == "ok" else msg[5]
        if not w.next:  # the worker has waited for this answer to be read since it ended
            self._stats.lag_s += max(0.0, now - msg[-1])
        seconds = msg[3] if kind == "ok" else msg[5]
        self._stats.handover_s += max(0.0, msg[-1] - seconds - w.started)
        if self._first is not None:
            self._stats.open_s = now - self._first
        w.job, w.deadline = None, None
        retire = msg[4] if kind == "ok" else msg[6]
        if retire:
            w.state = "retiring"
            self._requeue_ahead(w)
        elif w.next:  # the worker went on with the job sent ahead when it sent this answer
            w.job = w.next.popleft()
            w.started = msg[-1]
            timeout = w.job[3]
            w.deadline = None if timeout is None else w.started + timeout
        else:
            w.state = "idle"
        if kind == "ok":
            return [JobOutcome(key, "ok", value=msg[2], seconds=msg[3])]
        return [JobOutcome(key, "error", error=msg[3], exc_type=msg[2], traceback=msg[4],
                           seconds=msg[5])]

    def _on_death(self, w: _Worker) -> list[JobOutcome]:
        w.process.join(0.5)
        code = w.process.exitcode
        job = w.job
        was = w.state
        self._requeue_ahead(w)
        self._bury(w)
        if was == "starting":
            self._start_failures += 1
            self._last_start_error = f"the worker exited during start-up (exit code {code})"
            return []
        if was == "busy" and job is not None:
            self.restarts += 1
            how = f"killed by signal {-code}" if code is not None and code < 0 else (
                f"exit code {code}")
            return [JobOutcome(job[0], "died", error=f"the worker process died ({how})",
                               seconds=time.monotonic() - w.started)]
        return []

    def _expire(self) -> list[JobOutcome]:
        out = []
        now = time.monotonic()
        for w in list(self._workers):
            if w.deadline is None or now < w.deadline or w.state == "dead":
                continue
            if w.state == "starting":
                self._start_failures += 1
                self._last_start_error = (f"the worker did not start within "
                                          f"{self.start_timeout:.0f} s")
                self._bury(w)
            elif w.state == "busy":
                key, _, _, timeout = w.job
                self._requeue_ahead(w)
                self._bury(w)
                self.restarts += 1
                out.append(JobOutcome(key, "timeout", error=f"no answer within {timeout:g} s; "
                                      "the worker was killed", seconds=now - w.started))
        self._workers[:] = [w for w in self._workers if w.state != "dead"]
        return out

    def _fail_queue_if_unstartable(self) -> list[JobOutcome]:
        if self._start_failures < START_FAILURES_ALLOWED or not self._queue:
            return []
        out = [JobOutcome(key, "unstartable", error=f"no worker could be started: "
                          f"{self._last_start_error}") for key, _, _, _ in self._queue]
        self._queue.clear()
        self._start_failures = 0
        return out

    def _bury(self, w: _Worker) -> None:
        w.state = "dead"
        if w.process.is_alive():
            w.process.kill()
        w.process.join(2.0)
        try:
            w.conn.close()
        except OSError:
            pass


PREFETCH_MAX_BYTES = 128 * 1024
"""The largest job message sent ahead to a busy worker (a GPU runner's candidate with its
task's reference is 30-80 KB). A message is sent ahead only when it fits half the
connection's send buffer, so that sending it never waits for the worker."""

SEND_BUFFER = 1 << 20
"""The send buffer asked for on a pool's end of each worker connection when jobs are sent
ahead (Linux grants up to ``net.core.wmem_max``)."""


def _send_buffer(conn) -> int:
    """Ask for :data:`SEND_BUFFER` bytes of send buffer on ``conn`` (a socket pair end);
    the bytes a message sent ahead may have (0 where the buffer cannot be read)."""
    import socket

    try:
        sock = socket.socket(fileno=os.dup(conn.fileno()))
    except OSError:
        return 0
    try:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        except OSError:
            pass
        # Linux reports twice what the kernel accounts, overhead included
        return sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) // 4
    except OSError:
        return 0
    finally:
        sock.close()


def _hashable(key):
    try:
        hash(key)
        return key
    except TypeError:
        return repr(key)


def _raise(message: str):
    raise RuntimeError(message)
