"""Run the LLVM IR that the NVPTX code generator emits for a one-thread kernel on the host
CPU, through llvmlite's MCJIT: a check of the GPU code's arithmetic (integer division,
wrap-around, conversions, comparisons) without a GPU.

Only kernels that read no thread or block index (the unscheduled form ``ptxforge.lower``
gives: one thread, serial loops) can run this way; address spaces are dropped, so global
pointers become host pointers.
"""

from __future__ import annotations

import ctypes
import re

import llvmlite.binding as llvm
import numpy as np

_ENGINES: list = []  # keep the engines (and their code) alive while the test runs


def _host_text(llvm_ir: str) -> str:
    text = re.sub(r"^target (datalayout|triple) = .*$", "", llvm_ir, flags=re.M)
    text = text.replace("define ptx_kernel ", "define ")
    text = re.sub(r" addrspace\(\d+\)", "", text)
    text = re.sub(r'"target-cpu"="[^"]*"', "", text)
    text = re.sub(r'"target-features"="[^"]*"', "", text)
    if "llvm.nvvm." in text:
        raise ValueError("the kernel calls NVVM intrinsics (thread indices, shuffles, ...); "
                         "only one-thread kernels without them run on the host")
    return text


def run_on_host(llvm_ir: str, name: str, arrays: list[np.ndarray]) -> None:
    """Call kernel ``name`` of ``llvm_ir`` (the generator's ``"llvm"`` stage) with the host
    arrays as its buffer arguments, in parameter order; outputs are written in place."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    mod = llvm.parse_assembly(_host_text(llvm_ir))
    mod.verify()
    target = llvm.Target.from_default_triple().create_target_machine()
    mod.triple = llvm.get_process_triple()
    mod.data_layout = str(target.target_data)
    engine = llvm.create_mcjit_compiler(mod, target)
    engine.finalize_object()
    _ENGINES.append(engine)
    addr = engine.get_function_address(name)
    fn = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * len(arrays))(addr)
    for a in arrays:
        if not a.flags.c_contiguous:
            raise ValueError("host arrays must be C-contiguous")
    fn(*[a.ctypes.data for a in arrays])
