"""Arrays in GPU memory: ``empty``, ``array``, ``from_dlpack`` and the :class:`NDArray` type.

Arrays are compact row-major. Memory comes from ``cuMemAlloc`` (256-byte aligned) and is
freed when the array is garbage-collected; arrays imported through DLPack borrow the
producer's memory and release it through the producer's deleter instead.

bfloat16 arrays copy to and from numpy as ``ml_dtypes.bfloat16`` arrays when ``ml_dtypes``
is installed, else as uint16 bit patterns (:data:`ptxforge.ir.dtype.BFLOAT16_HOST`);
:func:`to_bfloat16` / :func:`from_bfloat16` convert float arrays either way, and
``copyfrom`` rounds float input to nearest even.
"""

from __future__ import annotations

import weakref

import numpy as np

from ..ir import dtype as dt
from . import dlpack
from .cuda_driver import CudaError, Device, call, cuda, release_failed


def _free(device: Device, ptr: int) -> None:
    try:
        device.activate()
        call("cuMemFree", ptr)
    except CudaError as e:
        release_failed(e)


to_bfloat16 = dt.to_bfloat16
from_bfloat16 = dt.from_bfloat16


def _host_dtype(dtype: str) -> np.dtype:
    return dt.to_numpy(dtype)


def _host_source(src: np.ndarray, dtype: str) -> np.ndarray:
    """``src`` as a compact host array of ``dtype``'s host type; float data headed for a
    bfloat16 array is rounded to nearest even (uint16 data is taken as bit patterns)."""
    if dtype == "bfloat16" and src.dtype != dt.BFLOAT16_HOST:
        if src.dtype == np.uint16:
            return np.ascontiguousarray(src)
        src = dt.to_bfloat16(src)
    src = dt.host_array(src, dtype, "copyfrom")  # no silent truncation or wrap-around
    return np.ascontiguousarray(src, dtype=_host_dtype(dtype))


class NDArray:
    """A compact row-major array in the memory of one GPU."""

    __slots__ = ("ptr", "shape", "dtype", "device", "_owner", "__weakref__")

    def __init__(self, ptr: int, shape: tuple, dtype: str, device: Device, owner=None):
        self.ptr = int(ptr)
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dt.check(dtype)
        self.device = device
        self._owner = owner

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.size * dt.nbytes(self.dtype)

    # copies ------------------------------------------------------------------------------

    def numpy(self) -> np.ndarray:
        """A host copy (waits for the work queued before it on the default stream)."""
        out = np.empty(self.shape, _host_dtype(self.dtype))
        if self.nbytes:
            self.device.activate()
            call("cuMemcpyDtoH", out.ctypes.data, self.ptr, self.nbytes)
        return out

    asnumpy = numpy

    def copyfrom(self, source) -> NDArray:
        """Fill from a numpy array (or anything numpy converts) or another NDArray."""
        self.device.activate()
        if isinstance(source, NDArray):
            self._check_same(source.shape, source.dtype, "copyfrom")
            if self.nbytes:
                call("cuMemcpyDtoD", self.ptr, source.ptr, self.nbytes)
            return self
        src = np.asarray(source)
        if tuple(src.shape) != self.shape:
            raise ValueError(
                f"copyfrom: source shape {list(src.shape)} does not match {list(self.shape)}")
        src = _host_source(src, self.dtype)
        if self.nbytes:
            call("cuMemcpyHtoD", self.ptr, src.ctypes.data, self.nbytes)
        return self

    def copyto(self, target) -> NDArray | np.ndarray:
        """Copy into ``target`` (an NDArray or a numpy array of the same shape)."""
        if isinstance(target, NDArray):
            return target.copyfrom(self)
        target[...] = self.numpy()
        return target

    def _check_same(self, shape, dtype, what: str) -> None:
        if tuple(shape) != self.shape or dtype != self.dtype:
            raise ValueError(
                f"{what}: {list(shape)} {dtype} does not match {list(self.shape)} {self.dtype}")

    # DLPack ------------------------------------------------------------------------------

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        """Export as a DLPack capsule (zero-copy). Work is queued on the legacy default
        stream, so when the consumer names another stream we synchronize first."""
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"cannot export {self} to DLPack device {dl_device} without a copy")
        if copy:
            raise BufferError("ptxforge arrays export without copying (copy=True requested)")
        if stream is not None and stream not in (1, 2) and stream != -1:
            self.device.sync()
        versioned = max_version is not None and tuple(max_version) >= (1, 0)
        return dlpack.to_capsule(self, self.ptr, self.shape, self.dtype,
                                 self.device.device_id, versioned)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (dlpack.KDL_CUDA, self.device.device_id)

    def __repr__(self):
        return f"<NDArray {list(self.shape)} {self.dtype} on {self.device}>"


def empty(shape, dtype: str = "float32", device: Device | None = None) -> NDArray:
    """An uninitialized GPU array."""
    device = device or cuda(0)
    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"negative extent in shape {list(shape)}")
    dt.check(dtype)
    n = 1
    for s in shape:
        n *= s
    nbytes = n * dt.nbytes(dtype)
    device.activate()
    ptr = int(call("cuMemAlloc", max(nbytes, 1)))
    arr = NDArray(ptr, shape, dtype, device)
    weakref.finalize(arr, _free, device, ptr)
    return arr


def array(data, device: Device | None = None, dtype: str | None = None) -> NDArray:
    """A GPU copy of ``data`` (a numpy array or anything numpy converts). ``dtype`` defaults
    to the data's (``ml_dtypes.bfloat16`` arrays give bfloat16); ``dtype="bfloat16"``
    with float data rounds it, with uint16 data takes it as bit patterns."""
    src = np.asarray(data)
    dtype = dtype or dt.from_numpy(src.dtype)
    out = empty(src.shape, dtype, device)
    return out.copyfrom(src)


from_numpy = array


class _Borrowed:
    """Keeps a DLPack producer's memory alive; releases it when the last user is gone."""

    def __init__(self, imported: dlpack.ImportedTensor):
        self.imported = imported
        weakref.finalize(self, imported.release)


def from_dlpack(obj) -> NDArray:
    """Wrap a GPU tensor of another library (``torch.Tensor``, CuPy, ...) without copying."""
    if isinstance(obj, NDArray):
        return obj
    imported = dlpack.from_capsule_source(obj)
    try:
        device = cuda(imported.device_id)
    except Exception:
        imported.release()
        raise
    return NDArray(imported.data, imported.shape, imported.dtype, device, _Borrowed(imported))
