"""The per-call path of a compiled partition on the GPU.

A ``torch.compile`` model calls each compiled partition once per forward, so whatever Python
runs per call adds to every call where the GPU would otherwise wait for the host (a batch-1
network of small kernels replays its CUDA graph in a few hundred microseconds). The call
therefore works on bare pointers: each input tensor's type, device, contiguity and alignment
is checked against what the build recorded, its ``data_ptr()`` is handed to
:meth:`~ptxforge.runtime.zero_copy.ZeroCopyGraphModule.run_pointers` with a
:class:`~ptxforge.runtime.zero_copy.PointerBinding` worked out once, the outputs are
allocated by PyTorch, and the work goes to PyTorch's current stream, read through the raw
accessor Inductor's generated code uses.
"""

from __future__ import annotations

from collections.abc import Callable


def raw_stream_getter() -> Callable[[int], int]:
    """``f(device_index) -> CUstream handle`` of PyTorch's current stream: the raw accessor
    where this torch has it (no ``torch.cuda.Stream`` object per call), else the public one."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    return lambda index: torch.cuda.current_stream(index).cuda_stream


class GpuCall:
    """Runs a built partition's GPU module on the partition's torch tensors.

    Args:
        module: the :class:`~ptxforge.runtime.zero_copy.ZeroCopyGraphModule`.
        names: the partition's input names, in the order of the call's tensors.
        used: per input, whether the module reads it at every call (weights bound at the
            build and inputs the build found unused are skipped).
        bad_device: called with the call's tensors when one is not on the module's GPU;
            raises the error that names it.
    """

    def __init__(self, module, names, used, bad_device: Callable):
        import torch

        plan = module.lib.plan
        self.module = module
        self.positions = tuple(i for i, u in enumerate(used) if u)
        self.names = tuple(names[i] for i in self.positions)
        self.specs = tuple((torch.Size(plan.slots[plan.inputs[n]].ty.shape),
                            getattr(torch, plan.slots[plan.inputs[n]].ty.dtype))
                           for n in self.names)
        self.outputs = tuple((tuple(plan.slots[k].ty.shape), getattr(torch, plan.slots[k].ty.dtype))
                             for k in plan.outputs)
        self.binding = module.pointer_binding(self.names)
        self.device_index = int(module.device.device_id)
        self.device = torch.device("cuda", self.device_index)
        self.device_type = "cuda"
        self.stream = raw_stream_getter()
        self.empty = torch.empty
        self.bad_device = bad_device

    def __call__(self, tensors) -> tuple:
        ptrs = []
        compacted = []  # copies made here live until their launches are queued
        for pos, (shape, dtype) in zip(self.positions, self.specs):
            t = tensors[pos]
            if t.device.type != self.device_type or (t.get_device() != self.device_index
                                                     and self.device_type == "cuda"):
                self.bad_device(tensors)
                raise self._wrong_device(t, pos)
            if t.dtype != dtype or t.shape != shape:
                raise self._wrong_type(t, pos, shape, dtype)
            ptr = t.data_ptr()
            if ptr % 16 or not t.is_contiguous():
                # a strided view or one at an unaligned offset: PyTorch makes it compact (the
                # one copy of this input, on the same stream as the launches that read it)
                t = t.detach().clone(memory_format=_contiguous())
                compacted.append(t)
                ptr = t.data_ptr()
            ptrs.append(ptr)
        outs = tuple(self.empty(shape, dtype=dtype, device=self.device)
                     for shape, dtype in self.outputs)
        self.module.run_pointers(self.binding, ptrs, [o.data_ptr() for o in outs],
                                 self.stream(self.device_index))
        return outs

    def _wrong_device(self, t, pos: int) -> Exception:
        from .torch_options import BackendError

        name = self.names[self.positions.index(pos)]
        return BackendError(f"input {name} is on {t.device}, but this graph runs on "
                            f"{self.device}; move it there (x.to({str(self.device)!r}))")

    def _wrong_type(self, t, pos: int, shape, dtype) -> Exception:
        from .torch_options import BackendError

        name = self.names[self.positions.index(pos)]
        return BackendError(f"input {name} is {list(t.shape)} {t.dtype}, but this graph was "
                            f"compiled for {list(shape)} {dtype}")


def _contiguous():
    import torch

    return torch.contiguous_format
