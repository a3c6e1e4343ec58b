"""Starting worker processes from a thread that lives as long as this process.

A pool's workers ask Linux to kill them when their parent dies (``PR_SET_PDEATHSIG``, so a
killed tuner leaves no workers behind). Linux takes "parent" to be the *thread* that started
the child: a worker started from a short-lived thread, such as the measuring thread of a
:class:`~ptxforge.measure.stream.MeasureStream` (one per tuning call), is killed when that
thread ends, though its pool and the builder or runner holding it live on. Every tuning
call after the first then started all its workers again (the GPU runner's worker opens a
CUDA context each time). Workers are therefore started on one daemon thread per process,
which ends with the process only.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from typing import Any

_lock = threading.Lock()
_starter: tuple | None = None  # (pid, thread, job queue) of this process's starter thread


def start_for_good(start: Callable[[], Any]) -> Any:
    """Run ``start()`` (which starts a process) on this process's starter thread and return
    what it returns (or raise what it raised)."""
    global _starter
    with _lock:
        # a forked child has the parent's record but not its thread: it starts its own
        if _starter is None or _starter[0] != os.getpid():
            jobs: queue.SimpleQueue = queue.SimpleQueue()
            thread = threading.Thread(target=_serve, args=(jobs,), daemon=True,
                                      name="ptxforge-worker-starter")
            thread.start()
            _starter = (os.getpid(), thread, jobs)
        _, thread, jobs = _starter
    if threading.current_thread() is thread:
        return start()
    done = threading.Event()
    box: dict = {}
    jobs.put((start, box, done))
    done.wait()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _serve(jobs: queue.SimpleQueue) -> None:
    while True:
        start, box, done = jobs.get()
        try:
            box["value"] = start()
        except BaseException as e:  # handed to the caller, which raises it
            box["error"] = e
        finally:
            done.set()
