"""Building the reference schedules that runners check candidates against, in the background.

A runner that checks correctness needs each task's reference kernels (the simple schedule of
:mod:`.reference`) before it can check the task's first candidate. Built where the runner
lives (the tuner's process, on the thread that moves candidates from the builders to the
runner), each reference stalled that thread for a build, a few hundred milliseconds per task:
no finished build was collected, no queued candidate reached a free builder and the GPU
waited, once per task of a network. :class:`ReferenceBuilds` builds them in a forked worker
process of its own instead; the runner asks for a task's reference as soon as the first
candidate of the task goes to the builders (:meth:`~ptxforge.measure.Runner.prepare`), so it
is usually ready before that candidate is, and holds candidates whose reference is still being
built until it is.
"""

from __future__ import annotations

from .build import BuildOptions, build_candidate
from .plan import PipelinePlan
from .pool import WorkerPool
from .reference import reference_pipeline
from .result import MeasureInput

PENDING = object()
""":meth:`ReferenceBuilds.get` of a reference still being built."""

REFERENCE_TIMEOUT = 300.0
"""Seconds a reference build may take (a reference is built once per task, and the
simulator's references of large layers lower slowly)."""


def build_reference(task, options: BuildOptions):
    """The reference artifact of ``task`` built with ``options``, or a ``"skipped: ..."``
    string saying why there is none (a reference that does not build is no reason to fail
    the candidate: its check is skipped, and the result says so)."""
    try:
        plan = PipelinePlan(reference_pipeline(task))
        b = build_candidate(MeasureInput(task, "", plan=plan), options)
    except ValueError as e:
        return f"skipped: {e}"
    if b.error_no:
        return f"skipped: the reference schedule did not build: {b.error_msg[:300]}"
    return b.artifact


class ReferenceBuilds:
    """Reference builds under caller-chosen keys, run one at a time in a forked worker.

    :meth:`request` starts one (once per key); :meth:`get` gives the artifact, the
    ``"skipped: ..."`` string, or :data:`PENDING`; :meth:`poll` collects finished builds
    without waiting and returns their keys. ``in_process`` builds at once in the calling
    process (for callers that have no event loop to wait in)."""

    def __init__(self, name: str = "ptxforge-reference", in_process: bool = False):
        self.name = name
        self.in_process = in_process
        self._pool: WorkerPool | None = None
        self._done: dict = {}
        self._waiting: set = set()

    def request(self, key, task, options: BuildOptions) -> None:
        """Start building the reference of ``task`` under ``key`` unless it is known."""
        if key in self._done or key in self._waiting:
            return
        if self.in_process:
            self._done[key] = build_reference(task, options)
            return
        if self._pool is None:
            self._pool = WorkerPool(1, "fork", name=self.name)
        self._waiting.add(key)
        self._pool.submit(key, build_reference, (task, options), REFERENCE_TIMEOUT)
        self.poll(0.0)  # starts the worker and hands it the job now

    def known(self, key) -> bool:
        """Whether ``key`` was requested."""
        return key in self._done or key in self._waiting

    def get(self, key):
        """The reference under ``key`` (artifact or ``"skipped: ..."``), or :data:`PENDING`."""
        self.poll()
        return self._done.get(key, PENDING)

    def poll(self, timeout: float | None = 0.0) -> list:
        """Collect finished builds (waiting up to ``timeout`` seconds for one); their
        keys."""
        if self._pool is None or not self._waiting:
            return []
        keys = []
        for o in self._pool.poll(timeout):
            self._waiting.discard(o.key)
            if o.status == "ok":
                self._done[o.key] = o.value
            else:
                why = o.error or o.exc_type or o.status
                self._done[o.key] = (f"skipped: the reference build failed ({o.status}): "
                                     f"{why[:300]}")
            keys.append(o.key)
        return keys

    @property
    def pending(self) -> int:
        """References still being built."""
        return len(self._waiting)

    def waitables(self) -> list:
        return self._pool.waitables() if self._pool is not None and self._waiting else []

    def next_deadline(self) -> float | None:
        return self._pool.next_deadline() if self._pool is not None else None

    def close(self) -> None:
        """Stop the worker (references being built are dropped)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        for key in self._waiting:
            self._done[key] = "skipped: the runner was closed while the reference was built"
        self._waiting.clear()
