"""``ptxforge.tvm``: TVM code runs with the import prefix changed only."""

import numpy as np
import ptxforge
import pytest

import ptxforge.tvm as tvm
import ptxforge.tvm.relay.testing
from ptxforge.passes.errors import PassError
from ptxforge.passes.schedule.common import ScheduleError
from ptxforge.tvm import auto_scheduler, autotvm, te, topi
from ptxforge.tvm.contrib import graph_executor


def _double():
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] * 2, name="B")
    return A, B


def test_tensor_axis_as_loop_argument_build_lower_nd():
    A, B = _double()
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.x"))
    assert "blockIdx.x" in str(tvm.lower(s, [A, B], simple_mode=True))
    f = tvm.build(s, [A, B], target="sim", name="double")
    dev = tvm.device("sim", 0)
    a = tvm.nd.array(np.arange(64, dtype="float32"), ctx=dev)
    b = tvm.nd.empty((64,), "float32", device=dev)
    f(a, b)
    tvm.testing.assert_allclose(b.numpy(), a.numpy() * 2)


def test_foreign_axis_is_a_clear_error():
    A, B = _double()
    _, C = _double()
    s = te.create_schedule(B.op)
    with pytest.raises(ScheduleError, match="not an axis of stage B"):
        s[B].split(C.op.axis[0], factor=32)


def test_names_map():
    with tvm.transform.PassContext(opt_level=3, config={}):
        pass
    assert tvm.target.Target("cuda").kind.name == "cuda"
    assert tvm.tir.const(1, "int32") is not None
    assert topi.nn.conv2d_nchw is not None and topi.testing.conv2d_nchw_python is not None
    assert auto_scheduler.SearchTask is not None and autotvm.LocalRunner is not None
    assert callable(graph_executor.GraphModule)
    assert callable(ptxforge.tvm.relay.testing.resnet.get_workload)
    with pytest.raises(ValueError, match="unknown device kind"):
        tvm.device("rocm")


def test_relay_build_and_graph_executor():
    from ptxforge import graph

    x = graph.var("data", (1, 8))
    net = graph.function([graph.sigmoid(x)])
    lib = tvm.relay.build({"main": net}, target="sim")
    dev = tvm.device("sim", 0)
    m = graph_executor.GraphModule(lib["default"](dev))
    data = np.linspace(-2, 2, 8, dtype="float32").reshape(1, 8)
    m.set_input("data", data)
    m.run()
    tvm.testing.assert_allclose(m.get_output(0).numpy(), 1 / (1 + np.exp(-data)), rtol=1e-5)


def test_tile_and_parallel_error():
    A = te.placeholder((64, 64), name="A")
    B = te.compute((64, 64), lambda i, j: A[i, j] + 1, name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(ScheduleError, match="bind the loop"):
        s[B].parallel(B.op.axis[0])
    xo, yo, xi, yi = s[B].tile(B.op.axis[0], B.op.axis[1], 8, 8)
    s[B].bind(s[B].fuse(xo, yo), te.thread_axis("blockIdx.x"))
    s[B].bind(s[B].fuse(xi, yi), te.thread_axis("threadIdx.x"))
    f = tvm.build(s, [A, B], target="sim")
    a = tvm.nd.array(np.random.rand(64, 64).astype("float32"))
    b = tvm.nd.empty((64, 64), "float32")
    f(a, b)
    tvm.testing.assert_allclose(b.numpy(), a.numpy() + 1)


def test_var_and_extern_are_clear_errors():
    with pytest.raises(te.TEError, match="shapes are static"):
        te.var("n")
    with pytest.raises(te.TEError, match="te.compute"):
        te.extern((4,), [], lambda ins, outs: None)


def test_time_evaluator_on_the_simulator_is_a_labelled_estimate_after_one_run():
    A, B = _double()
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.x"))
    f = tvm.build(s, [A, B], target="sim")
    a = tvm.nd.array(np.arange(64, dtype="float32"))
    b = tvm.nd.empty((64,), "float32")
    res = f.time_evaluator("main", tvm.sim(), number=400, repeat=3)(a, b)
    tvm.testing.assert_allclose(b.numpy(), a.numpy() * 2)
    assert len(res.results) == 3 and 0 < res.mean < 1e-3
    assert "estimated GPU time" in repr(res)


def test_graph_benchmark_on_the_simulator_is_a_labelled_estimate():
    from ptxforge import graph

    x = graph.var("data", (1, 8))
    lib = tvm.relay.build({"main": graph.function([graph.sigmoid(x)])}, target="sim")
    m = graph_executor.GraphModule(lib["default"](tvm.device("sim", 0)))
    m.set_input("data", np.zeros((1, 8), "float32"))
    res = m.benchmark(tvm.sim(), repeat=3, min_repeat_ms=500)
    assert len(res.results) == 3 and 0 < res.mean < 1e-3
    assert "estimated GPU time" in res.kind
    tvm.testing.assert_allclose(m.get_output(0).numpy(), np.full((1, 8), 0.5, "float32"))


def _reversed_blocks(n=256, block=64):
    """C reads B in reverse within each block of ``block``: the threads of a block read
    each other's B."""
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((n,), lambda i: B[(i // block) * block + block - 1 - i % block] + 1.0,
                   name="C")
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=block)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[B].compute_at(s[C], bx)
    return A, B, C, s


def test_set_scope_keeps_an_intermediate_in_shared_or_local_memory():
    A, B, C, s = _reversed_blocks()
    s[B].set_scope("shared")
    s[B].bind(s[B].op.axis[0], te.thread_axis("threadIdx.x"))
    assert 'set_scope(B, "shared")' in s.pipeline.text
    text = str(tvm.lower(s, [A, C]))
    assert "alloc B: float32[64] shared" in text and "barrier" in text
    a = np.random.default_rng(0).random(256).astype("float32")
    c = np.zeros(256, "float32")
    ptxforge.build(s, [A, C], target="sim")(a, c)
    np.testing.assert_allclose(c, a.reshape(4, 64)[:, ::-1].reshape(-1) * 2 + 1, rtol=1e-6)
    # per thread: the threads read each other's values, which local memory cannot hold
    A, B, C, s = _reversed_blocks()
    s[B].set_scope("local")
    s[B].bind(s[B].op.axis[0], te.thread_axis("threadIdx.x"))
    with pytest.raises(Exception, match="local memory"):
        tvm.lower(s, [A, C])
    # the errors: an unknown or global scope, an argument of the function
    A, B, C, s = _reversed_blocks()
    with pytest.raises(PassError, match="'shared' or 'local'.*global memory already"):
        s[B].set_scope("global")
    with pytest.raises(PassError, match="argument of the function"):
        s[C].set_scope("shared")


def test_op_input_tensors_and_topi_testing_module():
    from ptxforge.tvm.topi.testing import conv2d_nchw_python

    data = te.placeholder((1, 4, 6, 6), name="data")
    kernel = te.placeholder((8, 4, 3, 3), name="kernel")
    conv = topi.nn.conv2d_nchw(data, kernel, 1, 1, dilation=1, out_dtype="float32")
    s = te.create_schedule([conv.op])
    pad = s[conv].op.input_tensors[0]  # the AutoTVM tutorial's own line
    assert pad.op.input_tensors == [data] and s[conv].op.input_tensors[1] is kernel
    s[pad].compute_inline()
    f = tvm.build(s, [data, kernel, conv], "sim")
    a = np.random.default_rng(0).standard_normal((1, 4, 6, 6)).astype("float32")
    w = np.random.default_rng(1).standard_normal((8, 4, 3, 3)).astype("float32")
    dev = tvm.sim()
    c = tvm.nd.empty((1, 8, 6, 6), device=dev)
    f(tvm.nd.array(a, device=dev), tvm.nd.array(w, device=dev), c)
    np.testing.assert_allclose(c.numpy(), conv2d_nchw_python(a, w, 1, 1), rtol=1e-4, atol=1e-4)
    OL = s.cache_write(conv, "local")
    with pytest.raises(ScheduleError, match="made by the schedule"):
        _ = s[OL].op.input_tensors
    with pytest.raises(ScheduleError, match="one output"):
        s[conv].op.output(1)


def test_auto_scheduler_has_the_measure_names():
    from ptxforge import measure

    assert auto_scheduler.SimRunner is measure.SimRunner
    assert auto_scheduler.LocalRunner is measure.LocalRunner
    assert auto_scheduler.LocalBuilder is measure.LocalBuilder


def test_tuner_seed_from_the_environment(monkeypatch):
    from ptxforge.autotvm.tuner.tuner import default_seed

    monkeypatch.setenv("PTXFORGE_SEED", "7")
    assert default_seed(None) == 7 and default_seed(3) == 3
    monkeypatch.setenv("PTXFORGE_SEED", "x")
    with pytest.raises(ValueError, match="PTXFORGE_SEED"):
        default_seed(None)
    monkeypatch.delenv("PTXFORGE_SEED")
    assert default_seed(None) is None


def _add_mul():
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] * 2, name="B")
    C = te.compute((64,), lambda i: B[i] + 1, name="C")
    return A, B, C


def _run_add_mul(s, A, C):
    a = np.random.default_rng(3).standard_normal(64).astype("float32")
    f = tvm.build(s, [A, C], "sim")
    dev = tvm.sim()
    c = tvm.nd.empty((64,), device=dev)
    f(tvm.nd.array(a, device=dev), c)
    np.testing.assert_allclose(c.numpy(), a * 2 + 1, rtol=1e-6)


def _bind_all(s, *tensors):
    for t in tensors:
        xo, xi = s[t].split(s[t].leaf_iter_vars[0], factor=32)
        s[t].bind(xo, te.thread_axis("blockIdx.x"))
        s[t].bind(xi, te.thread_axis("threadIdx.x"))


def test_compute_root_undoes_a_pending_inline_and_an_applied_compute_at():
    A, B, C = _add_mul()
    s = te.create_schedule(C.op)
    s[B].compute_inline()
    s[B].compute_root()
    assert s.pipeline.text == ""  # the inline is gone: B is its own kernel again
    _bind_all(s, B, C)
    _run_add_mul(s, A, C)
    assert "alloc B: float32[64] global" in str(tvm.lower(s, [A, C]))  # B is materialised

    A, B, C = _add_mul()
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=32)
    s[B].compute_at(s[C], xo)
    assert "compute_at" in s.pipeline.text
    s[B].compute_root()
    assert s.pipeline.text == "split(C.i_1, factors=[32])"
    s[C].bind(xo, te.thread_axis("blockIdx.x"))
    s[C].bind(xi, te.thread_axis("threadIdx.x"))
    _bind_all(s, B)
    _run_add_mul(s, A, C)


def test_create_prim_func_and_build_name():
    A, B, C = _add_mul()
    f = te.create_prim_func([A, C])
    text = str(f)
    assert "block B" in text and "block C" in text and text.startswith("@main(")
    with pytest.raises(te.TEError, match="argument tensors"):
        te.create_prim_func([])
    s = te.create_schedule(C.op)
    _bind_all(s, B, C)
    mod = tvm.build(s, [A, C], "sim", name="add_mul")
    assert mod.entry_name == "add_mul" and mod["add_mul"] is mod
    with pytest.raises(KeyError, match="one function"):
        mod.time_evaluator("main", tvm.sim())
    with pytest.raises(ValueError, match="identifier"):
        tvm.build(s, [A, C], "sim", name="add mul")


def test_print_python_code_from_state(tmp_path):
    @auto_scheduler.register_workload
    def idiom_matmul(n):
        a = te.placeholder((n, n), name="a")
        b = te.placeholder((n, n), name="b")
        k = te.reduce_axis((0, n), name="k")
        return [a, b, te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k),
                                 name="c")]

    task = auto_scheduler.SearchTask(func=idiom_matmul, args=(16,), target="sim")
    dag = task.compute_dag
    init = dag.print_python_code_from_state(dag.get_init_state())
    assert "create_schedule" in init and ".split(" not in init
    log = str(tmp_path / "mm.json")
    task.tune(auto_scheduler.TuningOptions(num_measure_trials=2,
                                           runner=auto_scheduler.SimRunner(), verbose=0,
                                           measure_callbacks=[auto_scheduler.RecordToFile(log)]))
    inp, _ = auto_scheduler.load_best_record(log, task.workload_key)
    code = dag.print_python_code_from_state(inp.state)
    assert ".split(" in code and code == task.print_best(log)
    with pytest.raises(TypeError, match="pipeline"):
        dag.print_python_code_from_state(42)
