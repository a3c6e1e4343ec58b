"""Building and running candidates on a Dask cluster (``distributed``).

:class:`DaskBuilder` sends builds (CPU work) to any worker; :class:`DaskRunner` sends runs
to workers that declare a GPU (``dask worker ... --resources GPU=1``; a run asks for
``resources={"GPU": 1}``), or, with ``runner="sim"``, to any worker. Results come back to
the process running the search, so measure callbacks (record files) work as with the local
builder and runner.

On a worker, each executor thread keeps one long-lived build process and each worker one
runner (for the GPU: a :class:`~ptxforge.measure.LocalRunner`, whose isolated worker
process owns the CUDA context for the life of the Dask worker). Child processes are
started with ``exec``, never forked from the multi-threaded Dask worker.

A Dask worker that dies loses only its in-flight candidates: the scheduler moves them to
other workers; one that still cannot finish (``KilledWorker``) is submitted once more, and
after that it is recorded as an error saying that the worker died. A candidate never waits
forever: when no suitable worker is left for ``no_worker_timeout`` seconds, or a candidate
passes ``max_wait``, it is recorded as an error.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass

from .build import BuildOptions, LocalBuilder
from .measure import Builder, Runner
from .pool import WorkerPool
from .result import BuildResult, MeasureErrorNo, MeasureInput, error_result
from .runner_gpu import LocalRunner
from .runner_sim import SimRunner

WORKER_DIED = "the Dask worker measuring this candidate died"


def _distributed():
    try:
        import distributed
    except ImportError as e:
        raise ImportError("the Dask builder and runner need dask.distributed: pip install "
                          "'ptxforge[distributed]' (or 'dask[distributed]')") from e
    return distributed


def connect(client_or_address):
    """A ``distributed.Client``: the one given, or a new one for a scheduler address."""
    distributed = _distributed()
    if isinstance(client_or_address, distributed.Client):
        return client_or_address, False
    if not isinstance(client_or_address, str):
        raise TypeError("expected a distributed.Client or a scheduler address such as "
                        f"'tcp://host:8786', got {client_or_address!r}")
    return distributed.Client(client_or_address), True


# -- the client side: futures with one resubmission and deadlines ------------------------------

@dataclass
class Outcome:
    """How one remote job ended: ``status`` ``"ok"`` (``value``), ``"died"`` (its worker
    died twice), ``"error"`` (it raised), ``"expired"`` (``max_wait`` passed) or
    ``"no_worker"`` (no suitable worker was left); ``message`` explains failures."""

    key: object
    status: str
    value: object = None
    message: str = ""
    seconds: float = 0.0


class FutureQueue:
    """Jobs submitted to a Dask client under caller keys, collected as :class:`Outcome` s.

    ``resources``: what each job asks of its worker (e.g. ``{"GPU": 1}``). A job whose
    worker dies (``KilledWorker``, or a cancelled future) is submitted once more; a second
    loss is ``"died"``. ``max_wait`` (seconds from submission, None: no limit) and
    ``no_worker_timeout`` (seconds with no worker that has ``resources``) keep a lost
    cluster from hanging the search.
    """

    def __init__(self, client, resources: dict | None = None, max_wait: float | None = None,
                 no_worker_timeout: float = 60.0, name: str = "ptxforge"):
        self.client = client
        self.resources = dict(resources) if resources else None
        self.max_wait = max_wait
        self.no_worker_timeout = no_worker_timeout
        self.name = name
        self._jobs: dict = {}  # key -> [future, fn, args, tries, submitted]
        self._no_worker_since: float | None = None
        self._checked = 0.0
        self.resubmitted = 0

    def submit(self, key, fn, *args) -> None:
        self._jobs[key] = [self._submit(fn, args), fn, args, 1, time.monotonic()]

    def _submit(self, fn, args):
        return self.client.submit(fn, *args, key=f"{self.name}-{uuid.uuid4().hex}",
                                  resources=self.resources, pure=False)

    @property
    def pending(self) -> int:
        return len(self._jobs)

    def collect(self, timeout: float | None = 0.0) -> list[Outcome]:
        """Finished jobs; waits up to ``timeout`` seconds for one (None: until one is done
        or nothing is pending)."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            out = self._poll()
            if out or not self._jobs:
                return out
            now = time.monotonic()
            if end is not None and now >= end:
                return out
            step = 0.5 if end is None else min(0.5, end - now)
            distributed = _distributed()
            try:
                distributed.wait([j[0] for j in self._jobs.values()], timeout=step,
                                 return_when="FIRST_COMPLETED")
            except distributed.TimeoutError:
                pass

    def _poll(self) -> list[Outcome]:
        out = []
        now = time.monotonic()
        for key, job in list(self._jobs.items()):
            fut, fn, args, tries, t0 = job
            if fut.status == "finished":
                del self._jobs[key]
                try:
                    out.append(Outcome(key, "ok", fut.result(), seconds=now - t0))
                except Exception as e:  # lost between the status check and the fetch
                    out += self._lost(key, job, f"{type(e).__name__}: {e}")
            elif fut.status in ("error", "cancelled", "lost"):
                exc = _exception(fut)
                if _is_worker_loss(fut, exc):
                    out += self._lost(key, job, f"{type(exc).__name__}: {exc}")
                else:
                    del self._jobs[key]
                    out.append(Outcome(key, "error", message=f"{type(exc).__name__}: {exc}",
                                       seconds=now - t0))
            elif self.max_wait is not None and now - t0 > self.max_wait:
                del self._jobs[key]
                fut.cancel()
                out.append(Outcome(key, "expired", message=(
                    f"no result from the Dask cluster within max_wait={self.max_wait:g} s"),
                    seconds=now - t0))
        out += self._check_workers(now)
        return out

    def _lost(self, key, job, why: str) -> list[Outcome]:
        fut, fn, args, tries, t0 = job
        if tries < 2:
            self.resubmitted += 1
            job[0], job[3] = self._submit(fn, args), tries + 1
            return []
        del self._jobs[key]
        return [Outcome(key, "died", message=f"{WORKER_DIED} (after one retry on another "
                        f"worker): {why}", seconds=time.monotonic() - t0)]

    def _check_workers(self, now: float) -> list[Outcome]:
        """Fail every pending job once no suitable worker has been seen for
        ``no_worker_timeout`` seconds (checked at most once a second)."""
        if not self._jobs or now - self._checked < 1.0:
            return []
        self._checked = now
        try:
            workers = self.client.scheduler_info().get("workers", {})
        except Exception:  # the scheduler itself is gone: same as no worker
            workers = {}
        need = self.resources or {}
        fit = [w for w in workers.values()
               if all(w.get("resources", {}).get(r, 0) >= n for r, n in need.items())]
        if fit:
            self._no_worker_since = None
            return []
        if self._no_worker_since is None:
            self._no_worker_since = now
            return []
        if now - self._no_worker_since < self.no_worker_timeout:
            return []
        what = f"with resources {need}" if need else ""
        msg = (f"no Dask worker {what} was connected for {self.no_worker_timeout:g} s "
               "(start workers, e.g. 'dask worker ADDRESS --resources GPU=1')")
        out = []
        for key, job in list(self._jobs.items()):
            job[0].cancel()
            out.append(Outcome(key, "no_worker", message=msg, seconds=now - job[4]))
        self._jobs.clear()
        return out

    def close(self) -> None:
        """Cancel every pending job."""
        for job in self._jobs.values():
            job[0].cancel()
        self._jobs.clear()


def _exception(fut):
    try:
        return fut.exception(timeout=5)
    except Exception as e:  # a cancelled future raises instead of returning its exception
        return e


def _is_worker_loss(fut, exc) -> bool:
    from concurrent.futures import CancelledError

    distributed = _distributed()
    killed = getattr(distributed, "KilledWorker", None)
    if killed is None:
        from distributed.scheduler import KilledWorker as killed
    return fut.status in ("cancelled", "lost") or isinstance(
        exc, (killed, CancelledError, distributed.comm.CommClosedError))


# -- the worker side -----------------------------------------------------------------------

class ExecLocalBuilder(LocalBuilder):
    """A :class:`LocalBuilder` whose build processes start with ``exec`` (a Dask worker is
    multi-threaded and usually daemonic, so it may not fork children)."""

    def submit(self, key, inp: MeasureInput) -> None:
        if self.n_parallel and self._pool is None:
            self._pool = WorkerPool(self.n_parallel, "exec", name="ptxforge-dask-builder")
        super().submit(key, inp)


_local = threading.local()
_runners: dict = {}
_runners_lock = threading.Lock()


def remote_build(inp: MeasureInput, options: BuildOptions, timeout: float) -> BuildResult:
    """Build one candidate on a Dask worker, in this executor thread's build process."""
    builders = getattr(_local, "builders", None)
    if builders is None:
        builders = _local.builders = {}
    key = (options, timeout)
    b = builders.get(key)
    if b is None:
        b = builders[key] = ExecLocalBuilder(timeout=timeout, n_parallel=1)
        b.options = options
    return b.build([inp])[0]


def make_runner(spec, options: dict) -> Runner:
    """The runner a Dask worker measures with: ``"gpu"`` (a :class:`LocalRunner` with
    ``options``), ``"sim"`` (a :class:`SimRunner`) or a runner object as given."""
    if spec == "gpu":
        return LocalRunner(**options)
    if spec == "sim":
        runner = SimRunner(**options)
    elif isinstance(spec, Runner):
        runner = spec
    else:
        raise ValueError(f"unknown runner {spec!r}; use 'gpu', 'sim' or a Runner object")
    if isinstance(runner, SimRunner) and runner._pool is None:
        runner._pool = WorkerPool(runner.n_parallel, "exec", name="ptxforge-dask-sim")
    return runner


def remote_run(token: str, spec, options: dict, inp: MeasureInput, build: BuildResult):
    """Measure one candidate on a Dask worker with the worker's long-lived runner (made on
    first use; one candidate at a time)."""
    with _runners_lock:
        entry = _runners.get(token)
        if entry is None:
            entry = _runners[token] = (make_runner(spec, options), threading.Lock())
    runner, lock = entry
    with lock:
        return runner.run([inp], [build])[0]


# -- the builder and the runner ----------------------------------------------------------------

class DaskBuilder(Builder):
    """Builds candidates on the workers of a Dask cluster.

    ``client_or_address``: a ``distributed.Client`` or a scheduler address. ``timeout``:
    seconds one build may take on its worker (then ``BUILD_TIMEOUT``). ``target_sm``,
    ``compile_to``, ``verify``, ``ptxas_flags``: see :class:`BuildOptions`. ``n_parallel``
    is the batch size tuners use by default (None: the cluster's worker threads).
    ``max_wait``, ``no_worker_timeout``: see :class:`FutureQueue`.
    """

    def __init__(self, client_or_address, timeout: float = 10, target_sm: str | None = None,
                 compile_to: str = "cubin", verify: bool = False, ptxas_flags: tuple = (),
                 n_parallel: int | None = None, max_wait: float | None = None,
                 no_worker_timeout: float = 60.0):
        self.client, self._own_client = connect(client_or_address)
        self.timeout = timeout
        self.options = BuildOptions(target_sm, compile_to, verify, tuple(ptxas_flags))
        if n_parallel is None:
            threads = self.client.nthreads()
            n_parallel = max(1, sum(threads.values())) if threads else 1
        self.n_parallel = int(n_parallel)
        self._queue = FutureQueue(self.client, None, max_wait, no_worker_timeout,
                                  name="ptxforge-build")

    def submit(self, key, inp: MeasureInput) -> None:
        self._queue.submit(key, remote_build, inp, self.options, self.timeout)

    @property
    def pending(self) -> int:
        return self._queue.pending

    def collect(self, timeout: float | None = 0.0) -> list:
        out = []
        for o in self._queue.collect(timeout):
            if o.status == "ok":
                out.append((o.key, o.value))
                continue
            code = (MeasureErrorNo.UNKNOWN_ERROR if o.status == "error"
                    else MeasureErrorNo.BUILD_TIMEOUT)
            out.append((o.key, BuildResult(None, int(code), o.message, o.seconds)))
        return out

    def close(self) -> None:
        self._queue.close()
        if self._own_client:
            self.client.close()


class DaskRunner(Runner):
    """Measures built candidates on the workers of a Dask cluster.

    ``runner``: ``"gpu"`` (each worker keeps a :class:`LocalRunner` made with
    ``runner_options``; runs go to workers with ``resources``, default ``{"GPU": 1}``),
    ``"sim"`` (a :class:`SimRunner`; any worker) or a runner object (pickled to each worker
    as it is, before its first use). ``timeout``: the per-candidate limit of the remote
    runner. ``max_wait``, ``no_worker_timeout``: see :class:`FutureQueue`.
    """

    def __init__(self, client_or_address, runner="gpu", resources: dict | None = None,
                 max_wait: float | None = None, no_worker_timeout: float = 60.0,
                 **runner_options):
        self.client, self._own_client = connect(client_or_address)
        if resources is None:
            resources = ({"GPU": 1} if runner == "gpu" or isinstance(runner, LocalRunner)
                         else {})
        probe = make_runner(runner, runner_options) if isinstance(runner, str) else runner
        if isinstance(runner, str) and isinstance(probe, SimRunner) and probe._pool:
            probe._pool.close()
        self.spec = runner
        self.runner_options = dict(runner_options)
        self.timeout = float(getattr(probe, "timeout", 10))
        self.resources = dict(resources)
        self._token = uuid.uuid4().hex
        self._queue = FutureQueue(self.client, self.resources, max_wait, no_worker_timeout,
                                  name="ptxforge-run")
        self._build_time: dict = {}

    def submit(self, key, inp: MeasureInput, build: BuildResult) -> None:
        self._build_time[key] = build.time_cost
        self._queue.submit(key, remote_run, self._token, self.spec, self.runner_options, inp,
                           build)

    @property
    def pending(self) -> int:
        return self._queue.pending

    def collect(self, timeout: float | None = 0.0) -> list:
        out = []
        for o in self._queue.collect(timeout):
            build_time = self._build_time.pop(o.key, 0.0)
            if o.status == "ok":
                out.append((o.key, o.value))
                continue
            code = {"error": MeasureErrorNo.UNKNOWN_ERROR, "expired": MeasureErrorNo.RUN_TIMEOUT
                    }.get(o.status, MeasureErrorNo.RUNTIME_DEVICE)
            out.append((o.key, error_result(code, o.message, build_time + o.seconds,
                                            estimated=self.spec == "sim")))
        return out

    def close(self) -> None:
        self._queue.close()
        if self._own_client:
            self.client.close()
