"""Dynamic shared memory: kernels over the 48 KiB static limit get one dynamic array."""

from __future__ import annotations

import numpy as np
import pytest
from ptxforge import te
from ptxforge.backend_ptx import compile_kernel, find_ptxas
from ptxforge.driver import build, lower
from ptxforge.ir.expr import IRError
from ptxforge.ir.parser import roundtrip_check
from ptxforge.ir.stmt import Alloc, shared_memory, walk


def row_sums(rows: int, cols: int = 128):
    """``B[i] = sum_k A[i, k]``, one block of ``rows`` threads reading all of A through
    shared memory (``rows * cols`` floats of it)."""
    A = te.placeholder((rows, cols), name="A")
    k = te.reduce_axis((0, cols), name="k")
    B = te.compute((rows,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    AA = s.cache_read(A, "shared", [B])
    o, i = s[B].split(s[B].op.axis[0], factor=rows)
    s[B].bind(o, te.thread_axis("blockIdx.x"))
    s[B].bind(i, te.thread_axis("threadIdx.x"))
    s[AA].compute_at(s[B], o)
    return s, [A, B]


def test_64kib_of_shared_memory_is_placed_dynamically_and_runs():
    s, args = row_sums(128)  # 128 x 128 floats: 64 KiB
    module = lower(s, args)
    (k,) = module.kernels()
    assert k.launch.dynamic_shared_bytes == 65536 and shared_memory(k) == (0, 65536)
    (alloc,) = [x for x in walk(k.body) if isinstance(x, Alloc) and x.buffer.scope == "shared"]
    assert alloc.dyn_offset == 0
    assert "shared dynamic(0) {" in str(module) and '"dynamic_shared_bytes": 65536' in str(k)
    roundtrip_check(module)
    a = np.random.default_rng(0).uniform(-1, 1, (128, 128)).astype("float32")
    b = np.zeros(128, "float32")
    build(s, args, target="sim")(a, b)
    np.testing.assert_allclose(b, a.sum(axis=1), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas (CUDA toolkit) is not installed here")
def test_64kib_kernel_assembles_for_sm_90():
    s, args = row_sums(128)
    (k,) = lower(s, args).kernels()
    compiled = compile_kernel(k, "sm_90", cache=False)
    ptx = compiled.get_source("ptx")
    assert ".extern .shared .align 16 .b8 __ptxforge_dyn_smem[];" in ptx
    assert compiled.launch.dynamic_shared_bytes == 65536
    assert compiled.launch.static_shared_bytes == 0
    assert compiled.cubin[:4] == b"\x7fELF"
    assert compiled.resources.shared_bytes == 0  # nothing static


def test_300kib_of_shared_memory_is_rejected():
    s, args = row_sums(600)  # 600 x 128 floats: 300 KiB
    with pytest.raises(IRError, match=r"shared memory per block reaches 307200 bytes with "
                                      r"A.shared; sm_90 allows at most 232448 \(static plus "
                                      r"dynamic, with the opt-in\)"):
        lower(s, args)


@pytest.mark.gpu
def test_64kib_kernel_runs_on_the_gpu():
    from ptxforge.nd import array, cuda, empty

    dev = cuda(0)
    s, args = row_sums(128)
    mod = build(s, args, target="cuda")
    a = np.random.default_rng(1).uniform(-1, 1, (128, 128)).astype("float32")
    A, B = array(a, dev), empty((128,), "float32", dev)
    mod(A, B)
    np.testing.assert_allclose(B.numpy(), a.sum(axis=1), rtol=1e-5, atol=1e-5)
