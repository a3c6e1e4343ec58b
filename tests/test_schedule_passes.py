"""Schedule primitives as passes: IR text before and after, and their errors."""

from __future__ import annotations

import textwrap

import pytest
from ptxforge import te
from ptxforge.ir.expr import IRError
from ptxforge.ir.parser import roundtrip_check
from ptxforge.passes import Pipeline


def ir(text: str) -> str:
    """A snippet of IR text with indentation removed (compare with :func:`flat`)."""
    return flat(textwrap.dedent(text).strip("\n"))


def flat(module) -> str:
    return "\n".join(line.strip() for line in str(module).splitlines())


def run(module, text):
    out = Pipeline.parse(text)(module)
    roundtrip_check(out)
    return out


@pytest.fixture
def ew():
    A = te.placeholder((8, 6), name="A")
    B = te.compute((8, 6), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((8, 6), lambda i, j: B[i, j] + 1.0, name="C")
    return te.create_schedule(C.op).module


def test_split_even_and_uneven(ew):
    out = run(ew, "split(C.i_1, factors=[4])")
    assert ir("""
        for i_1.outer in 2 {
          for i_1.inner in 4 {
            for j_1 in 6 {
              block C(vi_1: S[8] = ((i_1.outer * 4) + i_1.inner), vj_1: S[6] = j_1) {
    """) in flat(out)
    out = run(ew, "split(C.j_1, factors=[4])")
    assert "where (((j_1.outer * 4) + j_1.inner) < 6)" in str(out)
    out = run(ew, "split(C.i_1, nparts=3)")
    assert "for i_1.outer in 3 {" in str(out) and "for i_1.inner in 3 {" in str(out)
    out = run(ew, "split(C.i_1, factors=[2, 2])")
    assert "for i_1.0 in 2" in str(out) and "(((i_1.0 * 2) + i_1.1) * 2) + i_1.2)" in str(out)


def test_fuse_bind_reorder(ew):
    out = run(ew, 'fuse([C.i_1, C.j_1]), bind(C.i_1.j_1.fused, "threadIdx.x")')
    text = str(out)
    assert "for i_1.j_1.fused in 48 thread(threadIdx.x) {" in text
    assert ("vi_1: S[8] = floordiv(i_1.j_1.fused, 6), "
            "vj_1: S[6] = floormod(i_1.j_1.fused, 6)") in text
    out = run(ew, "reorder([C.j_1, C.i_1])")
    assert ir("""
        for j_1 in 6 {
          for i_1 in 8 {
            block C(
    """) in flat(out)


def test_unroll_vectorize_pragma(ew):
    out = run(ew, 'unroll(C.j_1), pragma(C.i_1, "auto_unroll_max_step", 16), vectorize(B.j)')
    text = str(out)
    assert 'for i_1 in 8 attrs {"auto_unroll_max_step": 16} {' in text
    assert "for j_1 in 6 unroll {" in text
    assert "for j in 6 vectorize {" in text


def test_compute_inline(ew):
    out = run(ew, "compute_inline(B)")
    assert "C[vi_1, vj_1] = ((A[vi_1, vj_1] * 2f32) + 1f32)" in str(out)
    assert "alloc B" not in str(out)


def test_compute_at_shrinks_producer(ew):
    out = run(ew, "split(C.i_1, factors=[4]), compute_at(B, C.i_1.outer)")
    assert ir("""
        for i_1.outer in 2 {
          for i in 4 {
            for j in 6 {
              block B(vi: S[8] = ((i_1.outer * 4) + i), vj: S[6] = j) {
                B[vi, vj] = (A[vi, vj] * 2f32)
              }
            }
          }
          for i_1.inner in 4 {
    """) in flat(out)


def test_cache_read_and_write():
    A = te.placeholder((8, 6), name="A")
    k = te.reduce_axis((0, 6), name="k")
    D = te.compute((8,), lambda i: te.sum(A[i, k], axis=k), name="D")
    m = te.create_schedule(D.op).module
    out = run(m, 'cache_read(A, "shared", [D])')
    assert "A.shared[v0, v1] = A[v0, v1]" in str(out)
    assert "(D[vi] + A.shared[vi, vk])" in str(out)
    out = run(m, 'cache_write(D, "local")')
    text = str(out)
    assert "alloc D.local: float32[8] local {" in text
    assert "block D.local(vi: S[8] = i, vk: R[6] = k)" in text
    assert "D[v0] = D.local[v0]" in text


@pytest.mark.parametrize("text, message", [
    ("split(C.q, factors=[2])", "stage C has no loop 'q'"),
    ("split(X.i, factors=[2])", "does not start with a stage name"),
    ("split(C.i_1, factors=[0])", "positive ints"),
    ("split(C.i_1, factors=[2], nparts=2)", "exactly one of"),
    ('bind(C.i_1, "threadIdx.w")', "unknown thread tag"),
    ("fuse([C.j_1, C.i_1])", "is not the only statement directly inside"),
    ('cache_read(A, "texture", [B])', "scope must be shared, local or warp"),
    ('cache_read(A, "shared", [C])', "does not read A"),
    ("compute_inline(C)", "an argument of the function"),
    ('pragma(C.i_1, "unroll_everything", 1)', "unknown key"),
])
def test_errors_name_the_problem(ew, text, message):
    with pytest.raises(IRError, match=message):
        Pipeline.parse(text)(ew)


def test_reorder_refuses_across_attached_stage(ew):
    m = run(ew, "split(C.i_1, factors=[4]), compute_at(B, C.i_1.outer)")
    with pytest.raises(IRError, match="reorder before compute_at"):
        Pipeline.parse("reorder([C.j_1, C.i_1.outer])")(m)


def test_inline_refuses_reduction():
    A = te.placeholder((8, 6), name="A")
    k = te.reduce_axis((0, 6), name="k")
    D = te.compute((8,), lambda i: te.sum(A[i, k], axis=k), name="D")
    E = te.compute((8,), lambda i: D[i] * 2.0, name="E")
    m = te.create_schedule(E.op).module
    with pytest.raises(IRError, match="is a reduction"):
        Pipeline.parse("compute_inline(D)")(m)


def test_compute_at_needs_all_readers_inside():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((8,), lambda i: B[i] * 2.0, name="C")
    D = te.compute((8,), lambda i: B[i] + C[i], name="D")
    m = te.create_schedule(D.op).module
    with pytest.raises(IRError, match="also read B but are not inside"):
        Pipeline.parse("compute_at(B, C.i_1)")(m)


def test_schedule_api_records_replayable_pipeline():
    A = te.placeholder((64, 64), name="A")
    B = te.compute((64, 64), lambda i, j: A[i, j] * 3.0, name="B")
    s = te.create_schedule(B.op)
    i, j = s[B].op.axis
    io, ii = s[B].split(i, factor=8)
    f = s[B].fuse(ii, j)
    s[B].bind(io, te.thread_axis("blockIdx.x"))
    fo, fi = s[B].split(f, nparts=4)
    s[B].bind(fi, te.thread_axis("threadIdx.x"))
    text = s.pipeline.text
    assert text.startswith("split(B.i, factors=[8]), fuse([B.i.inner, B.j]), ")
    replayed = Pipeline.parse(text)(te.create_schedule(B.op).module)
    assert str(replayed) == str(s.module)


def _sum_rows(n=8, k=100):
    A = te.placeholder((n, k), name="A")
    r = te.reduce_axis((0, k), name="k")
    B = te.compute((n,), lambda i: te.sum(A[i, r], axis=r), name="B")
    return A, B


def _run_sim(s, args, inputs):
    import numpy as np
    import ptxforge

    f = ptxforge.build(s, args, target="sim")
    dev = ptxforge.sim()
    arrays = [ptxforge.nd.array(x, dev) for x in inputs]
    out = ptxforge.nd.empty(args[-1].shape, args[-1].dtype, dev)
    f(*arrays, out)
    return np.asarray(out.numpy())


def test_rfactor_text_and_cross_thread_reduction():
    import numpy as np
    import ptxforge

    A, B = _sum_rows()
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(s[B].op.reduce_axis[0], factor=24)
    BF = s.rfactor(B, ki)
    text = flat(s.module)
    assert "block B.rf(vk_inner: S[24] = k.inner, vi: S[8] = i, vk_outer: R[5] = k.outer)" in text
    assert "if (((vk_outer * 24) + vk_inner) < 100) {" in text
    assert "B[vi_1] = (B[vi_1] + B.rf[vk_inner_1, vi_1])" in text
    tx = s[B].op.reduce_axis[0]
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    s[B].bind(s[B].op.axis[0], te.thread_axis("blockIdx.x"))
    s[BF].compute_at(s[B], tx)
    mod = ptxforge.lower(s, [A, B])
    k = mod.kernels()[0]
    assert k.launch.block == (24, 1, 1)
    assert "alloc B.red_shared: float32[24] shared" in str(k)
    a = np.random.default_rng(0).random((8, 100), dtype=np.float32)
    np.testing.assert_allclose(_run_sim(s, [A, B], [a]), a.sum(1), rtol=1e-5)


def test_rfactor_across_blocks():
    import numpy as np

    A, B = _sum_rows(4, 64)
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(s[B].op.reduce_axis[0], nparts=4)
    BF = s.rfactor(B, ko, factor_axis=1)
    a0, a1 = s[BF].op.axis
    s[BF].bind(a0, te.thread_axis("blockIdx.x"))
    s[BF].bind(a1, te.thread_axis("threadIdx.x"))
    s[B].bind(s[B].op.axis[0], te.thread_axis("threadIdx.x"))
    a = np.random.default_rng(1).random((4, 64), dtype=np.float32)
    np.testing.assert_allclose(_run_sim(s, [A, B], [a]), a.sum(1), rtol=1e-5)


def test_storage_align_pads_the_shared_buffer():
    import numpy as np
    import ptxforge

    A, B = _sum_rows(64, 64)
    s = te.create_schedule(B.op)
    AA = s.cache_read(A, "shared", [B])
    i, = s[B].op.axis
    kk, = s[B].op.reduce_axis
    bo, bi = s[B].split(i, factor=16)
    ko, ki = s[B].split(kk, factor=16)
    s[B].reorder(bo, bi, ko, ki)
    s[B].bind(bo, te.thread_axis("blockIdx.x"))
    s[B].bind(bi, te.thread_axis("threadIdx.x"))
    s[AA].compute_at(s[B], ko)
    s[AA].storage_align(s[AA].op.axis[0], 32, 1)
    f = s[AA].fuse(*s[AA].op.axis)
    fo, fi = s[AA].split(f, factor=16)
    s[AA].bind(fi, te.thread_axis("threadIdx.x"))
    text = str(ptxforge.lower(s, [A, B]))
    assert "alloc A.shared: float32[511] shared" in text   # 15 * 33 + 16
    assert "* 33)" in text
    a = np.random.default_rng(2).random((64, 64), dtype=np.float32)
    np.testing.assert_allclose(_run_sim(s, [A, B], [a]), a.sum(1), rtol=1e-5)


def test_cross_thread_reduction_needs_reduce_loops_inside_the_thread_loop():
    import ptxforge

    A, B = _sum_rows()
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(s[B].op.reduce_axis[0], factor=20)
    s[B].bind(ki, te.thread_axis("threadIdx.x"))
    with pytest.raises(IRError, match="is outside the thread loop"):
        ptxforge.lower(s, [A, B])


def test_row_reductions_computed_inside_the_rows_block_make_one_kernel():
    """Layer norm as TVM users write its schedule: the mean and the variance (cross-thread
    reductions) computed at the output's row loop, the element-wise stages inlined first:
    an inline of a reader is applied before compute_at checks the readers, transitively
    (the centered value, once inlined, makes the variance a reader of the sum)."""
    import numpy as np
    import ptxforge

    R, C, T = 6, 40, 16
    x = te.placeholder((R, C), "float32", name="x")
    k1 = te.reduce_axis((0, C), name="k1")
    s1 = te.compute((R,), lambda i: te.sum(x[i, k1], axis=k1), name="s1")
    mean = te.compute((R,), lambda i: s1[i] / float(C), name="mean")
    d = te.compute((R, C), lambda i, j: x[i, j] - mean[i], name="d")
    k2 = te.reduce_axis((0, C), name="k2")
    s2 = te.compute((R,), lambda i: te.sum(d[i, k2] * d[i, k2], axis=k2), name="s2")
    out = te.compute((R, C), lambda i, j: d[i, j] * te.rsqrt(s2[i] / float(C) + 1e-5),
                     name="out")
    s = te.create_schedule(out.op)
    s[mean].compute_inline()
    s[d].compute_inline()
    o = s[out]
    i, j = o.op.axis
    o.bind(i, te.thread_axis("blockIdx.x"))
    jo, ji = o.split(j, factor=T)
    o.bind(ji, te.thread_axis("threadIdx.x"))
    for red in (s2, s1):  # the consumer first: s2 reads s1 once d is inlined
        st = s[red]
        st.compute_at(o, i)
        ko, ki = st.split(st.op.reduce_axis[0], factor=T)
        st.reorder(ki, ko)
        st.bind(ki, te.thread_axis("threadIdx.x"))
    (kern,) = ptxforge.lower(s, [x, out]).kernels()
    assert tuple(kern.attrs.launch.grid)[0] == R and tuple(kern.attrs.launch.block)[0] == T
    xx = np.random.default_rng(0).standard_normal((R, C)).astype("float32")
    got = np.zeros((R, C), "float32")
    ptxforge.build(s, [x, out], target="sim")(xx, got)
    mu = xx.mean(1, keepdims=True)
    want = (xx - mu) / np.sqrt(((xx - mu) ** 2).mean(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
