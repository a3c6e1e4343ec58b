"""wgmma in the default schedules of dense, matmul and batch_matmul (sm_90a): the GEMM
schedule with fused epilogues, zero padding, split-K and a batch against numpy on the
simulator, the default's choice between wgmma and mma.sync, its tile chooser, refusals,
and PTX for sm_90a."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import ops, te
from ptxforge.ir.te import ComputeOp
from ptxforge.ops.schedules import default_schedule
from ptxforge.ops.schedules.gemm.chooser import choose_wgmma_config, wgmma_choice
from ptxforge.ops.schedules.gemm.forms import GemmForm, gemm_form
from ptxforge.ops.schedules.gemm.knobs import WgmmaScheduleConfig
from ptxforge.ops.schedules.gemm.schedule import schedule_gemm_wgmma
from ptxforge.passes.schedule.common import ScheduleError

from .lowp import f64, host, measure_on_sim

SIM = "sim -arch=sm_90a"
H200 = "cuda -arch=sm_90a"
RNG = np.random.default_rng(91)


def _gelu(y):
    return ops.multiply(ops.multiply(y, ops.add(ops.erf(ops.multiply(y, 0.7071067811865476)),
                                                1.0)), 0.5)


def _dense(M, N, K, dtype="float16", bias=False, act=None, residual=False, cast=None):
    x = te.placeholder((M, K), dtype, name="x")
    w = te.placeholder((N, K), dtype, name="w")
    args = [x, w]
    b = None
    if bias:
        b = te.placeholder((N,), dtype, name="b")
        args.append(b)
    y = ops.nn.dense(x, w, b, out_dtype="float32" if cast else None)
    if cast == "float32":
        return y, args
    if act == "gelu":
        y = _gelu(y)
    elif act == "relu":
        y = ops.nn.relu(y)
    if residual:
        r = te.placeholder((M, N), y.dtype, name="r")
        args.append(r)
        y = ops.add(y, r)
    if cast:
        y = ops.cast(y, cast)
    return y, args


def _ref(vals, bias, act, residual):
    want = vals[0] @ vals[1].T
    k = 2
    if bias:
        want = want + vals[k]
        k += 1
    if act == "gelu":
        from math import erf

        want = 0.5 * want * (1 + np.vectorize(erf)(want / np.sqrt(2)))
    elif act == "relu":
        want = np.maximum(want, 0)
    if residual:
        want = want + vals[k]
    return want


def _product(y):
    return next(op for op in te.create_schedule(y.op).dag.ops
                if isinstance(op, ComputeOp) and op.reduce_axis)


def _schedule(y, cfg):
    """The product of ``y``'s DAG with wgmma and ``cfg``, its epilogue fused (every other
    stage inlined into it), as the default schedule plans it."""
    s = te.create_schedule(y.op)
    ops_ = [op for op in s.dag.ops if isinstance(op, ComputeOp)]
    prod = next(op for op in ops_ if op.reduce_axis)
    for op in reversed(ops_):
        if op is not prod and op is not y.op:
            s[op].compute_inline()
    return s, schedule_gemm_wgmma(s, prod, y.op if y.op is not prod else None, cfg, SIM)


def _run(s, args, y):
    mod = ptxforge.build(s, args + [y], target=SIM)
    vals = [host(RNG, a.shape, a.dtype) for a in args]
    out = np.full(y.shape, np.nan, y.dtype)
    mod(*vals, out)
    return mod, [f64(v, a.dtype) for v, a in zip(vals, args)], f64(out, y.dtype)


def _kernels(mod) -> int:
    return str(mod.device_module).count('"kind": "kernel"')


@pytest.mark.parametrize("M,N,K,bias,act,residual,cast,cfg", [
    # the epilogue over the shared C tile: bias + gelu; residual add then the cast
    (128, 128, 128, True, "gelu", False, "float16", (64, 1, 2, 0)),
    (128, 128, 256, True, None, True, "float16", (128, 2, 3, 1)),
    # only the cast: the warpgroups store straight to the output
    (128, 64, 128, False, None, False, "float16", (64, 2, 1, 0)),
    # padded M, N and K (K = 72: 16-byte copies; K = 100: 8-byte copies, zero-filled)
    (49, 100, 72, True, "relu", False, None, (64, 1, 1, 0)),
    (49, 130, 200, False, None, True, None, (64, 2, 3, 1)),
    (30, 64, 100, True, None, False, None, (64, 1, 2, 0)),
    # split-K: float32 parts on blockIdx.z, a second kernel runs bias + gelu once
    (64, 128, 512, True, "gelu", False, "float16", (64, 1, 3, 1, 2)),
    (100, 64, 300, False, None, True, None, (64, 2, 2, 0, 4)),
])
def test_wgmma_gemm_with_epilogues_matches_numpy(M, N, K, bias, act, residual, cast, cfg):
    y, args = _dense(M, N, K, bias=bias, act=act, residual=residual, cast=cast)
    s, used = _schedule(y, WgmmaScheduleConfig(*cfg))
    text = str(s.pipeline)
    assert f"wgmma_m64n{cfg[0]}k16_f16_f32" in text
    padded = (M % (64 * cfg[1]) or N % cfg[0] or K % 64) or used.split_k > 1
    assert ("implicit_gemm" in text) == bool(padded)
    direct = not padded and not (bias or act or residual)
    assert ('"store_wg_f32_f16"' in text) == direct
    mod, vals, got = _run(s, args, y)
    assert _kernels(mod) == (2 if used.split_k > 1 else 1)
    want = _ref(vals, bias, act, residual)
    tol = 2e-3 if y.dtype == "float16" else 1e-4
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * np.abs(want).max())


@pytest.mark.parametrize("B,M,N,K,cfg", [(3, 64, 64, 128, (64, 1, 2, 0)),
                                          (2, 49, 64, 100, (64, 1, 2, 0)),
                                          (2, 128, 128, 192, (128, 2, 1, 0, 3))])
def test_wgmma_batch_matmul_runs_the_batch_on_blockidx_z(B, M, N, K, cfg):
    x = te.placeholder((B, M, K), "bfloat16", name="x")
    w = te.placeholder((B, N, K), "bfloat16", name="w")
    y = ops.nn.batch_matmul(x, w, out_dtype="float32")
    s, _ = _schedule(y, WgmmaScheduleConfig(*cfg))
    assert "wgmma_m64n" in str(s.pipeline) and '"blockIdx.z"' in str(s.pipeline)
    _, (xv, wv), got = _run(s, [x, w], y)
    want = np.matmul(xv, wv.transpose(0, 2, 1))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())


def test_the_default_takes_wgmma_on_sm_90a_and_mma_sync_elsewhere():
    y, args = _dense(128, 256, 256, bias=True, act="relu")
    s = default_schedule(y, SIM)
    assert "wgmma_m64n" in str(s.pipeline)
    _, vals, got = _run(s, args, y)
    want = _ref(vals, True, "relu", False)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-3 * np.abs(want).max())
    for target in ("sim", "cuda -arch=sm_90", "cuda -arch=sm_80"):
        text = str(default_schedule(y, target).pipeline)
        assert "mma_m16n8k16" in text and "wgmma" not in text
    # what wgmma does not run stays on mma.sync on sm_90a (N < 64, TF32), and so does a
    # small product with B read as [K, N], where the 64-wide MN-major tiles estimate slower
    a = te.placeholder((128, 128), "float16", name="a")
    b = te.placeholder((128, 128), "float16", name="b")
    kn = ops.nn.matmul(a, b)
    narrow = ops.nn.dense(a, te.placeholder((32, 128), "float16", name="w"))
    f = te.placeholder((128, 128), "float32", name="f")
    tf32 = ops.nn.dense(f, te.placeholder((128, 128), "float32", name="g"), precision="tf32")
    for out in (kn, narrow, tf32):
        text = str(default_schedule(out, SIM).pipeline)
        assert "mma_m16n8k" in text and "wgmma" not in text


def _form(M, N, K, batch=1):
    return GemmForm(batch, M, N, K, "float16", "float32", False, False, batch > 1)


def test_the_chooser_follows_the_measured_tiles():
    # BERT-base at batch 1: 64 x 64 tiles of one warpgroup, 4 stages, one group in flight
    assert choose_wgmma_config(_form(128, 3072, 768), H200) == WgmmaScheduleConfig(64, 1, 4, 1)
    # few blocks over a long reduction: split-K
    assert choose_wgmma_config(_form(128, 768, 3072), H200).split_k > 1
    assert choose_wgmma_config(_form(128, 768, 768), H200).split_k == 1
    # large products: 128 x 256, 4 stages, one group in flight
    assert choose_wgmma_config(_form(4096, 4096, 4096), H200, epilogue_tile=False) == \
        WgmmaScheduleConfig(256, 2, 4, 1)
    # an epilogue that stores another layout: tiles that divide, no split-K
    cfg = choose_wgmma_config(_form(128, 768, 3072), H200, remap=True)
    assert cfg.split_k == 1 and 768 % cfg.block_n == 0
    assert choose_wgmma_config(_form(100, 768, 768), H200, remap=True) is None


def test_the_default_keeps_mma_sync_where_its_estimate_is_faster():
    # a single row of 1000 outputs: wgmma's 64-row tile only pads more
    y, _ = _dense(1, 1000, 512, cast="float32")
    assert wgmma_choice(y.op, None, gemm_form(y.op, H200), H200) is None
    y, _ = _dense(128, 3072, 768, cast="float32")
    assert wgmma_choice(y.op, None, gemm_form(y.op, H200), H200) == \
        WgmmaScheduleConfig(64, 1, 4, 1)


def test_refusals_name_the_rule():
    y, _ = _dense(128, 128, 128, cast="float32")
    s = te.create_schedule(y.op)
    with pytest.raises(ScheduleError, match="wgmma needs sm_90a; the target is sm_90"):
        schedule_gemm_wgmma(s, y.op, None, WgmmaScheduleConfig(64, 1, 2, 0), "sim")
    a = te.placeholder((128, 128), "float16", name="a")
    kn = ops.nn.matmul(a, te.placeholder((128, 128), "float16", name="b"), out_dtype="float32")
    with pytest.raises(ScheduleError, match=r"block_n in \(64, 128, 256\) \(got 32"):
        schedule_gemm_wgmma(te.create_schedule(kn.op), kn.op, None,
                            WgmmaScheduleConfig(32, 1, 2, 0), SIM)
    for cfg, rule in (((64, 1, 4, 1), "need at least 4 steps of 64"),
                      ((96, 1, 2, 0), "need block_n in"),
                      ((64, 1, 2, 1), "3 stages or more for in_flight=1"),
                      ((64, 1, 2, 0, 0), "split_k a positive int"),
                      ((64, 1, 2, 0, 2), r"need at least 2 steps of 64 .* per split_k part")):
        with pytest.raises(ScheduleError, match=rule):
            schedule_gemm_wgmma(te.create_schedule(y.op), y.op, None,
                                WgmmaScheduleConfig(*cfg), SIM)
    big, _ = _dense(4096, 4096, 4096, bias=True, cast="float16")
    s = te.create_schedule(big.op)
    prod = _product(big)
    with pytest.raises(ScheduleError, match="need at most .* and the f32 C tile"):
        schedule_gemm_wgmma(s, prod, big.op, WgmmaScheduleConfig(256, 2, 4, 1), H200)


def test_a_padded_split_k_epilogue_kernel_assembles_for_sm_90a():
    from ptxforge.backend_ptx import compile_module
    from ptxforge.backend_ptx.assemble import find_ptxas
    from ptxforge.target import as_target

    y, args = _dense(49, 200, 1000, bias=True, act="gelu", cast="float16")
    s, used = _schedule(y, WgmmaScheduleConfig(128, 1, 3, 1, 4))
    target = as_target(H200)
    with target:
        dev = ptxforge.lower(s, args + [y])
    grids = [tuple(k.attrs.launch.grid) for k in dev.kernels()]
    assert grids[0] == (2, 1, 4)  # N 200 in tiles of 128, M 49 in one of 64, 4 parts
    product, total = compile_module(dev, target).kernels.values()
    ptx = product.get_source("ptx")
    for step in ("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16", "cp.async",
                 "fence.proxy.async.shared::cta", "wgmma.wait_group.sync.aligned \t1;"):
        assert step in ptx
    if find_ptxas() is not None:
        assert product.cubin and total.cubin
        for k in (product, total):
            assert "ld.local" not in k.get_source("ptx")


def test_the_kernel_estimate_counts_tensorized_nests_as_tensor_core_work():
    from ptxforge.measure.estimate import module_seconds
    from ptxforge.measure.kernel_stats import analyze_module
    from ptxforge.target import as_target

    y, args = _dense(128, 3072, 768, cast="float32")
    est = {}
    for arch in ("sm_90a", "sm_90"):
        t = as_target(f"cuda -arch={arch}")
        with t:
            (stats,) = analyze_module(ptxforge.lower(default_schedule(y, t), args + [y]))
        # the product's multiply-adds, on the tensor cores, shared by the threads
        work = stats.wgmma_flops if arch == "sm_90a" else stats.mma_flops
        assert work * stats.threads * stats.blocks == 2 * 128 * 3072 * 768
        assert stats.flops == 0 and stats.int_ops < 1e4
        est[arch] = module_seconds((stats,), None, t)
    # measured on an H200: 4.1 us with wgmma, 7.9 us with mma.sync
    assert 3e-6 < est["sm_90a"] < 6e-6 < est["sm_90"] < 12e-6


def _wg_dense_layer(M, N, K):
    """A BERT-like dense layer: fp16 product, bias and gelu in float32, cast to fp16."""
    y, args = _dense(M, N, K, bias=True, act="gelu", cast="float16")
    return args + [y]


def test_the_auto_scheduler_gets_a_wgmma_sketch_on_sm_90a_and_measures_it(tmp_path):
    from ptxforge import autosched
    from ptxforge.autosched.evolution import random_population
    from ptxforge.autosched.features import population_features
    from ptxforge.autosched.state import State
    from ptxforge.autosched.tensorcore import WgmmaGemmStep
    from ptxforge.autosched.workload_registry import register_workload

    fn = register_workload(_wg_dense_layer)
    args = (100, 192, 320)  # padded: 100 rows, K of 5 steps
    names = [s.name for s in autosched.SearchTask(func=fn, args=args,
                                                  target="cuda -arch=sm_90").sketches]
    assert not any(n.startswith("wgmma") for n in names)
    task = autosched.SearchTask(func=fn, args=args, target=H200)
    wg = len(task.sketches) - 1
    sk = task.sketches[wg]
    assert sk.name.startswith("wgmma_gemm(") and isinstance(sk.steps[0], WgmmaGemmStep)
    assert task.sketches[wg - 1].name.startswith("tensorcore_gemm(")  # they compete
    step = sk.steps[0]
    slots = {sl.name: sl.choices for sl in sk.slots}
    assert slots[step.slot("block_n")] == (64, 128, 256)
    assert slots[step.slot("split_k")] == (1, 2, 4)  # 5 steps of 64: up to 4 parts
    rng = np.random.default_rng(5)
    pop = random_population(task, 600, rng)
    pop = pop[pop[:, 0] == wg]
    feats, valid, est = population_features(task.models, pop, task.flop_ct, 132)
    assert valid.any() and (~valid).any() and np.isfinite(est[valid]).all()
    assert np.isfinite(feats).all()
    for row in pop[valid][:6]:  # the states the model accepts schedule
        assert "wgmma_m64n" in State.from_row(row, task).pipeline_text(task)
    # measured with the simulator runner: built, checked against the reference, estimated
    states = [State.from_row(r, task) for r in pop[valid][:2]]
    for r in measure_on_sim(task, states):
        assert r.ok and r.correctness == "passed" and r.estimated
        assert 1e-6 < min(r.costs) < 1e-3


def test_the_autotvm_wgmma_templates_take_padded_batched_and_split_products():
    from ptxforge import autotvm
    from ptxforge.autotvm import tensorcore_wgmma as tw
    from ptxforge.target import as_target

    task = autotvm.task.create(tw.BATCH_NAME, args=(2, 49, 64, 200, "float16", "float32"),
                               target=SIM)
    space = task.config_space
    assert list(space.space_map) == list(tw.KNOBS)
    # block_n 64 (N = 64), 1 warpgroup (M <= 64), stages 1-4 (K: 4 steps), split-K 1, 2, 4
    assert space.dims == [1, 1, 4, 2, 3]
    cfg = space.get(space.knob2point([0, 0, 1, 0, 1]))  # 2 stages, split_k 2
    with as_target(SIM):
        s, tensors = task.instantiate(cfg)
    text = str(s.pipeline)
    assert "wgmma_m64n64k16_f16_f32" in text and "rfactor" in text
    x, y, out = tensors
    mod, (xv, yv), got = _run(s, [x, y], out)
    assert _kernels(mod) == 2
    want = np.matmul(xv, yv.transpose(0, 2, 1))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())
    with pytest.raises(ScheduleError, match="wgmma takes float16 or bfloat16 inputs"):
        autotvm.task.create(tw.NAME, args=(64, 64, 64, "float32"), target=SIM)


def test_a_float16_bert_layer_tuned_on_sm_90a_runs_its_wgmma_records(tmp_path):
    """The network path: tasks extracted for sm_90a get the wgmma sketch; records of its
    states (measured on the simulator runner) are applied by the build, whose products
    then run wgmma and keep the network's values."""
    from ptxforge import autosched, graph, measure
    from ptxforge.autosched.evolution import random_population
    from ptxforge.autosched.features import population_features
    from ptxforge.autosched.state import State, state_payload
    from ptxforge.graph.zoo.bert import bert_layer
    from ptxforge.measure.record import encode

    out, params, shape = bert_layer(1, "float32", seq_len=64, hidden=64, heads=1,
                                    intermediate=128)
    net = graph.function(out)
    tasks, _ = autosched.extract_tasks(net, params, H200, precision="float16")
    inputs = []
    for t in tasks:
        wg = [k for k, sk in enumerate(t.sketches) if sk.name.startswith("wgmma_gemm(")]
        if not wg:
            continue
        pop = random_population(t, 200, np.random.default_rng(3))
        pop = pop[pop[:, 0] == wg[0]]
        _, valid, est = population_features(t.models, pop, t.flop_ct, 132)
        s = State.from_row(pop[valid][np.argmin(est[valid])], t)
        inputs.append(measure.MeasureInput(t.task_spec, s.pipeline_text(t),
                                           state_payload(t, s)))
    assert len(inputs) >= 4  # the QKV, output and two FFN products
    results = measure.measure_batch(inputs, measure.LocalBuilder(n_parallel=1,
                                                                 compile_to="ir"),
                                    measure.SimRunner(max_sim_seconds=30.0))
    assert all(r.ok and r.correctness == "passed" for r in results)
    log = tmp_path / "bert.json"
    log.write_text("".join(encode(i, r) + "\n" for i, r in zip(inputs, results)))
    with pytest.warns(Warning), autosched.ApplyHistoryBest(str(log)):
        lib = graph.build(net, SIM, params, precision="float16")
    # (the scores with their softmax, one function with no wgmma_gemm sketch, may run
    # wgmma by their default schedule)
    tuned = [f for f in lib.functions.values() if f.tuned]
    assert len(tuned) >= len(inputs) and all("wgmma_m64n" in f.pipeline_text for f in tuned)
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    m = graph.GraphModule(lib)
    m.run(data=x)
    want = graph.evaluate(net, {"data": x}, params)
    got = m.get_output(0).numpy().astype("float64")
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-2 * np.abs(want).max())


def test_an_operand_computed_in_its_copy_is_stored_swizzled_without_cp_async():
    # a prologue (relu of A) inlined into A's shared copy: plain stores, then the proxy
    # fence before the wgmma reads them (the simulator checks it)
    x = te.placeholder((128, 128), "float16", name="x")
    w = te.placeholder((128, 128), "float16", name="w")
    xr = ops.nn.relu(x)
    y = ops.nn.dense(xr, w, out_dtype="float32")
    s = te.create_schedule(y.op)
    schedule_gemm_wgmma(s, y.op, None, WgmmaScheduleConfig(64, 1, 2, 0), SIM)
    s[xr.op].compute_inline()
    text = str(s.pipeline)
    assert "async_copy(w.shared)" in text and "async_copy(x" not in text
    assert "swizzle(compute.shared, 3)" in text
    _, (xv, wv), got = _run(s, [x, w], y)
    want = np.maximum(xv, 0) @ wv.T
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())


def test_a_broadcast_batch_runs_unpadded_and_refuses_split_k():
    x = te.placeholder((2, 128, 128), "float16", name="x")
    w = te.placeholder((1, 64, 128), "float16", name="w")  # one weight for both
    y = ops.nn.batch_matmul(x, w, out_dtype="float32")
    s, _ = _schedule(y, WgmmaScheduleConfig(64, 2, 2, 0))
    assert "implicit_gemm" not in str(s.pipeline)
    _, (xv, wv), got = _run(s, [x, w], y)
    want = np.matmul(xv, wv.transpose(0, 2, 1))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())
    with pytest.raises(ScheduleError, match="need split_k 1 on a broadcast batch"):
        _schedule(y, WgmmaScheduleConfig(64, 2, 2, 0, 2))
    odd = ops.nn.batch_matmul(te.placeholder((2, 80, 128), "float16", name="x"), w,
                              out_dtype="float32")
    with pytest.raises(ScheduleError, match="a broadcast batch is not padded"):
        _schedule(odd, WgmmaScheduleConfig(64, 1, 2, 0))


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K,epi,cfg", [
    (128, 3072, 768, "gelu", None),  # the default's pick: 64 x 64, 4 stages, 1 in flight
    (128, 768, 3072, "residual", None),  # the default splits K
    (49, 1000, 200, "gelu", (128, 1, 3, 1, 1)),  # padded M, N and K
    (300, 256, 520, "residual", (64, 2, 4, 1, 2)),  # padded, split-K
])
def test_wgmma_gemm_with_epilogues_on_the_gpu(M, N, K, epi, cfg):
    from ptxforge.backend_ptx import array, compile_module, cuda, empty
    from ptxforge.target import as_target

    dev = cuda(0)
    if dev.sm != "sm_90":
        pytest.skip(f"wgmma needs an sm_90 GPU (sm_90a code); this one is {dev.sm}")
    y, args = _dense(M, N, K, bias=True, act="gelu" if epi == "gelu" else None,
                     residual=epi == "residual", cast="float16" if epi == "gelu" else None)
    target = as_target(H200)
    with target:
        if cfg is None:
            s = default_schedule(y, target)
        else:
            s, _ = _schedule(y, WgmmaScheduleConfig(*cfg))
        assert "wgmma_m64n" in str(s.pipeline)
        loaded = compile_module(ptxforge.lower(s, args + [y]), target).load(dev)
    host_vals = [host(RNG, a.shape, a.dtype) for a in args]
    out = empty((M, N), y.dtype, dev)
    loaded(*[array(h, dev, a.dtype) for h, a in zip(host_vals, args)], out)
    want = _ref([f64(h, a.dtype) for h, a in zip(host_vals, args)], True,
                "gelu" if epi == "gelu" else None, epi == "residual")
    got = f64(out.numpy(), y.dtype)
    np.testing.assert_allclose(got, want, rtol=0, atol=3e-3 * np.abs(want).max())
