"""Facts about LLVM's NVPTX target: triple, data layout, address spaces, intrinsics.

What the GPU is (its architecture, PTX version, launch and shared-memory limits, features
such as cp.async) comes from :mod:`ptxforge.target`; this module holds only what is
LLVM's.

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


def cp_async_intrinsic(nbytes: int, zero_fill: bool) -> str:
    """The NVVM intrinsic of a cp.async of ``nbytes`` (4, 8, 16) from global to shared:
    ``.cg`` (L2 only) for 16 bytes, ``.ca`` otherwise; ``.s`` takes the src-size operand
    (bytes read, the rest zero-filled)."""
    kind = "cg" if nbytes == 16 else "ca"
    return f"llvm.nvvm.cp.async.{kind}.shared.global.{nbytes}" + (".s" if zero_fill else "")


EX2_APPROX_FTZ_F32 = "llvm.nvvm.ex2.approx.ftz.f"
"""``ex2.approx.ftz.f32`` (``float (float)``): 2^x in one MUFU.EX2, within 2 ulp, subnormal
inputs and results flushed to zero (FlashAttention's softmax exponent). ``llvm.exp2.f32``
lowers to ``ex2.approx.f32`` without ``.ftz``, which adds the subnormal handling."""

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
    "float8_e4m3fn": "i8",
    "float8_e5m2": "i8",
    "float16": "half",
    "bfloat16": "bfloat",
    "float32": "float",
    "float64": "double",
}
"""LLVM register type of each IR dtype (bool is ``i1`` in registers, ``i8`` in memory; fp8
values are their bit patterns in ``i8``: LLVM has no fp8 type, and PTX converts them with
``cvt`` on packed pairs, see ``backend_ptx/exprgen.py``)."""

STORAGE_TYPES = dict(LLVM_TYPES, bool="i8")
"""LLVM type of each IR dtype when stored in memory."""

INTRINSIC_SUFFIX = {"i1": "i1", "i8": "i8", "i16": "i16", "i32": "i32", "i64": "i64",
                    "half": "f16", "bfloat": "bf16", "float": "f32", "double": "f64"}
"""Type suffix of overloaded intrinsics (``llvm.fabs.f32``, ``llvm.smax.i32``)."""

SHUFFLE_BFLY = {"i32": "llvm.nvvm.shfl.sync.bfly.i32", "float": "llvm.nvvm.shfl.sync.bfly.f32"}
"""``shfl.sync.bfly.b32`` by register type: ``(member mask, value, lane mask, clamp)``;
16-bit values travel in the low half of an i32."""

FULL_WARP_MASK = 0xFFFFFFFF
"""The member mask naming every lane of a warp."""


def shuffle_clamp(width: int) -> int:
    """The ``c`` operand of ``shfl.sync`` for segments of ``width`` lanes."""
    return ((32 - width) << 8) | 0x1F
