"""Fused element-wise epilogues of the tensor-core products (BERT's bias + residual, GPT-2's
tanh GELU, the erf GELU): the alignment codegen proves for their global accesses (vector
loads and stores where the index proves it, scalar ones where it does not: an odd or
non-multiple-of-4 ``N``), on wgmma (sm_90a) and mma.sync (sm_80); and their results on the
simulator against numpy for odd shapes and split-K."""

from __future__ import annotations

import re

import numpy as np
import pytest

import ptxforge
from ptxforge import ops, te
from ptxforge.backend_ptx.align import access_align, known_multiple
from ptxforge.backend_ptx.compile import compile_kernel
from ptxforge.ir.expr import Bin, IntImm, Var
from ptxforge.ir.te import ComputeOp
from ptxforge.ops.schedules.gemm.knobs import TensorCoreConfig, WgmmaScheduleConfig
from ptxforge.ops.schedules.gemm.schedule import schedule_gemm_tensorcore, schedule_gemm_wgmma
from ptxforge.target import as_target

from .lowp import f64, host

SM90A = "cuda -arch=sm_90a"
SM80 = "cuda -arch=sm_80"
SIM = "sim -arch=sm_90a"
RNG = np.random.default_rng(26)
VECTOR_STORE = re.compile(r"st\.global\.(v2\.b32|v4\.b16|v4\.b32|v2\.b64|b64)\s")
SCALAR_STORE = re.compile(r"st\.global\.b16\s")
VECTOR_LOAD = re.compile(r"ld\.global\.nc\.(v2\.b32|v4\.b16|v4\.b32|b64)\s")
SCALAR_LOAD = re.compile(r"ld\.global\.nc\.b16\s")


# -- the proof -------------------------------------------------------------------------------


def test_known_multiple_follows_the_index_arithmetic():
    i, j, v = Var("i"), Var("j"), Var("v")
    row = Bin("mul", i, IntImm(768))
    col = Bin("mul", Bin("floormod", j, IntImm(32)), IntImm(4))
    base = Bin("add", row, col)
    assert known_multiple(base) == 4
    assert known_multiple(Bin("add", base, v)) == 1  # v unknown
    assert known_multiple(Bin("add", base, v), {v: 0}) == 4
    assert known_multiple(Bin("add", base, v), {v: 2}) == 2
    assert known_multiple(Bin("add", base, v), {v: 3}) == 1
    # a let-bound name stands for its value
    c = Var("c")
    assert known_multiple(Bin("add", c, IntImm(8)), {c: base}) == 4
    # floordiv keeps what the divisor leaves; floormod what both share
    assert known_multiple(Bin("floordiv", Bin("mul", i, IntImm(64)), IntImm(4))) == 16
    assert known_multiple(Bin("floordiv", Bin("mul", i, IntImm(6)), IntImm(4))) == 1
    assert known_multiple(Bin("floormod", Bin("mul", i, IntImm(12)), IntImm(8))) == 4
    assert known_multiple(IntImm(0)) == 0
    # an odd row length proves nothing past the element
    assert known_multiple(Bin("add", Bin("mul", i, IntImm(131)), col)) == 1


def test_access_align_never_exceeds_the_buffer_nor_drops_below_the_element():
    assert access_align(16, 2, 4) == 8
    assert access_align(16, 2, 8) == 16
    assert access_align(16, 2, 64) == 16  # capped by the buffer's own alignment
    assert access_align(16, 2, 3) == 2
    assert access_align(16, 4, 0) == 16  # element 0
    assert access_align(8, 2, 0) == 8
    assert access_align(16, 1, 6) == 2


# -- the kernels -----------------------------------------------------------------------------


def _layer(M, N, K, epilogue):
    """The fp16 layer of ``bench/bench_wgmma_default.py``: ``residual`` (bias, cast,
    residual add: BERT's FFN2), ``gelu_tanh`` (GPT-2's FFN1 chain in fp16), ``gelu16`` (the
    erf GELU in fp16); returns ``(inputs, output, product op)``."""
    def h(v):
        return te.const(v, "float16")

    x = te.placeholder((M, K), "float16", name="x")
    w = te.placeholder((N, K), "float16", name="w")
    b = te.placeholder((N,), "float16", name="b")
    args = [x, w, b]
    z = ops.nn.dense(x, w, b)
    if epilogue == "residual":
        r = te.placeholder((M, N), "float16", name="r")
        args.append(r)
        y = ops.add(z, r)
    elif epilogue == "gelu_tanh":
        cube = ops.cast(ops.power(ops.cast(z, "float32"), 3.0), "float16")
        t = ops.tanh(ops.multiply(ops.add(z, ops.multiply(cube, h(0.044715))),
                                  h(0.7978845608028654)))
        y = ops.multiply(ops.multiply(z, h(0.5)), ops.add(t, h(1.0)))
    else:
        e = ops.erf(ops.multiply(z, h(0.7071067811865476)))
        y = ops.multiply(ops.multiply(z, h(0.5)), ops.add(e, h(1.0)))
    return args, y


def _reference(vals, epilogue):
    z = vals[0] @ vals[1].T + vals[2]
    if epilogue == "residual":
        return z + vals[3]
    if epilogue == "gelu_tanh":
        return 0.5 * z * (1 + np.tanh(0.7978845608028654 * (z + 0.044715 * z ** 3)))
    from math import erf

    return 0.5 * z * (1 + np.vectorize(erf)(z / np.sqrt(2)))


def _schedule(args, y, cfg, target):
    s = te.create_schedule(y.op)
    ops_ = [op for op in s.dag.ops if isinstance(op, ComputeOp)]
    prod = next(op for op in ops_ if op.reduce_axis)
    for op in reversed(ops_):
        if op is not prod and op is not y.op:
            s[op].compute_inline()
    if isinstance(cfg, WgmmaScheduleConfig):
        schedule_gemm_wgmma(s, prod, y.op, cfg, target)
    else:
        schedule_gemm_tensorcore(s, prod, y.op, cfg, target)
    return s


def _ptx(M, N, K, epilogue, cfg, target):
    args, y = _layer(M, N, K, epilogue)
    t = as_target(target)
    with t:
        dev = ptxforge.lower(_schedule(args, y, cfg, t), args + [y])
    kernels = dev.kernels()
    return [compile_kernel(k, t, stop_after="ptx", cache=False).get_source("ptx")
            for k in kernels]


@pytest.mark.parametrize("target,cfg", [
    (SM90A, WgmmaScheduleConfig(128, 1, 2, 0)),
    (SM80, TensorCoreConfig(64, 64, 32, 2, 2, stages=2)),
])
def test_a_residual_epilogue_reads_and_writes_vectors_where_the_rows_allow(target, cfg):
    (ptx,) = _ptx(64, 256, 128, "residual", cfg, target)
    # every global store of the output and load of the residual is 8 bytes (4 halves)
    assert VECTOR_STORE.search(ptx) and not SCALAR_STORE.search(ptx)
    assert VECTOR_LOAD.search(ptx) and not SCALAR_LOAD.search(ptx)


@pytest.mark.parametrize("N", [131, 130])
def test_rows_of_unproven_alignment_keep_scalar_accesses(N):
    # N = 131: odd rows; N = 130: rows 4 bytes apart, so no 8-byte access is proven
    (ptx,) = _ptx(64, N, 128, "residual", WgmmaScheduleConfig(128, 1, 2, 0), SM90A)
    assert SCALAR_STORE.search(ptx) and not VECTOR_STORE.search(ptx)
    assert SCALAR_LOAD.search(ptx) and not VECTOR_LOAD.search(ptx)


def test_gelu_epilogues_in_fp16_take_the_16_bit_math():
    tanh_ptx, = _ptx(64, 128, 128, "gelu_tanh", WgmmaScheduleConfig(128, 1, 2, 0), SM90A)
    erf_ptx, = _ptx(64, 128, 128, "gelu16", WgmmaScheduleConfig(128, 1, 2, 0), SM90A)
    for ptx in (tanh_ptx, erf_ptx):
        assert VECTOR_STORE.search(ptx) and not SCALAR_STORE.search(ptx)
        assert "div.rn.f32" not in ptx and ".approx" not in ptx


# -- the simulator ---------------------------------------------------------------------------


@pytest.mark.parametrize("M,N,K,epilogue,cfg", [
    (64, 128, 128, "residual", (128, 1, 2, 0)),
    (49, 131, 72, "residual", (64, 1, 2, 0)),  # odd N, padded M, N and K
    (64, 130, 128, "gelu_tanh", (64, 1, 2, 0)),
    (30, 72, 200, "gelu16", (64, 1, 2, 0, 2)),  # split-K: the sum kernel runs the epilogue
])
def test_wgmma_epilogues_match_numpy_on_the_simulator(M, N, K, epilogue, cfg):
    args, y = _layer(M, N, K, epilogue)
    s = _schedule(args, y, WgmmaScheduleConfig(*cfg), SIM)
    mod = ptxforge.build(s, args + [y], target=SIM)
    vals = [host(RNG, a.shape, a.dtype) for a in args]
    out = np.full(y.shape, np.nan, y.dtype)
    mod(*vals, out)
    got = f64(out, y.dtype)
    want = _reference([f64(v, a.dtype) for v, a in zip(vals, args)], epilogue)
    np.testing.assert_allclose(got, want, rtol=0, atol=4e-3 * np.abs(want).max())


# -- the GPU ---------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K,epilogue", [
    (1024, 3072, 768, "gelu_tanh"),  # GPT-2's FFN1 at 1,024 tokens
    (4096, 768, 3072, "residual"),  # BERT's FFN2 at batch 8 x 512
    (1024, 3072, 768, "gelu16"),
    (200, 130, 264, "residual"),  # rows of unproven alignment: scalar accesses
])
def test_default_kernels_with_fused_epilogues_on_the_gpu(M, N, K, epilogue):
    from ptxforge.backend_ptx import array, compile_module, cuda, empty
    from ptxforge.ops.schedules import default_schedule

    dev = cuda(0)
    if dev.sm != "sm_90":
        pytest.skip(f"wgmma needs an sm_90 GPU (sm_90a code); this one is {dev.sm}")
    args, y = _layer(M, N, K, epilogue)
    target = as_target(SM90A)
    with target:
        s = default_schedule(y, target)
        loaded = compile_module(ptxforge.lower(s, args + [y]), target).load(dev)
    vals = [host(RNG, a.shape, a.dtype) for a in args]
    out = empty((M, N), y.dtype, dev)
    loaded(*[array(h, dev, a.dtype) for h, a in zip(vals, args)], out)
    want = _reference([f64(h, a.dtype) for h, a in zip(vals, args)], epilogue)
    got = f64(out.numpy(), y.dtype)
    np.testing.assert_allclose(got, want, rtol=0, atol=4e-3 * np.abs(want).max())
