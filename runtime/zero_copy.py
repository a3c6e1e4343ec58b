"""Running a compiled network on arrays the caller owns, without copies.

:class:`ZeroCopyGraphModule` is a :class:`~ptxforge.runtime.graph_executor.GraphModule` whose
:meth:`~ZeroCopyGraphModule.run_bound` takes the network's inputs and outputs as arrays of
the caller (torch tensors wrapped by :func:`ptxforge.nd.wrap_tensor`): every slot of an input's
storage (the input and the reshapes of it that run no kernel) reads the caller's memory,
and the kernel writing an output writes into the caller's array. The module's own input and
output buffers are not touched; weights and intermediate results stay in the module.

On the simulator the kernels run on numpy views of the caller's memory. On a GPU they are
launched on the caller's stream (``torch.cuda.current_stream().cuda_stream``): one by one,
or, with ``use_cuda_graph``, from a CUDA graph captured once on the module's own buffers
whose kernel nodes that touch an input or output are re-pointed before each launch
(``cuGraphExecKernelNodeSetParams``, which changes only later launches of the graph, so
earlier launches still queued keep their pointers). The captured graph runs its kernels in
one stream order.

An output that is an input or a weight itself, or the same output twice, has no kernel
writing it: it is copied into the caller's array after the run (on the same stream).
"""

from __future__ import annotations

import ctypes
import warnings
from dataclasses import dataclass

import numpy as np

from ..ir import dtype as dt
from ..nd import SimArray
from . import GraphError
from .graph_executor import GraphModule


class CudaGraphFallbackWarning(UserWarning):
    """A module's kernels could not be captured in one CUDA graph: they launch one by one
    (still zero-copy, on the caller's stream), paying a launch each."""


@dataclass(frozen=True)
class PointerBinding:
    """Where the caller's pointers go, worked out once for a fixed order of inputs
    (:meth:`ZeroCopyGraphModule.pointer_binding`), so a call passes bare pointers.

    Attributes:
        inputs: the storage each input's pointer stands for, in the caller's order.
        outputs: per output, the storage its kernel writes into the caller's array, or
            None when no kernel writes it (an input or a weight itself, or an output given
            twice): then it is copied after the run.
        copies: ``(output index, slot)`` of the outputs copied after the run.
    """

    inputs: tuple[int, ...]
    outputs: tuple[int | None, ...]
    copies: tuple[tuple[int, int], ...]


class _Pointer:
    """A bare device pointer where the runtime expects an array (``.ptr``)."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int):
        self.ptr = ptr


class ZeroCopyGraphModule(GraphModule):
    """A :class:`GraphModule` that also runs on caller-owned input and output arrays
    (:meth:`run_bound`); ``run`` / ``set_input`` / ``get_output`` work as before."""

    def __init__(self, lib, dev=None, use_cuda_graph: bool = True,
                 dependent_launch: bool = True):
        super().__init__(lib, dev, use_cuda_graph, dependent_launch)
        plan = lib.plan
        # the slot indices of every kernel step, parallel to self._steps
        self._step_slots = [list(step.args) + [step.out]
                            for step, key in zip(plan.steps, lib.call_keys) if key is not None]
        self._input_storage = {name: plan.slots[k].storage for name, k in plan.inputs.items()}
        self._patched = None  # the captured graph with re-pointable kernel nodes
        self.bound_graph_error = ""  # why the bound runs launch one by one, if they do

    # -- binding ----------------------------------------------------------------------------

    def _bind(self, inputs: dict, outputs: list) -> tuple[dict, list]:
        """Storage index -> caller array; and the (output index, slot) pairs no kernel
        writes into the caller's array (copied after the run)."""
        plan = self.lib.plan
        missing = sorted(set(plan.inputs) - set(inputs))
        extra = sorted(set(inputs) - set(plan.inputs))
        if missing or extra:
            raise GraphError(f"run_bound needs exactly the inputs {sorted(plan.inputs)}; "
                             f"missing {missing}, unknown {extra}")
        if len(outputs) != len(plan.outputs):
            raise GraphError(f"run_bound needs {len(plan.outputs)} output arrays, got "
                             f"{len(outputs)}")
        bound: dict[int, object] = {}
        for name, arr in inputs.items():
            self._check_array(arr, plan.slots[plan.inputs[name]].ty, f"input {name!r}")
            bound[self._input_storage[name]] = arr
        copies = []
        for k, (slot, arr) in enumerate(zip(plan.outputs, outputs)):
            self._check_array(arr, plan.slots[slot].ty, f"output {k}")
            st = plan.slots[slot].storage
            if plan.storages[st].kind == "output" and st not in bound:
                bound[st] = arr
            else:
                copies.append((k, slot))
        return bound, copies

    def pointer_binding(self, input_names) -> PointerBinding:
        """The :class:`PointerBinding` of calls that pass the inputs ``input_names`` (all of
        the network's inputs, in that order) and every output, to :meth:`run_pointers`."""
        plan = self.lib.plan
        names = list(input_names)
        if sorted(names) != sorted(plan.inputs) or len(set(names)) != len(names):
            raise GraphError(f"a pointer binding needs exactly the inputs {sorted(plan.inputs)}"
                             f", got {names}")
        inputs = tuple(self._input_storage[n] for n in names)
        taken = set(inputs)
        outputs: list[int | None] = []
        copies = []
        for k, slot in enumerate(plan.outputs):
            st = plan.slots[slot].storage
            if plan.storages[st].kind == "output" and st not in taken:
                outputs.append(st)
                taken.add(st)
            else:
                outputs.append(None)
                copies.append((k, slot))
        return PointerBinding(inputs, tuple(outputs), tuple(copies))

    def run_pointers(self, binding: PointerBinding, inputs, outputs, stream: int = 0) -> None:
        """:meth:`run_bound` on bare device pointers (ints), the inputs in the order of
        ``binding`` and one per output: the per-call path of the ``torch.compile`` backend,
        which builds no array objects. The caller vouches for each pointer (dtype, shape,
        device, 16-byte alignment: a torch tensor checked against the plan's types); GPU
        modules only."""
        if self.is_sim:
            raise GraphError("run_pointers runs GPU modules; on the simulator use run_bound")
        ptr_of = dict(zip(binding.inputs, inputs))
        for st, ptr in zip(binding.outputs, outputs):
            if st is not None:
                ptr_of[st] = ptr
        self.device.activate()
        if self.use_cuda_graph and self._patched is None and not self.bound_graph_error:
            self._capture_patchable()
        if self._patched is not None:
            self._patched.launch_pointers(ptr_of, stream)
        else:
            self._launch_steps({st: _Pointer(p) for st, p in ptr_of.items()}, stream)
        plan = self.lib.plan
        for k, slot in binding.copies:
            # from the caller's memory where the slot's storage is bound (an output that is
            # an input itself), else from the module's own buffer
            nbytes = plan.slots[slot].ty.nbytes
            if nbytes:
                from ..backend_ptx.cuda_driver import call

                src = ptr_of.get(plan.slots[slot].storage, None)
                src = self._slots[slot].ptr if src is None else src
                call("cuMemcpyDtoDAsync", outputs[k], src, nbytes, stream)

    def _launch_steps(self, bound: dict, stream: int) -> None:
        """Every kernel launched one by one on ``stream`` (no CUDA graph)."""
        for (fn, _), slots in zip(self._steps, self._step_slots):
            fn(*[self._slot_array(k, bound) for k in slots], stream=stream,
               dependent=self.dependent_launch)

    def _check_array(self, arr, ty, what: str) -> None:
        if tuple(arr.shape) != tuple(ty.shape) or arr.dtype != ty.dtype:
            raise GraphError(f"{what} must be {list(ty.shape)} {ty.dtype}, got "
                             f"{list(arr.shape)} {arr.dtype}")
        if self.is_sim != isinstance(arr, SimArray):
            where = "host memory" if isinstance(arr, SimArray) else "GPU memory"
            raise GraphError(f"{what} is in {where}, but the network runs on {self.device}: "
                             + ("move the tensors to the GPU (x.cuda())" if not self.is_sim
                                else "pass host tensors or build for the GPU"))
        if not self.is_sim and arr.device != self.device:
            raise GraphError(f"{what} is on {arr.device}, the network on {self.device}")

    def _slot_array(self, k: int, bound: dict):
        """Slot ``k``'s array: a view of the caller's array when its storage is bound."""
        slot = self.lib.plan.slots[k]
        ext = bound.get(slot.storage)
        if ext is None:
            return self._slots[k]
        ty = slot.ty
        if self.is_sim:
            flat = ext.host_view.reshape(-1).view(np.uint8)[:ty.nbytes]
            return SimArray(flat.view(dt.to_numpy(ty.dtype)).reshape(ty.shape), self.device,
                            ty.dtype)
        from ..backend_ptx import NDArray

        return NDArray(ext.ptr, ty.shape, ty.dtype, self.device, owner=ext)

    # -- running ----------------------------------------------------------------------------

    def run_bound(self, inputs: dict, outputs: list, stream: int = 0) -> None:
        """Run reading ``inputs`` (name -> array) and writing ``outputs`` (one array per
        output, in order), all of the module's device kind; on a GPU asynchronously on
        ``stream`` (a ``CUstream`` handle as an int; 0: the legacy default stream)."""
        bound, copies = self._bind(inputs, outputs)
        if self.is_sim:
            from .. import backend_sim

            for (module, _), slots in zip(self._steps, self._step_slots):
                backend_sim.run(module, [self._slot_array(k, bound).host_view for k in slots])
            for k, slot in copies:
                np.copyto(outputs[k].host_view, self._slot_array(slot, bound).host_view)
            return
        self.device.activate()
        if self.use_cuda_graph and self._patched is None and not self.bound_graph_error:
            self._capture_patchable()
        if self._patched is not None:
            self._patched.launch(bound, stream)
        else:
            self._launch_steps(bound, stream)
        for k, slot in copies:
            src = self._slot_array(slot, bound)
            if src.nbytes:
                from ..backend_ptx.cuda_driver import call

                call("cuMemcpyDtoDAsync", outputs[k].ptr, src.ptr, src.nbytes, stream)

    def _capture_patchable(self) -> None:
        from ..backend_ptx.cuda_driver import CudaError

        try:
            self._patched = _PatchableGraph.capture(self)
        except (CudaError, AttributeError, TypeError, ValueError) as e:
            # launching one by one on the caller's stream is still zero-copy, only slower:
            # said once, since a network of small kernels can lose a third of its speed
            self.bound_graph_error = f"{type(e).__name__}: {e}"
            warnings.warn(f"the module's kernels could not be captured in a CUDA graph "
                          f"({self.bound_graph_error}); they launch one by one",
                          CudaGraphFallbackWarning, stacklevel=3)


class _KernelNode:
    """One captured kernel launch: its graph node, the kernel, and where each pointer
    argument comes from (a slot of the network, or a temporary of the step's module)."""

    def __init__(self, node, kernel, sources: list):
        self.node = node
        self.kernel = kernel
        self.sources = sources  # ("slot", k) or ("ptr", address)
        n = max(len(sources), 1)
        self.values = (ctypes.c_uint64 * n)()
        base = ctypes.addressof(self.values)
        self.slots = (ctypes.c_void_p * n)(*[base + 8 * i for i in range(n)])
        self.last: tuple = ()
        self.where: tuple = ()  # ((storage or None, own pointer), ...), set by the graph


class _PatchableGraph:
    """A network captured into a CUDA graph on one stream, with the kernel nodes that read
    an input or write an output recorded, so each launch can point them at the caller's
    arrays."""

    def __init__(self, module: ZeroCopyGraphModule, graph, exec_, nodes: list[_KernelNode]):
        self.module = module
        self.graph = graph
        self.exec = exec_
        plan = module.lib.plan
        outside = {s for s in range(len(plan.storages))
                   if plan.storages[s].kind in ("input", "output")}
        self.nodes = [n for n in nodes
                      if any(kind == "slot" and plan.slots[v].storage in outside
                             for kind, v in n.sources)]
        slots = module._slots
        for n in self.nodes:
            # per argument, resolved once: the storage a call may re-point (None: a
            # temporary) and the module's own pointer, kept where the call binds nothing
            n.where = tuple((plan.slots[v].storage, slots[v].ptr) if kind == "slot"
                            else (None, v) for kind, v in n.sources)

    @classmethod
    def capture(cls, module: ZeroCopyGraphModule) -> _PatchableGraph:
        from ..backend_ptx.cuda_driver import call, driver, gc_paused

        d = driver()
        stream = call("cuStreamCreate", d.CUstream_flags.CU_STREAM_NON_BLOCKING)
        nodes: list[_KernelNode] = []
        graph = None
        try:
            with gc_paused():
                call("cuStreamBeginCapture", stream,
                     d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
                try:
                    for (fn, arrays), slots in zip(module._steps, module._step_slots):
                        nodes += _capture_step(fn, arrays, slots, stream,
                                               module.dependent_launch)
                finally:
                    graph = call("cuStreamEndCapture", stream)
            exec_ = call("cuGraphInstantiate", graph, 0)
        except Exception:
            if graph is not None:
                call("cuGraphDestroy", graph)
            raise
        finally:
            call("cuStreamDestroy", stream)
        return cls(module, graph, exec_, nodes)

    def launch(self, bound: dict, stream: int) -> None:
        """Launch with the storages in ``bound`` (storage -> array) at the arrays' memory."""
        self.launch_pointers({st: arr.ptr for st, arr in bound.items()}, stream)

    def launch_pointers(self, ptr_of: dict, stream: int) -> None:
        """Launch with the storages in ``ptr_of`` (storage -> device pointer) re-pointed."""
        from ..backend_ptx.cuda_driver import call, driver

        for n in self.nodes:
            ptrs = tuple(own if st is None else ptr_of.get(st, own) for st, own in n.where)
            if ptrs == n.last:
                continue  # the node already points there (same tensors as the last call)
            n.values[:len(ptrs)] = ptrs
            params = driver().CUDA_KERNEL_NODE_PARAMS()
            k = n.kernel
            params.func = k.function
            params.gridDimX, params.gridDimY, params.gridDimZ = k._grid
            params.blockDimX, params.blockDimY, params.blockDimZ = k._block
            params.sharedMemBytes = k._smem
            params.kernelParams = ctypes.addressof(n.slots)
            call("cuGraphExecKernelNodeSetParams", self.exec, n.node, params)
            n.last = ptrs
        call("cuGraphLaunch", self.exec, stream)

    def __del__(self):
        try:
            from ..backend_ptx.cuda_driver import call

            call("cuGraphExecDestroy", self.exec)
            call("cuGraphDestroy", self.graph)
        except Exception:  # noqa: BLE001 - at interpreter exit the driver may be gone
            pass


def _capture_step(fn, arrays, slots: list[int], stream, dependent: bool) -> list[_KernelNode]:
    """Launch one step's kernels into the capturing ``stream`` as ``LoadedModule`` runs
    them, recording after each launch the node it added (the stream's capture
    dependency)."""
    from ..backend_ptx.cuda_driver import call

    ptrs = fn._param_ptrs(arrays)
    nodes = []
    for lk, kinds in fn._plan:
        args = [ptrs[i] if kind == "p" else fn._temp_ptrs[i] for kind, i in kinds]
        sources = [("slot", slots[i]) if kind == "p" else ("ptr", fn._temp_ptrs[i])
                   for kind, i in kinds]
        lk.launch_ptrs(args, stream=stream, dependent=dependent)
        info = call("cuStreamGetCaptureInfo", stream)
        deps = info[3] if len(info) > 3 else ()
        if len(deps) != 1:
            raise ValueError(f"the capture of {lk.name} left {len(deps)} dependencies, "
                             "expected its one kernel node")
        nodes.append(_KernelNode(deps[0], lk, sources))
    return nodes
