"""Facts about the NVPTX target: triple, data layout, address spaces, intrinsics, sm table.

Every other module of the backend takes these from here, so a new LLVM or CUDA release is
absorbed in one place. The values were read off LLVM 22 (llvmlite 0.50) and CUDA 13:

* LLVM 22 marks kernels with the ``ptx_kernel`` calling convention (the old
  ``!nvvm.annotations`` "kernel" entry is gone) and takes launch bounds as the function
  attribute ``"nvvm.maxntid"="x,y,z"``, which the PTX printer turns into ``.maxntid``.
* ``llvm.nvvm.barrier0`` is still parsed but auto-upgraded to
  ``llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)``; we emit the new name directly.
* NVPTX lowers ``llvm.sqrt``, ``llvm.fma``, ``llvm.fabs``, ``llvm.floor``/``ceil``/``rint``,
  ``llvm.minimum``/``maximum`` and ``llvm.exp2`` (to ``ex2.approx``) natively, but has no
  libcall for ``llvm.exp``, ``llvm.log`` and friends ("no libcall available for fexp"), and
  lowers ``llvm.sin``/``cos``/``tanh`` only under ``afn`` to the approximate instructions.
  Transcendentals therefore come from :mod:`.mathlib`, written in plain LLVM IR.
* The data layout has no alloca address space: ``alloca`` lives in the generic space and the
  backend moves it to ``.local`` itself.
"""

from __future__ import annotations

from dataclasses import dataclass

TRIPLE = "nvptx64-nvidia-cuda"
"""The LLVM target triple of 64-bit CUDA."""

DATA_LAYOUT = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
"""LLVM 22's data layout for ``nvptx64-nvidia-cuda`` (what the target machine reports)."""

# address spaces ------------------------------------------------------------------------

ADDRSPACE_GENERIC = 0
ADDRSPACE_GLOBAL = 1
ADDRSPACE_SHARED = 3
ADDRSPACE_CONST = 4
ADDRSPACE_LOCAL = 5

SCOPE_ADDRSPACE = {"global": ADDRSPACE_GLOBAL, "shared": ADDRSPACE_SHARED,
                   "local": ADDRSPACE_GENERIC}
"""Address space of the pointer codegen uses for a buffer of each IR scope.

Local buffers are ``alloca`` s, which the data layout puts in the generic space; NVPTX's
alloca lowering moves them to local memory (or SROA promotes them to registers).
"""

# kernels -------------------------------------------------------------------------------

KERNEL_CALLING_CONV = "ptx_kernel"
MAXNTID_ATTRIBUTE = "nvvm.maxntid"
MINCTASM_ATTRIBUTE = "nvvm.minctasm"

MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_DIM = (1024, 1024, 64)
MAX_GRID_DIM = (2**31 - 1, 65535, 65535)
MAX_STATIC_SHARED_BYTES = 48 * 1024
"""Largest ``.shared`` array a kernel may declare statically; more needs dynamic shared
memory and an opt-in through ``cuFuncSetAttribute``."""

PARAM_ALIGN = 16
"""Alignment promised on every buffer parameter (the runtime checks pointers against it)."""

# intrinsics ----------------------------------------------------------------------------

SREG_INTRINSICS = {
    "threadIdx.x": "llvm.nvvm.read.ptx.sreg.tid.x",
    "threadIdx.y": "llvm.nvvm.read.ptx.sreg.tid.y",
    "threadIdx.z": "llvm.nvvm.read.ptx.sreg.tid.z",
    "blockIdx.x": "llvm.nvvm.read.ptx.sreg.ctaid.x",
    "blockIdx.y": "llvm.nvvm.read.ptx.sreg.ctaid.y",
    "blockIdx.z": "llvm.nvvm.read.ptx.sreg.ctaid.z",
}
"""Special-register reads for each hardware index (all ``i32 ()``)."""

BARRIER_INTRINSIC = "llvm.nvvm.barrier.cta.sync.aligned.all"
"""``__syncthreads()`` (``bar.sync 0``); takes the barrier id as ``i32``."""


CP_ASYNC_MIN_CAPABILITY = (8, 0)
"""cp.async exists from sm_80 (Ampere) on."""


def cp_async_intrinsic(nbytes: int, zero_fill: bool) -> str:
    """The NVVM intrinsic of a cp.async of ``nbytes`` (4, 8, 16) from global to shared:
    ``.cg`` (L2 only) for 16 bytes, ``.ca`` otherwise; ``.s`` takes the src-size operand
    (bytes read, the rest zero-filled)."""
    kind = "cg" if nbytes == 16 else "ca"
    return f"llvm.nvvm.cp.async.{kind}.shared.global.{nbytes}" + (".s" if zero_fill else "")


CP_ASYNC_COMMIT_INTRINSIC = "llvm.nvvm.cp.async.commit.group"
"""``cp.async.commit_group`` (``void ()``)."""

CP_ASYNC_WAIT_INTRINSIC = "llvm.nvvm.cp.async.wait.group"
"""``cp.async.wait_group N`` (``void (i32 immarg)``)."""


def thread_tag_axis(tag: str) -> tuple[str, int]:
    """``"threadIdx.y"`` -> ``("block", 1)``; ``"blockIdx.z"`` -> ``("grid", 2)``."""
    kind, axis = tag.split(".")
    return ("block" if kind == "threadIdx" else "grid"), "xyz".index(axis)


# types ---------------------------------------------------------------------------------

LLVM_TYPES = {
    "bool": "i1",
    "int8": "i8",
    "uint8": "i8",
    "int16": "i16",
    "uint16": "i16",
    "int32": "i32",
    "uint32": "i32",
    "int64": "i64",
    "uint64": "i64",
    "float16": "half",
    "bfloat16": "bfloat",
    "float32": "float",
    "float64": "double",
}
"""LLVM register type of each IR dtype (bool is ``i1`` in registers, ``i8`` in memory)."""

STORAGE_TYPES = dict(LLVM_TYPES, bool="i8")
"""LLVM type of each IR dtype when stored in memory."""

INTRINSIC_SUFFIX = {"i1": "i1", "i8": "i8", "i16": "i16", "i32": "i32", "i64": "i64",
                    "half": "f16", "bfloat": "bf16", "float": "f32", "double": "f64"}
"""Type suffix of overloaded intrinsics (``llvm.fabs.f32``, ``llvm.smax.i32``)."""


# devices -------------------------------------------------------------------------------


@dataclass(frozen=True)
class SMInfo:
    """One GPU architecture: its sm name, the PTX ISA version LLVM 22 emits for it, and the
    most shared memory one block may use (bytes, with the dynamic opt-in)."""

    sm: str
    capability: tuple[int, int]
    ptx_version: tuple[int, int]
    max_shared_per_block: int
    name: str


SM_TABLE = {
    info.sm: info
    for info in (
        SMInfo("sm_75", (7, 5), (6, 3), 64 * 1024, "Turing (T4, RTX 20xx)"),
        SMInfo("sm_80", (8, 0), (7, 0), 163 * 1024, "Ampere (A100)"),
        SMInfo("sm_86", (8, 6), (7, 1), 99 * 1024, "Ampere (A10, RTX 30xx)"),
        SMInfo("sm_87", (8, 7), (7, 4), 163 * 1024, "Ampere (Orin)"),
        SMInfo("sm_89", (8, 9), (7, 8), 99 * 1024, "Ada (L4, L40, RTX 40xx)"),
        SMInfo("sm_90", (9, 0), (7, 8), 227 * 1024, "Hopper (H100, H200)"),
        SMInfo("sm_90a", (9, 0), (8, 0), 227 * 1024, "Hopper with wgmma/setmaxnreg"),
        SMInfo("sm_100", (10, 0), (8, 6), 227 * 1024, "Blackwell (B200)"),
        SMInfo("sm_103", (10, 3), (8, 8), 227 * 1024, "Blackwell (B300)"),
        SMInfo("sm_120", (12, 0), (8, 7), 99 * 1024, "Blackwell (RTX 50xx)"),
        SMInfo("sm_121", (12, 1), (8, 8), 99 * 1024, "Blackwell (DGX Spark)"),
    )
}
"""Architectures both LLVM 22 and CUDA 13's ptxas accept (ptxas 13 dropped sm_70 and older)."""


class TargetError(ValueError):
    """An sm name or compute capability this backend cannot compile for."""


def sm_info(sm: str) -> SMInfo:
    """The table entry of ``sm`` (``"sm_90"``), or a :class:`TargetError` listing the known."""
    try:
        return SM_TABLE[sm]
    except KeyError:
        raise TargetError(
            f"unknown target {sm!r}; known: {', '.join(SM_TABLE)}"
        ) from None


def sm_for_capability(major: int, minor: int) -> str:
    """The sm name for a device's compute capability (9.0 -> ``"sm_90"``)."""
    sm = f"sm_{major}{minor}"
    if sm not in SM_TABLE:
        raise TargetError(
            f"compute capability {major}.{minor} ({sm}) is not supported; "
            f"supported: {', '.join(s for s in SM_TABLE if not s.endswith('a'))}"
        )
    return sm


def ptx_version_text(sm: str) -> str:
    """The ``.version`` LLVM 22 writes for ``sm`` by default (``"7.8"`` for sm_90)."""
    major, minor = sm_info(sm).ptx_version
    return f"{major}.{minor}"
