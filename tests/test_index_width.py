"""Index arithmetic is 64-bit where a 32-bit offset could overflow (and stays 32-bit
elsewhere); integer constants are checked against their dtype; integer division by a
constant zero and buffers beyond the GPU's memory are rejected at build."""

from __future__ import annotations

import re

import numpy as np
import ptxforge
import pytest
from ptxforge import te
from ptxforge.ir.expr import IRError

BIG = 2**31 + 8


def _elementwise(n: int, dtype: str):
    a = te.placeholder((n,), dtype=dtype, name="A")
    b = te.compute((n,), lambda i: a[i] + te.const(1, dtype), name="B")
    s = te.create_schedule(b.op)
    xo, xi = s[b].split(s[b].op.axis[0], factor=256)
    s[b].bind(xo, te.thread_axis("blockIdx.x"))
    s[b].bind(xi, te.thread_axis("threadIdx.x"))
    return s, [a, b]


def test_a_tensor_of_more_than_2_31_elements_indexes_in_64_bits():
    s, args = _elementwise(BIG, "int8")
    m = ptxforge.build(s, args, target="cuda")
    llvm = m.get_source("llvm")
    # the tail guard keeps its value (it read 'icmp slt i32 %x, -2147483640' before)
    assert re.search(r"icmp slt i64 %\S+, 2147483656", llvm), llvm
    assert "-2147483640" not in llvm
    assert "getelementptr inbounds i8, ptr addrspace(1) %A, i64" in llvm
    ptx = m.get_source("ptx")
    # the body survives (it was folded to 'ret' before); LLVM may prove the index fits an
    # unsigned 32-bit register, never a signed one
    assert "st.global.b8" in ptx and not re.search(r"setp\.\w+\.s32", ptx), ptx


def test_a_65536_by_65537_tensor_multiplies_its_row_index_in_64_bits():
    a = te.placeholder((65536, 65537), dtype="float16", name="A")
    b = te.compute((65536, 65537), lambda i, j: a[i, j] * te.const(2.0, "float16"), name="B")
    s = te.create_schedule(b.op)
    s[b].bind(s[b].op.axis[0], te.thread_axis("blockIdx.x"))
    jo, ji = s[b].split(s[b].op.axis[1], factor=512)
    s[b].bind(ji, te.thread_axis("threadIdx.x"))
    llvm = ptxforge.build(s, [a, b], target="cuda").get_source("llvm")
    assert re.search(r"mul nsw i64 %\S+, 65537", llvm), llvm
    assert "mul nsw i32" not in llvm


def test_small_kernels_keep_32_bit_indices():
    s, args = _elementwise(4096, "float32")
    llvm = ptxforge.build(s, args, target="cuda").get_source("llvm")
    assert "getelementptr inbounds float, ptr addrspace(1) %A, i32" in llvm
    assert " i64 " not in llvm


def test_64_bit_indices_compute_the_same_on_the_simulator(monkeypatch):
    from ptxforge import backend_sim
    from ptxforge.ir.stmt import Module
    from ptxforge.passes.lower import widen_index as wmod

    s, args = _elementwise(1000, "int32")
    module = ptxforge.lower(s, args)
    # force the widening on a small kernel: both must compute the same
    monkeypatch.setattr(wmod, "needs_64bit", lambda k: True)
    wide = Module([wmod.widen_index(f) for f in module.functions.values()], module.attrs)
    assert "int64" in str(wide) and "int64" not in str(module)
    x = np.arange(1000, dtype="int32") * 3 - 7
    for mod in (module, wide):
        out = np.zeros(1000, "int32")
        backend_sim.run(mod, [x, out])
        np.testing.assert_array_equal(out, x + 1)


def test_integer_constant_outside_its_dtype_is_an_error():
    a = te.placeholder((8,), dtype="int32", name="A")
    with pytest.raises(IRError, match="does not fit int32"):
        te.compute((8,), lambda i: a[i] + 2**40, name="B")
    b = te.compute((8,), lambda i: te.cast("int64", a[i]) + 2**40, name="B")
    assert b.dtype == "int64"


@pytest.mark.parametrize("op", ["floordiv", "floormod"])
def test_integer_division_by_constant_zero_is_an_error(op):
    a = te.placeholder((8,), dtype="int32", name="A")
    fn = (lambda i: a[i] // 0) if op == "floordiv" else (lambda i: a[i] % 0)
    b = te.compute((8,), fn, name="B")
    s = te.create_schedule(b.op)
    with pytest.raises(IRError, match=f"integer {op} by zero"):
        ptxforge.build(s, [a, b], target="sim")


def test_buffers_beyond_the_gpu_memory_are_rejected():
    s, args = _elementwise(2**40, "float32")  # 4 TB each, 8 TB in all
    with pytest.raises(IRError, match="global memory"):
        ptxforge.build(s, args, target="sim")


@pytest.mark.gpu
def test_more_than_2_31_elements_on_the_gpu():
    s, args = _elementwise(BIG, "int8")
    m = ptxforge.build(s, args, target="cuda")
    dev = ptxforge.cuda(0)
    host = (np.arange(BIG, dtype=np.int64) % 97).astype(np.int8)
    a = ptxforge.nd.array(host, dev)
    b = ptxforge.nd.array(np.zeros(BIG, np.int8), dev)
    m(a, b)
    out = b.numpy()
    np.testing.assert_array_equal(out[-4096:], host[-4096:] + 1)
    np.testing.assert_array_equal(out[2**31 - 8: 2**31 + 8], host[2**31 - 8: 2**31 + 8] + 1)
    step = 1 << 20
    np.testing.assert_array_equal(out[::step], host[::step] + 1)
