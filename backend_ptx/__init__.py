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

from . import nvptx
from .assemble import AssemblerError, ResourceUsage, find_ptxas, nvjitlink_available
from .cache import KernelCache, default_cache
from .codegen import CodegenError, LaunchInfo, ParamInfo, codegen_kernel
from .compile import assemble, compile_kernel
from .cuda_driver import CudaError, Device, NoGPUError, cuda, device_count
from .dlpack import DLPackError
from .kernel import STAGES, CompiledKernel, CompileError
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
    "codegen_kernel",
    "compile_kernel",
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
