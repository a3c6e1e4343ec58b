"""Tuple computes: ``te.compute`` whose fcompute returns several expressions is one op (one
stage, one block) with one output tensor per expression."""

import numpy as np
import pytest

import ptxforge
from ptxforge import nd, te
from ptxforge.ir.compute_dag import ComputeDAG
from ptxforge.ir.parser import parse_module
from ptxforge.ir.printer import print_module
from ptxforge.ir.to_ir import to_ir
from ptxforge.passes.errors import PassError
from ptxforge.passes.schedule.common import ScheduleError

N, M = 8, 12


def _pair(dtype="float32"):
    A = te.placeholder((N, M), dtype, name="A")
    B0, B1 = te.compute((N, M), lambda i, j: (A[i, j] + 1, A[i, j] * 2), name="B")
    return A, B0, B1


def _data(dtype="float32"):
    return np.random.default_rng(0).uniform(-1, 1, (N, M)).astype(dtype)


def _run(s, args, *inputs):
    """Build ``s`` for the simulator, run it on ``inputs`` and return every other
    argument's array."""
    f = ptxforge.build(s, args, target="sim")
    ins = [nd.array(x) for x in inputs]
    outs = [nd.empty(t.shape, t.dtype) for t in args[len(inputs):]]
    f(*ins, *outs)
    return [o.numpy() for o in outs]


def _check_pair(s, A, B0, B1):
    """``s`` of :func:`_pair`'s tensors computes ``A + 1`` and ``A * 2``."""
    a = _data()
    b0, b1 = _run(s, [A, B0, B1], a)
    np.testing.assert_allclose(b0, a + 1)
    np.testing.assert_allclose(b1, a * 2)


# -- declaration ----------------------------------------------------------------------------
def test_declaration_one_op_two_outputs():
    A, B0, B1 = _pair()
    assert B0.op is B1.op
    op = B0.op
    assert op.num_outputs == 2
    assert op.output(0) is B0 and op.output(1) is B1
    assert (B0.value_index, B1.value_index) == (0, 1)
    assert B0.name == "B.v0" and B1.name == "B.v1" and op.name == "B"
    assert B0.shape == B1.shape == (N, M)
    assert len(op.axis) == 2 and op.reduce_axis == ()
    assert isinstance(op.body, tuple) and len(op.body) == 2 and op.bodies == op.body
    assert op.input_tensors == [A]
    # a single output keeps its plain name, one body and value index 0
    C = te.compute((N, M), lambda i, j: A[i, j] - 1, name="C")
    assert C.op.num_outputs == 1 and C.value_index == 0 and C.name == "C"
    assert not isinstance(C.op.body, tuple)
    with pytest.raises(te.TEError, match="2 outputs"):
        op.output(2)
    with pytest.raises(te.TEError, match="one output"):
        C.op.output(1)


def test_one_element_tuple_is_a_single_tensor():
    A = te.placeholder((N,), name="A")
    B = te.compute((N,), lambda i: (A[i] + 1,), name="B")
    assert isinstance(B, te.Tensor) and B.op.num_outputs == 1
    B2 = te.compute((N,), lambda i: [A[i] * 3], name="B2")
    assert isinstance(B2, te.Tensor)


def test_outputs_may_have_different_dtypes():
    A = te.placeholder((N, M), name="A")
    outs = te.compute((N, M), lambda i, j: (te.cast("int32", A[i, j] * 4), A[i, j] > 0,
                                            A[i, j]), name="B")
    assert isinstance(outs, list) and len(outs) == 3
    assert [t.dtype for t in outs] == ["int32", "bool", "float32"]
    assert outs[0].op.dtypes == ("int32", "bool", "float32")


def test_dag_prints_each_output_and_counts_both():
    A, B0, B1 = _pair()
    dag = ComputeDAG([A, B0, B1])
    text = str(dag)
    assert "B.v0(i, j) = (A[i, j] + 1f)" in text
    assert "B.v1(i, j) = (A[i, j]*2f)" in text
    assert dag.flop_count() == 2 * N * M
    # the hash tells the tuple compute from its first output alone
    A2 = te.placeholder((N, M), name="A")
    B2 = te.compute((N, M), lambda i, j: A2[i, j] + 1, name="B")
    assert ComputeDAG([A2, B2]).structural_hash() != dag.structural_hash()
    # a reader of both outputs is one consumer of the op
    C = te.compute((N, M), lambda i, j: B0[i, j] * B1[i, j], name="C")
    dag = ComputeDAG([A, C])
    assert dag.consumers(B0.op) == [C.op]
    assert [op.name for op in dag.ops] == ["A", "B", "C"]


def test_to_ir_one_block_stores_every_output_and_round_trips():
    A, B0, B1 = _pair()
    mod = to_ir([A, B0, B1])
    func = mod.main
    assert [p.name for p in func.params] == ["A", "B_v0", "B_v1"]
    text = print_module(mod)
    assert text.count("block B(") == 1
    assert "B_v0[vi, vj] = (A[vi, vj] + 1f32)" in text
    assert "B_v1[vi, vj] = (A[vi, vj] * 2f32)" in text
    assert print_module(parse_module(text)) == text


def test_an_output_left_out_of_the_arguments_is_a_temporary():
    A, B0, B1 = _pair()
    func = to_ir([A, B1]).main
    assert [p.name for p in func.params] == ["A", "B_v1"]
    assert "alloc B_v0: float32[8, 12] global" in print_module(to_ir([A, B1]))
    a = _data()
    (b1,) = _run([A, B1], [A, B1], a)
    np.testing.assert_allclose(b1, a * 2)
    # a schedule of the op has every output as an argument
    with pytest.raises(ValueError, match="missing B_v0"):
        ptxforge.build(te.create_schedule(B1.op), [A, B1], target="sim")


# -- running on the simulator ---------------------------------------------------------------
def test_plain_tuple_compute_runs():
    A, B0, B1 = _pair()
    s = te.create_schedule(B0.op)
    _check_pair(s, A, B0, B1)


def test_scheduled_tuple_compute_is_one_kernel():
    A, B0, B1 = _pair()
    s = te.create_schedule([B0.op])
    assert s[B0] is s[B1]
    xo, xi = s[B0].split(B0.op.axis[0], 4)
    s[B1].bind(xo, te.thread_axis("blockIdx.x"))
    s[B0].bind(xi, te.thread_axis("threadIdx.x"))
    dev = ptxforge.lower(s, [A, B0, B1])
    kernels = dev.kernels()
    assert len(kernels) == 1
    assert kernels[0].launch.grid[0] == 2 and kernels[0].launch.block[0] == 4
    # both stores share one computation of the element's offset
    text = print_module(dev)
    assert text.count("let cse") == 1
    assert "B_v0[cse0] = (A[cse0] + 1f32)" in text and "B_v1[cse0] = (A[cse0] * 2f32)" in text
    _check_pair(s, A, B0, B1)


def test_fuse_reorder_unroll_on_the_shared_stage():
    A, B0, B1 = _pair()
    s = te.create_schedule(B1.op)
    i, j = B1.op.axis
    s[B0].reorder(j, i)
    f = s[B1].fuse(j, i)
    xo, xi = s[B0].split(f, 16)
    xi, xu = s[B1].split(xi, 4)
    s[B0].unroll(xu)
    s[B0].bind(xo, te.thread_axis("blockIdx.x"))
    s[B1].bind(xi, te.thread_axis("threadIdx.x"))
    _check_pair(s, A, B0, B1)


def test_different_dtypes_run():
    A = te.placeholder((N, M), name="A")
    B0, B1 = te.compute((N, M), lambda i, j: (te.cast("int32", A[i, j] * 4), A[i, j] > 0),
                        name="B")
    s = te.create_schedule(B0.op)
    xo, xi = s[B0].split(B0.op.axis[0], 4)
    s[B0].bind(xo, te.thread_axis("blockIdx.x"))
    s[B0].bind(xi, te.thread_axis("threadIdx.x"))
    a = _data()
    b0, b1 = _run(s, [A, B0, B1], a)
    assert b0.dtype == np.int32 and b1.dtype == np.bool_
    np.testing.assert_array_equal(b0, (a * 4).astype("int32"))
    np.testing.assert_array_equal(b1, a > 0)


def test_consumer_reads_both_outputs():
    A, B0, B1 = _pair()
    C = te.compute((N, M), lambda i, j: B0[i, j] - B1[i, j] * 3, name="C")
    s = te.create_schedule(C.op)
    a = _data()
    (c,) = _run(s, [A, C], a)
    np.testing.assert_allclose(c, (a + 1) - (a * 2) * 3, rtol=1e-6)


def test_compute_at_and_cache_read_into_a_consumer():
    A, B0, B1 = _pair()
    C = te.compute((N, M), lambda i, j: B0[i, j] + B1[i, j] * 3, name="C")
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [B0])
    xo, xi = s[C].split(C.op.axis[0], 4)
    s[B0].compute_at(s[C], xo)
    s[AA].compute_at(s[C], xo)
    s[C].bind(xo, te.thread_axis("blockIdx.x"))
    s[C].bind(xi, te.thread_axis("threadIdx.x"))
    text = print_module(s.module)
    # the tuple stage moved inside C's block loop and covers only that block's rows
    assert "for i in 4" in text
    a = _data()
    (c,) = _run(s, [A, C], a)
    np.testing.assert_allclose(c, (a + 1) + (a * 2) * 3, rtol=1e-6)


def test_consumer_of_one_output_and_all_outputs_as_arguments():
    A, B0, B1 = _pair()
    C = te.compute((N, M), lambda i, j: B1[i, j] + 1, name="C")
    s = te.create_schedule([C.op, B0.op])
    xo, xi = s[C].split(C.op.axis[0], 2)
    s[C].bind(xo, te.thread_axis("blockIdx.x"))
    s[C].bind(xi, te.thread_axis("threadIdx.x"))
    a = _data()
    b0, b1, c = _run(s, [A, B0, B1, C], a)
    np.testing.assert_allclose(b0, a + 1)
    np.testing.assert_allclose(b1, a * 2)
    np.testing.assert_allclose(c, a * 2 + 1, rtol=1e-6)


def test_cache_write_of_all_outputs():
    A, B0, B1 = _pair()
    s = te.create_schedule(B0.op)
    L0, L1 = s.cache_write([B0, B1], "local")
    assert s[L0] is s[L1] and (L0.dtype, L1.dtype) == ("float32", "float32")
    xo, xi = s[B0].split(B0.op.axis[0], 4)
    s[B0].bind(xo, te.thread_axis("blockIdx.x"))
    s[B0].bind(xi, te.thread_axis("threadIdx.x"))
    s[L0].compute_at(s[B0], xi)
    text = print_module(s.module)
    assert "alloc B_v0.local" in text and "alloc B_v1.local" in text
    _check_pair(s, A, B0, B1)


def test_cache_read_of_one_output_for_its_reader():
    A, B0, B1 = _pair()
    C = te.compute((N, M), lambda i, j: B0[i, j] + B1[i, j], name="C")
    s = te.create_schedule(C.op)
    BB = s.cache_read(B1, "shared", [C])
    assert BB.name == "B_v1.shared"
    xo, xi = s[C].split(C.op.axis[0], 4)
    s[C].bind(xo, te.thread_axis("blockIdx.x"))
    s[C].bind(xi, te.thread_axis("threadIdx.x"))
    s[BB].compute_at(s[C], xo)
    text = print_module(s.module)
    assert "B_v1.shared[v0, v1] = B_v1[v0, v1]" in text
    assert "(B_v0[vi_1, vj_1] + B_v1.shared[vi_1, vj_1])" in text
    a = _data()
    (c,) = _run(s, [A, C], a)
    np.testing.assert_allclose(c, (a + 1) + a * 2, rtol=1e-6)


def test_producer_inlined_into_a_tuple_compute_and_vectorized():
    A = te.placeholder((N, M), name="A")
    P = te.compute((N, M), lambda i, j: A[i, j] * 3, name="P")
    B0, B1 = te.compute((N, M), lambda i, j: (P[i, j] + 1, P[i, j] * 2), name="B")
    s = te.create_schedule(B0.op)
    s[P].compute_inline()
    xo, xi = s[B0].split(B0.op.axis[0], 4)
    jo, ji = s[B0].split(B0.op.axis[1], 4)
    s[B0].bind(xo, te.thread_axis("blockIdx.x"))
    s[B0].bind(xi, te.thread_axis("threadIdx.x"))
    s[B1].vectorize(ji)
    text = print_module(ptxforge.lower(s, [A, B0, B1]))
    assert "P[" not in text and "vectorize" in text
    a = _data()
    b0, b1 = _run(s, [A, B0, B1], a)
    np.testing.assert_allclose(b0, a * 3 + 1, rtol=1e-6)
    np.testing.assert_allclose(b1, a * 6, rtol=1e-6)


def test_compute_at_waits_for_a_pending_inline_of_the_reader():
    A, B0, B1 = _pair()
    C = te.compute((N, M), lambda i, j: B0[i, j] + B1[i, j], name="C")
    D = te.compute((N, M), lambda i, j: C[i, j] * 2, name="D")
    s = te.create_schedule(D.op)
    s[C].compute_inline()
    xo, xi = s[D].split(D.op.axis[0], 4)
    s[D].bind(xo, te.thread_axis("blockIdx.x"))
    s[D].bind(xi, te.thread_axis("threadIdx.x"))
    # B's readers are C's, and C is inlined into D: B goes under D's block loop
    s[B0].compute_at(s[D], xo)
    a = _data()
    (d,) = _run(s, [A, D], a)
    np.testing.assert_allclose(d, ((a + 1) + a * 2) * 2, rtol=1e-6)


# -- clear errors ---------------------------------------------------------------------------
def test_compute_inline_of_a_tuple_compute_is_a_clear_error():
    A, B0, B1 = _pair()
    C = te.compute((N, M), lambda i, j: B0[i, j] + B1[i, j], name="C")
    s = te.create_schedule(C.op)
    with pytest.raises(ScheduleError, match="several outputs cannot be inlined"):
        s[B0].compute_inline()
    with pytest.raises(PassError, match="several outputs cannot be inlined"):
        s.apply("compute_inline(B)")


def test_cache_write_of_one_output_is_a_clear_error():
    A, B0, B1 = _pair()
    s = te.create_schedule(B0.op)
    with pytest.raises(ScheduleError, match=r"pass the list of all of them"):
        s.cache_write(B0, "local")
    with pytest.raises(ScheduleError, match="pass all 2 of its outputs"):
        s.cache_write([B1], "local")


def test_reduction_in_a_tuple_compute_is_a_clear_error():
    A = te.placeholder((N, M), name="A")
    k = te.reduce_axis((0, M), name="k")
    with pytest.raises(te.TEError, match="must be element-wise.*own stage"):
        te.compute((N,), lambda i: (te.sum(A[i, k], axis=k), A[i, 0]), name="B")
    with pytest.raises(te.TEError, match="output 1 of the tuple is a reduction"):
        te.compute((N,), lambda i: (A[i, 0], te.max(A[i, k], axis=k) + 1), name="B")


def test_tuple_compute_op_checks_its_bodies():
    A = te.placeholder((N,), name="A")
    i = te.IterVar(te.Var("i"), N, "spatial")
    k = te.reduce_axis((0, N), name="k")
    with pytest.raises(te.TEError, match="must be element-wise"):
        te.ComputeOp("B", "", None, (i,), (k,), (A[i.var] + 1, A[i.var] * 2))
    with pytest.raises(te.TEError, match="body 1 is not an expression"):
        te.ComputeOp("B", "", None, (i,), (), (A[i.var], 3))


def test_schedule_of_both_outputs_or_ops_is_one_stage():
    A, B0, B1 = _pair()
    for outs in ([B0.op, B1.op], [B1, B0], B1):
        s = te.create_schedule(outs)
        # every output of the op, in output order, whichever were named
        assert [t.name for t in s.outputs] == ["B.v0", "B.v1"]
        assert repr(s) == "Schedule(B)" and s[B0] is s[B1]


def test_mismatched_tuple_bodies_are_clear_errors():
    A = te.placeholder((N, M), name="A")
    with pytest.raises(te.TEError, match="empty"):
        te.compute((N, M), lambda i, j: (), name="B")
    with pytest.raises(te.TEError, match="output 1 of the tuple is not an expression"):
        te.compute((N, M), lambda i, j: (A[i, j], A), name="B")
    with pytest.raises(te.TEError, match="2 dimensions"):
        te.compute((N, M), lambda i: (A[i, 0], A[i, 1]), name="B")


def test_primitives_that_need_one_buffer_say_so():
    A, B0, B1 = _pair()
    s = te.create_schedule(B0.op)
    for text in ("storage_align(B, 0, 32, 1)", "swizzle(B, 3)", "async_copy(B)"):
        name = text.split("(")[0]
        with pytest.raises(PassError, match=f"{name} B: it writes 2 buffers .B_v0, B_v1., "
                                            f"the outputs of a tuple compute"):
            s.apply(text)
    with pytest.raises(PassError, match="stage B is not a reduction"):
        s.rfactor(B0, B0.op.axis[1])


def test_schedule_code_printer_refuses_a_tuple_compute_clearly():
    A, B0, B1 = _pair()
    s = te.create_schedule(B0.op)
    s[B0].split(B0.op.axis[0], 4)
    assert s.pipeline.text.startswith("split(B.i")
    with pytest.raises(te.TEError, match="tuple compute.*s.pipeline.text"):
        s.dag.print_python_code_from_state(s.pipeline)


def test_auto_scheduler_refuses_a_tuple_compute_clearly():
    from ptxforge.autosched.search_task import SearchTask
    from ptxforge.ir.compute_dag import ComputeDAG

    A, B0, B1 = _pair()
    with pytest.raises(ValueError, match="does not search tuple computes: stage B has 2"):
        SearchTask(compute_dag=ComputeDAG([A, B0, B1]), target="cuda")


def test_stage_op_view_gives_every_output():
    A, B0, B1 = _pair()
    s = te.create_schedule(B0.op)
    assert s[B1].op.num_outputs == 2
    assert s[B1].op.output(0) is B0 and s[B0].op.output(1) is B1
    with pytest.raises(te.TEError, match="2 outputs"):
        s[B0].op.output(2)


def test_default_schedule_of_a_graph_with_tuple_computes():
    from ptxforge.ops.schedules import default_schedule
    from ptxforge.ops.schedules.default import plan

    K = 32
    A = te.placeholder((N, M), name="A")
    W = te.placeholder((N, K), name="W")
    P = te.compute((N, M), lambda i, j: A[i, j] * 0.5, name="P")
    B0, B1 = te.compute((N, M), lambda i, j: (P[i, j] + 1, P[i, j] * P[i, j]), name="B")
    k = te.reduce_axis((0, K), name="k")
    R = te.compute((N,), lambda i: te.sum(W[i, k], axis=k), name="R")
    D0, D1 = te.compute((N, M), lambda i, j: (R[i] + B0[i, j], te.max(B1[i, j], R[i])),
                        name="D")
    C = te.compute((N, M), lambda i, j: D0[i, j] - D1[i, j], name="C")
    p = plan([C, D1])
    # P is inlined into B; B (not an output) keeps its stage; R is not fused into D
    assert p.inlined == {id(P.op)} and p.epilogue == {}
    s = default_schedule([C, D1], "sim")
    dev = ptxforge.lower(s, [A, W, C, D0, D1])
    assert len(dev.kernels()) == 4  # R, B, D and C
    a = _data()
    w = np.random.default_rng(1).uniform(-1, 1, (N, K)).astype("float32")
    f = ptxforge.build(s, [A, W, C, D0, D1], target="sim")
    outs = [nd.empty((N, M)) for _ in range(3)]
    f(nd.array(a), nd.array(w), *outs)
    b0, b1, r = a * 0.5 + 1, (a * 0.5) ** 2, w.sum(1)[:, None]
    d0, d1 = r + b0, np.maximum(b1, r)
    for got, want in zip(outs, [d0 - d1, d0, d1]):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


def test_tvm_namespace_builds_a_tuple_compute():
    import ptxforge.tvm as tvm
    from ptxforge.tvm import te as tvm_te

    A = tvm_te.placeholder((N, M), name="A")
    B0, B1 = tvm_te.compute((N, M), lambda i, j: (A[i, j] + 1, A[i, j] * 2), name="B")
    s = tvm_te.create_schedule(B0.op)
    xo, xi = s[B0].split(B0.op.axis[0], factor=4)
    s[B0].bind(xo, tvm_te.thread_axis("blockIdx.x"))
    s[B1].bind(xi, tvm_te.thread_axis("threadIdx.x"))
    f = tvm.build(s, [A, B0, B1], target="sim")
    a = tvm.nd.array(_data())
    b0, b1 = tvm.nd.empty((N, M)), tvm.nd.empty((N, M))
    f(a, b0, b1)
    tvm.testing.assert_allclose(b0.numpy(), a.numpy() + 1)
    tvm.testing.assert_allclose(b1.numpy(), a.numpy() * 2)
    with pytest.raises(te.TEError, match="tuple reduction.*not supported"):
        tvm_te.comm_reducer(lambda x, y: x + y, lambda t: 0, name="argmax")


def test_ptx_stores_every_output_in_one_kernel():
    from ptxforge.backend_ptx import compile_module, find_ptxas

    A = te.placeholder((64, 64), name="A")
    B0, B1 = te.compute((64, 64), lambda i, j: (te.cast("int32", A[i, j] * 4), A[i, j] > 0),
                        name="B")
    s = te.create_schedule(B0.op)
    xo, xi = s[B0].split(s[B0].fuse(*B0.op.axis), 128)
    s[B0].bind(xo, te.thread_axis("blockIdx.x"))
    s[B0].bind(xi, te.thread_axis("threadIdx.x"))
    ptx = compile_module(ptxforge.lower(s, [A, B0, B1]), "cuda")
    src = ptx.get_source("ptx")
    assert src.count(".entry") == 1
    assert "st.global.b32" in src or "st.global.u32" in src  # the int32 output
    assert "st.global.b8" in src or "st.global.u8" in src  # the bool output
    if find_ptxas() is not None:
        assert ptx.kernels["main_kernel0"].cubin


@pytest.mark.gpu
def test_tuple_compute_on_the_gpu():
    from ptxforge.backend_ptx import array, compile_module, cuda, empty

    n, m = 256, 384
    A = te.placeholder((n, m), name="A")
    B0, B1 = te.compute((n, m), lambda i, j: (A[i, j] * A[i, j], te.cast("int32", A[i, j] * 8)),
                        name="B")
    C = te.compute((n, m), lambda i, j: B0[i, j] + te.cast("float32", B1[i, j]), name="C")
    s = te.create_schedule([C.op, B0.op])
    for t in (B0, C):
        xo, xi = s[t].split(s[t].fuse(*t.op.axis), 128)
        s[t].bind(xo, te.thread_axis("blockIdx.x"))
        s[t].bind(xi, te.thread_axis("threadIdx.x"))
    dev = cuda(0)
    loaded = compile_module(ptxforge.lower(s, [A, B0, B1, C])).load(dev)
    a = np.random.default_rng(2).uniform(-4, 4, (n, m)).astype("float32")
    outs = [empty((n, m), "float32", dev), empty((n, m), "int32", dev),
            empty((n, m), "float32", dev)]
    loaded(array(a, dev), *outs)
    b0, b1, c = (o.numpy() for o in outs)
    np.testing.assert_allclose(b0, a * a, rtol=1e-6)
    np.testing.assert_array_equal(b1, (a * 8).astype("int32"))
    np.testing.assert_allclose(c, a * a + (a * 8).astype("int32"), rtol=1e-6)


def test_cse_shares_only_load_free_subexpressions_across_a_run_of_stores():
    from ptxforge.ir.attrs import FuncAttrs
    from ptxforge.ir.expr import Var
    from ptxforge.ir.printer import print_func
    from ptxforge.ir.stmt import Buffer, PrimFunc, Seq, Store
    from ptxforge.passes.lower.cse import cse

    x = Buffer("x", "int32", (64,))
    y = Buffer("y", "int32", (64,))
    i = Var("i")
    # the second store's value reads x[0], which the first store may have written: it must
    # not be computed before the first store
    body = Seq([Store(x, [i * 2 + 1], x[0] * 3 + 1), Store(y, [i * 2 + 1], x[0] * 3 + 1)])
    text = print_func(cse(PrimFunc("k", [x, y], body, FuncAttrs.kernel((1, 1, 1), (1, 1, 1)))))
    assert "let cse0 = ((i * 2) + 1)" in text
    assert text.count("let ") == 1
    assert "x[cse0] = ((x[0] * 3) + 1)" in text and "y[cse0] = ((x[0] * 3) + 1)" in text


def test_autotvm_tunes_a_tuple_compute_on_the_simulator(tmp_path):
    from ptxforge import autotvm
    from ptxforge.measure import LocalBuilder, load_records

    @autotvm.template("test/tuple_pair_square")
    def pair(n, m):
        A = te.placeholder((n, m), name="A")
        B0, B1 = te.compute((n, m), lambda i, j: (A[i, j] + 1, A[i, j] * A[i, j]), name="B")
        s = te.create_schedule(B0.op)
        cfg = autotvm.get_config()
        cfg.define_split("tile", n * m, num_outputs=2)
        bx, tx = cfg["tile"].apply(s, B0, s[B0].fuse(*B0.op.axis))
        s[B0].bind(bx, te.thread_axis("blockIdx.x"))
        s[B1].bind(tx, te.thread_axis("threadIdx.x"))
        return s, [A, B0, B1]

    task = autotvm.task.create("test/tuple_pair_square", args=(16, 8), target="cuda")
    assert task.flop == 2 * 16 * 8
    log = tmp_path / "pair.log"
    option = autotvm.measure_option(builder=LocalBuilder(n_parallel=1, compile_to="ir"),
                                    runner=autotvm.SimRunner(max_sim_seconds=1.0))
    autotvm.tuner.GridSearchTuner(task).tune(
        n_trial=3, measure_option=option, callbacks=[autotvm.callback.log_to_file(log)])
    records = load_records(log)
    assert len(records) == 3
    # every candidate ran and matched the unscheduled computation of both outputs
    assert all(r.error_no == 0 and r.correctness == "passed" for _, r in records)
