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

__all__ = ["SimDevice", "SimArray", "sim", "cuda", "gpu", "array", "empty", "to_bfloat16",
           "from_bfloat16"]


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
