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
from ptxforge.ops.schedules.gemm.chooser import choose_gemm_config
from ptxforge.ops.schedules.gemm.forms import gemm_form
from ptxforge.ops.schedules.gemm.knobs import TensorCoreConfig
from ptxforge.ops.schedules.gemm.schedule import schedule_gemm_tensorcore
from ptxforge.passes.schedule.common import ScheduleError

from .lowp import host, run_sim

RNG = np.random.default_rng(14)
SM90 = "cuda -arch=sm_90"


def _rand(shape, dtype):
    return host(RNG, shape, dtype)


def _uses_tensor_cores(s) -> bool:
    return "tensorize" in str(s.pipeline)


def _run(out, args, target=SM90, dtype="float16"):
    """Build ``out`` with the default schedule on the simulator, run it on random inputs;
    returns (schedule, inputs as float64, output as float64)."""
    s = default_schedule(out, target)
    _, vals, res = run_sim(s, args, out, RNG)
    return s, vals, res


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


@pytest.mark.parametrize("M,N,K,dtype,bias", [
    (1, 24, 64, "float16", True),        # a single row: 15 zero rows in the tile
    (7, 1000, 64, "float16", False),     # ResNet's classifier width, the bare cast
    (49, 24, 72, "float16", True),       # K not a multiple of 16 either
    (100, 1000, 72, "bfloat16", True),
    (49, 64, 64, "bfloat16", False),
    (1, 1000, 64, "bfloat16", False),
    (100, 24, 64, "float16", False),
    (64, 40, 64, "float16", True),       # only N padded
    (64, 64, 24, "float16", True),       # only K padded
    (7, 24, 70, "float16", True),        # K = 70: copies of 2 elements
])
def test_padded_shapes_run_on_tensor_cores(M, N, K, dtype, bias):
    # the operands are read through zero-padded views (implicit_gemm) and only the real
    # rows and columns are stored; the simulator rejects any access out of bounds, and
    # the NaN-filled output shows every element is written
    y, args = _dense_net(M, N, K, dtype, bias=bias, act=bias)
    s, vals, got = _run(y, args, dtype=dtype)
    assert _uses_tensor_cores(s) and "implicit_gemm" in str(s.pipeline)
    tol = 2e-3 if dtype == "float16" else 8e-3
    assert _rel(got, _dense_ref(vals, bias, bias, False)) < tol


def test_padded_product_with_a_residual_add():
    y, args = _dense_net(49, 40, 64, residual=True)
    s, vals, got = _run(y, args)
    assert _uses_tensor_cores(s) and "implicit_gemm" in str(s.pipeline)
    assert _rel(got, _dense_ref(vals, True, True, True)) < 2e-3


def test_padded_matmul_with_b_as_k_n_and_tf32():
    a = te.placeholder((49, 72), "float16", name="a")
    b = te.placeholder((72, 40), "float16", name="b")  # [K, N]: ldmatrix .trans
    mm = ops.nn.matmul(a, b)
    s, (av, bv), got = _run(mm, [a, b])
    assert "implicit_gemm" in str(s.pipeline) and "mma_m16n8k16_f16_f32_kn" in str(s.pipeline)
    assert _rel(got, av @ bv) < 2e-3
    x = te.placeholder((7, 20), "float32", name="x")
    w = te.placeholder((24, 20), "float32", name="w")
    y = ops.nn.dense(x, w, precision="tf32")
    s, (xv, wv), got = _run(y, [x, w])
    assert _uses_tensor_cores(s) and "implicit_gemm" in str(s.pipeline)
    assert "ldmatrix_a_x4_tf32" in str(s.pipeline)  # the default's TF32 fragment loads
    want = dt.round_to(xv.astype(np.float32), "tf32").astype(np.float64) @ dt.round_to(
        wv.astype(np.float32), "tf32").astype(np.float64).T
    assert _rel(got, want) < 1e-6


@pytest.mark.parametrize("M,N,K", [(64, 8, 64), (1, 8, 64), (64, 64, 8)])
def test_slivers_stay_on_cuda_cores_and_are_correct(M, N, K):
    # the rule: N of at least 16 and K of at least the mma's k; below that a padded mma
    # would mostly multiply zeros
    y, args = _dense_net(M, N, K)
    mm = y.op.input_tensors[0].op.input_tensors[0].op
    assert mm.tag == "dense" and gemm_form(mm, SM90) is None
    s, vals, got = _run(y, args)
    assert not _uses_tensor_cores(s)
    assert _rel(got, _dense_ref(vals, True, True, False)) < 2e-3


@pytest.mark.parametrize("B,M,N,K,tb,xb", [
    (2, 49, 24, 72, True, 2),            # Q x K^T of 49 tokens, padded per batch
    (3, 7, 40, 64, False, 3),            # attention x V: B as [k, n]
    (1, 49, 24, 64, True, 1),            # a batch of one: an axis neither operand reads
])
def test_padded_batch_matmul_on_tensor_cores(B, M, N, K, tb, xb):
    x = te.placeholder((xb, M, K), "float16", name="x")
    y = te.placeholder((B, N, K) if tb else (B, K, N), "float16", name="y")
    z = ops.nn.batch_matmul(x, y, transpose_b=tb)
    s, (xv, yv), got = _run(z, [x, y])
    assert _uses_tensor_cores(s) and "implicit_gemm" in str(s.pipeline)
    assert _rel(got, xv @ (yv.transpose(0, 2, 1) if tb else yv)) < 2e-3


def test_a_broadcast_batch_is_not_padded():
    # A of batch 1 against B of batch 2: the batch is no batch axis of implicit_gemm
    x = te.placeholder((1, 49, 64), "float16", name="x")
    y = te.placeholder((2, 32, 64), "float16", name="y")
    z = ops.nn.batch_matmul(x, y)
    assert gemm_form(z.op.input_tensors[0].op, SM90) is None
    s, (xv, yv), got = _run(z, [x, y])
    assert not _uses_tensor_cores(s)
    assert _rel(got, xv @ yv.transpose(0, 2, 1)) < 2e-3


def test_default_tiles_of_padded_products():
    # 49 x 24 x 72 costs its launch whatever the tiles: the near tie goes to the larger
    # tile (one block), which pads no more than 16 x 16 tiles would
    for M, N, K, want in ((1, 1000, 512, (16, 16, 128)), (49, 1000, 512, (32, 16, 128)),
                          (49, 24, 72, (64, 32, 16)), (1, 4096, 4096, (16, 32, 128))):
        x = te.placeholder((M, K), "float16")
        w = te.placeholder((N, K), "float16")
        form = gemm_form(ops.nn.dense(x, w).op.input_tensors[0].op, SM90)
        cfg = choose_gemm_config(form, SM90)
        assert (cfg.block_m, cfg.block_n, cfg.block_k) == want, (M, N, K, cfg)
        # a padded K (72 -> 80) stays within 16 of the real one
        assert -(-K // cfg.block_k) * cfg.block_k - K < 16 or K % cfg.block_k == 0


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
    assert choose_gemm_config(gemm_form(y.op, SM90), SM90).frag_load == "ldmatrix"
    assert "ldmatrix_a_x4_tf32" in str(s.pipeline)
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
    # every SM, or all but a few of the 132, gets a block
    for M, want_blocks in ((16, 128), (128, 128), (4096, 132)):
        x = te.placeholder((M, 4096), "float16")
        w = te.placeholder((4096, 4096), "float16")
        mm = ops.nn.dense(x, w).op.input_tensors[0].op
        form = gemm_form(mm, SM90)
        cfg = choose_gemm_config(form, SM90)
        # the split-K parts are blocks too (128 x 4096 x 4096 may split its reduction)
        blocks = (M // cfg.block_m) * (4096 // cfg.block_n) * cfg.split_k
        assert blocks >= want_blocks, (M, cfg)
        if M == 4096:
            assert (cfg.block_m, cfg.block_n, cfg.stages) == (128, 128, 4) and cfg.async_copy


@pytest.mark.parametrize("shape,cfg,rule", [
    ((2, 64, 64, 64), TensorCoreConfig(48, 64, 32, 1, 2), "block_m 48 divides M 64"),
    ((70, 64, 70), TensorCoreConfig(16, 16, 16, 1, 2, vec=4), "vec 4 to divide K = 70"),
    ((64, 64, 64), TensorCoreConfig(16, 16, 32, 1, 2, vec=4, stages=3),
     "at least 3 block_k steps"),
])
def test_configs_that_do_not_fit_are_rejected_with_the_rule(shape, cfg, rule):
    if len(shape) == 4:  # a broadcast batch is never padded: the tiles divide it
        B, M, N, K = shape
        y = ops.nn.batch_matmul(te.placeholder((1, M, K), "float16"),
                                te.placeholder((B, N, K), "float16"))
    else:
        M, N, K = shape
        y = ops.nn.dense(te.placeholder((M, K), "float16"), te.placeholder((N, K), "float16"))
    mm = y.op.input_tensors[0].op
    s = te.create_schedule(y.op)
    with pytest.raises(ScheduleError, match=rule):
        schedule_gemm_tensorcore(s, mm, y.op, cfg, SM90)


def test_unpadded_shared_rows_match_numpy():
    # pad=0: plain rows of block_k elements (the tuner's other shared layout)
    y, args = _dense_net(64, 64, 64, act=False)  # the bias stage reads the product
    mm = next(t.op for t in y.op.input_tensors if t.op.tag == "dense")
    cfg = TensorCoreConfig(32, 32, 32, 2, 2, vec=8, pad=0, stages=2, async_copy=True)
    s = te.create_schedule(y.op)
    schedule_gemm_tensorcore(s, mm, y.op, cfg, SM90)
    text = str(s.pipeline)
    assert "storage_align(T_matmul_NT.warp.shared" in text  # the epilogue's C tile only
    assert "storage_align(x.shared" not in text and "storage_align(w.shared" not in text
    mod = ptxforge.build(s, args + [y], target="sim")
    vals = [_rand(a.shape, a.dtype) for a in args]
    res = np.full(y.shape, np.nan, "float16")
    mod(*vals, res)
    want = _dense_ref([v.astype(np.float64) for v in vals], True, False, False)
    assert _rel(res.astype(np.float64), want) < 2e-3


def test_epilogue_kernel_assembles_for_sm80_and_sm90():
    y, args = _dense_net(128, 128, 64)
    for arch in ("sm_80", "sm_90"):
        s = default_schedule(y, f"cuda -arch={arch}")
        ptx = compile_module(ptxforge.lower(s, args + [y]), arch).get_source("ptx")
        assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx
        assert "cp.async" in ptx and "ld.local" not in ptx


@pytest.mark.parametrize("seq_len", [16, 7])
def test_mixed_precision_bert_layer_uses_tensor_cores(seq_len):
    # 7 tokens: the dense layers are padded to 16 rows; the attention products (7 x 7 per
    # head: N = 7 < 16 for scores) stay on the CUDA cores
    from ptxforge.graph.zoo.bert import bert_layer

    out, params, shape = bert_layer(1, "float32", seq_len=seq_len, hidden=32, heads=2,
                                    intermediate=64)
    net = graph.function(out)
    x = RNG.standard_normal(shape).astype(np.float32)
    ref = graph.evaluate(net, {"data": x}, params)
    lib = graph.build(net, "sim", params, precision="float16")
    products = [f for f in lib.functions.values()
                if any(c.op in ("nn.dense", "nn.batch_matmul") for c in f.func.func.calls())]
    dense = [f for f in products
             if any(c.op == "nn.dense" for c in f.func.func.calls())]
    assert len(products) >= 6 and len(dense) >= 4
    tc = products if seq_len % 16 == 0 else dense
    assert all("tensorize" in f.pipeline_text for f in tc)
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(data=x)
    m.run()
    got = m.get_output(0).numpy()
    np.testing.assert_allclose(got, ref, atol=1e-2 * np.abs(ref).max(), rtol=0)


@pytest.mark.parametrize("sm", ["sm_80", "sm_90"])
def test_tf32_gemm_ptx_loads_fragments_with_ldmatrix(sm):
    from ptxforge.backend_ptx import compile_kernel, find_ptxas

    # a padded TF32 product with a fused bias: the GEMM schedule with its default config
    x = te.placeholder((49, 200), "float32", name="x")
    w = te.placeholder((96, 200), "float32", name="w")
    b = te.placeholder((96,), "float32", name="b")
    y = ops.nn.dense(x, w, b, precision="tf32")
    s = default_schedule(y, f"cuda -arch={sm}")
    assert "ldmatrix_a_x4_tf32" in str(s.pipeline) and "load_a_tf32" not in str(s.pipeline)
    dev = ptxforge.lower(s, [x, w, b, y])
    (kernel,) = dev.kernels()
    asm = "ptxas" if find_ptxas() else None
    k = compile_kernel(kernel, sm, cache=False, **({"assembler": asm} if asm else
                                                    {"stop_after": "ptx"}))
    ptx = k.get_source("ptx")
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
    assert ".trans" not in ptx and "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in ptx
    assert "ld.local" not in ptx and "st.local" not in ptx  # fragments stay in registers
    if asm:  # assembled by ptxas (skipped where the CUDA toolkit is not installed)
        assert k.cubin[:4] == b"\x7fELF"


def test_default_chooser_against_the_measured_sweep():
    # every configuration the chooser ranks, timed on an H200 (bench/calibrate_gemm_chooser.py
    # measure): its picks stay within 1.15x of the fastest measured, geometric mean (the
    # fixed tile table it replaced was at 1.26x)
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "bench"
    spec = importlib.util.spec_from_file_location("calibrate_gemm_chooser",
                                                  root / "calibrate_gemm_chooser.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    gm = bench.evaluate(str(root / "results" / "gemm_chooser_sweep_h200.jsonl"), quiet=True)
    assert 1.0 <= gm < 1.15, gm
