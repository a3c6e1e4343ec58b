"""``GraphModule``: run a compiled network on the simulator or a GPU.

On a GPU every storage of the memory plan is allocated once, the weights are uploaded
once, and the first :meth:`GraphModule.run` captures the launches of all kernels into one
CUDA graph (stream capture); every later ``run`` is a single ``cuGraphLaunch`` with no
per-kernel Python work. Where capture fails the kernels are launched one by one (the
module says which in ``uses_cuda_graph``). Graph launches go to the default stream, so
``set_input`` copies and ``get_output`` reads are ordered with them without extra
synchronization.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..ir import dtype as dt
from ..nd import SimArray, SimDevice
from . import GraphError

if TYPE_CHECKING:
    from ..graph.build_module import GraphLibrary


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


class GraphModule:
    """A compiled network on a device: ``set_input``, ``run``, ``get_output``.

    Args:
        lib: the :class:`~ptxforge.graph.build_module.GraphLibrary` from ``graph.build``.
        dev: ``ptxforge.sim()`` or ``ptxforge.cuda(0)``.
        use_cuda_graph: capture the whole network into one CUDA graph on the first run.
    """

    def __init__(self, lib: GraphLibrary, dev=None, use_cuda_graph: bool = True):
        from ..nd import sim

        self.lib = lib
        self.device = dev if dev is not None else sim()
        self.is_sim = isinstance(self.device, SimDevice)
        self.use_cuda_graph = use_cuda_graph and not self.is_sim
        self._graph = None
        self.uses_cuda_graph = False
        self.capture_error: str = ""
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
        target.copyfrom(src.astype(dt.to_numpy(want.dtype), copy=False))

    # -- steps ------------------------------------------------------------------------------

    def _prepare_steps(self) -> None:
        lib = self.lib
        self._steps = []
        loaded: dict[str, object] = {}
        for step, key in zip(lib.plan.steps, lib.call_keys):
            if key is None:
                continue
            fn = lib.functions[key]
            arrays = [self._slots[a] for a in step.args] + [self._slots[step.out]]
            if self.is_sim:
                self._steps.append((fn.device_module, [a.host_view for a in arrays]))
            else:
                if key not in loaded:
                    loaded[key] = fn.ptx.load(self.device)
                self._steps.append((loaded[key], arrays))
        self._loaded = loaded

    def _launch_all(self, stream=0) -> None:
        for fn, arrays in self._steps:
            fn(*arrays, stream=stream)

    def _capture(self) -> None:
        from ..backend_ptx.cuda_driver import CudaError, call, driver

        d = driver()
        stream = call("cuStreamCreate", d.CUstream_flags.CU_STREAM_NON_BLOCKING)
        graph = None
        try:
            call("cuStreamBeginCapture", stream,
                 d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            try:
                self._launch_all(stream)
            finally:
                graph = call("cuStreamEndCapture", stream)
            exec_ = call("cuGraphInstantiate", graph, 0)
            self._graph = _CapturedGraph(graph, exec_)
            self.uses_cuda_graph = True
        except CudaError as e:
            self.capture_error = str(e)
            self.use_cuda_graph = False
            if graph is not None:
                try:
                    call("cuGraphDestroy", graph)
                except CudaError:
                    pass
        finally:
            call("cuStreamDestroy", stream)

    # -- the user interface -----------------------------------------------------------------

    def set_input(self, key=None, value=None, **inputs) -> None:
        """Copy input data (or replace a weight): ``set_input("data", x)`` or
        ``set_input(data=x)``; ``value`` is a numpy array or a device array."""
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
        if self._graph is not None:
            self._graph.launch()
        else:
            self._launch_all(0)

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
