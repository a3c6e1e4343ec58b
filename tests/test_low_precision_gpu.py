"""On a GPU: float16 and bfloat16 operators, paired half2 kernels and TF32 products match
their float64 references; bfloat16 and float16 arrays cross to numpy and, through DLPack,
to torch and back.

Every test needs an NVIDIA GPU (``gpu`` mark; skipped elsewhere by conftest.py).
"""

from __future__ import annotations

import gc
import zlib

import numpy as np
import ptxforge
import ptxforge.ops as ops
import pytest
from ptxforge import te
from ptxforge.backend_ptx import array, compile_module, cuda, dlpack, empty, from_dlpack
from ptxforge.ir import dtype as dt
from ptxforge.ops import testing as ref
from ptxforge.ops.schedules import default_schedule
from ptxforge.ops.schedules.cases import SMALL, workload

from .test_low_precision import HALF, INTEGER_CASES, TOLERANCE, _vectorized_elementwise, host

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def dev():
    return cuda(0)


def _run(s, tensors, inputs, dev):
    loaded = compile_module(ptxforge.lower(s, tensors)).load(dev)
    out = empty(tensors[-1].shape, tensors[-1].dtype, dev)
    loaded(*[array(x, dev, t.dtype) for x, t in zip(inputs, tensors)], out)
    return out.numpy()


PARAMS = [pytest.param(case, shapes[0], d, id=f"{case}-{d}")
          for case, shapes in SMALL.items() if case not in INTEGER_CASES for d in HALF]


@pytest.mark.parametrize("case,shape,d", PARAMS)
def test_half_operator_on_the_gpu_matches_float64(dev, case, shape, d):
    w = workload(case, dtype=d, **shape)
    inputs = w.random_inputs(np.random.default_rng(zlib.crc32(f"{case}{d}".encode())))
    got = ref.widen(_run(default_schedule(w.output), w.tensors, inputs, dev), w.output.dtype)
    want = w.expected64(inputs)
    if not dt.is_float(w.output.dtype):
        assert np.array_equal(got, want)
        return
    tol = TOLERANCE[d]
    scale = float(np.abs(want).max()) if want.size else 0.0
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(scale, 1e-6))


@pytest.mark.parametrize("d", HALF)
def test_paired_half_kernel_on_the_gpu(dev, d):
    s, args = _vectorized_elementwise(d, 8)
    rng = np.random.default_rng(3)
    A, B = host(rng.uniform(-2, 2, 2048), d), host(rng.uniform(-2, 2, 2048), d)
    got = ref.widen(_run(s, args, [A, B], dev), d)
    a64, b64 = ref.widen(A, d), ref.widen(B, d)
    # fma.rn.{f16,bf16}x2: one rounding of a*b + a
    assert np.array_equal(got, np.asarray(dt.round_to(a64 * b64 + a64, d), np.float64))


def test_tf32_dense_on_the_gpu(dev):
    rng = np.random.default_rng(4)
    a, w = te.placeholder((64, 256), name="a"), te.placeholder((48, 256), name="w")
    A = rng.uniform(-1, 1, (64, 256)).astype(np.float32)
    W = rng.uniform(-1, 1, (48, 256)).astype(np.float32)
    out = ops.nn.dense(a, w, precision="tf32")
    got = _run(default_schedule(out), [a, w, out], [A, W], dev).astype(np.float64)
    want = ref.dense_python(A, W, precision="tf32")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.abs(got - ref.dense_python(A.astype(np.float64), W)).max() > 1e-4


@pytest.mark.parametrize("d", HALF)
def test_half_arrays_copy_to_and_from_numpy(dev, d):
    x = np.linspace(-3, 3, 35).reshape(5, 7)
    a = array(host(x, d), dev)
    assert a.dtype == d and a.nbytes == 70
    assert np.array_equal(ref.widen(a.numpy(), d), np.asarray(dt.round_to(x, d), np.float64))
    b = empty((5, 7), d, dev).copyfrom(x)  # float input rounds to nearest even
    assert np.array_equal(ref.widen(b.numpy(), d), ref.widen(a.numpy(), d))


@pytest.mark.parametrize("d", HALF)
def test_half_dlpack_round_trip_with_torch(dev, d):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    tdtype = torch.float16 if d == "float16" else torch.bfloat16
    # torch -> ptxforge: a kernel reads and writes torch's memory
    ta = torch.randn(2048, device="cuda", dtype=tdtype)
    tb = torch.randn(2048, device="cuda", dtype=tdtype)
    tc = torch.empty(2048, device="cuda", dtype=tdtype)
    A, B, C = from_dlpack(ta), from_dlpack(tb), from_dlpack(tc)
    assert (A.dtype, C.ptr) == (d, tc.data_ptr())
    s, args = _vectorized_elementwise(d, 2)
    loaded = compile_module(ptxforge.lower(s, args)).load(dev)
    loaded(A, B, C)
    dev.sync()
    want = (ta.double() * tb.double() + ta.double()).to(tdtype)  # one rounding (fma)
    assert torch.equal(tc, want)
    # ptxforge -> torch, zero-copy, bits intact
    x = array(host(np.linspace(-1, 1, 64), d), dev)
    before = dlpack.live_exports()
    tx = torch.from_dlpack(x)
    assert tx.dtype == tdtype and tx.data_ptr() == x.ptr
    assert np.array_equal(tx.view(torch.int16).cpu().numpy().view(np.uint16),
                          x.numpy().view(np.uint16))
    del tx
    gc.collect()
    assert dlpack.live_exports() == before
