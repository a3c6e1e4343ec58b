"""The tensor-core sketch rule: an fp16 dense layer tuned with the simulator runner finds,
records and replays a tensor-core kernel; the rule stays off where it does not apply."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

import ptxforge
from ptxforge import autosched, measure, ops, te
from ptxforge.autosched.evolution import mutate, random_population
from ptxforge.autosched.features import population_features
from ptxforge.autosched.printer import python_schedule_code, schedule_from_pipeline
from ptxforge.autosched.search_policy import SketchPolicy
from ptxforge.autosched.state import State, state_from_payload
from ptxforge.autosched.tensorcore import TensorCoreStep, bank_conflict
from ptxforge.ir import dtype as dt
from ptxforge.ops.schedules.gemm.schedule import dense_tensorcore_compute

from .roundtrip import roundtrip_skipped

SM80 = "cuda -arch=sm_80"


@autosched.register_workload
def tc_dense_fp16(M, N, K):
    """fp16 dense, fp32 accumulation, cast to fp16."""
    return dense_tensorcore_compute(M, N, K, "float16", out_dtype="float16")


@autosched.register_workload
def tc_dense_layer(M, N, K, dtype):
    """A dense layer: product, bias, relu and cast, the epilogue fused by the rule."""
    a = te.placeholder((M, K), dtype, name="A")
    w = te.placeholder((N, K), dtype, name="W")
    bias = te.placeholder((N,), "float32", name="bias")
    k = te.reduce_axis((0, K), name="k")
    c = te.compute((M, N), lambda i, j: te.sum(a[i, k].astype("float32")
                                               * w[j, k].astype("float32"), axis=k), name="C")
    d = te.compute((M, N), lambda i, j: c[i, j] + bias[j], name="add")
    out = te.compute((M, N), lambda i, j: te.max(d[i, j], 0.0).astype(dtype), name="relu")
    return [a, w, bias, out]


@autosched.register_workload
def tc_dense_kn(M, N, K, dtype):
    return dense_tensorcore_compute(M, N, K, dtype, out_dtype="float32", b_layout="kn")


@autosched.register_workload
def tc_batch_matmul(batch, M, N, K, dtype):
    x = te.placeholder((batch, M, K), dtype, name="x")
    y = te.placeholder((batch, N, K), dtype, name="y")
    return [x, y, ops.nn.batch_matmul(x, y, out_dtype="float32")]


@autosched.register_workload
def tc_dense_fp32(M, N, K):
    return dense_tensorcore_compute(M, N, K, "float32", out_dtype="float32")


def short_tune(task, log: str, trials: int, per_round: int) -> None:
    """A short search on the simulator runner (small population, one generation)."""
    opts = autosched.TuningOptions(
        num_measure_trials=trials, num_measures_per_round=per_round,
        builder=measure.LocalBuilder(n_parallel=1, compile_to="ir"),
        runner=measure.SimRunner(), measure_callbacks=[autosched.RecordToFile(log)])
    pol = SketchPolicy(task, autosched.XGBModel(), {"evolutionary_search_population": 128,
                                                    "evolutionary_search_num_iters": 1},
                       seed=0)
    task.tune(opts, search_policy=pol)


def test_rule_applies_to_fp16_products_on_sm80_only():
    names = [s.name for s in autosched.SearchTask(func=tc_dense_fp16, args=(64, 64, 64),
                                                  target=SM80).sketches]
    # a product users declare themselves gets the GEMM sketch (the retired tensorcore(C)
    # took such stages; records of it map onto this one: test_tensorcore_records.py)
    assert names[-1] == "tensorcore_gemm(C)" and "tile(C)" in names
    assert "tensorcore(C)" not in names
    # a target without mma.sync
    task = autosched.SearchTask(func=tc_dense_fp16, args=(64, 64, 64), target="cuda -arch=sm_75")
    assert not any(s.name.startswith("tensorcore") for s in task.sketches)
    # awkward extents of such a product: padded to the tiles by the GEMM sketch
    task = autosched.SearchTask(func=tc_dense_fp16, args=(48, 64, 24), target=SM80)
    assert [s.name for s in task.sketches if s.name.startswith("tensorcore")] == [
        "tensorcore_gemm(C)"]
    # float32: TF32 is never chosen silently
    task = autosched.SearchTask(func=tc_dense_fp32, args=(64, 64, 64), target=SM80)
    assert not any(s.name.startswith("tensorcore") for s in task.sketches)
    assert list(bank_conflict([128, 144, 64])) == [8, 1, 4]


def test_tuning_finds_records_and_replays_a_tensor_core_kernel(tmp_path):
    task = autosched.SearchTask(func=tc_dense_layer, args=(64, 64, 64, "float16"),
                                target=SM80)
    tc = len(task.sketches) - 1
    log = str(tmp_path / "tc.json")
    short_tune(task, log, 6, 3)
    recs = measure.load_records(log)
    ok = [(i, r) for i, r in recs if r.ok]
    assert ok and all(r.correctness == "passed" for _, r in ok)
    best_inp, _ = autosched.ApplyHistoryBest(log).best[task.workload_key]
    state = state_from_payload(task, best_inp.payload)
    assert state is not None and state.sketch == tc
    assert isinstance(task.sketches[tc].steps[0], TensorCoreStep)
    text = state.pipeline_text(task)
    assert best_inp.pipeline_text == text and "tensorize" in text
    assert "mma_m16n8k16_f16_f32" in text and "async_copy" in text
    code = python_schedule_code(task, text)
    assert ".tensorize(" in code and ".async_copy()" in code and "s.apply(" not in code
    ns = {"te": te, "tensors": task.tensors}
    exec(code, ns)
    assert ns["s"].pipeline.text == text
    sch, args = task.apply_best(log)
    assert sch.pipeline.text == text
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, size=(64, 64)).astype("float16")
    b = rng.uniform(-1, 1, size=(64, 64)).astype("float16")
    bias = rng.uniform(-1, 1, size=64).astype("float32")
    out = np.zeros((64, 64), "float16")
    ptxforge.build(sch, args, target="sim")(a, b, bias, out)
    ref = np.maximum(a.astype("float32") @ b.astype("float32").T + bias, 0.0)
    np.testing.assert_allclose(out.astype("float32"), ref, rtol=1e-2, atol=1e-2)
    # the record replays to the same kernel
    again = autosched.SearchTask(func=tc_dense_layer, args=(64, 64, 64, "float16"),
                                 target=SM80)
    sch2, _ = again.apply_best(log)
    assert sch2.pipeline.text == sch.pipeline.text


def _inputs(tensors, rng):
    """Random inputs of ``tensors`` (bfloat16 as its host form) and their float32 values."""
    host, f32 = [], []
    for t in tensors:
        x = rng.uniform(-1, 1, size=t.shape).astype("float32")
        if t.dtype == "bfloat16":
            host.append(dt.to_bfloat16(x))
            f32.append(dt.from_bfloat16(host[-1]))
        else:
            host.append(x.astype(dt.to_numpy(t.dtype)))
            f32.append(host[-1].astype("float32"))
    return host, f32


def test_sampled_tensor_core_states_compute_the_product():
    """Every valid state the search may draw builds and matches numpy: fp16 with the
    bias + relu + cast epilogue, bf16 with B as [k, n] (ldmatrix .trans), and
    batch_matmul (the batch on blockIdx.z), each on the GEMM sketch."""
    rng = np.random.default_rng(0)
    for fn, args, n in ((tc_dense_layer, (32, 48, 64, "float16"), 3),
                        (tc_dense_kn, (32, 64, 32, "bfloat16"), 2),
                        (tc_batch_matmul, (3, 32, 16, 32, "float16"), 2)):
        task = autosched.SearchTask(func=fn, args=args, target=SM80)
        tcs = [k for k, s in enumerate(task.sketches) if s.name.startswith("tensorcore")]
        want = (["tensorcore_gemm(C)"] if fn is not tc_batch_matmul else
                ["tensorcore_gemm(T_batch_matmul_NT)"])
        assert [task.sketches[k].name for k in tcs] == want
        pop = random_population(task, 400 * len(tcs), rng)
        for tc in tcs:
            _check_sampled_states(task, fn, pop[pop[:, 0] == tc], n, rng)


def _check_sampled_states(task, fn, pop, n, rng):
    """The model finds valid states among ``pop`` (one sketch's) and ``n`` of them build
    and match numpy."""
    _, valid, est = population_features(task.models, pop, task.flop_ct, 132)
    assert valid.any() and np.isfinite(est[valid]).all()
    for i, row in enumerate(pop[valid][:n]):
        with roundtrip_skipped(i > 0):  # the round trip on the first state
            got, f32 = _run_on_sim(task, State.from_row(row, task).pipeline_text(task), rng)
        if fn is tc_batch_matmul:
            ref = np.einsum("bik,bjk->bij", f32[0], f32[1])
        elif fn is tc_dense_layer:
            ref = np.maximum(f32[0] @ f32[1].T + f32[2], 0.0)
        else:
            ref = f32[0] @ f32[1]
        np.testing.assert_allclose(got, ref, rtol=2e-2, atol=2e-2)


def test_mutation_moves_stages_and_warp_tiling():
    task = autosched.SearchTask(func=tc_dense_layer, args=(64, 64, 64, "float16"),
                                target=SM80)
    tc = len(task.sketches) - 1
    sk = task.sketches[tc]
    pop = np.tile(State(tc, sk.default_row()).row(task.state_width), (200, 1))
    moved = mutate(task, pop, np.random.default_rng(0)) != pop
    for kind in ("stages", "warps_m", "warps_n", "block_m"):
        assert moved[:, 1 + sk.slot_index[f"C.tc.{kind}"]].any(), kind
    assert (moved.sum(axis=1) == 1).all()


@pytest.mark.gpu
def test_tensor_core_search_on_the_gpu(tmp_path):
    """An fp16 dense layer (1024^3, bias, relu, cast) tuned with the GPU runner: the best
    record is a tensor-core kernel, it matches numpy, and its time is printed next to the
    best CUDA-core record's."""
    task = autosched.SearchTask(func=tc_dense_layer, args=(1024, 1024, 1024, "float16"),
                                target="cuda")
    tc = len(task.sketches) - 1
    log = str(tmp_path / "tc_gpu.json")
    ctx = autosched.LocalRPCMeasureContext(min_repeat_ms=10, repeat=3, timeout=10,
                                           check_correctness=True)
    trials = int(os.environ.get("PTXFORGE_AUTOSCHED_TRIALS", "64"))
    opts = autosched.TuningOptions(num_measure_trials=trials, num_measures_per_round=32,
                                   runner=ctx.runner,
                                   measure_callbacks=[autosched.RecordToFile(log)], verbose=1)
    t0 = time.perf_counter()
    summary = task.tune(opts, search_policy=SketchPolicy(task, autosched.XGBModel(), seed=0))
    elapsed = time.perf_counter() - t0
    ctx.close()
    best = {}
    for inp, res in measure.load_records(log):
        st = state_from_payload(task, inp.payload)
        if res.ok and st is not None:
            kind = "tensorcore" if st.sketch == tc else "cuda-core"
            best[kind] = min(best.get(kind, np.inf), res.mean)
    print(f"fp16 dense 1024^3: best {summary.best_cost * 1e3:.4f} ms, per kind (ms) "
          f"{ {k: round(v * 1e3, 4) for k, v in best.items()} }, {summary.trials} trials in "
          f"{elapsed:.1f} s, {summary.errors} errors")
    best_inp, _ = autosched.ApplyHistoryBest(log).best[task.workload_key]
    assert state_from_payload(task, best_inp.payload).sketch == tc
    sch, args = task.apply_best(log)
    f = ptxforge.build(sch, args, target="cuda")
    dev = ptxforge.cuda(0)
    rng = np.random.default_rng(0)
    host, f32 = _inputs(args[:3], rng)
    arrays = [ptxforge.nd.array(h, dev) for h in host]
    out = ptxforge.nd.empty(args[3].shape, "float16", dev)
    f(*arrays, out)
    ref = np.maximum(f32[0] @ f32[1].T + f32[2], 0.0)
    np.testing.assert_allclose(out.numpy().astype("float32"), ref, rtol=2e-2, atol=5e-2)


# -- conv2d NHWC as an implicit GEMM ------------------------------------------------------

@autosched.register_workload
def tc_conv_layer(n, h, ci, co, k, stride, pad, dtype, epilogue="bias_relu", precision=None):
    """conv2d NHWC summed in float32, then bias (+ a residual) + relu and a cast back."""
    d = te.placeholder((n, h, h, ci), dtype, name="data")
    w = te.placeholder((k, k, ci, co), dtype, name="kernel")
    b = te.placeholder((co,), "float32", name="bias")
    c = ops.nn.conv2d_nhwc(d, w, stride, pad, out_dtype="float32", precision=precision)
    args = [d, w, b]
    if epilogue == "bias_add_relu":
        r = te.placeholder(c.shape, dtype, name="residual")
        args.append(r)
        y = te.compute(c.shape, lambda a, i, j, f: c[a, i, j, f] + b[f]
                       + r[a, i, j, f].astype("float32"), name="add")
    else:
        y = te.compute(c.shape, lambda a, i, j, f: c[a, i, j, f] + b[f], name="add")
    out = te.compute(c.shape, lambda a, i, j, f: te.max(y[a, i, j, f], 0.0).astype(dtype),
                     name="relu")
    return args + [out]


def _run_on_sim(task, text: str, rng):
    """The output (as float32) of the schedule ``text`` of ``task`` run on the simulator on
    random inputs, and those inputs as float32."""
    sch = schedule_from_pipeline(task, text)
    host, f32 = _inputs(task.tensors[:-1], rng)
    out_t = task.tensors[-1]
    out = np.zeros(out_t.shape, dt.to_numpy(out_t.dtype))
    ptxforge.build(sch, task.tensors, target="sim")(*host, out)
    got = dt.from_bfloat16(out) if out_t.dtype == "bfloat16" else out.astype("float32")
    return got, f32


def _conv_reference(f32, k, stride, pad, out_shape, residual):
    x, w, b = f32[:3]
    n, oh, ow, _ = out_shape
    xp = np.pad(x.astype("float64"), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    ref = np.zeros(out_shape)
    for ky in range(k):
        for kx in range(k):
            win = xp[:, ky:ky + stride * (oh - 1) + 1:stride, kx:kx + stride * (ow - 1) + 1:stride]
            ref += np.einsum("nhwc,cf->nhwf", win, w[ky, kx].astype("float64"))
    ref += b
    if residual:
        ref += f32[3]
    return np.maximum(ref, 0.0)


def test_conv_rule_applies_to_low_precision_and_explicit_tf32_nhwc_convolutions():
    def names(args, target=SM80, **kw):
        task = autosched.SearchTask(func=tc_conv_layer, args=args, target=target, **kw)
        return [s.name for s in task.sketches]

    assert names((1, 7, 16, 24, 3, 1, 1, "float16"))[-1] == "tensorcore_conv(conv2d_nhwc)"
    assert names((1, 9, 3, 16, 7, 2, 3, "bfloat16"))[-1] == "tensorcore_conv(conv2d_nhwc)"
    tf32 = (1, 7, 8, 16, 3, 1, 1, "float32", "bias_relu", "tf32")
    assert names(tf32)[-1] == "tensorcore_conv(conv2d_nhwc)"
    # float32 without TF32 asked for, a GPU without mma.sync: the CUDA-core sketches only
    for args, target in (((1, 7, 8, 16, 3, 1, 1, "float32"), SM80),
                         ((1, 7, 16, 24, 3, 1, 1, "float16"), "cuda -arch=sm_75")):
        assert not any(n.startswith("tensorcore") for n in names(args, target))


@pytest.mark.parametrize("args", [
    (1, 7, 16, 24, 3, 1, 1, "float16"),                   # 49 pixels, padded to the tile
    (1, 9, 3, 16, 7, 2, 3, "float16"),                    # the stem: 3 channels, stride 2
    (2, 5, 16, 16, 3, 1, 1, "bfloat16", "bias_add_relu"),  # a batch and a residual
    (1, 6, 8, 16, 1, 2, 0, "float32", "bias_relu", "tf32"),  # 1x1 strided, TF32
], ids=["fp16_7x7", "stem_3ch", "bf16_residual", "tf32_1x1"])
def test_sampled_tensor_core_conv_states_compute_the_convolution(args):
    """The states the search may draw for a convolution: the model's validity agrees with
    the schedule's rules on every sampled state, and valid ones build and match numpy."""
    from ptxforge.passes.schedule.common import ScheduleError

    task = autosched.SearchTask(func=tc_conv_layer, args=args, target=SM80)
    tc = len(task.sketches) - 1
    rng = np.random.default_rng(1)
    pop = random_population(task, 300, rng)
    pop = pop[pop[:, 0] == tc]
    _, valid, est = population_features(task.models, pop, task.flop_ct, 132)
    assert valid.any() and np.isfinite(est[valid]).all()
    # the states the model accepts schedule (the round trip of their passes is checked on
    # the two that are built below)
    with roundtrip_skipped():
        for row in pop[valid][:12]:
            State.from_row(row, task).pipeline_text(task)
    rejected = 0
    for row in pop[~valid][:12]:
        try:
            State.from_row(row, task).pipeline_text(task)
        except ScheduleError:
            rejected += 1
    assert rejected >= 0.9 * min(12, (~valid).sum())  # almost all it rejects are illegal
    n, h, ci, co, k, stride, pad = args[:7]
    residual = len(args) > 8 and args[8] == "bias_add_relu"
    tol = 2e-2 if args[7] != "float32" else 5e-3
    for row in pop[valid][:2]:
        text = State.from_row(row, task).pipeline_text(task)
        assert "implicit_gemm" in text and "tensorize" in text
        if args[7] == "float32":  # TF32 fragments from ldmatrix
            assert "ldmatrix_a_x4_tf32" in text and "load_a_tf32" not in text
        got, f32 = _run_on_sim(task, text, rng)
        ref = _conv_reference(f32, k, stride, pad, got.shape, residual)
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * max(1.0, np.abs(ref).max()))


def test_tuning_a_convolution_records_tensor_core_kernels(tmp_path):
    task = autosched.SearchTask(func=tc_conv_layer, args=(1, 7, 16, 32, 3, 1, 1, "float16"),
                                target=SM80)
    tc = len(task.sketches) - 1
    log = str(tmp_path / "conv.json")
    short_tune(task, log, 8, 4)
    tc_recs = [(inp, res) for inp, res in measure.load_records(log)
               if res.ok and state_from_payload(task, inp.payload).sketch == tc]
    assert tc_recs and all(res.correctness == "passed" for _, res in tc_recs)
    best = min(tc_recs, key=lambda r: r[1].mean)[0]
    assert "implicit_gemm" in best.pipeline_text
    sch = schedule_from_pipeline(task, best.pipeline_text)
    assert sch.pipeline.text == best.pipeline_text


# -- the padded / TF32 GEMM sketch ---------------------------------------------------------

@autosched.register_workload
def tc_gemm_layer(M, N, K, dtype, precision=None):
    """A dense layer (bias, relu, cast back) whose extents no tile needs to divide."""
    a = te.placeholder((M, K), dtype, name="A")
    w = te.placeholder((N, K), dtype, name="W")
    bias = te.placeholder((N,), "float32", name="bias")
    c = ops.nn.dense(a, w, out_dtype="float32", precision=precision)
    out = te.compute((M, N), lambda i, j: te.max(c[i, j] + bias[j], 0.0).astype(dtype),
                     name="relu")
    return [a, w, bias, out]


@pytest.mark.parametrize("args", [(49, 24, 40, "float16"), (7, 40, 72, "bfloat16"),
                                  (16, 24, 24, "float32", "tf32")],
                         ids=["fp16_padded", "bf16_padded", "tf32"])
def test_gemm_sketch_pads_awkward_and_tf32_products(args):
    """Products no tile divides, or declared TF32, get ``tensorcore_gemm``: the model's
    valid states schedule, and they match numpy."""
    from ptxforge.autosched.tensorcore import TensorCoreGemmStep

    task = autosched.SearchTask(func=tc_gemm_layer, args=args, target=SM80)
    tc = len(task.sketches) - 1
    fp32 = autosched.SearchTask(func=tc_gemm_layer, args=(16, 24, 24, "float32"), target=SM80)
    assert not any(s.name.startswith("tensorcore") for s in fp32.sketches)  # not declared
    assert task.sketches[tc].name.startswith("tensorcore_gemm(")
    assert isinstance(task.sketches[tc].steps[0], TensorCoreGemmStep)
    rng = np.random.default_rng(2)
    pop = random_population(task, 300, rng)
    pop = pop[pop[:, 0] == tc]
    _, valid, est = population_features(task.models, pop, task.flop_ct, 132)
    assert valid.any() and np.isfinite(est[valid]).all()
    with roundtrip_skipped():  # checked on the two states built below
        for row in pop[valid][:10]:
            State.from_row(row, task).pipeline_text(task)
    want = "mma_m16n8k8_tf32_f32" if args[3] == "float32" else "mma_m16n8k16"
    for row in pop[valid][:2]:
        text = State.from_row(row, task).pipeline_text(task)
        assert want in text
        if args[3] == "float32":  # TF32 fragments from ldmatrix
            assert "ldmatrix_a_x4_tf32" in text and "load_a_tf32" not in text
        got, f32 = _run_on_sim(task, text, rng)
        a, w = f32[0], f32[1]
        if args[3] == "float32":
            a, w = dt.round_to(a, "tf32"), dt.round_to(w, "tf32")
        ref = np.maximum(a.astype(np.float64) @ w.astype(np.float64).T + f32[2], 0.0)
        np.testing.assert_allclose(got, ref, rtol=2e-2, atol=2e-2)


def test_gemm_sketch_split_k_states_compute_the_product():
    """An fp16 dense layer on the GEMM sketch (its only tensor-core sketch): its ``split_k``
    slot, the model's estimate of its states (valid ones schedule), and sampled states
    with split_k > 1 build (the parts on blockIdx.z) and match numpy."""
    from ptxforge.autosched.tensorcore import SPLIT_K_CHOICES, TensorCoreGemmStep

    task = autosched.SearchTask(func=tc_gemm_layer, args=(32, 32, 256, "float16"),
                                target=SM80)
    names = [s.name for s in task.sketches]
    assert names[-1] == "tensorcore_gemm(T_matmul_NT)"
    assert [n for n in names if n.startswith("tensorcore")] == names[-1:]
    tc = len(names) - 1
    sk = task.sketches[tc]
    step = sk.steps[0]
    assert isinstance(step, TensorCoreGemmStep)
    col = 1 + sk.slot_index[step.slot("split_k")]
    assert sk.slots[col - 1].choices == SPLIT_K_CHOICES  # K = 256: up to 8 parts
    rng = np.random.default_rng(4)
    pop = random_population(task, 1200, rng)
    pop = pop[(pop[:, 0] == tc) & (pop[:, col] > 0)]
    _, valid, est = population_features(task.models, pop, task.flop_ct, 132)
    assert valid.any() and np.isfinite(est[valid]).all()
    for row in pop[valid][:8]:  # the states the model accepts schedule
        State.from_row(row, task).pipeline_text(task)
    for row in pop[valid][:2]:
        state = State.from_row(row, task)
        split = SPLIT_K_CHOICES[row[col]]
        text = state.pipeline_text(task)
        assert "rfactor" in text and "implicit_gemm" in text
        sch = schedule_from_pipeline(task, text)
        mod = ptxforge.build(sch, task.tensors, target="sim")
        product = mod.device_module.kernels()[0]
        assert tuple(product.attrs.launch.grid)[2] == split
        host, f32 = _inputs(task.tensors[:-1], rng)
        out = np.zeros(task.tensors[-1].shape, "float16")
        mod(*host, out)
        ref = np.maximum(f32[0].astype(np.float64) @ f32[1].astype(np.float64).T + f32[2],
                         0.0)
        np.testing.assert_allclose(out.astype(np.float64), ref, rtol=2e-2, atol=2e-2)


def test_every_convolution_of_resnet18_in_fp16_gets_the_tensor_core_sketch():
    """ResNet-18's tasks in float16 (an NCHW network: the build converts it to NHWC): every
    convolution task gets ``tensorcore_conv`` and the classifier (1 x 1000 x 512)
    ``tensorcore_gemm``."""
    from ptxforge import graph

    net, params, _, _ = graph.get_network("resnet_v1-18", 1, "NCHW")
    tasks, _ = autosched.extract_tasks(net, params, SM80, precision="float16")
    convs = [t for t in tasks if "conv2d" in t.desc]
    assert len(convs) >= 10
    for t in convs:
        assert t.sketches[-1].name.startswith("tensorcore_conv("), t.desc
    (dense,) = [t for t in tasks if "dense" in t.desc]
    assert dense.sketches[-1].name.startswith("tensorcore_gemm("), dense.desc
