"""Lowering passes: each one's effect on small scheduled IR."""

from __future__ import annotations

import ptxforge
import pytest
from ptxforge import te
from ptxforge.ir.expr import IRError
from ptxforge.ir.parser import roundtrip_check
from ptxforge.passes import PassContext, Pipeline


def flat(module) -> str:
    return "\n".join(line.strip() for line in str(module).splitlines())


def _matmul_sched(vthread=True):
    A = te.placeholder((16, 8), name="A")
    W = te.placeholder((8, 16), name="W")
    k = te.reduce_axis((0, 8), name="k")
    C = te.compute((16, 16), lambda i, j: te.sum(A[i, k] * W[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    bi, ti = s[C].split(i, factor=4)
    if vthread:
        bj, vj = s[C].split(j, nparts=2)
        s[C].reorder(bi, bj, vj, ti)
        s[C].bind(vj, te.thread_axis("vthread"))
    else:
        s[C].reorder(bi, j, ti)
        bj = j
    s[C].bind(bi, te.thread_axis("blockIdx.x"))
    s[C].bind(ti, te.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], ti)
    AA = s.cache_read(A, "shared", [CL])
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=4)
    s[AA].compute_at(s[CL], ko)
    fa = s[AA].fuse(*s[AA].op.axis)
    _, tx = s[AA].split(fa, factor=4)
    s[AA].bind(tx, te.thread_axis("threadIdx.x"))
    return s, [A, W, C]


def test_pipeline_text_is_printed_and_replayable():
    from ptxforge.passes.lower import LOWERING_PIPELINE, lowering_pipeline

    assert lowering_pipeline().text == LOWERING_PIPELINE


def test_each_lowering_stage_round_trips_and_dumps(tmp_path):
    s, args = _matmul_sched()
    with PassContext(dump_dir=str(tmp_path)):
        mod = ptxforge.lower(s, args)
    roundtrip_check(mod)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert "000_input.txt" in files and any("inject_vthread" in f for f in files)


def test_decompose_reduction_puts_init_before_the_reduce_loop():
    s, args = _matmul_sched(vthread=False)
    m = Pipeline.parse("cross_thread_reduction(), decompose_reduction()")(s.module)
    text = flat(m)
    init_at = text.index("block C.local.init")
    loop_at = text.index("for k.outer in 2")
    assert init_at < loop_at


def test_inject_vthread_interleaves_and_expands_local_buffers():
    s, args = _matmul_sched(vthread=True)
    mod = ptxforge.lower(s, args)
    k = mod.kernels()[0]
    text = flat(k)
    assert "vthread" not in text
    # the accumulator holds one element per virtual thread (8 of them), each statement
    # of the reduction is replicated per virtual thread
    assert "alloc C.local: float32[8] local" in text
    assert "C.local[7] = (C.local[7] + " in text
    assert k.launch.block == (4, 1, 1)


def test_barriers_around_the_shared_fetch():
    s, args = _matmul_sched(vthread=False)
    text = flat(ptxforge.lower(s, args).kernels()[0])
    body = text[text.index("for k.outer in 2"):]
    first_barrier = body.index("barrier")
    fetch = body.index("A.shared[")
    compute = body.index("C.local[")
    second = body.index("barrier", first_barrier + 1)
    assert first_barrier < fetch < second < compute


def test_merge_thread_loops_guards_shorter_loops():
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((64,), lambda i: B[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    o, i = s[C].split(s[C].op.axis[0], factor=32)
    s[C].bind(o, te.thread_axis("blockIdx.x"))
    s[C].bind(i, te.thread_axis("threadIdx.x"))
    s[B].compute_at(s[C], o)
    bo, bi = s[B].split(s[B].op.axis[0], factor=16)
    s[B].bind(bi, te.thread_axis("threadIdx.x"))
    k = ptxforge.lower(s, [A, C]).kernels()[0]
    # the producer's thread loop (16) is shorter than the block (32): only the first 16
    # threads run it, and the barrier between the stages stays outside that loop
    assert k.launch.block == (32, 1, 1)
    text = flat(k)
    assert "for i.inner in 16 thread(threadIdx.x)" in text
    assert text.index("barrier") > text.index("for i.inner in 16")
    import numpy as np

    a = np.random.default_rng(0).random(64, dtype=np.float32)
    f = ptxforge.build(s, [A, C], target="sim")
    dev = ptxforge.sim()
    out = ptxforge.nd.empty((64,), "float32", dev)
    f(ptxforge.nd.array(a, dev), out)
    np.testing.assert_allclose(out.numpy(), a * 2 + 1, rtol=1e-6)


def test_nested_thread_loops_merge_with_a_guard():
    A = te.placeholder((8, 64), name="A")
    k = te.reduce_axis((0, 64), name="k")
    B = te.compute((8,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    AA = s.cache_read(A, "shared", [B])
    o, i = s[B].split(s[B].op.axis[0], factor=8)
    s[B].bind(o, te.thread_axis("blockIdx.x"))
    s[B].bind(i, te.thread_axis("threadIdx.x"))
    ko, ki = s[B].split(s[B].op.reduce_axis[0], factor=4)
    s[AA].compute_at(s[B], ko)
    f = s[AA].fuse(*s[AA].op.axis)
    fo, fi = s[AA].split(f, factor=6)
    s[AA].bind(fi, te.thread_axis("threadIdx.x"))
    text = flat(ptxforge.lower(s, [A, B]))
    assert "if (i.inner < 6) {" in text


def test_gpu_limits_are_reported_with_stage_and_limit():
    A = te.placeholder((4096,), name="A")
    B = te.compute((4096,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    o, i = s[B].split(s[B].op.axis[0], factor=2048)
    s[B].bind(o, te.thread_axis("blockIdx.x"))
    s[B].bind(i, te.thread_axis("threadIdx.x"))
    with pytest.raises(IRError, match="2048 threads per block.*the limit is 1024"):
        ptxforge.lower(s, [A, B])


def test_shared_memory_limit():
    # 128 KiB: dynamic shared memory on sm_90 (227 KiB), too much for sm_86 (99 KiB)
    A = te.placeholder((128, 256), name="A")
    k = te.reduce_axis((0, 256), name="k")
    B = te.compute((128,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    AA = s.cache_read(A, "shared", [B])
    o, i = s[B].split(s[B].op.axis[0], factor=128)
    s[B].bind(o, te.thread_axis("blockIdx.x"))
    s[B].bind(i, te.thread_axis("threadIdx.x"))
    s[AA].compute_at(s[B], o)
    (kern,) = ptxforge.lower(s, [A, B],
                             ctx=PassContext(config={"target": "cuda -arch=sm_90"})).kernels()
    assert kern.launch.dynamic_shared_bytes == 131072
    with pytest.raises(IRError, match="131072 bytes with A.shared; sm_86 allows at most 101376"):
        ptxforge.lower(s, [A, B], ctx=PassContext(config={"target": "cuda -arch=sm_86"}))


def test_passes_refuse_functions_of_the_wrong_level():
    from ptxforge.passes import PassLevelError
    from ptxforge.passes.lower.flatten_buffers import FlattenBuffers
    from ptxforge.passes.lower.split_host_device import SplitHostDevice
    from ptxforge.passes.lower.validate_gpu import ValidateGPU

    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    prim = s.module
    with pytest.raises(PassLevelError, match=r"pass flatten_buffers\(\) works on kernel "
                                             r"\(device IR\) functions, but the module holds "
                                             r"prim \(tensor/scheduled IR\)"):
        FlattenBuffers()(prim)
    with pytest.raises(PassLevelError):
        FlattenBuffers().apply(prim, PassContext())  # also when called without a context
    device = ptxforge.lower(s, [A, B])
    with pytest.raises(PassLevelError, match="split_host_device.*holds host .*kernel"):
        SplitHostDevice()(device)
    # validate_gpu only checks: it hands back its input, untouched
    assert ValidateGPU()(device) is device
