"""Timing candidates on every GPU of a host: one isolated runner worker per GPU.

:class:`MultiGPURunner` keeps one :class:`~ptxforge.measure.LocalRunner`-style worker
process per GPU. Each worker sees only its own GPU (``CUDA_VISIBLE_DEVICES`` is set in the
worker before the driver starts), so a kernel that faults or hangs takes down one GPU's
worker only, and the others go on measuring. Candidates wait in one queue; a GPU that is
free takes the next one. Every result names the GPU that measured it
(``MeasureResult.device``, e.g. ``"cuda:1 NVIDIA H200 (sm_90)"``).

Times from different GPU models are not comparable, so the runner refuses a device list
that mixes models.
"""

from __future__ import annotations

import dataclasses
import os
from collections import deque
from collections.abc import Callable, Sequence

from .measure import Runner
from .pool import WorkerPool
from .result import BuildResult, MeasureInput
from .runner_gpu import LocalRunner, gpu_worker_init


def visible_gpu_names() -> list[str]:
    """The model name of every GPU this process sees, by ordinal (``cuDeviceGetName``)."""
    from ..backend_ptx.cuda_driver import call, device_count

    names = []
    for i in range(device_count()):
        raw = call("cuDeviceGetName", 256, call("cuDeviceGet", i))
        names.append(raw.split(b"\0", 1)[0].decode() if isinstance(raw, bytes) else str(raw))
    return names


def physical_gpu_ids(ordinals: Sequence[int], environ=None) -> list[str]:
    """What to put in ``CUDA_VISIBLE_DEVICES`` for each ordinal this process sees: the
    ordinal itself, or the matching entry of this process's own ``CUDA_VISIBLE_DEVICES``
    (an index or a UUID) when that is set."""
    environ = os.environ if environ is None else environ
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or not visible.strip():
        return [str(i) for i in ordinals]
    entries = [v.strip() for v in visible.split(",") if v.strip()]
    out = []
    for i in ordinals:
        if i >= len(entries):
            raise ValueError(f"GPU {i} is not visible: CUDA_VISIBLE_DEVICES={visible!r} "
                             f"lists {len(entries)} GPU(s)")
        out.append(entries[i])
    return out


def pinned_gpu_worker_init(visible_id: str) -> None:
    """Worker initializer: see only GPU ``visible_id`` and open it (as device 0). The worker
    is a fresh interpreter, so the driver has not read the environment yet."""
    os.environ["CUDA_VISIBLE_DEVICES"] = str(visible_id)
    gpu_worker_init(0)


def check_same_model(devices: Sequence[int], names: Sequence[str]) -> str:
    """The one GPU model of ``devices`` (ordinals into ``names``); ValueError if a device
    does not exist or the models differ."""
    if not devices:
        raise ValueError("MultiGPURunner needs at least one GPU; none was given or visible")
    for d in devices:
        if not 0 <= d < len(names):
            raise ValueError(f"there is no GPU {d}; this process sees {len(names)} "
                             f"({', '.join(names) or 'none'})")
    models = {names[d] for d in devices}
    if len(models) > 1:
        listing = ", ".join(f"cuda:{d} {names[d]}" for d in devices)
        raise ValueError(
            "MultiGPURunner measures on one GPU model only (times from different models are "
            f"not comparable), but the devices are: {listing}; pass devices=[...] with GPUs "
            "of one model")
    return models.pop()


class PinnedGPURunner(LocalRunner):
    """A :class:`LocalRunner` whose worker sees GPU ``visible_id`` only (as its device 0);
    ``ordinal`` is the GPU's number in the parent, used in messages."""

    def __init__(self, ordinal: int, visible_id: str, **options):
        super().__init__(device_id=ordinal, **options)
        self.visible_id = visible_id

    def submit(self, key, inp: MeasureInput, build: BuildResult) -> None:
        if self._pool is None:
            self._pool = WorkerPool(1, self.start_method, initializer=pinned_gpu_worker_init,
                                    init_args=(self.visible_id,),
                                    name=f"ptxforge-gpu-runner-{self.device_id}")
        super().submit(key, inp, build)


class MultiGPURunner(Runner):
    """Times built candidates on several GPUs of this host at once.

    ``devices``: GPU ordinals as this process sees them (None: every visible GPU); they
    must all be one model. The other options are :class:`LocalRunner`'s (``number``,
    ``repeat``, ``min_repeat_ms``, ``timeout``, ``check_correctness``,
    ``enable_cuda_graph``, ``start_method``) and apply to every GPU. Each GPU has its own
    worker process; a free GPU takes the next queued candidate.

    ``device_names`` and ``make_runner(ordinal, visible_id, **options)`` replace the GPU
    query and the per-GPU runner (tests use them to run without a GPU).
    """

    def __init__(self, devices: Sequence[int] | None = None, *,
                 device_names: Callable[[], list[str]] | None = None,
                 make_runner: Callable[..., Runner] | None = None, **runner_options):
        if "device_id" in runner_options:
            raise TypeError("MultiGPURunner takes devices=[...], not device_id")
        LocalRunner(**runner_options)  # check the options now, with LocalRunner's messages
        names = (device_names or visible_gpu_names)()
        self.devices = list(range(len(names))) if devices is None else [int(d)
                                                                          for d in devices]
        if len(set(self.devices)) != len(self.devices):
            raise ValueError(f"devices lists a GPU twice: {self.devices}")
        self.model = check_same_model(self.devices, names)
        self.options = dict(runner_options)
        self.timeout = float(runner_options.get("timeout", 10))
        make = make_runner or PinnedGPURunner
        ids = physical_gpu_ids(self.devices)
        self._runners = [make(d, vid, **runner_options) for d, vid in zip(self.devices, ids)]
        self._queue: deque = deque()
        self._busy: list = [None] * len(self._runners)  # the key each GPU is measuring
        self.measured = [0] * len(self._runners)

    @property
    def device(self) -> str:
        """The GPUs, as ``"cuda:0,1,2,3 NVIDIA H200"``."""
        return f"cuda:{','.join(map(str, self.devices))} {self.model}"

    def submit(self, key, inp: MeasureInput, build: BuildResult) -> None:
        self._queue.append((key, inp, build))
        self._dispatch()

    def _dispatch(self) -> None:
        for i, r in enumerate(self._runners):
            if not self._queue:
                return
            if self._busy[i] is None:
                key, inp, build = self._queue.popleft()
                self._busy[i] = key
                r.submit(key, inp, build)

    @property
    def pending(self) -> int:
        return len(self._queue) + sum(1 for k in self._busy if k is not None)

    def collect(self, timeout: float | None = 0.0) -> list:
        out = self._collect_once()
        if out or timeout == 0.0 or not self.pending:
            return out
        import time
        from multiprocessing.connection import wait as wait_any

        end = None if timeout is None else time.monotonic() + timeout
        while not out and self.pending:
            now = time.monotonic()
            if end is not None and now >= end:
                break
            waits = [t - now for t in (end, self.next_deadline()) if t is not None]
            wait_for = max(0.0, min(waits)) if waits else None
            handles = self.waitables()
            if handles:
                wait_any(handles, wait_for)
            else:
                time.sleep(0.001 if wait_for is None else min(wait_for, 0.01))
            out = self._collect_once()
        return out

    def _collect_once(self) -> list:
        out = []
        for i, r in enumerate(self._runners):
            if self._busy[i] is None:
                continue
            for key, res in r.collect(0.0):
                self._busy[i] = None
                self.measured[i] += 1
                out.append((key, self._stamp(i, res)))
        self._dispatch()
        return out

    def _stamp(self, i: int, res):
        """Name the GPU in the result: ``cuda:<ordinal> <what the worker reported>``."""
        what = res.device or self.model
        return dataclasses.replace(res, device=f"cuda:{self.devices[i]} {what}")

    def waitables(self) -> list:
        return [h for r in self._runners for h in r.waitables()]

    def next_deadline(self) -> float | None:
        ds = [d for d in (r.next_deadline() for r in self._runners) if d is not None]
        return min(ds) if ds else None

    def close(self) -> None:
        self._queue.clear()
        self._busy = [None] * len(self._runners)
        for r in self._runners:
            r.close()
