"""A builder may leave the optimized LLVM module out of its kernels: same PTX, own cache
entries."""

from __future__ import annotations

from ptxforge.backend_ptx.cache import KernelCache
from ptxforge.backend_ptx.compile import compile_kernels
from ptxforge.ir import te
from ptxforge.ir.to_ir import to_ir
from ptxforge.passes import PassContext
from ptxforge.passes.lower import lowering_pipeline
from ptxforge.target import as_target

TARGET = "cuda -arch=sm_80"


def _kernels():
    a = te.placeholder((64,), name="A")
    b = te.compute((64,), lambda i: a[i] * 2.0 + 1.0, name="B")
    with as_target(TARGET):
        return list(lowering_pipeline()(to_ir([a, b]), PassContext(verify=False)).kernels())


def test_without_the_optimized_module_the_ptx_is_the_same():
    funcs = _kernels()
    full = compile_kernels(funcs, TARGET, stop_after="ptx", cache=False)
    lean = compile_kernels(funcs, TARGET, stop_after="ptx", cache=False, keep_llvm_opt=False)
    for name, k in full.items():
        assert "llvm_opt" in k.sources
        assert "llvm_opt" not in lean[name].sources
        assert lean[name].sources["ptx"] == k.sources["ptx"]


def test_a_kernel_kept_without_it_is_not_served_to_a_caller_that_wants_it():
    funcs = _kernels()
    cache = KernelCache()
    lean = compile_kernels(funcs, TARGET, stop_after="ptx", cache=cache, keep_llvm_opt=False)
    full = compile_kernels(funcs, TARGET, stop_after="ptx", cache=cache)
    for name, k in full.items():
        assert not k.cache_hit and "llvm_opt" in k.sources
        assert not lean[name].cache_hit
    again = compile_kernels(funcs, TARGET, stop_after="ptx", cache=cache, keep_llvm_opt=False)
    assert all(k.cache_hit for k in again.values())


def test_stopping_after_the_optimized_module_keeps_it():
    funcs = _kernels()
    out = compile_kernels(funcs, TARGET, stop_after="llvm_opt", cache=False,
                          keep_llvm_opt=False)
    assert all("llvm_opt" in k.sources for k in out.values())
