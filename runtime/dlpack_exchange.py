"""Arrays of other libraries as ptxforge arrays, without copying.

Two ways in, both checked the same way (dtype, compact row-major layout, alignment, device):

- :func:`wrap_dlpack`: any DLPack producer (``torch.Tensor``, numpy, CuPy, ...). Host memory
  becomes a simulator array (numpy's own DLPack import), CUDA memory a GPU array
  (:func:`ptxforge.backend_ptx.from_dlpack`).
- :func:`wrap_tensor`: a ``torch.Tensor`` through ``data_ptr()`` and its strides, which costs
  no capsule per call (the path the ``torch.compile`` backend takes on every call) and
  handles bfloat16 host tensors, which numpy cannot import.

Either way the result borrows the producer's memory: a kernel writing into it writes into
the tensor. Nothing here imports torch; the functions read the attributes tensors have.
"""

from __future__ import annotations

import numpy as np

from ..backend_ptx.dlpack import DLPackError
from ..ir import dtype as dt
from ..nd import KDL_CPU, KDL_CUDA, SimArray, SimDevice

__all__ = ["DLPackError", "wrap_dlpack", "wrap_tensor", "torch_dtype_name", "ALIGN_BYTES"]

ALIGN_BYTES = 16
"""Kernels load vectors from their buffers: a wrapped GPU tensor must start 16-byte aligned
(every fresh torch allocation is; a view at an odd offset is not)."""

_REJECTED = {"complex": "complex tensors are not supported",
             "float8": "float8 tensors are not supported yet"}


def torch_dtype_name(torch_dtype) -> str:
    """ptxforge's name of a ``torch.dtype`` (``torch.float16`` -> ``"float16"``); complex,
    float8 and other dtypes ptxforge has no kernels for are a :class:`DLPackError`."""
    name = str(torch_dtype).removeprefix("torch.")
    for prefix, why in _REJECTED.items():
        if name.startswith(prefix):
            raise DLPackError(f"{why}: {name}")
    try:
        return dt.check(name)
    except (dt.DTypeError, ValueError, KeyError):
        raise DLPackError(f"dtype {name} has no ptxforge equivalent") from None


def _device_kind(device) -> str:
    """``"sim"`` or ``"cuda"`` for a ptxforge device (None: no check wanted)."""
    if device is None:
        return ""
    return "sim" if isinstance(device, SimDevice) else "cuda"


def _refuse_move(where: str, device, what: str) -> None:
    if where == "cpu":
        raise DLPackError(
            f"{what} is in host memory, but {device} is a GPU: wrapping cannot move memory; "
            "move the tensor to the GPU first (x.cuda()) or run on ptxforge.sim()")
    raise DLPackError(
        f"{what} is in GPU memory, but {device} is the CPU simulator: wrapping cannot move "
        "memory; copy it to the host first (x.cpu()) or run on ptxforge.cuda()")


def _check_compact(shape: tuple, strides: tuple, what: str) -> None:
    """Strides in elements must be those of a compact row-major array (size-1 dimensions
    may have any stride)."""
    expect = 1
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != expect:
            raise DLPackError(
                f"{what} is not contiguous (shape {list(shape)}, strides {list(strides)}): "
                "kernels index compact row-major memory; pass x.contiguous()")
        expect *= extent


def wrap_dlpack(obj, device=None):
    """``obj`` (a DLPack producer) as a :class:`~ptxforge.nd.SimArray` (host memory) or a
    GPU :class:`~ptxforge.backend_ptx.NDArray` sharing its memory; ``device`` (optional)
    must be where the memory is."""
    if isinstance(obj, SimArray):
        arr = obj
    elif hasattr(obj, "__dlpack_device__"):
        kind = int(obj.__dlpack_device__()[0])
        if kind == KDL_CPU:
            arr = _wrap_host(obj)
        elif kind == KDL_CUDA:
            if _device_kind(device) == "sim":
                _refuse_move("cuda", device, f"the {type(obj).__name__}")
            from ..backend_ptx import from_dlpack

            arr = from_dlpack(obj)
        else:
            raise DLPackError(f"the {type(obj).__name__} lives on DLPack device type {kind}; "
                              "ptxforge shares host (1) and CUDA (2) memory")
    else:
        raise DLPackError(f"{type(obj).__name__} does not support DLPack (no __dlpack__); "
                          "copy it with ptxforge.nd.array(x) instead")
    if _device_kind(device) == "cuda" and isinstance(arr, SimArray):
        _refuse_move("cpu", device, f"the {type(obj).__name__}")
    if device is not None and not isinstance(arr, SimArray) and arr.device != device:
        raise DLPackError(f"the tensor is on {arr.device}, not {device}")
    return arr


def _wrap_host(obj) -> SimArray:
    try:
        data = np.from_dlpack(obj)
    except (RuntimeError, TypeError, BufferError) as e:
        raise DLPackError(f"numpy cannot import this {type(obj).__name__} through DLPack "
                          f"({e}); bfloat16 torch tensors: use wrap_tensor") from None
    if data.ndim and not data.flags.c_contiguous:
        _check_compact(data.shape, tuple(s // data.itemsize for s in data.strides),
                       f"the {type(obj).__name__}")
    try:
        dtype = dt.from_numpy(data.dtype)
    except (dt.DTypeError, ValueError, KeyError) as e:
        raise DLPackError(f"dtype {data.dtype} has no ptxforge equivalent ({e})") from None
    return SimArray(data, SimDevice(0), dtype)


def wrap_tensor(t, device=None, what: str = "the tensor"):
    """A ``torch.Tensor`` as a ptxforge array sharing its memory: a simulator array for a
    CPU tensor, a GPU array for a CUDA tensor (``device``, when given, must match; a CPU
    tensor for a CUDA device is an error naming ``what``). The tensor must be contiguous,
    of a ptxforge dtype, and (on the GPU) 16-byte aligned; it must not need gradients
    (``detach()`` it: a compiled graph writes outside autograd)."""
    if getattr(t, "requires_grad", False):
        raise DLPackError(f"{what} requires grad; pass t.detach() (compiled graphs run "
                          "outside autograd)")
    dtype = torch_dtype_name(t.dtype)
    shape = tuple(int(s) for s in t.shape)
    _check_compact(shape, tuple(int(s) for s in t.stride()), what)
    where = t.device.type
    if where not in ("cpu", "cuda"):
        raise DLPackError(f"{what} is on {t.device}; ptxforge shares CPU and CUDA memory")
    kind = _device_kind(device)
    if kind and (where == "cpu") != (kind == "sim"):
        _refuse_move(where, device, what)
    if where == "cpu":
        return SimArray(_host_view(t, dtype, shape), SimDevice(0), dtype)
    from ..backend_ptx import NDArray, cuda

    ptr = int(t.data_ptr())
    if ptr % ALIGN_BYTES:
        raise DLPackError(f"{what} starts at {ptr:#x}, not {ALIGN_BYTES}-byte aligned (a view "
                          "at an offset); pass x.clone()")
    dev = device if device is not None else cuda(t.device.index or 0)
    if dev.device_id != (t.device.index or 0):
        raise DLPackError(f"{what} is on {t.device}, but the module runs on {dev}")
    return NDArray(ptr, shape, dtype, dev, owner=t)


def _host_view(t, dtype: str, shape: tuple) -> np.ndarray:
    """The numpy array over a CPU tensor's memory (``Tensor.numpy()`` shares it); bfloat16,
    which numpy lacks, is viewed as int16 and reinterpreted as the host bfloat16 type."""
    if dtype == "bfloat16":
        import torch

        bits = t.view(torch.int16).numpy()
        return bits.view(dt.BFLOAT16_HOST).reshape(shape)
    return t.numpy().reshape(shape)
