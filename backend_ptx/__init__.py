"""The NVPTX backend: device IR -> LLVM IR -> PTX -> cubin, and the CUDA driver runtime.

Compiling needs no GPU::

    k = compile_kernel(kernel_func, "sm_90")          # CompiledKernel
    print(k.get_source("ptx"), k.resources)           # registers, spills, shared memory
    mod = compile_module(device_module)               # PtxModule: every kernel

Running needs one::

    dev = cuda(0)
    a = array(np.ones(1024, "float32"), dev)
    loaded = mod.load(dev)                            # LoadedModule
    loaded(a, b, c)                                   # runs the host function
    loaded.time_evaluator(number=100)(a, b, c).mean   # seconds

Stages (:data:`STAGES`): ``device_ir``, ``llvm_ir``, ``llvm_opt``, ``ptx``, ``cubin``; each
is kept on the compiled kernel, can be dumped (``dump_dir=``) and replaced (``replace=``).
"""

import importlib

from .assemble import AssemblerError, ResourceUsage, find_ptxas, nvjitlink_available
from .cuda_driver import CudaError, Device, NoGPUError, cuda, device_count
from .dlpack import DLPackError
from .kernel import STAGES, CompiledKernel, CompileError
from .launch import LaunchInfo, ParamInfo
from .module import LoadedKernel, LoadedModule, PtxModule, compile_module
from .ndarray import (
    NDArray,
    array,
    empty,
    from_bfloat16,
    from_dlpack,
    from_numpy,
    to_bfloat16,
)
from .timer import ProfileResult, time_evaluator

# the compiler (LLVM through llvmlite) is imported when first used, so that loading and
# running exported kernels (ptxforge.runtime) needs only the CUDA driver
_COMPILER = {"nvptx": (".nvptx", None), "KernelCache": (".cache", "KernelCache"),
             "default_cache": (".cache", "default_cache"),
             "CodegenError": (".exprgen", "CodegenError"),
             "codegen_kernel": (".codegen", "codegen_kernel"),
             "assemble": (".compile", "assemble"), "compile_kernel": (".compile", "compile_kernel"),
             "assemble_many": (".compile", "assemble_many"),
             "compile_kernels": (".compile", "compile_kernels")}


def __getattr__(name: str):
    if name in _COMPILER:
        module, attr = _COMPILER[name]
        mod = importlib.import_module(module, __name__)
        return mod if attr is None else getattr(mod, attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "STAGES",
    "AssemblerError",
    "CodegenError",
    "CompileError",
    "CompiledKernel",
    "CudaError",
    "DLPackError",
    "Device",
    "KernelCache",
    "LaunchInfo",
    "LoadedKernel",
    "LoadedModule",
    "NDArray",
    "NoGPUError",
    "ParamInfo",
    "ProfileResult",
    "PtxModule",
    "ResourceUsage",
    "array",
    "assemble",
    "assemble_many",
    "codegen_kernel",
    "compile_kernel",
    "compile_kernels",
    "compile_module",
    "cuda",
    "default_cache",
    "device_count",
    "empty",
    "find_ptxas",
    "from_dlpack",
    "from_numpy",
    "to_bfloat16",
    "from_bfloat16",
    "nvjitlink_available",
    "nvptx",
    "time_evaluator",
]
