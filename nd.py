"""Devices and arrays: ``ptxforge.sim()``, ``ptxforge.cuda(0)``, ``nd.array``, ``nd.empty``.

A simulator array holds a numpy array on the host; a CUDA array lives in GPU memory (see
:mod:`ptxforge.backend_ptx`). Built modules accept either kind and run where the arrays are.
bfloat16 host data is ``ml_dtypes.bfloat16`` (uint16 bit patterns without ``ml_dtypes``);
:func:`to_bfloat16` and :func:`from_bfloat16` convert.
"""

from __future__ import annotations

import numpy as np

from .ir import dtype as dt
from .ir.dtype import from_bfloat16, to_bfloat16

__all__ = ["SimDevice", "SimArray", "sim", "cuda", "gpu", "array", "empty", "from_dlpack",
           "to_bfloat16", "from_bfloat16"]

KDL_CPU, KDL_CUDA = 1, 2
"""DLPack device types: host memory (the simulator's arrays) and CUDA memory."""


class SimDevice:
    """The CPU simulator as a device."""

    device_type = "sim"

    def __init__(self, device_id: int = 0):
        self.device_id = device_id

    def __repr__(self):
        return f"sim({self.device_id})"

    def __eq__(self, other):
        return isinstance(other, SimDevice) and other.device_id == self.device_id

    def __hash__(self):
        return hash(("sim", self.device_id))

    def sync(self) -> None:
        """Nothing to wait for: the simulator runs synchronously."""


class SimArray:
    """An array on the simulator device (a numpy array the simulator reads and writes)."""

    def __init__(self, data: np.ndarray, device: SimDevice, dtype: str | None = None):
        self._data = data
        self.device = device
        # bfloat16 data may be uint16 bit patterns (without ml_dtypes): keep the name
        self._dtype = dtype or dt.from_numpy(data.dtype)

    @property
    def shape(self) -> tuple:
        return tuple(self._data.shape)

    @property
    def dtype(self) -> str:
        return self._dtype

    def numpy(self) -> np.ndarray:
        return self._data.copy()

    asnumpy = numpy

    def copyfrom(self, source) -> SimArray:
        src = source.numpy() if hasattr(source, "numpy") else np.asarray(source)
        if tuple(src.shape) != self.shape:
            raise ValueError(f"copyfrom: shape {list(src.shape)} does not match {list(self.shape)}")
        if self._dtype == "bfloat16":
            src = dt.to_bfloat16(src)
        src = dt.host_array(src, self._dtype, "copyfrom")
        self._data[...] = src.astype(self._data.dtype, copy=False)
        return self

    @property
    def host_view(self) -> np.ndarray:
        """The backing numpy array, shared (the simulator writes outputs into it)."""
        return self._data

    @property
    def data_ptr(self) -> int:
        """The address of the first element (shared with DLPack consumers)."""
        return int(self._data.ctypes.data)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        """Export as a DLPack capsule of host memory, without copying: ``torch.from_dlpack``
        of a simulator array shares its memory (the simulator runs synchronously, so there is
        no stream to order with)."""
        if dl_device is not None and tuple(dl_device)[0] != KDL_CPU:
            raise BufferError(f"{self} is host memory; it cannot be exported to DLPack device "
                              f"{tuple(dl_device)} without a copy")
        if copy:
            raise BufferError("ptxforge arrays export without copying (copy=True requested)")
        if self._dtype == "bfloat16" or self._data.dtype.kind == "V":
            raise BufferError("bfloat16 simulator arrays have no DLPack export (numpy has no "
                              "bfloat16 type); share .host_view as uint16 bit patterns instead")
        if max_version is None:
            return self._data.__dlpack__()
        return self._data.__dlpack__(max_version=max_version)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (KDL_CPU, 0)

    def __repr__(self):
        return f"<SimArray {list(self.shape)} {self.dtype} on {self.device}>"


def sim(device_id: int = 0) -> SimDevice:
    return SimDevice(device_id)


def cuda(device_id: int = 0):
    """A CUDA GPU; raises a clear error when there is no GPU or driver."""
    from .backend_ptx import cuda as _cuda

    return _cuda(device_id)


gpu = cuda


def array(data, device=None):
    """Copy ``data`` (numpy or array-like) to ``device`` (default: the simulator)."""
    device = device or sim()
    arr = np.require(np.asarray(data), requirements="C")  # a 0-d array stays 0-d
    if isinstance(device, SimDevice):
        dt.from_numpy(arr.dtype)
        return SimArray(arr.copy(), device)
    from .backend_ptx import array as _array

    return _array(arr, device)


def empty(shape, dtype: str = "float32", device=None):
    """An uninitialized array of ``shape`` and ``dtype`` on ``device``."""
    device = device or sim()
    shape = tuple(int(s) for s in shape)
    if isinstance(device, SimDevice):
        # poison with NaN/garbage so a kernel that forgets to write an element is caught
        npdt = dt.to_numpy(dtype)
        if dtype == "bfloat16":
            data = dt.to_bfloat16(np.full(shape, np.nan, np.float32))
        else:
            data = np.empty(shape, npdt)
            if np.issubdtype(npdt, np.floating):
                data.fill(np.nan)
            else:
                data.fill(np.iinfo(npdt).min if np.issubdtype(npdt, np.integer) else 0)
        return SimArray(data, device, dtype)
    from .backend_ptx import empty as _empty

    return _empty(shape, dtype, device)


def from_dlpack(obj, device=None):
    """Wrap a tensor of another library (``torch.Tensor``, numpy, CuPy, ...) as a ptxforge
    array without copying: host memory becomes a simulator array, CUDA memory a GPU array
    (:func:`ptxforge.backend_ptx.from_dlpack`). ``device`` (optional) is checked against
    where the tensor lives: a host tensor is refused for a CUDA device and the other way
    round, since wrapping cannot move memory.

    The tensor must be compact row-major (kernels index flat memory) and of a dtype
    ptxforge has; anything else raises :class:`DLPackError` naming what to change.
    """
    return wrap_dlpack(obj, device)


# --- Arrays of other libraries without copying ---------------------------------------------
# Two ways in, both checked the same way (dtype, compact row-major layout, alignment, device):
# wrap_dlpack takes any DLPack producer (torch.Tensor, numpy, CuPy, ...): host memory becomes
# a simulator array (numpy's own DLPack import), CUDA memory a GPU array
# (ptxforge.backend_ptx.from_dlpack). wrap_tensor takes a torch.Tensor through data_ptr() and
# its strides, which costs no capsule per call (the path the torch.compile backend takes on
# every call) and handles bfloat16 host tensors, which numpy cannot import. Either way the
# result borrows the producer's memory. Nothing here imports torch.

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
            raise _dlpack_error(f"{why}: {name}")
    try:
        return dt.check(name)
    except (dt.DTypeError, ValueError, KeyError):
        raise _dlpack_error(f"dtype {name} has no ptxforge equivalent") from None


def _device_kind(device) -> str:
    """``"sim"`` or ``"cuda"`` for a ptxforge device (None: no check wanted)."""
    if device is None:
        return ""
    return "sim" if isinstance(device, SimDevice) else "cuda"


def _refuse_move(where: str, device, what: str) -> None:
    if where == "cpu":
        raise _dlpack_error(
            f"{what} is in host memory, but {device} is a GPU: wrapping cannot move memory; "
            "move the tensor to the GPU first (x.cuda()) or run on ptxforge.sim()")
    raise _dlpack_error(
        f"{what} is in GPU memory, but {device} is the CPU simulator: wrapping cannot move "
        "memory; copy it to the host first (x.cpu()) or run on ptxforge.cuda()")


def _check_compact(shape: tuple, strides: tuple, what: str) -> None:
    """Strides in elements must be those of a compact row-major array (size-1 dimensions
    may have any stride)."""
    expect = 1
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != expect:
            raise _dlpack_error(
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
            from .backend_ptx import from_dlpack

            arr = from_dlpack(obj)
        else:
            raise _dlpack_error(f"the {type(obj).__name__} lives on DLPack device type {kind}; "
                              "ptxforge shares host (1) and CUDA (2) memory")
    else:
        raise _dlpack_error(f"{type(obj).__name__} does not support DLPack (no __dlpack__); "
                          "copy it with ptxforge.nd.array(x) instead")
    if _device_kind(device) == "cuda" and isinstance(arr, SimArray):
        _refuse_move("cpu", device, f"the {type(obj).__name__}")
    if device is not None and not isinstance(arr, SimArray) and arr.device != device:
        raise _dlpack_error(f"the tensor is on {arr.device}, not {device}")
    return arr


def _wrap_host(obj) -> SimArray:
    try:
        data = np.from_dlpack(obj)
    except (RuntimeError, TypeError, BufferError) as e:
        raise _dlpack_error(f"numpy cannot import this {type(obj).__name__} through DLPack "
                          f"({e}); bfloat16 torch tensors: use wrap_tensor") from None
    if data.ndim and not data.flags.c_contiguous:
        _check_compact(data.shape, tuple(s // data.itemsize for s in data.strides),
                       f"the {type(obj).__name__}")
    try:
        dtype = dt.from_numpy(data.dtype)
    except (dt.DTypeError, ValueError, KeyError) as e:
        raise _dlpack_error(f"dtype {data.dtype} has no ptxforge equivalent ({e})") from None
    return SimArray(data, SimDevice(0), dtype)


def wrap_tensor(t, device=None, what: str = "the tensor"):
    """A ``torch.Tensor`` as a ptxforge array sharing its memory: a simulator array for a
    CPU tensor, a GPU array for a CUDA tensor (``device``, when given, must match; a CPU
    tensor for a CUDA device is an error naming ``what``). The tensor must be contiguous,
    of a ptxforge dtype, and (on the GPU) 16-byte aligned; it must not need gradients
    (``detach()`` it: a compiled graph writes outside autograd)."""
    if getattr(t, "requires_grad", False):
        raise _dlpack_error(f"{what} requires grad; pass t.detach() (compiled graphs run "
                          "outside autograd)")
    dtype = torch_dtype_name(t.dtype)
    shape = tuple(int(s) for s in t.shape)
    _check_compact(shape, tuple(int(s) for s in t.stride()), what)
    where = t.device.type
    if where not in ("cpu", "cuda"):
        raise _dlpack_error(f"{what} is on {t.device}; ptxforge shares CPU and CUDA memory")
    kind = _device_kind(device)
    if kind and (where == "cpu") != (kind == "sim"):
        _refuse_move(where, device, what)
    if where == "cpu":
        return SimArray(_host_view(t, dtype, shape), SimDevice(0), dtype)
    from .backend_ptx import NDArray, cuda

    ptr = int(t.data_ptr())
    if ptr % ALIGN_BYTES:
        raise _dlpack_error(f"{what} starts at {ptr:#x}, not {ALIGN_BYTES}-byte aligned (a view "
                          "at an offset); pass x.clone()")
    dev = device if device is not None else cuda(t.device.index or 0)
    if dev.device_id != (t.device.index or 0):
        raise _dlpack_error(f"{what} is on {t.device}, but the module runs on {dev}")
    return NDArray(ptr, shape, dtype, dev, owner=t)


def _host_view(t, dtype: str, shape: tuple) -> np.ndarray:
    """The numpy array over a CPU tensor's memory (``Tensor.numpy()`` shares it); bfloat16,
    which numpy lacks, is viewed as int16 and reinterpreted as the host bfloat16 type."""
    if dtype == "bfloat16":
        import torch

        bits = t.view(torch.int16).numpy()
        return bits.view(dt.BFLOAT16_HOST).reshape(shape)
    return t.numpy().reshape(shape)


def _dlpack_error(message: str) -> Exception:
    """A :class:`~ptxforge.backend_ptx.dlpack.DLPackError`: imported when raised, so that
    arrays load without the NVPTX backend."""
    from .backend_ptx.dlpack import DLPackError

    return DLPackError(message)


def __getattr__(name: str):
    if name == "DLPackError":
        from .backend_ptx.dlpack import DLPackError

        return DLPackError
    raise AttributeError(f"module 'ptxforge.nd' has no attribute {name!r}")
