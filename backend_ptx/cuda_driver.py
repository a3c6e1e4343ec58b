"""The CUDA driver through ``cuda.bindings.driver``: one checked call, devices, contexts.

Every driver call in ptxforge goes through :func:`call`, which raises :class:`CudaError`
naming the driver function and the CUDA error when the result is not ``CUDA_SUCCESS``.
Devices use their primary context (the one the CUDA runtime, and so PyTorch, uses too), so
arrays and modules can be shared with other libraries in the same process.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading

from ..target import ARCHS, Target, arch_for_capability, as_target


class CudaError(RuntimeError):
    """A CUDA driver call failed: ``func_name`` returned ``error_name`` (``message``)."""

    def __init__(self, func_name: str, error_name: str, message: str, code: int = -1):
        self.func_name = func_name
        self.error_name = error_name
        self.message = message
        self.code = code
        super().__init__(f"{func_name} failed: {error_name} ({message})")


class NoGPUError(RuntimeError):
    """No usable NVIDIA GPU: the driver library is missing, or it reports no device."""


_driver_module = None
_init_lock = threading.Lock()
_initialized = False
_init_pid: int | None = None  # the process that called cuInit


def driver():
    """The ``cuda.bindings.driver`` module, or :class:`NoGPUError` if it cannot be used."""
    global _driver_module
    if _driver_module is None:
        try:
            from cuda.bindings import driver as d
        except ImportError as e:
            raise NoGPUError(
                "cuda-python is not installed (pip install cuda-python); it is needed to "
                "run kernels on a GPU") from e
        _driver_module = d
    return _driver_module


def _error_text(d, err) -> tuple[str, str]:
    try:
        e1, name = d.cuGetErrorName(err)
        e2, msg = d.cuGetErrorString(err)
        name = name.decode() if isinstance(name, bytes) else str(name)
        msg = msg.decode() if isinstance(msg, bytes) else str(msg)
        if int(e1) == 0 and int(e2) == 0:
            return name, msg
    except Exception:  # the driver may be unusable while reporting its own failure
        pass
    return getattr(err, "name", f"CUresult {int(err)}"), "no description from the driver"


_bound: dict = {}


def call(func_name: str, *args):
    """Call driver function ``func_name`` and check its result.

    Returns what the binding returns after the error code: nothing, the single value, or a
    tuple of values. Raises :class:`CudaError` on any error code.
    """
    fn = _bound.get(func_name)
    if fn is None:
        fn = _bound[func_name] = getattr(driver(), func_name)
    result = fn(*args)
    if isinstance(result, tuple):
        err = result[0]
        n = len(result)
    else:
        err, n = result, 1
    if err != 0:
        name, msg = _error_text(driver(), err)
        raise CudaError(func_name, name, msg, int(err))
    if n == 1:
        return None
    return result[1] if n == 2 else result[1:]


_EXIT_ERRORS = ("CUDA_ERROR_DEINITIALIZED", "CUDA_ERROR_CONTEXT_IS_DESTROYED")


def release_failed(error: CudaError) -> None:
    """Report a failed release (free, unload) from a finalizer, where raising is useless.

    At interpreter exit the driver may already be torn down, which is expected; anything
    else (typically a context broken by a faulting kernel) becomes one warning."""
    if error.error_name in _EXIT_ERRORS:
        return
    if error.error_name == "CUDA_ERROR_NOT_INITIALIZED" and _init_pid not in (None,
                                                                             os.getpid()):
        # a forked child (a builder or runner worker) dropping arrays or modules it
        # inherited: they belong to the parent's context, which the child cannot touch
        return
    import warnings

    warnings.warn(f"could not release a CUDA resource: {error}", RuntimeWarning, stacklevel=2)


def init() -> None:
    """``cuInit`` once; :class:`NoGPUError` when there is no driver library or no GPU."""
    global _initialized, _init_pid
    if _initialized:
        return
    with _init_lock:
        if _initialized:
            return
        try:
            call("cuInit", 0)
        except NoGPUError:
            raise
        except CudaError as e:
            raise NoGPUError(
                f"the CUDA driver found no usable GPU: cuInit returned {e.error_name} "
                f"({e.message})") from e
        except Exception as e:  # libcuda.so missing: the bindings raise their own loader error
            raise NoGPUError(
                "no NVIDIA driver on this machine (libcuda.so could not be loaded: "
                f"{e}); GPU kernels need an NVIDIA GPU and its driver") from e
        if call("cuDeviceGetCount") == 0:
            raise NoGPUError("the CUDA driver is installed but reports no GPU")
        _initialized = True
        _init_pid = os.getpid()


def device_count() -> int:
    init()
    return int(call("cuDeviceGetCount"))


_ATTRS = {
    "multiprocessor_count": "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT",
    "max_threads_per_block": "CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK",
    "max_shared_memory_per_block": "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK",
    "max_shared_memory_per_block_optin":
        "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
    "max_registers_per_block": "CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK",
    "warp_size": "CU_DEVICE_ATTRIBUTE_WARP_SIZE",
    "l2_cache_size": "CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE",
    "clock_rate_khz": "CU_DEVICE_ATTRIBUTE_CLOCK_RATE",
    "compute_capability_major": "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR",
    "compute_capability_minor": "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR",
}


class Device:
    """One CUDA GPU (``ptxforge.cuda(0)``), using its primary context.

    Get devices through :func:`cuda`, which returns one object per ordinal.
    """

    device_type = "cuda"
    dlpack_device_type = 2  # kDLCUDA

    def __init__(self, device_id: int):
        init()
        n = device_count()
        if not 0 <= device_id < n:
            raise NoGPUError(f"there is no GPU {device_id}; this machine has {n}")
        self.device_id = device_id
        self.handle = call("cuDeviceGet", device_id)
        self._context = None
        self._attrs: dict = {}
        self._lock = threading.Lock()

    @property
    def context(self):
        """The retained primary context (retained on first use, kept for the process)."""
        if self._context is None:
            with self._lock:
                if self._context is None:
                    self._context = call("cuDevicePrimaryCtxRetain", self.handle)
        return self._context

    def activate(self) -> None:
        """Make this device's primary context current in the calling thread."""
        call("cuCtxSetCurrent", self.context)

    def attribute(self, name: str) -> int:
        """A device attribute by its short name (see ``_ATTRS``) or full CU_DEVICE_ATTRIBUTE."""
        if name not in self._attrs:
            d = driver()
            enum = getattr(d.CUdevice_attribute, _ATTRS.get(name, name))
            self._attrs[name] = int(call("cuDeviceGetAttribute", enum, self.handle))
        return self._attrs[name]

    @property
    def name(self) -> str:
        raw = call("cuDeviceGetName", 256, self.handle)
        return raw.split(b"\0", 1)[0].decode() if isinstance(raw, bytes) else str(raw)

    @property
    def compute_capability(self) -> tuple[int, int]:
        return (self.attribute("compute_capability_major"),
                self.attribute("compute_capability_minor"))

    @property
    def sm(self) -> str:
        """The sm name of the device's compute capability (``"sm_90"`` on an H100 or
        H200); cubins for it run here."""
        return arch_for_capability(*self.compute_capability)

    @property
    def target(self) -> Target:
        """This GPU as a :class:`~ptxforge.target.Target`: its architecture (``sm_90a``
        on Hopper, whose every part has wgmma), SM count, launch and shared-memory limits,
        registers and clock as the driver reports them."""
        arch = self.sm + ("a" if self.sm + "a" in ARCHS else "")
        figures = {
            "num_sms": self.multiprocessor_count,
            "max_threads_per_block": self.max_threads_per_block,
            "max_shared_memory_per_block": self.attribute("max_shared_memory_per_block"),
            "registers_per_block": self.attribute("max_registers_per_block"),
            "clock_hz": self.attribute("clock_rate_khz") * 1000,
        }
        opts = " ".join(f"-{k}={v}" for k, v in figures.items())
        return as_target(f"cuda -arch={arch} {opts}")

    @property
    def multiprocessor_count(self) -> int:
        return self.attribute("multiprocessor_count")

    @property
    def max_threads_per_block(self) -> int:
        return self.attribute("max_threads_per_block")

    @property
    def max_shared_memory_per_block(self) -> int:
        """Shared memory a block may use with the dynamic opt-in."""
        return self.attribute("max_shared_memory_per_block_optin")

    @property
    def total_memory(self) -> int:
        return int(call("cuDeviceTotalMem", self.handle))

    def sync(self) -> None:
        """Wait for all work on this device's context."""
        self.activate()
        call("cuCtxSynchronize")

    def __repr__(self):
        return f"cuda({self.device_id})"

    def __eq__(self, other):
        return isinstance(other, Device) and other.device_id == self.device_id

    def __hash__(self):
        return hash(("cuda", self.device_id))


_devices: dict[int, Device] = {}


def cuda(device_id: int = 0) -> Device:
    """The CUDA device ``device_id``; :class:`NoGPUError` where there is none."""
    dev = _devices.get(device_id)
    if dev is None:
        dev = _devices.setdefault(device_id, Device(device_id))
    return dev


@contextlib.contextmanager
def gc_paused():
    """Hold off Python's cyclic garbage collector (a stream capture runs inside): an
    object it collects may free device memory (``cuMemFree`` through an array's
    finalizer) or unload a module, calls that are illegal while a stream is captured and
    invalidate the capture (``CUDA_ERROR_STREAM_CAPTURE_INVALIDATED``) at whatever
    point the collector happens to run."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# tensor maps (TMA) -------------------------------------------------------------------------

_TENSOR_MAP_DTYPES = {
    "float16": "FLOAT16", "bfloat16": "BFLOAT16", "float32": "FLOAT32", "float64": "FLOAT64",
    "int32": "INT32", "uint32": "UINT32", "int64": "INT64", "uint64": "UINT64",
    "uint16": "UINT16", "uint8": "UINT8",
    # a copy moves bits and fills zeros: the unsigned type of the width serves
    "int16": "UINT16", "int8": "UINT8", "float8_e4m3fn": "UINT8", "float8_e5m2": "UINT8",
}
_TENSOR_MAP_CACHE: dict = {}
_TENSOR_MAP_CACHE_LIMIT = 4096


def encode_tensor_map(address: int, dtype: str, shape: tuple, box: tuple,
                      swizzle: str) -> bytes:
    """The 128 bytes of the ``CUtensorMap`` of a compact row-major tensor at device
    ``address`` (``shape`` outermost first) copied in boxes of ``box`` with ``swizzle``
    (``cuTensorMapEncodeTiled``: zeros outside the tensor, L2 promotion of 128 bytes).
    Encoded once per (address, dtype, shape, box, swizzle) and cached: a map holds only
    the address and the geometry, so the same tensor at the same address reuses it."""
    key = (int(address), dtype, tuple(shape), tuple(box), swizzle)
    hit = _TENSOR_MAP_CACHE.get(key)
    if hit is not None:
        return hit
    from ..ir import dtype as dt
    from ..ir.intrin.tma import tensor_map_problem

    problem = tensor_map_problem(dtype, tuple(shape), tuple(box), swizzle)
    if problem:
        raise ValueError(f"tensor map of {list(shape)} {dtype}: {problem}")
    if address % 16:
        raise ValueError(f"tensor map: the tensor's address {address:#x} is not 16-byte "
                         "aligned, as cuTensorMapEncodeTiled requires")
    d = driver()
    esize = dt.nbytes(dtype)
    rank = len(shape)
    dims = [d.cuuint64_t(int(n)) for n in reversed(shape)]
    strides, acc = [], esize
    for n in reversed(shape[1:]):
        acc *= int(n)
        strides.append(d.cuuint64_t(acc))
    boxes = [d.cuuint32_t(int(b)) for b in reversed(box)]
    ones = [d.cuuint32_t(1)] * rank
    sw = {"none": "NONE", "32B": "32B", "64B": "64B", "128B": "128B"}[swizzle]
    tmap = call("cuTensorMapEncodeTiled",
                getattr(d.CUtensorMapDataType,
                        f"CU_TENSOR_MAP_DATA_TYPE_{_TENSOR_MAP_DTYPES[dtype]}"),
                rank, int(address), dims, strides, boxes, ones,
                d.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
                getattr(d.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{sw}"),
                d.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                d.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    import struct

    data = struct.pack("<16Q", *(int(x) for x in tmap.opaque))
    if len(_TENSOR_MAP_CACHE) >= _TENSOR_MAP_CACHE_LIMIT:
        _TENSOR_MAP_CACHE.clear()
    _TENSOR_MAP_CACHE[key] = data
    return data
