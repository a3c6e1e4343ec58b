"""Python's cyclic garbage collector paused while a kernel is built.

A build allocates IR nodes by the hundred thousand, nearly all freed by reference counting
as soon as a pass replaces them. The cyclic collector still runs every 700 allocations: it
walks the young objects again and again and, every hundred runs, every object of the
process (in a builder worker: the tasks, their modules and the caches). On the 70
candidates of ``bench/candidate_corpus.py`` it took about a fifth of the CPU time of the
schedule and lowering stages. Inside :func:`paused` it does not run; when the outermost
block ends it is enabled again if it was on (its next run collects the cycles made inside,
so memory grows by at most what one build leaves in cycles). Blocks nest and may be entered
from several threads. Nothing a build computes depends on the collector: kernels are the
same with it paused.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_depth = 0
_resume = False  # whether the outermost block found the collector on


def _after_fork_in_child() -> None:
    # a worker forked while another thread of its parent held the lock (a build in the
    # tuner's process) would wait for it forever at its first build: start afresh
    global _lock, _depth, _resume
    _lock, _depth, _resume = threading.Lock(), 0, False
    gc.enable()


os.register_at_fork(after_in_child=_after_fork_in_child)


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Run the enclosed block with the cyclic garbage collector off."""
    global _depth, _resume
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume:
                gc.enable()
