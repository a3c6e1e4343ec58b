"""Split-K in the tensor-core GEMM schedule (dense, matmul, batch_matmul): the reduction
in parts on blockIdx.z computing float32 partial sums, a second kernel adding them up with
the fused epilogue, checked on the simulator against float64 numpy; its rules; and the
default chooser's picks on BERT-base's dense layers at batch 1."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import ops, te
from ptxforge.backend_ptx import compile_module, find_ptxas
from ptxforge.ir import dtype as dt
from ptxforge.ops.schedules import default_schedule
from ptxforge.ops.schedules.gemm.chooser import choose_gemm_config
from ptxforge.ops.schedules.gemm.estimate import gemm_time
from ptxforge.ops.schedules.gemm.forms import gemm_form
from ptxforge.ops.schedules.gemm.knobs import TensorCoreConfig
from ptxforge.ops.schedules.gemm.pieces import SPLIT_SUM_THREADS
from ptxforge.ops.schedules.gemm.rules import check_gemm_config
from ptxforge.ops.schedules.gemm.schedule import schedule_gemm_tensorcore
from ptxforge.passes.schedule.common import ScheduleError

from .lowp import run_sim

RNG = np.random.default_rng(21)
SM90 = "cuda -arch=sm_90"
TOL = {"float16": 2e-3, "bfloat16": 8e-3, "float32": 1e-5}


def _schedule(out, cfg):
    """The tensor-core GEMM schedule of ``out``'s product with ``cfg``, every element-wise
    stage between the product and ``out`` inlined (as a network's fused epilogue)."""
    from ptxforge.ir.te import ComputeOp

    s = te.create_schedule(out.op)
    mm, stack, seen = None, [out.op], set()
    while stack:
        op = stack.pop()
        if id(op) in seen or not isinstance(op, ComputeOp):
            continue
        seen.add(id(op))
        if op.reduce_axis:
            mm = op
            continue
        if op is not out.op:
            s[op].compute_inline()
        stack.extend(t.op for t in op.input_tensors)
    epilogue = None if out.op is mm else out.op
    schedule_gemm_tensorcore(s, mm, epilogue, cfg, SM90)
    return s


def _run(s, args, out):
    return run_sim(s, args, out, RNG)


def _rel(got, want) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def _gelu(y):
    """A GELU-like element-wise chain (erf form) over ``y``."""
    half = te.const(0.5, y.dtype)
    return te.compute(y.shape, lambda i, j: half * y[i, j] * (
        te.const(1, y.dtype) + te.erf(y[i, j] * te.const(0.7071067811865476, y.dtype))),
        name="T_gelu")


def _erf(x):
    from math import erf

    return np.vectorize(erf)(x)


def _grid(mod):
    """The launch grids of the module's kernels, in order."""
    return [tuple(k.attrs.launch.grid) for k in mod.device_module.kernels()]


@pytest.mark.parametrize("M,N,K,dtype,epilogue,split,cfg", [
    (32, 48, 256, "float16", "bias_gelu", 4,
     TensorCoreConfig(16, 16, 32, 1, 2, vec=8, stages=2, async_copy=True)),
    (32, 32, 128, "float16", "residual_cast", 2,
     TensorCoreConfig(32, 16, 32, 2, 1, vec=8, stages=2, async_copy=True)),
    (49, 40, 200, "float16", "bias_gelu", 3,     # M, N and K padded (K to 3 x 3 x 32)
     TensorCoreConfig(16, 16, 32, 1, 2, vec=8, stages=3, async_copy=True)),
    (32, 32, 128, "bfloat16", "bias", 2,
     TensorCoreConfig(16, 32, 32, 1, 2, vec=8, stages=2, async_copy=True)),
    (16, 24, 64, "float32", "bias", 2,           # TF32, fragments from ldmatrix (.x2 of B)
     TensorCoreConfig(16, 16, 16, 1, 2, vec=4, stages=2, async_copy=True, tf32=True)),
    (20, 40, 72, "float32", "bias", 3,           # TF32 padded, ldmatrix .x4 of B
     TensorCoreConfig(16, 32, 16, 1, 2, vec=4, stages=2, async_copy=True, tf32=True)),
    (16, 24, 64, "float32", "bias", 2,           # TF32, fragments loaded lane by lane
     TensorCoreConfig(16, 16, 16, 1, 2, vec=4, stages=2, async_copy=True, frag_load="load",
                      tf32=True)),
    (16, 32, 96, "float16", "", 3,               # no epilogue but the cast
     TensorCoreConfig(16, 16, 32, 1, 2, vec=8, stages=1)),
], ids=["bias_gelu_split4", "residual_cast_split2", "padded_split3", "bf16_split2",
        "tf32_split2", "tf32_padded_x4_split3", "tf32_lane_loads_split2", "cast_only_split3"])
def test_split_k_dense_sums_parts_in_a_second_kernel(M, N, K, dtype, epilogue, split, cfg):
    from dataclasses import replace

    tf32 = dtype == "float32"
    x = te.placeholder((M, K), dtype, name="x")
    w = te.placeholder((N, K), dtype, name="w")
    args = [x, w]
    if epilogue == "residual_cast":  # float32 sums + float32 residual, then cast to fp16
        y = ops.nn.dense(x, w, out_dtype="float32")
        r = te.placeholder((M, N), "float32", name="r")
        args.append(r)
        y = ops.cast(ops.add(y, r), "float16")
    else:
        b = None
        if "bias" in epilogue:
            b = te.placeholder((N,), dtype, name="b")
            args.append(b)
        y = ops.nn.dense(x, w, b, precision="tf32" if tf32 else None)
        if "gelu" in epilogue:
            y = _gelu(y)
    s = _schedule(y, replace(cfg, split_k=split))
    assert "rfactor" in str(s.pipeline)
    if tf32:  # the fragments come the way the config asks
        want_a = "ldmatrix_a_x4_tf32" if cfg.frag_load == "ldmatrix" else "load_a_tf32"
        assert want_a in str(s.pipeline)
    mod, vals, got = _run(s, args, y)
    product, total = _grid(mod)
    Mp, Np = -(-M // cfg.block_m) * cfg.block_m, -(-N // cfg.block_n) * cfg.block_n
    assert product == (Np // cfg.block_n, Mp // cfg.block_m, split)
    assert total == (-(-M * N // SPLIT_SUM_THREADS), 1, 1)
    xv, wv = vals[0], vals[1]
    if tf32:
        xv, wv = (dt.round_to(v.astype(np.float32), "tf32").astype(np.float64)
                  for v in (xv, wv))
    want = xv @ wv.T
    if len(vals) > 2:
        want = want + vals[2]
    if "gelu" in epilogue:
        want = 0.5 * want * (1 + _erf(want / np.sqrt(2)))
    tol = 1e-6 if tf32 else (6e-3 if "gelu" in epilogue else TOL[dtype])
    assert _rel(got, want) < tol


@pytest.mark.parametrize("tb", [True, False], ids=["b_nk", "b_kn"])
def test_split_k_batch_matmul_puts_batch_and_parts_on_blockidx_z(tb):
    B, M, N, K, split = 2, 32, 16, 96, 3
    x = te.placeholder((B, M, K), "float16", name="x")
    y = te.placeholder((B, N, K) if tb else (B, K, N), "float16", name="y")
    z = ops.nn.batch_matmul(x, y, transpose_b=tb)
    cfg = TensorCoreConfig(16, 16, 32, 1, 2, vec=8, stages=1, split_k=split)
    mod, (xv, yv), got = _run(_schedule(z, cfg), [x, y], z)
    product, total = _grid(mod)
    assert product == (1, 2, B * split)
    assert total == (-(-B * M * N // SPLIT_SUM_THREADS), 1, 1)
    assert _rel(got, xv @ (yv.transpose(0, 2, 1) if tb else yv)) < 2e-3


def _dense_form(M, N, K, dtype="float16"):
    y = ops.nn.dense(te.placeholder((M, K), dtype), te.placeholder((N, K), dtype))
    return y, gemm_form(y.op.input_tensors[0].op, SM90)


def test_split_k_rules():
    y, form = _dense_form(32, 32, 256)
    # K = 256 in 4 parts of 2 block_k steps of 32: too few for 3 pipeline stages
    with pytest.raises(ScheduleError, match="at least 3 block_k steps .* per split_k part"):
        check_gemm_config(TensorCoreConfig(16, 16, 32, 1, 2, stages=3, split_k=4), form,
                          target=SM90)
    for bad in (0, -2, 2.0):
        with pytest.raises(ScheduleError, match="split_k to be a positive int"):
            check_gemm_config(TensorCoreConfig(16, 16, 32, 1, 2, split_k=bad), form,
                              target=SM90)
    # a broadcast batch (A of batch 1) is not padded, so it has no split-K
    z = ops.nn.batch_matmul(te.placeholder((1, 32, 64), "float16"),
                            te.placeholder((2, 32, 64), "float16"))
    bform = gemm_form(z.op.input_tensors[0].op, SM90)
    assert bform is not None and bform.broadcast
    with pytest.raises(ScheduleError, match="split_k 1 on a broadcast batch"):
        check_gemm_config(TensorCoreConfig(16, 16, 16, 1, 2, split_k=2), bform, target=SM90)
    # and the schedule itself refuses, naming the rule
    s = te.create_schedule(y.op)
    with pytest.raises(ScheduleError, match="per split_k part"):
        schedule_gemm_tensorcore(s, y.op.input_tensors[0].op, y.op,
                                 TensorCoreConfig(16, 16, 32, 1, 2, stages=3, split_k=4), SM90)


@pytest.mark.parametrize("M,N,K,split", [
    # as measured on an H200: BERT-base FFN2 at batch 1 (seq 128) is fastest split; FFN1
    # and the fused QKV projection are not (96 and 72 blocks of 64 x 64 over K = 768
    # beat every split of theirs)
    (128, 768, 3072, True),
    (128, 3072, 768, False),
    (128, 2304, 768, False),
    (256, 1024, 4096, True),
    (4096, 4096, 4096, False),  # blocks enough for every SM many times over
])
def test_default_chooser_splits_k_where_few_blocks_meet_a_long_reduction(M, N, K, split):
    _, form = _dense_form(M, N, K)
    cfg = choose_gemm_config(form, SM90)
    assert (cfg.split_k > 1) == split, cfg
    check_gemm_config(cfg, form, target=SM90)
    if split:
        # it pays by the chooser's estimate, against the tiles it takes without split-K
        base = choose_gemm_config(form, SM90, split_k=False)
        assert base.split_k == 1
        assert gemm_time(cfg, form, SM90) < gemm_time(base, form, SM90)


def test_default_split_k_schedule_matches_numpy():
    # a thin product with a long reduction: the default takes split-K
    x = te.placeholder((16, 2048), "float16", name="x")
    w = te.placeholder((64, 2048), "float16", name="w")
    b = te.placeholder((64,), "float16", name="b")
    y = ops.nn.relu(ops.nn.dense(x, w, b))
    _, form = _dense_form(16, 64, 2048)
    cfg = choose_gemm_config(form, SM90)
    assert cfg.split_k > 1
    s = default_schedule(y, SM90)
    mod, (xv, wv, bv), got = _run(s, [x, w, b], y)
    assert _grid(mod)[0][2] == cfg.split_k
    assert _rel(got, np.maximum(xv @ wv.T + bv, 0)) < 2e-3


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas (CUDA toolkit) is not installed here")
def test_bert_ffn2_split_k_kernels_assemble_for_sm90():
    # 128 x 768 x 3072 + bias + residual add in fp16: the default splits K; both kernels
    # assemble with ptxas, the product's with mma.sync and cp.async and no spills
    x = te.placeholder((128, 3072), "float16", name="x")
    w = te.placeholder((768, 3072), "float16", name="w")
    b = te.placeholder((768,), "float16", name="b")
    r = te.placeholder((128, 768), "float16", name="r")
    y = ops.add(ops.nn.dense(x, w, b), r)
    _, form = _dense_form(128, 768, 3072)
    cfg = choose_gemm_config(form, SM90)
    dev = ptxforge.lower(default_schedule(y, SM90), [x, w, b, r, y])
    grids = [tuple(k.attrs.launch.grid) for k in dev.kernels()]
    assert grids == [(768 // cfg.block_n, 128 // cfg.block_m, cfg.split_k),
                     (128 * 768 // SPLIT_SUM_THREADS, 1, 1)]
    mod = compile_module(dev, "sm_90")
    product, total = mod.kernels.values()
    ptx = product.get_source("ptx")
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx and "cp.async" in ptx
    assert product.cubin and total.cubin
    for k in (product, total):
        assert "ld.local" not in k.get_source("ptx")


def test_mixed_precision_bert_layer_with_a_split_k_ffn():
    """A BERT layer built in float16 through the graph layer: its long-K FFN2 (16 tokens,
    2048 -> 64, bias and the residual add fused) takes split-K by default, and the network
    still matches the float32 evaluation."""
    from ptxforge import graph
    from ptxforge.graph.zoo.bert import bert_layer

    out, params, shape = bert_layer(1, "float32", seq_len=16, hidden=64, heads=2,
                                    intermediate=2048)
    net = graph.function(out)
    x = RNG.standard_normal(shape).astype(np.float32)
    ref = graph.evaluate(net, {"data": x}, params)
    lib = graph.build(net, "sim", params, precision="float16")
    split = [f for f in lib.functions.values() if "rfactor" in f.pipeline_text]
    assert len(split) == 1
    assert {c.op for c in split[0].func.func.calls()} >= {"nn.dense", "add"}
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(data=x)
    m.run()
    got = m.get_output(0).numpy()
    np.testing.assert_allclose(got, ref, atol=1e-2 * np.abs(ref).max(), rtol=0)
