"""cp.async: the IR ops, the async_copy schedule pass and its lowering, the simulator's
model of copies in flight, and PTX code generation."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import backend_sim, te
from ptxforge.backend_ptx import find_ptxas
from ptxforge.backend_ptx.compile import compile_kernel
from ptxforge.backend_ptx.exprgen import CodegenError
from ptxforge.backend_sim.errors import SimMemoryError, SimRaceError
from ptxforge.ir.expr import IRError
from ptxforge.ir.parser import parse_module, roundtrip_check
from ptxforge.ir.verify import verify

needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas is not installed here")


def flat(module) -> str:
    return "\n".join(line.strip() for line in str(module).splitlines())


# ---------------------------------------------------------------------------------------
# schedules


def matmul_schedule(M=64, N=64, K=64, BM=32, BN=32, BK=8, vec=4, use_async=True, stages=0,
                    dtype="float32"):
    """A CUDA-core tiled matmul: 8x8 threads each computing 4x4 outputs, A and B tiles in
    shared memory fetched by all threads with ``vec``-wide vectorized copies."""
    A = te.placeholder((M, K), name="A", dtype=dtype)
    B = te.placeholder((K, N), name="B", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(
        A[i, k].astype("float32") * B[k, j].astype("float32"), axis=k), name="C")
    s = te.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    bi, ii = s[C].split(i, factor=BM)
    bj, jj = s[C].split(j, factor=BN)
    ty, ti = s[C].split(ii, factor=BM // 8)
    tx, tj = s[C].split(jj, factor=BN // 8)
    s[C].reorder(bi, bj, ty, tx, ti, tj)
    s[C].bind(bi, te.thread_axis("blockIdx.y"))
    s[C].bind(bj, te.thread_axis("blockIdx.x"))
    s[C].bind(ty, te.thread_axis("threadIdx.y"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], tx)
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=BK)
    s[CL].reorder(ko, ki, *s[CL].op.axis)
    for ax in (*s[CL].op.axis, ti, tj):  # accumulators stay in registers
        (s[CL] if ax.stage == CL.block else s[C]).unroll(ax)
    for X in (AS, BS):
        s[X].compute_at(s[CL], ko)
        f = s[X].fuse(*s[X].op.axis)
        f, v = s[X].split(f, factor=vec)
        f, t = s[X].split(f, factor=64)
        t8, t1 = s[X].split(t, factor=8)
        s[X].bind(t1, te.thread_axis("threadIdx.x"))
        s[X].bind(t8, te.thread_axis("threadIdx.y"))
        s[X].vectorize(v)
        if use_async:
            s[X].async_copy()
    if stages:
        s[CL].pipeline(ko, stages=stages)
    return s, [A, B, C]


def run_matmul(mod, M, N, K, dtype="float32", seed=0):
    rng = np.random.default_rng(seed)
    a = rng.random((M, K)).astype(dtype)
    b = rng.random((K, N)).astype(dtype)
    c = np.zeros((M, N), "float32")
    backend_sim.run(mod, [a, b, c])
    return c, a.astype("float64") @ b.astype("float64")


# ---------------------------------------------------------------------------------------
# IR


KERNEL = '''@main(A: float32[128], B: float32[128]) attrs {"kind": "host"} {
  launch k(A, B)
}

@k(A: float32[128], B: float32[128]) attrs {"kind": "kernel", "grid": [2, 1, 1], \
"block": [4, 1, 1]} {
  for b in 2 thread(blockIdx.x) {
    alloc S: float32[64] shared {
      for t in 4 thread(threadIdx.x) {
        async_copy(S[(t * 4)], A[((b * 64) + (t * 4))], 16)
        async_commit
        async_copy(S[((t * 4) + 16)], A[(((b * 64) + (t * 4)) + 16)], 16, select((t < 2), 16, 0))
        async_commit
        async_wait(0)
        barrier
        B[((b * 64) + t)] = S[(t + 1)]
        B[(((b * 64) + t) + 16)] = S[(t + 18)]
        B[(((b * 64) + t) + 32)] = S[(t + 28)]
      }
    }
  }
}
'''


def test_async_ops_print_parse_and_verify():
    mod = parse_module(KERNEL)
    verify(mod)
    roundtrip_check(mod)
    text = str(mod)
    assert "async_copy(S[(t * 4)], A[((b * 64) + (t * 4))], 16)" in text
    assert "16, select((t < 2), 16, 0))" in text
    assert "async_commit" in text and "async_wait(0)" in text


def test_async_copy_rejects_bad_sizes_and_scopes():
    with pytest.raises(Exception, match="cp.async copies 4, 8, 16 bytes"):
        parse_module(KERNEL.replace("], 16)", "], 12)", 1))
    bad = KERNEL.replace("alloc S: float32[64] shared", "alloc S: float32[64] local")
    with pytest.raises(IRError, match="async_copy destination S is in local memory"):
        verify(parse_module(bad))


def _run(text):
    a = np.arange(128, dtype=np.float32)
    b = np.zeros(128, np.float32)
    backend_sim.run(parse_module(text), [a, b])
    return a, b


def test_simulator_lands_copies_at_the_wait_and_zero_fills():
    a, b = _run(KERNEL)
    for blk in range(2):
        o = blk * 64
        assert list(b[o:o + 4]) == list(a[o + 1:o + 5])
        assert list(b[o + 16:o + 20]) == list(a[o + 18:o + 22])  # t < 2 copied these
        assert list(b[o + 32:o + 36]) == [0, 0, 0, 0]  # zero-filled: src-size 0


def test_simulator_reports_a_wait_that_does_not_cover_a_read():
    missing = KERNEL.replace("        async_wait(0)\n", "")
    with pytest.raises(SimRaceError, match=r"reads S\[1\] while a cp.async to it is in flight"):
        _run(missing)
    # wait_group 1 leaves the second group in flight: reading it is an error ...
    with pytest.raises(SimRaceError, match=r"reads S\[18\] while a cp.async"):
        _run(KERNEL.replace("async_wait(0)", "async_wait(1)"))
    # ... and a copy waited for but read by another thread needs a barrier
    with pytest.raises(SimRaceError, match="missing barrier"):
        _run(KERNEL.replace("        barrier\n", ""))


def test_simulator_rejects_misaligned_and_out_of_bounds_copies():
    with pytest.raises(SimMemoryError, match="misaligned address.*cp.async of 16 bytes with "
                                             r"destination S\[1\]"):
        _run(KERNEL.replace("async_copy(S[(t * 4)]", "async_copy(S[((t * 4) + 1)]"))
    with pytest.raises(SimMemoryError, match=r"cp.async source A\[.*outside \[0, 128\)"):
        _run(KERNEL.replace("A[(((b * 64) + (t * 4)) + 16)], 16, select((t < 2), 16, 0)",
                            "A[(((b * 64) + (t * 4)) + 116)], 16"))


def test_copy_issued_over_an_unsynchronized_read_is_a_race():
    body = """        B[t] = S[(t + 16)]
        if (t == 0) {
          async_copy(S[16], A[0], 16)
        }
        async_commit
        async_wait(0)
"""
    start = KERNEL.index("        async_copy(S[(t * 4)]")
    end = KERNEL.index("        barrier\n")
    with pytest.raises(SimRaceError, match=r"issues a cp.async to S\[1[789]\], which thread"):
        _run(KERNEL[:start] + body + KERNEL[end:])


def test_two_threads_copying_different_values_to_one_element_conflict():
    text = KERNEL.replace("async_copy(S[(t * 4)], A[((b * 64) + (t * 4))], 16)",
                          "async_copy(S[0], A[((b * 64) + (t * 4))], 16)")
    with pytest.raises(SimRaceError, match=r"conflicting writes: .* lands a different value on "
                                           r"S\[0\]"):
        _run(text)


# ---------------------------------------------------------------------------------------
# schedule and lowering


@pytest.mark.parametrize("vec,width", [(4, 16), (2, 8), (1, 4)])
def test_async_copy_width_follows_the_vector_loop(vec, width):
    s, args = matmul_schedule(vec=vec)
    assert "async_copy(A.shared)" in s.pipeline.text
    mod = ptxforge.lower(s, args)
    text = flat(mod)
    copies = [ln for ln in text.splitlines() if ln.startswith("async_copy(")]
    assert copies and all(ln.endswith(f", {width})") for ln in copies)
    # commit and wait come after the copies and before the barrier and the reads
    assert "async_commit\nasync_wait(0)\nbarrier\nfor k.inner" in text
    c, ref = run_matmul(mod, 64, 64, 64)
    np.testing.assert_allclose(c, ref, rtol=1e-5)


@pytest.mark.parametrize("dtype,vec,bk,K", [("float32", 4, 8, 44), ("float16", 8, 16, 40)])
def test_async_copy_tails_read_part_and_zero_fill_the_rest(dtype, vec, bk, K):
    M, N = 60, 56  # rows of N and K elements stay 16-byte aligned
    s, args = matmul_schedule(M, N, K, BK=bk, vec=vec, dtype=dtype)
    text = flat(ptxforge.lower(s, args))
    copies = [ln for ln in text.splitlines() if ln.startswith("async_copy(")]
    # whole 16-byte copies whose src-size counts the elements inside the matrix
    assert len(copies) == 2 and all(", 16, (max(min(" in ln for ln in copies)
    mod = ptxforge.lower(s, args)
    c, ref = run_matmul(mod, M, N, K, dtype)
    np.testing.assert_allclose(c, ref, rtol=1e-5)


def test_partial_src_size_in_the_simulator():
    text = KERNEL.replace("A[((b * 64) + (t * 4))], 16)", "A[((b * 64) + (t * 4))], 16, 8)")
    a, b = _run(text)
    assert list(b[:4]) == [1, 0, 0, 4]  # S[1..4]: element 1 read, 2 and 3 zero, 4 read
    with pytest.raises(SimMemoryError, match="reads 6 bytes; the src-size must be whole "
                                             "float32 elements from 0 to 16"):
        _run(KERNEL.replace("A[((b * 64) + (t * 4))], 16)", "A[((b * 64) + (t * 4))], 16, 6)"))


def test_async_copy_fp16_copies_16_bytes_or_refuses_2():
    s, args = matmul_schedule(BK=16, vec=8, dtype="float16")
    mod = ptxforge.lower(s, args)
    copies = [ln for ln in flat(mod).splitlines() if ln.startswith("async_copy(")]
    assert len(copies) == 2 and all(ln.endswith(", 16)") for ln in copies)
    c, ref = run_matmul(mod, 64, 64, 64, "float16")
    np.testing.assert_allclose(c, ref, rtol=1e-5)
    s, args = matmul_schedule(BK=16, vec=1, dtype="float16")
    with pytest.raises(IRError, match="float16 is 2 bytes, and cp.async copies 4, 8 or 16"):
        ptxforge.lower(s, args)


def test_async_copy_needs_a_shared_stage():
    s, args = matmul_schedule(use_async=False)
    C = args[2]
    with pytest.raises(IRError, match="async_copy C: the stage writes C in global memory"):
        s[C].async_copy()


# ---------------------------------------------------------------------------------------
# PTX


@needs_ptxas
@pytest.mark.parametrize("sm", ["sm_80", "sm_90"])
def test_async_copy_ptx_assembles(sm):
    s, args = matmul_schedule()
    mod = ptxforge.lower(s, args)
    k = compile_kernel(mod.kernels()[0], sm, cache=False)
    ptx = k.get_source("ptx")
    assert "cp.async.cg.shared.global [" in ptx and ", 16;" in ptx
    assert "cp.async.commit_group" in ptx and "cp.async.wait_group" in ptx
    assert k.cubin[:4] == b"\x7fELF"


def test_zero_fill_copy_uses_the_src_size_form_and_sm75_is_refused():
    mod = parse_module(KERNEL)
    k = compile_kernel(mod["k"], "sm_90", stop_after="ptx", cache=False)
    ptx = k.get_source("ptx")
    assert "cp.async.cg.shared.global" in ptx
    assert any(ln.count(",") == 3 for ln in ptx.splitlines() if "cp.async.cg" in ln)
    with pytest.raises(CodegenError, match="cp.async needs sm_80 or later"):
        compile_kernel(mod["k"], "sm_75", stop_after="ptx", cache=False)


# ---------------------------------------------------------------------------------------
# software pipelining


@pytest.mark.parametrize("stages,shape", [
    (2, (64, 64, 64)), (3, (64, 64, 64)), (4, (60, 56, 44)), (3, (60, 56, 44)),
    (5, (64, 64, 24)), (4, (64, 64, 8)),
])
def test_pipelined_matmul_matches_numpy(stages, shape):
    M, N, K = shape
    s, args = matmul_schedule(M, N, K, stages=stages)
    assert f"software_pipeline(C.local.k.outer, {stages})" in s.pipeline.text
    mod = ptxforge.lower(s, args)
    c, ref = run_matmul(mod, M, N, K)
    np.testing.assert_allclose(c, ref, rtol=1e-5)


def test_pipeline_ir_prologue_wait_barrier_fetch_ahead_compute():
    s, args = matmul_schedule(stages=3)
    mod = ptxforge.lower(s, args)
    text = flat(mod)
    k = mod.kernels()[0]
    assert "alloc A.shared: float32[768] shared" in text  # 3 slots of 256
    # prologue: two groups, tiles 0 and 1 in slots 0 and 1
    head = text[:text.index("for k.outer in 8")]
    assert head.count("async_copy(") == 4 and head.count("async_commit") == 2
    assert "A.shared[(((ax0.inner.outer * 32) + (ax1.inner.outer * 4)) + 256)]" in head
    body = text[text.index("for k.outer in 8"):]
    assert body.startswith("for k.outer in 8 {\nasync_wait(1)\nbarrier\nif (k.outer < 6) {\n"
                           "async_copy(B.shared[")
    assert "(floormod((k.outer + 2), 3) * 256)" in body and "floormod(k.outer, 3) * 256" in body
    assert body.count("barrier") == 1 and "}\nasync_wait(0)\n" in body
    assert k.shared_bytes == 2 * 3 * 256 * 4


def test_pipeline_of_plain_shared_stages_has_no_groups():
    s, args = matmul_schedule(M=60, N=56, K=44, use_async=False, stages=2)
    mod = ptxforge.lower(s, args)
    assert "async" not in flat(mod).replace('"async_copy"', "")
    c, ref = run_matmul(mod, 60, 56, 44)
    np.testing.assert_allclose(c, ref, rtol=1e-5)


def test_simulator_catches_a_broken_pipeline():
    s, args = matmul_schedule(stages=3)
    text = str(ptxforge.lower(s, args))
    # waiting for all but two groups leaves this iteration's tile in flight
    with pytest.raises(SimRaceError, match=r"cp.async not waited for.*reads [AB].shared"):
        run_matmul(parse_module(text.replace("async_wait(1)", "async_wait(2)")), 64, 64, 64)
    # without the barrier, other threads' copies are read unsynchronized and slots are
    # overwritten while being read
    broken = text.replace("async_wait(1)\n                  barrier\n", "async_wait(1)\n")
    assert broken != text
    with pytest.raises(SimRaceError, match="missing barrier"):
        run_matmul(parse_module(broken), 64, 64, 64)


def test_pipeline_legality_errors():
    s, args = matmul_schedule(stages=0)
    with pytest.raises(IRError, match="stages=6; use 2 to 5"):
        s[s.outputs[0]].pipeline(s[s.outputs[0]].op.axis[0], stages=6)
    with pytest.raises(IRError, match="the loop is thread; only a sequential loop"):
        s["C"].pipeline("C.ax0.outer", stages=2)
    # the output's loop loads no shared stage
    s["C"].pipeline("C.ax0.inner.inner", stages=2)
    with pytest.raises(IRError, match="loads no shared-memory stage; pipeline the loop that the "
                                      "shared stages are computed at"):
        ptxforge.lower(s, args)


def test_pipeline_shared_memory_limit():
    from ptxforge.target import Target

    s, args = matmul_schedule(BM=32, BN=32, BK=128, stages=5, M=64, N=64, K=640)
    with Target("cuda -arch=sm_86"):
        with pytest.raises(IRError, match=r"need 163840 bytes of shared memory per block; the "
                                          r"target allows 101376"):
            ptxforge.lower(s, args)


def test_pipeline_above_48k_takes_dynamic_shared_memory():
    s, args = matmul_schedule(BM=32, BN=32, BK=64, stages=5, M=64, N=64, K=320)
    mod = ptxforge.lower(s, args)
    assert mod.kernels()[0].attrs.launch.dynamic_shared_bytes == 2 * 5 * 32 * 64 * 4
    c, ref = run_matmul(mod, 64, 64, 320)
    np.testing.assert_allclose(c, ref, rtol=1e-5)


@needs_ptxas
def test_pipelined_ptx_assembles_for_sm80_and_sm90():
    s, args = matmul_schedule(M=60, N=56, K=44, stages=3)
    kern = ptxforge.lower(s, args).kernels()[0]
    for sm in ("sm_80", "sm_90"):
        k = compile_kernel(kern, sm, cache=False)
        ptx = k.get_source("ptx")
        assert "cp.async.wait_group \t1;" in ptx or "cp.async.wait_group 1;" in ptx
        assert "cp.async.commit_group" in ptx and k.cubin[:4] == b"\x7fELF"


# ---------------------------------------------------------------------------------------
# GPU

GPU_CASES = [(0, False), (0, True), (2, True), (3, True), (4, True), (3, False)]


def _gpu_matmul(stages, use_async, M, N, K):
    from ptxforge.backend_ptx import compile_module

    s, args = matmul_schedule(M, N, K, BM=64, BN=64, BK=16, stages=stages,
                              use_async=use_async)
    return compile_module(ptxforge.lower(s, args))


@pytest.mark.gpu
@pytest.mark.parametrize("stages,use_async", GPU_CASES)
@pytest.mark.parametrize("shape", [(1024, 1024, 1024), (1000, 968, 1000)])
def test_pipelined_matmul_on_the_gpu_matches_numpy(stages, use_async, shape):
    from ptxforge.backend_ptx import array, cuda, empty

    M, N, K = shape
    dev = cuda(0)
    loaded = _gpu_matmul(stages, use_async, M, N, K).load(dev)
    rng = np.random.default_rng(1)
    a = rng.random((M, K)).astype("float32")
    b = rng.random((K, N)).astype("float32")
    c = empty((M, N), "float32", dev)
    loaded(array(a, dev), array(b, dev), c)
    np.testing.assert_allclose(c.numpy(), a.astype("f8") @ b.astype("f8"), rtol=1e-4)


@pytest.mark.gpu
def test_pipelined_matmul_gpu_timing():
    """Times the 2048^3 fp32 matmul with and without cp.async and pipelining (printed)."""
    from ptxforge.backend_ptx import array, cuda, empty

    M = N = K = 2048
    dev = cuda(0)
    rng = np.random.default_rng(2)
    a = array(rng.random((M, K)).astype("float32"), dev)
    b = array(rng.random((K, N)).astype("float32"), dev)
    c = empty((M, N), "float32", dev)
    times = {}
    for stages, use_async in GPU_CASES:
        loaded = _gpu_matmul(stages, use_async, M, N, K).load(dev)
        timer = loaded.time_evaluator("main", number=20, repeat=5, graph=True)
        ms = timer(a, b, c).median * 1e3
        times[(stages, use_async)] = ms
        print(f"matmul 2048^3 fp32 stages={stages} async={use_async}: {ms:.3f} ms, "
              f"{2 * M * N * K / ms / 1e9:.1f} TFLOP/s")
    assert all(t > 0 for t in times.values())


# ---------------------------------------------------------------------------------------
# tensor cores


@pytest.mark.parametrize("stages", [0, 3])
def test_tensor_core_dense_with_async_copies_and_pipelining(stages):
    from ptxforge.ops.schedules.gemm.knobs import TensorCoreConfig
    from ptxforge.ops.schedules.gemm.schedule import dense_tensorcore_compute

    from .tensorcore_dense import schedule_dense_tensorcore

    M = N = K = 128
    A, B, C = dense_tensorcore_compute(M, N, K, "float16", out_dtype="float32")
    s = schedule_dense_tensorcore([A, B, C], TensorCoreConfig(64, 64, 32, 2, 2))
    s["A.shared"].async_copy()
    s["B.shared"].async_copy()
    if stages:
        s["C.warp"].pipeline("C.warp.k.outer", stages)
    mod = ptxforge.lower(s, [A, B, C])
    copies = [ln for ln in flat(mod).splitlines() if ln.startswith("async_copy(")]
    assert copies and all(ln.endswith(", 16)") for ln in copies)
    rng = np.random.default_rng(3)
    a = rng.random((M, K)).astype("float16")
    b = rng.random((N, K)).astype("float16")
    c = np.zeros((M, N), "float32")
    backend_sim.run(mod, [a, b, c])
    np.testing.assert_allclose(c, a.astype("f8") @ b.astype("f8").T, rtol=1e-5)


def test_cp_async_of_bfloat16_tiles_on_the_simulator():
    """A bfloat16 buffer lives in a float32 host array: a cp.async of 16 bytes still moves
    eight elements (the element size is the IR's, not the host array's)."""
    from ptxforge.ir import dtype as dt
    from ptxforge.ops.schedules.gemm.knobs import TensorCoreConfig
    from ptxforge.ops.schedules.gemm.schedule import dense_tensorcore_compute

    from .tensorcore_dense import schedule_dense_tensorcore

    t = dense_tensorcore_compute(32, 32, 32, "bfloat16", "float32")
    rng = np.random.default_rng(0)
    a = dt.to_bfloat16(rng.uniform(-1, 1, (32, 32)).astype("float32"))
    b = dt.to_bfloat16(rng.uniform(-1, 1, (32, 32)).astype("float32"))
    s = schedule_dense_tensorcore(t, TensorCoreConfig(32, 32, 16, 1, 1, async_copy=True,
                                                      stages=2))
    c = np.zeros((32, 32), "float32")
    ptxforge.build(s, t, target="sim")(a, b, c)
    np.testing.assert_allclose(c, dt.from_bfloat16(a) @ dt.from_bfloat16(b).T,
                               rtol=1e-5, atol=1e-5)
