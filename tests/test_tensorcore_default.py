"""Tensor cores in the default schedules of dense, matmul and batch_matmul: which stages
take them (dtypes, precision, target, shapes), the tiles chosen, fused epilogues (bias,
activation, residual add, the cast to a 16-bit output), results on the simulator against
numpy, and a mixed-precision BERT layer built through the graph layer."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import graph, ops, te
from ptxforge.backend_ptx import compile_module
from ptxforge.ir import dtype as dt
from ptxforge.ops.schedules import default_schedule
from ptxforge.ops.schedules.tensorcore import TensorCoreConfig
from ptxforge.ops.schedules.tensorcore_gemm import (
    choose_gemm_config,
    gemm_form,
    schedule_gemm_tensorcore,
)
from ptxforge.passes.schedule.common import ScheduleError

RNG = np.random.default_rng(14)
SM90 = "cuda -arch=sm_90"


def _rand(shape, dtype):
    x = RNG.uniform(-1, 1, shape).astype(np.float32)
    return dt.to_bfloat16(x) if dtype == "bfloat16" else x.astype(dtype)


def _f64(x, dtype):
    return (dt.from_bfloat16(x) if dtype == "bfloat16" else x).astype(np.float64)


def _uses_tensor_cores(s) -> bool:
    return "tensorize" in str(s.pipeline)


def _run(out, args, target=SM90, dtype="float16"):
    """Build ``out`` with the default schedule on the simulator, run it on random inputs;
    returns (schedule, inputs as float64, output as float64)."""
    s = default_schedule(out, target)
    mod = ptxforge.build(s, args + [out], target="sim")
    vals = [_rand(a.shape, a.dtype) for a in args]
    res = (dt.to_bfloat16(np.full(out.shape, np.nan, np.float32)) if out.dtype == "bfloat16"
           else np.full(out.shape, np.nan, out.dtype))
    mod(*vals, res)
    return s, [_f64(v, a.dtype) for v, a in zip(vals, args)], _f64(res, out.dtype)


def _rel(got, want) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def _dense_net(M, N, K, dtype="float16", bias=True, act=True, residual=False):
    x = te.placeholder((M, K), dtype, name="x")
    w = te.placeholder((N, K), dtype, name="w")
    args = [x, w]
    b = None
    if bias:
        b = te.placeholder((N,), dtype, name="b")
        args.append(b)
    y = ops.nn.dense(x, w, b)
    if act:
        y = ops.nn.relu(y)
    if residual:
        r = te.placeholder((M, N), dtype, name="r")
        args.append(r)
        y = ops.add(y, r)
    return y, args


def _dense_ref(vals, bias, act, residual):
    want = vals[0] @ vals[1].T
    k = 2
    if bias:
        want = want + vals[k]
        k += 1
    if act:
        want = np.maximum(want, 0)
    if residual:
        want = want + vals[k]
    return want


@pytest.mark.parametrize("M,N,K,bias,act,residual", [
    (64, 64, 64, True, True, False),     # epilogue through shared memory
    (32, 48, 96, False, False, False),   # the cast to fp16 only: straight from fragments
    (48, 32, 64, True, True, True),      # residual add
])
def test_dense_fp16_runs_on_tensor_cores_with_its_epilogue(M, N, K, bias, act, residual):
    y, args = _dense_net(M, N, K, bias=bias, act=act, residual=residual)
    s, vals, got = _run(y, args)
    assert _uses_tensor_cores(s)
    assert _rel(got, _dense_ref(vals, bias, act, residual)) < 2e-3  # fp16 output rounding


@pytest.mark.parametrize("M,N,K", [(1, 64, 64), (49, 64, 64), (64, 40, 64), (64, 64, 24)])
def test_awkward_shapes_stay_on_cuda_cores_and_are_correct(M, N, K):
    # the rule: M, N multiples of 16 and K of the mma's k; otherwise CUDA cores
    y, args = _dense_net(M, N, K)
    mm = y.op.input_tensors[0].op.input_tensors[0].op
    assert mm.tag == "dense" and gemm_form(mm, SM90) is None
    s, vals, got = _run(y, args)
    assert not _uses_tensor_cores(s)
    assert _rel(got, _dense_ref(vals, True, True, False)) < 2e-3


@pytest.mark.parametrize("tb,xb,dtype,out_dtype", [
    (True, 2, "float16", None),          # Q x K^T
    (False, 2, "float16", None),         # attention x V: B as [k, n] (ldmatrix .trans)
    (True, 1, "float16", "float32"),     # a broadcast batch of A, float32 output
    (True, 2, "bfloat16", None),
])
def test_batch_matmul_on_tensor_cores(tb, xb, dtype, out_dtype):
    B, M, N, K = 2, 32, 16, 48
    x = te.placeholder((xb, M, K), dtype, name="x")
    y = te.placeholder((B, N, K) if tb else (B, K, N), dtype, name="y")
    z = ops.nn.batch_matmul(x, y, transpose_b=tb, out_dtype=out_dtype)
    s, (xv, yv), got = _run(z, [x, y])
    assert _uses_tensor_cores(s)
    want = xv @ (yv.transpose(0, 2, 1) if tb else yv)
    tol = {"float16": 2e-3, "bfloat16": 8e-3, "float32": 1e-6}[z.dtype]
    assert _rel(got, want) < tol


def test_tf32_only_when_asked_and_float32_elsewhere():
    x = te.placeholder((32, 64), "float32", name="x")
    w = te.placeholder((48, 64), "float32", name="w")
    plain = ops.nn.dense(x, w)
    assert gemm_form(plain.op, SM90) is None  # float32 stays float32: never silently TF32
    assert not _uses_tensor_cores(default_schedule(plain, SM90))
    y = ops.nn.dense(x, w, precision="tf32")
    s, (xv, wv), got = _run(y, [x, w])
    assert _uses_tensor_cores(s)
    want = dt.round_to(xv.astype(np.float32), "tf32").astype(np.float64) @ dt.round_to(
        wv.astype(np.float32), "tf32").astype(np.float64).T
    assert _rel(got, want) < 1e-6  # the same products as the CUDA-core TF32 path


def test_transposed_a_and_fp16_accumulation_stay_on_cuda_cores():
    a = te.placeholder((64, 32), "float16", name="a")  # [K, M]
    b = te.placeholder((64, 48), "float16", name="b")
    mm = ops.nn.matmul(a, b, transpose_a=True)
    assert gemm_form(mm.op.input_tensors[0].op, SM90) is None
    s, (av, bv), got = _run(mm, [a, b])
    assert not _uses_tensor_cores(s) and _rel(got, av.T @ bv) < 2e-3


def test_tiles_fill_the_sms_for_small_m():
    for M, want_blocks in ((16, 132), (128, 132), (4096, 132)):
        x = te.placeholder((M, 4096), "float16")
        w = te.placeholder((4096, 4096), "float16")
        mm = ops.nn.dense(x, w).op.input_tensors[0].op
        form = gemm_form(mm, SM90)
        cfg = choose_gemm_config(form, SM90)
        blocks = (M // cfg.block_m) * (4096 // cfg.block_n)
        assert blocks >= want_blocks, (M, cfg)
        if M == 4096:
            assert (cfg.block_m, cfg.block_n, cfg.stages) == (128, 128, 2) and cfg.async_copy


def test_configs_that_do_not_fit_are_rejected_with_the_rule():
    x = te.placeholder((64, 64), "float16")
    w = te.placeholder((64, 64), "float16")
    y = ops.nn.dense(x, w)
    mm = y.op.input_tensors[0].op
    s = te.create_schedule(y.op)
    with pytest.raises(ScheduleError, match="block_m 48 divides M 64"):
        schedule_gemm_tensorcore(s, mm, y.op, TensorCoreConfig(48, 64, 32, 1, 2), SM90)


def test_epilogue_kernel_assembles_for_sm80_and_sm90():
    y, args = _dense_net(128, 128, 64)
    for arch in ("sm_80", "sm_90"):
        s = default_schedule(y, f"cuda -arch={arch}")
        ptx = compile_module(ptxforge.lower(s, args + [y]), arch).get_source("ptx")
        assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx
        assert "cp.async" in ptx and "ld.local" not in ptx


def test_mixed_precision_bert_layer_uses_tensor_cores():
    from ptxforge.graph.zoo.bert import bert_layer

    out, params, shape = bert_layer(1, "float32", seq_len=16, hidden=32, heads=2,
                                    intermediate=64)
    net = graph.function(out)
    x = RNG.standard_normal(shape).astype(np.float32)
    ref = graph.evaluate(net, {"data": x}, params)
    lib = graph.build(net, "sim", params, precision="float16")
    products = [f for f in lib.functions.values()
                if any(c.op in ("nn.dense", "nn.batch_matmul") for c in f.func.func.calls())]
    assert len(products) >= 6 and all("tensorize" in f.pipeline_text for f in products)
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(data=x)
    m.run()
    got = m.get_output(0).numpy()
    np.testing.assert_allclose(got, ref, atol=1e-2 * np.abs(ref).max(), rtol=0)
