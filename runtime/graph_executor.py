"""``GraphModule``: run a compiled network on the simulator or a GPU.

On a GPU every storage of the memory plan is allocated once, the weights are uploaded
once, and the first :meth:`GraphModule.run` captures the launches of all kernels into one
CUDA graph (stream capture); every later ``run`` is a single ``cuGraphLaunch`` with no
per-kernel Python work. Where capture fails the kernels are launched one by one (the
module says which in ``uses_cuda_graph``). Graph launches go to the default stream, so
``set_input`` copies and ``get_output`` reads are ordered with them without extra
synchronization.

The captured graph keeps only the dependencies the network has (:func:`step_dependencies`:
a kernel waits for the kernels that wrote what it reads, and for the earlier readers and
writer of every storage it overwrites, since the memory plan reuses storages in the
serial order), so independent kernels run side by side: the query, key and value head
transposes of an attention block, a residual block's downsampling convolution next to its
main path. The capture spreads the kernels over up to :data:`CAPTURE_STREAMS` streams
(:func:`assign_streams`) joined by events where a dependency crosses streams.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..ir import dtype as dt
from ..nd import SimArray, SimDevice
from . import GraphError


class CompiledNetwork(Protocol):
    """What the executor runs: ``graph.build``'s ``GraphLibrary`` or a network loaded by
    :func:`ptxforge.runtime.load_module` (the graph layer stands above the runtime, so the
    executor names the attributes it reads rather than the class)."""

    target: Any
    plan: Any
    functions: dict
    call_keys: list
    params: dict


@dataclass(frozen=True)
class BenchmarkResult:
    """Seconds per run, one entry per repeat; printing it gives TVM's summary table."""

    results: tuple[float, ...]
    kind: str = "gpu"

    @property
    def mean(self) -> float:
        return statistics.fmean(self.results)

    @property
    def median(self) -> float:
        return statistics.median(self.results)

    @property
    def max(self) -> float:
        return max(self.results)

    @property
    def min(self) -> float:
        return min(self.results)

    @property
    def std(self) -> float:
        return statistics.pstdev(self.results) if len(self.results) > 1 else 0.0

    def __str__(self) -> str:
        head = "Execution time summary"
        if self.kind != "gpu":
            head += f" ({self.kind})"
        return (f"{head}:\n"
                f"{'mean (ms)':^12} {'median (ms)':^12} {'max (ms)':^12} {'min (ms)':^12} "
                f"{'std (ms)':^12}\n"
                f"{self.mean * 1e3:^12.4f} {self.median * 1e3:^12.4f} {self.max * 1e3:^12.4f} "
                f"{self.min * 1e3:^12.4f} {self.std * 1e3:^12.4f}")

    def __repr__(self) -> str:
        return (f"BenchmarkResult(mean={self.mean * 1e3:.4f} ms, median={self.median * 1e3:.4f}"
                f" ms, repeats={len(self.results)}, {self.kind})")


LAUNCH_CHOICE_NUMBER = 10
"""Graph launches per timing when ``dependent_launch="auto"`` chooses (3 repeats, twice,
for each of the two graphs: about 120 runs of the network, once per module)."""


@dataclass(frozen=True)
class LaunchChoice:
    """What ``dependent_launch="auto"`` chose on the first run, and the seconds per run it
    measured for each way of launching."""

    chosen: str
    dependent_seconds: float
    plain_seconds: float


class GraphModule:
    """A compiled network on a device: ``set_input``, ``run``, ``get_output``.

    Args:
        lib: the :class:`~ptxforge.graph.build_module.GraphLibrary` from ``graph.build``,
            or a network loaded by :func:`ptxforge.runtime.load_module`.
        dev: ``ptxforge.sim()`` or ``ptxforge.cuda(0)``.
        use_cuda_graph: capture the whole network into one CUDA graph on the first run.
        dependent_launch: True: launch kernels built for sm_90 and later with programmatic
            dependent launch: each starts while the kernel before it on its stream
            finishes, and waits for its results in its first instruction, which hides
            most of the gap between two kernels. False: plain launches, one after the other.
            ``"auto"`` (the default): with a CUDA graph, the first :meth:`run` captures the
            network both ways, times both graphs and keeps the faster (the outputs are the
            same bits either way; which one won and the times are in :attr:`launch_choice`);
            without a graph, dependent launches.
    """

    def __init__(self, lib: CompiledNetwork, dev=None, use_cuda_graph: bool = True,
                 dependent_launch: bool | str = "auto"):
        from ..nd import sim

        if dependent_launch not in (True, False, "auto"):
            raise GraphError(f"dependent_launch must be True, False or 'auto', got "
                             f"{dependent_launch!r}")
        self.lib = lib
        self.device = dev if dev is not None else sim()
        self.is_sim = isinstance(self.device, SimDevice)
        self.use_cuda_graph = use_cuda_graph and not self.is_sim
        self._auto_launch = dependent_launch == "auto"
        self.dependent_launch = bool(dependent_launch)
        self.launch_choice: LaunchChoice | None = None
        self._graph = None
        self.uses_cuda_graph = False
        self.capture_error: str = ""
        self.capture_streams = 1  # how many streams the captured graph's kernels use
        plan = lib.plan
        if self.is_sim:
            self._storages = [self._sim_storage(s.nbytes) for s in plan.storages]
        else:
            if lib.target.is_sim:
                raise GraphError("this network was built with target='sim'; build it with "
                                 "target='cuda' to run it on a GPU")
            from ..backend_ptx import empty

            self._storages = [empty((s.nbytes,), "uint8", self.device) for s in plan.storages]
        self._slots = [self._view(k) for k in range(len(plan.slots))]
        for name, slot in plan.params.items():
            self._copy_in(slot, lib.params[name])
        self._prepare_steps()

    # -- memory -----------------------------------------------------------------------------

    @staticmethod
    def _sim_storage(nbytes: int) -> np.ndarray:
        # NaN-filled, so a kernel reading what nothing wrote shows in the output
        return np.full(nbytes, 0xFF, dtype=np.uint8)

    def _view(self, k: int):
        slot = self.lib.plan.slots[k]
        storage = self._storages[slot.storage]
        ty = slot.ty
        if self.is_sim:
            arr = storage[:ty.nbytes].view(dt.to_numpy(ty.dtype)).reshape(ty.shape)
            return SimArray(arr, self.device)
        from ..backend_ptx import NDArray

        return NDArray(storage.ptr, ty.shape, ty.dtype, self.device, owner=storage)

    def _copy_in(self, slot: int, value) -> None:
        target = self._slots[slot]
        src = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
        want = self.lib.plan.slots[slot].ty
        if tuple(src.shape) != want.shape:
            raise GraphError(f"expected an array of shape {list(want.shape)}, got "
                             f"{list(src.shape)}")
        # the device array converts, refusing float data for an integer input and
        # integers that would wrap (int64 token ids into an int32 input)
        try:
            target.copyfrom(src)
        except dt.DTypeError as e:
            name = self.lib.plan.slots[slot].name
            raise GraphError(f"input {name!r}: {e}") from None

    # -- steps ------------------------------------------------------------------------------

    def _prepare_steps(self) -> None:
        lib = self.lib
        plan = lib.plan
        self._steps = []
        self._accesses: list[tuple[set, set]] = []
        loaded: dict[str, object] = {}
        for step, key in zip(plan.steps, lib.call_keys):
            if key is None:
                continue
            fn = lib.functions[key]
            arrays = [self._slots[a] for a in step.args] + [self._slots[step.out]]
            reads = {plan.slots[a].storage for a in step.args}
            # a function's scratch buffers (split-K partial sums) are one per loaded module:
            # two calls of it must not overlap
            writes = {plan.slots[step.out].storage, ("scratch", key)}
            self._accesses.append((reads, writes))
            if self.is_sim:
                self._steps.append((fn.device_module, [a.host_view for a in arrays]))
            else:
                if key not in loaded:
                    loaded[key] = fn.ptx.load(self.device)
                self._steps.append((loaded[key], arrays))
        self._loaded = loaded

    def _launch_all(self, stream=0) -> None:
        for fn, arrays in self._steps:
            fn(*arrays, stream=stream, dependent=self.dependent_launch)

    def _capture(self) -> None:
        from ..backend_ptx.cuda_driver import CudaError, call, driver, gc_paused

        d = driver()
        flags = d.CUstream_flags.CU_STREAM_NON_BLOCKING
        deps = step_dependencies(self._accesses)
        assign = assign_streams(deps, CAPTURE_STREAMS)
        n_streams = max(assign, default=0) + 1
        streams = [call("cuStreamCreate", flags) for _ in range(n_streams)]
        events: list = []

        def event():
            events.append(call("cuEventCreate",
                               d.CUevent_flags.CU_EVENT_DISABLE_TIMING))
            return events[-1]

        graph = None
        try:
            origin = streams[0]
            with gc_paused():  # a collection could free device memory mid-capture
                call("cuStreamBeginCapture", origin,
                     d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
                try:
                    fork = event()
                    call("cuEventRecord", fork, origin)
                    for st in streams[1:]:  # the side streams join the capture
                        call("cuStreamWaitEvent", st, fork, 0)
                    needed = {d_ for i, ds in enumerate(deps) for d_ in ds
                              if assign[d_] != assign[i]}
                    done: dict[int, object] = {}
                    for i, (fn, arrays) in enumerate(self._steps):
                        st = streams[assign[i]]
                        for d_ in sorted(deps[i]):
                            if assign[d_] != assign[i]:
                                call("cuStreamWaitEvent", st, done[d_], 0)
                        fn(*arrays, stream=st, dependent=self.dependent_launch)
                        if i in needed:
                            done[i] = event()
                            call("cuEventRecord", done[i], st)
                    for st in streams[1:]:  # ... and join it again before it ends
                        join = event()
                        call("cuEventRecord", join, st)
                        call("cuStreamWaitEvent", origin, join, 0)
                finally:
                    graph = call("cuStreamEndCapture", origin)
            exec_ = call("cuGraphInstantiate", graph, 0)
            self._graph = _CapturedGraph(graph, exec_)
            self.uses_cuda_graph = True
            self.capture_streams = n_streams
        except CudaError as e:
            self.capture_error = str(e)
            self.use_cuda_graph = False
            if graph is not None:
                try:
                    call("cuGraphDestroy", graph)
                except CudaError:
                    pass
        finally:
            for ev in events:
                call("cuEventDestroy", ev)
            for st in streams:
                call("cuStreamDestroy", st)

    # -- the user interface -----------------------------------------------------------------

    def set_input(self, key=None, value=None, /, **inputs) -> None:
        """Copy input data (or replace a weight): ``set_input("data", x)`` or
        ``set_input(data=x)``; ``value`` is a numpy array or a device array. ``key`` and
        ``value`` are positional only, so inputs named ``key`` or ``value`` (an attention's)
        go by keyword too."""
        if key is not None:
            inputs[key] = value
        plan = self.lib.plan
        for name, v in inputs.items():
            if name in plan.inputs:
                self._copy_in(plan.inputs[name], v)
            elif name in plan.params:
                self._copy_in(plan.params[name], v)
            else:
                raise GraphError(f"the network has no input {name!r}; inputs: "
                                 f"{', '.join(plan.inputs) or 'none'}")

    def get_input(self, name: str):
        """The device array of an input."""
        if name not in self.lib.plan.inputs:
            raise GraphError(f"the network has no input {name!r}")
        return self._slots[self.lib.plan.inputs[name]]

    def run(self, **inputs) -> None:
        """Run the network (asynchronously on a GPU); keyword arguments are set as inputs
        first."""
        if inputs:
            self.set_input(**inputs)
        if self.is_sim:
            from .. import backend_sim

            for module, arrays in self._steps:
                backend_sim.run(module, arrays)
            return
        self.device.activate()
        if self.use_cuda_graph and self._graph is None:
            self._capture()
            if self._auto_launch and self._graph is not None:
                self._choose_launch()
        if self._graph is not None:
            self._graph.launch()
        else:
            self._launch_all(0)

    def _choose_launch(self) -> None:
        """Capture the network with plain launches beside the dependent-launch graph just
        captured, time both and keep the faster. Dependent launch hides the gaps between
        kernels but makes each kernel wait for its predecessor's completion in its first
        instruction; on networks of few long kernels (batch 16) the plain graph can win."""
        from ..backend_ptx import time_evaluator

        self._auto_launch = False
        dependent = self._graph
        self._graph, self.dependent_launch = None, False
        self._capture()
        plain = self._graph
        if plain is None:  # the second capture failed: keep the first
            self._graph, self.dependent_launch, self.use_cuda_graph = dependent, True, True
            return
        seconds = {}
        for _ in range(2):  # alternate, so a clock ramp favours neither
            for name, g in (("dependent", dependent), ("plain", plain)):
                t = time_evaluator(g.launch, self.device, number=LAUNCH_CHOICE_NUMBER,
                                   repeat=3, min_repeat_ms=0.0, warmup=2)().results
                seconds[name] = min(seconds.get(name, float("inf")), statistics.median(t))
        use_dependent = seconds["dependent"] <= seconds["plain"]
        self._graph = dependent if use_dependent else plain
        self.dependent_launch = use_dependent
        self.launch_choice = LaunchChoice("dependent" if use_dependent else "plain",
                                          seconds["dependent"], seconds["plain"])

    def get_num_outputs(self) -> int:
        return len(self.lib.plan.outputs)

    def get_output(self, index: int = 0, out=None):
        """Output ``index`` as a device array (``.numpy()`` copies it to the host, after the
        queued work finished); with ``out``, copied into it."""
        outputs = self.lib.plan.outputs
        if not 0 <= index < len(outputs):
            raise GraphError(f"output {index} does not exist; the network has {len(outputs)}")
        arr = self._slots[outputs[index]]
        if out is not None:
            out.copyfrom(arr)
            return out
        return arr

    def benchmark(self, dev=None, number: int = 10, repeat: int = 3, min_repeat_ms: float = 0.0,
                  warmup: int = 1) -> BenchmarkResult:
        """Time :meth:`run`: ``repeat`` measurements of ``number`` runs each (``number`` grows
        until a measurement lasts ``min_repeat_ms``), as TVM's ``GraphModule.benchmark``.
        Print the result for the summary table."""
        dev = dev if dev is not None else self.device
        if self.is_sim:
            # one run (the outputs stay the network's), then the analytical estimate of the
            # GPU time of every step: simulating number x repeat runs would take minutes and
            # time the CPU, not a GPU
            from ..measure.estimate import module_seconds
            from ..measure.kernel_stats import analyze_module

            self.run()
            target = None if self.lib.target.is_sim else self.lib.target
            stats: dict = {}
            est = 0.0
            for module, _ in self._steps:
                if id(module) not in stats:
                    stats[id(module)] = module_seconds(analyze_module(module), target=target)
                est += stats[id(module)]
            return BenchmarkResult((est,) * repeat,
                                   "estimated GPU time (analytical model; simulator, not measured)")
        from ..backend_ptx import time_evaluator

        if self.use_cuda_graph and self._graph is None:
            self.run()
        timed = time_evaluator(lambda: self.run(), dev, number, repeat, min_repeat_ms, warmup)
        return BenchmarkResult(tuple(timed().results), "gpu")

    def __repr__(self):
        mode = "cuda graph" if self.uses_cuda_graph else "launches"
        return f"<GraphModule: {len(self._steps)} kernel steps on {self.device} ({mode})>"


CAPTURE_STREAMS = 4
"""The most streams a captured network's kernels are spread over."""


def step_dependencies(accesses: list[tuple[set, set]]) -> list[set[int]]:
    """For each step (``(storages read, storages written)``, in the serial order), the
    earlier steps it must wait for: the last writer of each storage it reads or writes
    (read after write, write after write) and every reader of a storage it overwrites since
    that storage was last written (write after read)."""
    last_write: dict = {}
    readers: dict = {}
    deps: list[set[int]] = []
    for i, (reads, writes) in enumerate(accesses):
        d: set[int] = set()
        for s in reads | writes:
            if s in last_write:
                d.add(last_write[s])
        for s in writes:
            d.update(readers.get(s, ()))
        d.discard(i)
        deps.append(d)
        for s in reads:
            readers.setdefault(s, []).append(i)
        for s in writes:
            last_write[s] = i
            readers[s] = []
    return deps


def assign_streams(deps: list[set[int]], n_streams: int = CAPTURE_STREAMS) -> list[int]:
    """A stream for each step: the stream whose last step it depends on (a chain stays on
    one stream), else an unused stream, else the stream whose last step is the oldest.
    Dependencies on other streams are joined by events when the steps are captured."""
    tail: list[int | None] = [None] * max(1, n_streams)
    out: list[int] = []
    for i, d in enumerate(deps):
        pick = next((k for k, t in enumerate(tail) if t is not None and t in d), None)
        if pick is None:
            pick = next((k for k, t in enumerate(tail) if t is None), None)
        if pick is None:
            pick = min(range(len(tail)), key=lambda k: tail[k])
        out.append(pick)
        tail[pick] = i
    return out


class _CapturedGraph:
    def __init__(self, graph, exec_):
        self.graph = graph
        self.exec = exec_

    def launch(self) -> None:
        from ..backend_ptx.cuda_driver import call

        call("cuGraphLaunch", self.exec, 0)

    def __del__(self):
        try:
            from ..backend_ptx.cuda_driver import call

            call("cuGraphExecDestroy", self.exec)
            call("cuGraphDestroy", self.graph)
        except Exception:  # at interpreter exit the driver may be gone already
            pass
