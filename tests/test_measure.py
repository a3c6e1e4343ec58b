"""measure/: error codes, builders, runners (simulator here, GPU under the gpu mark),
record files, the worker pool and the analytical model."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time

import numpy as np
import pytest
from ptxforge import te
from ptxforge.cli.main import main as ptxforge_cli
from ptxforge.measure import (
    BuildOptions,
    LocalBuilder,
    LocalRunner,
    MeasureErrorNo,
    MeasureInput,
    MeasureResult,
    RecordWriter,
    SimRunner,
    TaskSpec,
    best_records,
    build_candidate,
    default_reference_pipeline,
    distill,
    estimate,
    load_records,
    measure_batch,
)
from ptxforge.measure.check import compare
from ptxforge.measure.pool import Retire, WorkerPool
from ptxforge.passes import register_function_pass

# -- fixtures: small tasks ------------------------------------------------------------------


def add_one_task() -> TaskSpec:
    a = te.placeholder((256,), name="A")
    b = te.compute((256,), lambda i: a[i] + 1.0, name="B")
    return TaskSpec.from_tensors([a, b], "add_one")


ADD_ONE_PIPE = ('split(B.i, factors=[64]), bind(B.i.outer, "blockIdx.x"), '
                'bind(B.i.inner, "threadIdx.x")')


def matmul_task(n: int = 32) -> TaskSpec:
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return TaskSpec.from_tensors([a, b, c], f"matmul{n}")


MATMUL_PIPE = 'bind(C.i, "blockIdx.x"), bind(C.j, "threadIdx.x")'

OOB_TEXT = """@main(A: float32[64], B: float32[64]) attrs {"kind": "prim"} {
  for i in 64 {
    block B(vi: S[64] = i) {
      B[vi] = A[(vi + 1500000000)]
    }
  }
}"""


def oob_input() -> MeasureInput:
    """A kernel reading far outside its input: a fault on any GPU."""
    return MeasureInput(TaskSpec("oob", "cuda", OOB_TEXT, 64.0, "oob"),
                        'bind(B.i, "threadIdx.x")')


def hang_input() -> MeasureInput:
    """A kernel of 2**60 dependent additions per thread: it never finishes."""
    a = te.placeholder((64,), name="A")
    k1 = te.reduce_axis((0, 1 << 30), name="k1")
    k2 = te.reduce_axis((0, 1 << 30), name="k2")
    b = te.compute((64,), lambda i: te.sum(a[i], axis=[k1, k2]), name="B")
    return MeasureInput(TaskSpec.from_tensors([a, b], "hang"), 'bind(B.i, "threadIdx.x")')


@register_function_pass("test_measure_sleep", override=True)
def _sleep_pass(module, ctx):
    """Sleeps for a minute (a build that hangs)."""
    time.sleep(60)
    return module


@register_function_pass("test_measure_crash", override=True)
def _crash_pass(module, ctx):
    """Kills its process (a build that crashes)."""
    os.kill(os.getpid(), signal.SIGKILL)
    return module


# -- results and error codes ----------------------------------------------------------------


def test_error_codes_are_tvms():
    assert [(e.name, int(e)) for e in MeasureErrorNo] == [
        ("NO_ERROR", 0), ("INSTANTIATION_ERROR", 1), ("COMPILE_HOST", 2),
        ("COMPILE_DEVICE", 3), ("RUNTIME_DEVICE", 4), ("WRONG_ANSWER", 5),
        ("BUILD_TIMEOUT", 6), ("RUN_TIMEOUT", 7), ("UNKNOWN_ERROR", 8)]


def test_measure_result_repr_and_mean():
    ok = MeasureResult((2e-3, 4e-3), 0, "", 1.5, 1.0)
    assert ok.mean == pytest.approx(3e-3)
    assert repr(ok).startswith("MeasureResult(costs=(0.002, 0.004,), error_no=0")
    assert "estimated" not in repr(ok)
    est = dataclasses.replace(ok, estimated=True)
    assert "estimated=True" in repr(est)
    bad = MeasureResult((1e10,), 1, "ScheduleError: no loop x\nmore", 0.1, 1.0)
    assert bad.mean == 1e10
    assert "INSTANTIATION_ERROR('ScheduleError: no loop x')" in repr(bad)


def test_task_spec_round_trips_its_module():
    task = matmul_task(8)
    assert task.flop == 2 * 8 * 8 * 8
    assert str(task.module()) == task.module_text
    assert task.module() is task.module()  # parsed once per process


# -- building ---------------------------------------------------------------------------------


def test_build_candidate_makes_cubins_and_stats():
    res = build_candidate(MeasureInput(matmul_task(), MATMUL_PIPE))
    assert res.error_no == 0, res.error_msg
    art = res.artifact
    assert art.output_params == (2,)
    (k,) = art.kernels.values()
    assert k.cubin and k.resources.registers > 0
    assert {"parse", "apply", "lower", "llvm_ir", "ptx", "ptxas"} <= set(res.stage_seconds)
    (st,) = art.stats
    assert st.grid == (32, 1, 1) and st.block == (32, 1, 1)
    assert st.total_flops == pytest.approx(2 * 32**3)


def test_builder_workers_share_the_kernels_they_compile():
    builder = LocalBuilder(n_parallel=2, compile_to="ptx")
    inp = MeasureInput(matmul_task(), MATMUL_PIPE)
    (first,) = builder.build([inp])
    assert first.error_no == 0 and "ptx" in first.stage_seconds
    (k,) = first.artifact.kernels.values()
    assert not k.cache_hit
    shared = builder.options.kernel_cache_dir
    assert shared and os.listdir(shared)
    # another process building with the same options loads the kernel instead
    here = build_candidate(inp, builder.options)
    (k2,) = here.artifact.kernels.values()
    assert k2.cache_hit and "ptx" not in here.stage_seconds and k2.sources.get("ptx")
    again = builder.build([inp, inp])
    assert all(k.cache_hit for r in again for k in r.artifact.kernels.values())
    assert builder.stage_summary().endswith("kernels compiled 1, reused 2")
    builder.close()
    assert not os.path.exists(shared) and builder.options.kernel_cache_dir is None


@pytest.mark.parametrize("pipe, needle", [
    ('bind(C.nope, "threadIdx.x")', "nope"),
    ('fuse([C.i, C.j]), bind(C.i.j.fused, "threadIdx.x")', "1024"),
])
def test_invalid_schedules_are_instantiation_errors(pipe, needle):
    res = build_candidate(MeasureInput(matmul_task(64), pipe))
    assert res.error_no == MeasureErrorNo.INSTANTIATION_ERROR
    assert needle in res.error_msg and res.artifact is None


def test_missing_ptxas_is_a_device_compile_error(monkeypatch):
    monkeypatch.setenv("PTXFORGE_PTXAS", "/nonexistent/ptxas")
    res = build_candidate(MeasureInput(add_one_task(), ADD_ONE_PIPE))
    assert res.error_no == MeasureErrorNo.COMPILE_DEVICE
    assert "ptxas was not found" in res.error_msg
    # the simulator needs no cubin
    res = build_candidate(MeasureInput(add_one_task(), ADD_ONE_PIPE), BuildOptions(
        compile_to="ir"))
    assert res.error_no == 0 and res.artifact.kernels == {}


def test_local_builder_survives_hangs_and_crashes():
    task = add_one_task()
    inputs = [MeasureInput(task, ADD_ONE_PIPE),
              MeasureInput(task, "test_measure_sleep(), " + ADD_ONE_PIPE),
              MeasureInput(task, "test_measure_crash(), " + ADD_ONE_PIPE),
              MeasureInput(task, ADD_ONE_PIPE.replace("64", "128"))]
    builder = LocalBuilder(timeout=3, n_parallel=2, compile_to="ir")
    try:
        t0 = time.time()
        res = builder.build(inputs)
        assert time.time() - t0 < 20
    finally:
        builder.close()
    assert [r.error_no for r in res] == [0, MeasureErrorNo.BUILD_TIMEOUT,
                                         MeasureErrorNo.UNKNOWN_ERROR, 0]
    assert "died" in res[2].error_msg
    assert res[3].artifact.stats[0].block == (128, 1, 1)
    assert "builds, per candidate" in builder.stage_summary()


# -- the simulator runner ---------------------------------------------------------------------


def test_sim_runner_checks_and_estimates():
    task = matmul_task()
    good = MeasureInput(task, MATMUL_PIPE)
    worse = MeasureInput(task, 'bind(C.i, "threadIdx.x")')  # one block of 32 threads
    builder = LocalBuilder(n_parallel=0, compile_to="ir")
    runner = SimRunner()
    try:
        res = measure_batch([good, worse], builder, runner)
    finally:
        runner.close()
    assert [r.error_no for r in res] == [0, 0]
    assert all(r.estimated and r.correctness == "passed" for r in res)
    assert "model" in res[0].device
    assert res[0].mean < res[1].mean


def test_sim_runner_reports_faults_hangs_and_skips():
    runner = SimRunner(timeout=5, max_sim_seconds=2)
    builder = LocalBuilder(n_parallel=0, compile_to="ir")
    big = MeasureInput(matmul_task(), MATMUL_PIPE)
    try:
        res = measure_batch([oob_input(), hang_input(), big], builder, runner)
        assert res[0].error_no == MeasureErrorNo.RUNTIME_DEVICE
        assert "illegal memory access" in res[0].error_msg
        assert res[1].error_no == MeasureErrorNo.RUN_TIMEOUT
        assert res[2].error_no == 0 and res[2].correctness == "passed"
        small = SimRunner(max_sim_seconds=1e-9)
        (skipped,) = measure_batch([big], builder, small)
        assert skipped.error_no == 0 and skipped.correctness.startswith("skipped")
    finally:
        runner.close()


def test_sim_runner_catches_wrong_answers():
    # a candidate whose kernels compute something else than the task
    task = add_one_task()
    a = te.placeholder((256,), name="A")
    other = TaskSpec.from_tensors([a, te.compute((256,), lambda i: a[i] * 2.0, name="B")],
                                  "times_two")
    wrong = build_candidate(MeasureInput(other, ADD_ONE_PIPE), BuildOptions(compile_to="ir"))
    runner = SimRunner()
    try:
        (res,) = runner.run([MeasureInput(task, ADD_ONE_PIPE)], [wrong])
    finally:
        runner.close()
    assert res.error_no == MeasureErrorNo.WRONG_ANSWER
    assert "differ" in res.error_msg


def test_default_reference_pipeline_matches_numpy():
    from ptxforge import backend_sim, ops
    from ptxforge.ops.testing import conv2d_nchw_python
    from ptxforge.passes.lower import lowering_pipeline

    data = te.placeholder((1, 3, 6, 6), name="data")
    kernel = te.placeholder((4, 3, 3, 3), name="kernel")
    out = ops.nn.conv2d_nchw(data, kernel, 1, 1)
    task = TaskSpec.from_tensors([data, kernel, out], "conv")
    pipe = default_reference_pipeline(task.module())
    dev = lowering_pipeline()(pipe(task.module()))
    assert len(dev.kernels()) == 2  # padding, then the convolution
    rng = np.random.default_rng(0)
    d, w = rng.random((1, 3, 6, 6), "float32"), rng.random((4, 3, 3, 3), "float32")
    o = np.zeros((1, 4, 6, 6), "float32")
    backend_sim.run(dev, [d, w, o])
    np.testing.assert_allclose(o, conv2d_nchw_python(d, w, 1, 1), rtol=1e-5)


def test_compare_reports_the_first_mismatch():
    ref = np.arange(6, dtype="float32").reshape(2, 3)
    assert compare([ref.copy()], [ref], ["C"]) == ""
    bad = ref.copy()
    bad[1, 2] = np.nan
    msg = compare([bad], [ref], ["C"])
    assert "1 of 6" in msg and "[1, 2]" in msg


def test_compare_judges_a_wide_output_of_16_bit_operands_by_their_precision():
    """The last layer of a mixed-precision BERT: a float16 product with a bias and a
    residual added in float16, cast to float32. Two schedules of it differ by two units of
    float16 (782 against 783, where a unit is 0.5); judged as float32 every tensor-core
    schedule of that task was wrong, and tuning kept a CUDA-core kernel 18 times slower."""
    ref = np.full((4, 8), 783.0, np.float32)
    out = ref.copy()
    out[1, 3] = 782.0
    assert "1 of 32" in compare([out], [ref], ["T_cast"])
    assert "1 of 32" in compare([out], [ref], ["T_cast"], ["float32", "float32"])
    assert compare([out], [ref], ["T_cast"], ["float16", "float16", "float32"]) == ""
    out[2, 5] = 779.0  # eight units of float16: wrong whatever the operands
    assert "1 of 32" in compare([out], [ref], ["T_cast"], ["float16", "float32"])
    out[2, 5] = 783.0
    out[0, 0] = 774.0  # 1.2%: within bfloat16's two units, not float16's
    assert "1 of 32" in compare([out], [ref], ["T_cast"], ["float16", "float32"])
    assert compare([out], [ref], ["T_cast"], ["bfloat16", "float32"]) == ""


def test_the_simulator_runner_judges_a_float32_output_of_float16_operands_in_float16():
    """A candidate one or two units of float16 away from the reference (as a schedule that
    sums in another order is) passes when the operands are float16, and the same distance
    is wrong when they are float32."""
    from ptxforge.measure.check import computed_in

    assert computed_in(["float32", "float16"]) == "float16"
    assert computed_in(["float16", "bfloat16"]) == "bfloat16"
    assert computed_in(["float32", "int64"]) is None

    def task(dtype, nudge):
        a = te.placeholder((256,), dtype, name="A")
        if nudge:  # about 1.5e-3 away, rounded to float16: 1 to 2 units of it
            b = te.compute((256,), lambda i: (a[i].astype("float32") * 1.0015)
                           .astype("float16").astype("float32"), name="B")
        else:
            b = te.compute((256,), lambda i: a[i].astype("float32"), name="B")
        return TaskSpec.from_tensors([a, b], f"widen_{dtype}_{nudge}")

    opts = BuildOptions(compile_to="ir")
    runner = SimRunner()
    try:
        for dtype, verdict in (("float16", MeasureErrorNo.NO_ERROR),
                               ("float32", MeasureErrorNo.WRONG_ANSWER)):
            nudged = build_candidate(MeasureInput(task(dtype, True), ADD_ONE_PIPE), opts)
            (res,) = runner.run([MeasureInput(task(dtype, False), ADD_ONE_PIPE)], [nudged])
            assert res.error_no == verdict, (dtype, res.error_msg)
    finally:
        runner.close()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_compare_is_isclose_with_equal_nans_chunk_by_chunk(dtype, monkeypatch):
    from ptxforge.measure import check

    monkeypatch.setattr(check, "CHUNK", 1000)  # several chunks, a mismatch in a later one
    rng = np.random.default_rng(3)
    for _ in range(20):
        n = int(rng.integers(1, 4000))
        ref = rng.standard_normal(n).astype(dtype)
        out = (ref + rng.standard_normal(n) * rng.choice([0, 1e-6, 1e-4, 1e-2], n)).astype(dtype)
        at = rng.choice(n, min(n, 16), replace=False)
        ref[at[:4]], out[at[:2]] = np.inf, np.inf  # equal infinities only are close
        ref[at[4:8]], out[at[4:6]] = np.nan, np.nan  # so are two NaNs
        out[at[8:10]], ref[at[10:12]] = -np.inf, -np.inf
        finite = np.isfinite(ref)
        scale = float(np.abs(ref[finite]).max()) if finite.any() else 0.0
        want = ~np.isclose(out, ref, rtol=check.RTOL, equal_nan=True,
                           atol=check.ATOL_FRACTION * max(scale, 1e-30))
        msg = compare([out.reshape(-1, 1)], [ref.reshape(-1, 1)], ["C"])
        if not want.any():
            assert msg == ""
            continue
        first = int(np.flatnonzero(want)[0])
        assert f"{int(want.sum())} of {n} elements" in msg and f"[{first}, 0]" in msg


# -- the analytical model ---------------------------------------------------------------------


def test_kernel_stats_see_coalescing_and_work():
    task = matmul_task(256)
    ir = BuildOptions(compile_to="ir")
    coalesced = build_candidate(MeasureInput(task, MATMUL_PIPE), ir)
    strided = build_candidate(MeasureInput(
        task, 'reorder([C.j, C.i]), bind(C.j, "blockIdx.x"), bind(C.i, "threadIdx.x")'), ir)
    (a,) = coalesced.artifact.stats
    (b,) = strided.artifact.stats
    assert a.total_flops == b.total_flops == 2 * 256**3
    # threads along j read B and write C contiguously (A is a broadcast); along i both A
    # and C are strided, one 32-byte sector per thread and access
    assert b.global_sector_bytes > 4 * a.global_sector_bytes
    assert estimate.module_seconds((a,)) < estimate.module_seconds((b,))


def test_estimate_refuses_what_cannot_launch():
    from ptxforge.measure.kernel_stats import KernelStats

    st = KernelStats("k", (1, 1, 1), (128, 1, 1), 300 * 1024, 0, 1.0, 1.0, 4.0, 4.0, 4.0,
                     0.0, 0.0, 1024, 10.0)
    assert estimate.blocks_per_sm(st, 32) == 0
    assert estimate.kernel_seconds(st) == float("inf")
    ok = dataclasses.replace(st, shared_bytes=1024)
    more = dataclasses.replace(ok, grid=(10000, 1, 1))
    assert estimate.kernel_seconds(ok) < estimate.kernel_seconds(more)
    assert estimate.blocks_per_sm(ok, 255) == 2  # 256 allocated x 128 threads = half an SM
    wide = dataclasses.replace(ok, block=(512, 1, 1))
    assert estimate.blocks_per_sm(wide, 255) == 0


# -- records ----------------------------------------------------------------------------------


def _records(tmp_path):
    task = add_one_task()
    other = matmul_task(8)
    inputs = [MeasureInput(task, "p1", {"k": 1}), MeasureInput(task, "p2", {"k": 2}),
              MeasureInput(other, "p3"), MeasureInput(task, "p4")]
    results = [MeasureResult((3e-3,), 0, "", 1.0, 10.0),
               MeasureResult((1e-3, 2e-3), 0, "", 1.0, 11.0, estimated=True,
                             correctness="passed"),
               MeasureResult((5e-3,), 0, "", 1.0, 12.0, device="gpu0"),
               MeasureResult((1e10,), 1, "bad\nconfig", 0.1, 13.0)]
    path = tmp_path / "tune.log"
    writer = RecordWriter(path)
    writer(inputs[:2], results[:2])
    writer(inputs[2:], results[2:])
    return path, inputs, results


def test_records_round_trip(tmp_path):
    path, inputs, results = _records(tmp_path)
    lines = path.read_text().splitlines()
    assert len(lines) == 4 and all(json.loads(x)["v"] == 1 for x in lines)
    loaded = load_records(path)
    assert [r for _, r in loaded] == results
    assert [(i.pipeline_text, i.payload, i.task.workload_key) for i, _ in loaded] == [
        (i.pipeline_text, i.payload, i.task.workload_key) for i in inputs]
    assert loaded[0][0].task.flop == inputs[0].task.flop


def test_corrupt_and_truncated_lines_are_skipped_with_a_warning(tmp_path):
    path, _, _ = _records(tmp_path)
    text = path.read_text().splitlines()
    path.write_text(text[0] + "\n{not json\n" + text[1] + "\n" + text[2][: len(text[2]) // 2])
    with pytest.warns(RuntimeWarning) as caught:
        loaded = load_records(path)
    assert len(loaded) == 2
    messages = [str(w.message) for w in caught]
    assert any(f"{path}:2: skipping a corrupt record" in m for m in messages)
    assert any(f"{path}:4: skipping a truncated record" in m for m in messages)


def test_distill_keeps_the_best_per_workload(tmp_path, capsys):
    path, inputs, _ = _records(tmp_path)
    best = best_records(path)
    # a measured result beats an estimated one, whatever the numbers
    assert best[("add_one", "cuda")][0].pipeline_text == "p1"
    out = tmp_path / "best.log"
    assert distill(path, out) == 2
    assert sorted(i.pipeline_text for i, _ in load_records(out)) == ["p1", "p3"]
    out2 = tmp_path / "best2.log"
    assert ptxforge_cli(["records", "distill", str(path), "-o", str(out2)]) == 0
    assert out2.read_text() == out.read_text()
    assert "2 workloads" in capsys.readouterr().out


# -- the worker pool --------------------------------------------------------------------------


def _square(x):
    return x * x


def _fail(x):
    raise ValueError(f"bad {x}")


def _crash(x):
    os.kill(os.getpid(), signal.SIGKILL)


def _sleep(x):
    time.sleep(x)
    return x


def _retire(x):
    return Retire(os.getpid())


def test_pool_isolates_failures():
    with WorkerPool(2) as pool:
        out = pool.run([(1, _square, (3,)), (2, _fail, (4,)), (3, _crash, (0,)),
                        (4, _sleep, (30,)), (5, _square, (5,))], timeout=1.5)
        assert [o.status for o in out] == ["ok", "error", "died", "timeout", "ok"]
        assert out[0].value == 9 and out[4].value == 25
        assert out[1].exc_type == "ValueError" and "bad 4" in out[1].error
        assert "signal 9" in out[2].error
        assert pool.restarts == 2
        first = pool.run([(6, _retire, (0,))])[0].value
        second = pool.run([(7, _retire, (0,))])[0].value
        assert first != second  # a retired worker is replaced


# -- the GPU runner ---------------------------------------------------------------------------


def _has_gpu() -> bool:
    try:
        from ptxforge.backend_ptx import cuda

        cuda(0)
        return True
    except Exception:
        return False


@pytest.mark.skipif(_has_gpu(), reason="checks the behaviour on a machine without a GPU")
def test_local_runner_without_a_gpu_says_so():
    runner = LocalRunner(timeout=5)
    inputs = [MeasureInput(add_one_task(), ADD_ONE_PIPE)] * 2
    try:
        res = measure_batch(inputs, LocalBuilder(n_parallel=1), runner)
    finally:
        runner.close()
    assert [r.error_no for r in res] == [MeasureErrorNo.RUNTIME_DEVICE] * 2
    assert "could not start" in res[0].error_msg and "NoGPUError" in res[0].error_msg
    # a build without cubins is refused before any GPU is involved
    (res,) = measure_batch(inputs[:1], LocalBuilder(n_parallel=0, compile_to="ir"),
                           LocalRunner())
    assert res.error_no == MeasureErrorNo.COMPILE_DEVICE and "cubin" in res.error_msg


@pytest.mark.gpu
def test_local_runner_times_a_kernel():
    task = matmul_task(256)
    inp = MeasureInput(task, 'split(C.j, factors=[64]), bind(C.i, "blockIdx.y"), '
                             'bind(C.j.outer, "blockIdx.x"), bind(C.j.inner, "threadIdx.x")')
    runner = LocalRunner(number=5, repeat=3, timeout=30)
    builder = LocalBuilder(n_parallel=1)
    try:
        res = measure_batch([inp], builder, runner)[0]
    finally:
        runner.close()
        builder.close()
    assert res.error_no == 0, res.error_msg
    assert len(res.costs) == 3 and all(0 < c < 0.1 for c in res.costs)
    assert not res.estimated and res.device


@pytest.mark.gpu
def test_local_runner_recovers_from_faults_and_hangs():
    good = MeasureInput(add_one_task(), ADD_ONE_PIPE)
    runner = LocalRunner(timeout=8)
    builder = LocalBuilder(n_parallel=2)
    try:
        res = measure_batch([good, oob_input(), good, hang_input(), good], builder, runner)
    finally:
        runner.close()
        builder.close()
    codes = [r.error_no for r in res]
    assert codes == [0, MeasureErrorNo.RUNTIME_DEVICE, 0, MeasureErrorNo.RUN_TIMEOUT, 0], [
        r.error_msg for r in res]


@pytest.mark.gpu
def test_local_runner_checks_correctness():
    task = matmul_task(64)
    inp = MeasureInput(task, 'bind(C.i, "blockIdx.x"), bind(C.j, "threadIdx.x")')
    a = te.placeholder((64, 64), name="A")
    b = te.placeholder((64, 64), name="B")
    k = te.reduce_axis((0, 64), name="k")
    c = te.compute((64, 64), lambda i, j: te.sum(a[i, k] * b[j, k], axis=k), name="C")
    other = TaskSpec.from_tensors([a, b, c], "transposed")
    good = build_candidate(inp)
    wrong = build_candidate(MeasureInput(other, inp.pipeline_text))
    runner = LocalRunner(check_correctness=True, timeout=30)
    try:
        res = runner.run([inp, inp], [good, wrong])
    finally:
        runner.close()
    assert res[0].error_no == 0 and res[0].correctness == "passed"
    assert res[1].error_no == MeasureErrorNo.WRONG_ANSWER
