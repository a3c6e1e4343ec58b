"""The DLPack capsule protocol with ctypes: share GPU arrays with torch (and others) zero-copy.

Export wraps an array's memory in a ``DLManagedTensor`` (or, when the consumer asks for
DLPack 1.0, a ``DLManagedTensorVersioned``) inside a ``PyCapsule`` named ``"dltensor"``
(``"dltensor_versioned"``). The consumer renames the capsule when it takes ownership and
later calls the tensor's deleter, which drops our reference to the array. A capsule that is
never consumed calls the deleter from its own destructor.

Import takes a capsule from ``obj.__dlpack__``, reads the tensor, renames the capsule to
``"used_dltensor"`` as the protocol requires, and calls the producer's deleter when the
array made from it is freed.
"""

from __future__ import annotations

import ctypes
import threading

KDL_CUDA = 2
KDL_INT, KDL_UINT, KDL_FLOAT, KDL_BFLOAT, KDL_BOOL = 0, 1, 2, 4, 6
FLAG_READ_ONLY = 1

_DTYPE_CODES = {
    "int8": (KDL_INT, 8), "int16": (KDL_INT, 16), "int32": (KDL_INT, 32), "int64": (KDL_INT, 64),
    "uint8": (KDL_UINT, 8), "uint16": (KDL_UINT, 16), "uint32": (KDL_UINT, 32),
    "uint64": (KDL_UINT, 64), "float16": (KDL_FLOAT, 16), "float32": (KDL_FLOAT, 32),
    "float64": (KDL_FLOAT, 64), "bfloat16": (KDL_BFLOAT, 16), "bool": (KDL_BOOL, 8),
}
_CODE_DTYPES = {v: k for k, v in _DTYPE_CODES.items()}
_CODE_DTYPES[(KDL_UINT, 1)] = "bool"  # older producers write bool as 1-bit unsigned


class DLPackError(ValueError):
    """An object that cannot be shared through DLPack (wrong device, layout or dtype)."""


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _DELETER),
]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", _DELETER),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


def dtype_code(dtype: str) -> tuple[int, int]:
    try:
        return _DTYPE_CODES[dtype]
    except KeyError:
        raise DLPackError(f"dtype {dtype} has no DLPack code") from None


# ---------------------------------------------------------------------------------------
# Python C API through ctypes

_api = ctypes.pythonapi
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p,
                                 ctypes.c_void_p)(("PyCapsule_New", _api))
_capsule_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api))
_capsule_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_SetName", _api))
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api))
# raw-pointer variants for the capsule destructor, which must not touch reference counts
_capsule_is_valid_raw = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api))
_capsule_get_pointer_raw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p,
                                             ctypes.c_char_p)(("PyCapsule_GetPointer", _api))

# capsule names must outlive the capsules: module-level constants
_NAME = b"dltensor"
_NAME_VERSIONED = b"dltensor_versioned"
_USED = b"used_dltensor"
_USED_VERSIONED = b"used_dltensor_versioned"

# ---------------------------------------------------------------------------------------
# export

_exports: dict[int, tuple] = {}  # address of the managed struct -> (struct, shape, owner)
_exports_lock = threading.Lock()


@_DELETER
def _export_deleter(managed_ptr):
    with _exports_lock:
        _exports.pop(managed_ptr, None)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule):
    for name in (_NAME, _NAME_VERSIONED):
        if _capsule_is_valid_raw(capsule, name):
            ptr = _capsule_get_pointer_raw(capsule, name)
            _export_deleter(ptr)
            return


def to_capsule(owner, data_ptr: int, shape: tuple, dtype: str, device_id: int,
               versioned: bool = False):
    """A DLPack capsule over ``data_ptr`` (compact row-major) that keeps ``owner`` alive."""
    code, bits = dtype_code(dtype)
    ndim = len(shape)
    shape_arr = (ctypes.c_int64 * max(ndim, 1))(*shape)
    tensor = DLTensor()
    tensor.data = data_ptr
    tensor.device = DLDevice(KDL_CUDA, device_id)
    tensor.ndim = ndim
    tensor.dtype = DLDataType(code, bits, 1)
    tensor.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))
    tensor.strides = None
    tensor.byte_offset = 0
    if versioned:
        managed = DLManagedTensorVersioned()
        managed.version = DLPackVersion(1, 0)
        managed.flags = 0
    else:
        managed = DLManagedTensor()
    managed.dl_tensor = tensor
    managed.manager_ctx = None
    managed.deleter = _export_deleter
    with _exports_lock:
        _exports[ctypes.addressof(managed)] = (managed, shape_arr, owner)
    name = _NAME_VERSIONED if versioned else _NAME
    return _capsule_new(ctypes.addressof(managed), name,
                        ctypes.cast(_capsule_destructor, ctypes.c_void_p))


def live_exports() -> int:
    """How many exported tensors the consumers still hold (for tests and leak checks)."""
    return len(_exports)


# ---------------------------------------------------------------------------------------
# import


class ImportedTensor:
    """What a capsule described; call :meth:`release` when the memory is no longer used."""

    def __init__(self, data: int, shape: tuple, dtype: str, device_id: int, managed_ptr: int,
                 deleter, readonly: bool):
        self.data = data
        self.shape = shape
        self.dtype = dtype
        self.device_id = device_id
        self._managed_ptr = managed_ptr
        self._deleter = deleter
        self.readonly = readonly

    def release(self) -> None:
        if self._managed_ptr is not None:
            ptr, self._managed_ptr = self._managed_ptr, None
            if self._deleter:
                self._deleter(ptr)


def _is_capsule(obj) -> bool:
    return type(obj).__name__ == "PyCapsule"


def from_capsule_source(obj) -> ImportedTensor:
    """Consume ``obj.__dlpack__(...)`` (or a capsule) into an :class:`ImportedTensor`."""
    if _is_capsule(obj):
        capsule = obj
    elif hasattr(obj, "__dlpack__"):
        try:
            capsule = obj.__dlpack__(stream=1, max_version=(1, 0))
        except TypeError:  # producers older than DLPack 1.0 take no max_version
            capsule = obj.__dlpack__(stream=1)
    else:
        raise DLPackError(
            f"{type(obj).__name__} does not support DLPack (no __dlpack__ method)")
    if _capsule_is_valid(capsule, _NAME_VERSIONED):
        ptr = _capsule_get_pointer(capsule, _NAME_VERSIONED)
        managed = DLManagedTensorVersioned.from_address(ptr)
        readonly = bool(managed.flags & FLAG_READ_ONLY)
        used = _USED_VERSIONED
    elif _capsule_is_valid(capsule, _NAME):
        ptr = _capsule_get_pointer(capsule, _NAME)
        managed = DLManagedTensor.from_address(ptr)
        readonly = False
        used = _USED
    else:
        raise DLPackError("the capsule is not an unused DLPack tensor (already consumed?)")
    t = managed.dl_tensor
    if t.device.device_type != KDL_CUDA:
        raise DLPackError(
            f"the tensor lives on DLPack device type {t.device.device_type}, not CUDA (2); "
            "move it to the GPU first")
    if t.dtype.lanes != 1:
        raise DLPackError(f"vector dtypes (lanes={t.dtype.lanes}) are not supported")
    dtype = _CODE_DTYPES.get((t.dtype.code, t.dtype.bits))
    if dtype is None:
        raise DLPackError(f"unsupported DLPack dtype code {t.dtype.code}, bits {t.dtype.bits}")
    shape = tuple(int(t.shape[i]) for i in range(t.ndim))
    if t.strides:
        expect = 1
        for i in reversed(range(t.ndim)):
            if shape[i] != 1 and int(t.strides[i]) != expect:
                raise DLPackError(
                    f"the tensor is not compact row-major (shape {list(shape)}, strides "
                    f"{[int(t.strides[k]) for k in range(t.ndim)]}); pass a contiguous copy")
            expect *= shape[i]
    deleter = managed.deleter if managed.deleter else None
    _capsule_set_name(capsule, used)
    return ImportedTensor(int(t.data or 0) + int(t.byte_offset), shape, dtype,
                          int(t.device.device_id), ptr, deleter, readonly)
