"""Cross-thread reductions with warp shuffles: the ``shfl_xor`` intrinsic in the IR, the
simulator's semantics of ``shfl.sync.bfly`` (and its divergence error), the lowering's
choice between shuffles and the shared-memory tree, and the PTX."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import autosched, ops, te
from ptxforge.autosched.fused_rows import fused_rows_step, schedule_fused_rows
from ptxforge.backend_ptx import find_ptxas
from ptxforge.backend_sim import SimDivergenceError, runtime
from ptxforge.ir.expr import IntImm, IRError, Var, shfl_xor
from ptxforge.ir.parser import parse_module, roundtrip_check
from ptxforge.passes.errors import PassError
from ptxforge.passes.pipeline import Pipeline

needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas is not installed here")
RNG = np.random.default_rng(3)
REDUCE = {"sum": (te.sum, np.sum), "max": (te.max, np.max)}


def _row_reduce(rows, cols, threads, reducer="sum", dtype="float32", rows_on_y=1):
    """``r[i] = reducer_k x[i, k]``: rows over blockIdx.x (and ``rows_on_y`` of them over
    threadIdx.y), the reduce axis split by ``threads`` on threadIdx.x, thread part
    outermost."""
    x = te.placeholder((rows, cols), dtype, name="x")
    k = te.reduce_axis((0, cols), name="k")
    r = te.compute((rows,), lambda i: REDUCE[reducer][0](x[i, k], axis=k), name="r")
    s = te.create_schedule(r.op)
    i = r.op.axis[0]
    if rows_on_y > 1:
        io, ii = s[r].split(i, factor=rows_on_y)
        s[r].bind(io, te.thread_axis("blockIdx.x"))
        s[r].bind(ii, te.thread_axis("threadIdx.y"))
    else:
        s[r].bind(i, te.thread_axis("blockIdx.x"))
    ko, ki = s[r].split(k, factor=threads)
    s[r].reorder(ki, ko)
    s[r].bind(ki, te.thread_axis("threadIdx.x"))
    return s, [x, r]


def _check(s, args, reducer, want_shuffles):
    text = str(ptxforge.lower(s, args))
    x, r = args
    if dt_int(x.dtype):
        xv = RNG.integers(-1000, 1000, x.shape).astype(x.dtype)
    else:
        xv = RNG.standard_normal(x.shape).astype(x.dtype)
    out = np.zeros(r.shape, r.dtype)
    ptxforge.build(s, args, target="sim")(xv, out)
    want = REDUCE[reducer][1](xv.astype(np.float64), axis=1)
    tol = 2e-2 if x.dtype == "float16" else 1e-5
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=tol, atol=tol * 10)
    assert text.count("shfl_xor(") == want_shuffles, text
    return text


def dt_int(dtype: str) -> bool:
    return dtype.startswith("int")


@pytest.mark.parametrize("threads", [32, 64, 128, 256, 1024])
@pytest.mark.parametrize("reducer", ["sum", "max"])
def test_reductions_over_whole_warps_shuffle(threads, reducer):
    s, args = _row_reduce(3, 1000, threads, reducer)
    levels = 5 + (threads // 32).bit_length() - 1
    text = _check(s, args, reducer, levels)
    assert "red_shared" not in text
    # above a warp: one value per warp in shared memory, one barrier
    assert (f"red_warp: float32[{threads // 32}] shared" in text) == (threads > 32)
    assert text.count("barrier") == (1 if threads > 32 else 0)


@pytest.mark.parametrize("dtype,reducer", [("float16", "max"), ("int32", "sum"),
                                           ("float16", "sum")])
def test_shuffled_types(dtype, reducer):
    s, args = _row_reduce(4, 300, 64, reducer, dtype)
    _check(s, args, reducer, 6)


def test_several_reductions_per_warp():
    # 8 lanes per row, 16 rows on threadIdx.y: 4 rows per warp, butterflies of width 8; the
    # second block's guarded rows still shuffle (identity partials), only their write is off
    s, args = _row_reduce(20, 50, 8, "max", rows_on_y=16)  # rows 20-31 guarded
    text = _check(s, args, "max", 3)
    assert "shfl_xor(r.red_local[0], 4, 8)" in text and "red_shared" not in text


@pytest.mark.parametrize("case", ["not_power_of_two", "partial_warp", "threadIdx_y",
                                  "float64"])
def test_what_falls_back_to_the_shared_tree(case):
    if case == "not_power_of_two":
        s, args = _row_reduce(3, 100, 48)
    elif case == "partial_warp":
        s, args = _row_reduce(3, 100, 16)  # a block of 16 threads: half a warp
    elif case == "float64":
        s, args = _row_reduce(3, 100, 64, dtype="float64")
    else:
        x = te.placeholder((64, 40), "float32", name="x")
        k = te.reduce_axis((0, 40), name="k")
        r = te.compute((64,), lambda i: te.sum(x[i, k], axis=k), name="r")
        s = te.create_schedule(r.op)
        io, ii = s[r].split(r.op.axis[0], factor=32)
        s[r].bind(io, te.thread_axis("blockIdx.x"))
        s[r].bind(ii, te.thread_axis("threadIdx.x"))
        ko, ki = s[r].split(k, factor=4)
        s[r].reorder(ki, ko)
        s[r].bind(ki, te.thread_axis("threadIdx.y"))
        args = [x, r]
    text = _check(s, args, "sum", 0)
    assert "red_shared" in text


def test_the_pass_parameter_keeps_the_tree():
    s, args = _row_reduce(3, 100, 64)
    tree = str(Pipeline.parse("cross_thread_reduction(warp_shuffle=False)")(s.module))
    shuffled = str(Pipeline.parse("cross_thread_reduction()")(s.module))
    assert "shfl_xor" not in tree and "red_shared" in tree
    assert "shfl_xor" in shuffled and "red_shared" not in shuffled


# -- fused rows: softmax and layer norm ---------------------------------------------------


@autosched.register_workload
def shfl_softmax(rows, n):
    x = te.placeholder((rows, n), "float32", name="x")
    return [x, ops.nn.softmax(x)]


@autosched.register_workload
def shfl_layer_norm(rows, cols):
    x = te.placeholder((rows, cols), "float32", name="x")
    k1 = te.reduce_axis((0, cols), name="k1")
    s1 = te.compute((rows,), lambda i: te.sum(x[i, k1], axis=k1), name="s1")
    d = te.compute((rows, cols), lambda i, j: x[i, j] - s1[i] / float(cols), name="d")
    k2 = te.reduce_axis((0, cols), name="k2")
    s2 = te.compute((rows,), lambda i: te.sum(d[i, k2] * d[i, k2], axis=k2), name="s2")
    out = te.compute((rows, cols), lambda i, j: d[i, j] * te.rsqrt(s2[i] / float(cols)
                                                                   + 1e-5), name="out")
    return [x, out]


def _numpy(fn, x):
    if fn is shfl_softmax:
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    mu = x.mean(1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(1, keepdims=True) + 1e-5)


def _fused_rows(fn, args, threads):
    task = autosched.SearchTask(func=fn, args=args, target="cuda -arch=sm_90a")
    step = fused_rows_step(task)
    assert step is not None
    return schedule_fused_rows(step, threads), list(task.tensors)


@pytest.mark.parametrize("fn,args", [(shfl_softmax, (6, 200)), (shfl_layer_norm, (4, 768))],
                         ids=["softmax", "layer_norm"])
@pytest.mark.parametrize("threads", [32, 128, 1024])
def test_fused_rows_kernels_shuffle(fn, args, threads):
    s, tensors = _fused_rows(fn, args, threads)
    mod = ptxforge.lower(s, tensors)
    text = str(mod)
    roundtrip_check(mod)
    assert "shfl_xor" in text and "red_shared" not in text
    x = RNG.standard_normal(args).astype("float32")
    out = np.zeros(args, "float32")
    ptxforge.build(s, tensors, target="sim")(x, out)
    np.testing.assert_allclose(out, _numpy(fn, x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("red_threads", [32, 64])
def test_reductions_with_fewer_threads_than_the_block(red_threads):
    """A softmax whose output stage runs on 128 threads and reductions on fewer: on 32, the
    warps past the first skip each reduction as a whole, which shuffles within the first
    warp (no barrier); on 64, the second warp's lanes would share a warp with idle ones,
    and the tree's barriers would be divergent: the kernel is refused."""
    task = autosched.SearchTask(func=shfl_softmax, args=(4, 200), target="cuda -arch=sm_90a")
    y, reds, inlined = fused_rows_step(task).tensors
    x = task.tensors[0]
    s = te.create_schedule(y.op)
    for t in inlined:
        s[t].compute_inline()
    o = s[y]
    row, j = o.op.axis
    o.bind(row, te.thread_axis("blockIdx.x"))
    jo, ji = o.split(j, factor=128)
    o.bind(ji, te.thread_axis("threadIdx.x"))
    assert len(reds) == 2
    for r in reds:
        st = s[r]
        st.compute_at(o, row)
        (k,) = st.op.reduce_axis
        ko, ki = st.split(k, factor=red_threads)
        st.reorder(ki, ko)
        st.bind(ki, te.thread_axis("threadIdx.x"))
    if red_threads == 64:
        with pytest.raises(PassError, match="barrier sits under"):
            ptxforge.lower(s, [x, y])
        return
    text = str(ptxforge.lower(s, [x, y]))
    assert text.count("shfl_xor") == 10 and "red_shared" not in text
    xv = RNG.standard_normal((4, 200)).astype("float32")
    out = np.zeros((4, 200), "float32")
    ptxforge.build(s, [x, y], target="sim")(xv, out)
    e = np.exp(xv - xv.max(1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)


# -- PTX ----------------------------------------------------------------------------------


@needs_ptxas
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
def test_shuffles_reach_the_ptx_and_assemble(dtype):
    from ptxforge.backend_ptx.compile import compile_kernel

    s, args = _row_reduce(4, 300, 64, "max" if dtype == "float16" else "sum", dtype)
    (kern,) = ptxforge.lower(s, args).kernels()
    ptx = compile_kernel(kern, "sm_90a", cache=False).get_source("ptx")  # ptxas runs
    assert ptx.count("shfl.sync.bfly.b32") == 6
    assert "shfl.sync.bfly.b32" in ptx and ", 31, -1;" in ptx  # a full warp's mask


# -- the intrinsic and the simulator's semantics ------------------------------------------


def test_shfl_xor_checks_its_operands():
    v = Var("v", "float32")
    assert shfl_xor(v, 3).dtype == "float32"
    with pytest.raises(IRError, match="lane mask"):
        shfl_xor(v, 32)
    with pytest.raises(IRError, match="power of two"):
        shfl_xor(v, 1, 12)
    with pytest.raises(IRError, match="float64"):
        shfl_xor(Var("d", "float64"), 1)
    with pytest.raises(IRError, match="int32 constant"):
        from ptxforge.ir.expr import Call

        Call("shfl_xor", (v, Var("m", "int32"), IntImm(32)), "float32")


def _chunk(threads, nblocks=2):
    return runtime.Chunk("k", (nblocks, 1, 1), (threads, 1, 1), 0, nblocks, False)


def test_the_simulated_shuffle_is_shfl_sync_bfly():
    c = _chunk(64)
    v = np.arange(c.lanes, dtype=np.float32) * 10
    lane = np.arange(c.lanes)
    np.testing.assert_array_equal(runtime.shuffle_xor(c, v, 5, 32, None), v[lane ^ 5])
    # segments of 8: a source above the segment's last lane reads its own value, one
    # below it reads that lane (PTX's clamp rule)
    got = runtime.shuffle_xor(c, v, 8, 8, None)
    within = lane % 32
    src = np.where((within ^ 8) <= (within | 7), within ^ 8, within)
    np.testing.assert_array_equal(got, v[lane - within + src])
    assert got[0] == v[0] and got[8] == v[0]
    # a value every lane shares
    assert (runtime.shuffle_xor(c, np.float32(2.5), 1, 32, None) == 2.5).all()


def test_the_simulator_refuses_divergent_shuffles():
    c = _chunk(64)
    v = np.zeros(c.lanes, np.float32)
    whole = np.zeros(c.lanes, bool)
    whole[32:64] = True  # one whole warp active: fine
    runtime.shuffle_xor(c, v, 1, 32, whole)
    half = np.zeros(c.lanes, bool)
    half[:16] = True
    with pytest.raises(SimDivergenceError, match="not by thread \\(16, 0, 0\\)"):
        runtime.shuffle_xor(c, v, 1, 32, half)
    with pytest.raises(SimDivergenceError, match="last warp has only 16"):
        runtime.shuffle_xor(_chunk(48), np.zeros(96, np.float32), 1, 32, None)


def test_a_shuffle_under_a_lane_condition_fails_in_a_kernel():
    s, args = _row_reduce(2, 64, 32)
    text = str(ptxforge.lower(s, args))
    first = next(ln for ln in text.splitlines() if "shfl_xor" in ln)
    guarded = text.replace(first, f"if (k.inner < 16) {{\n{first}\n}}", 1)
    mod = parse_module(guarded)
    x = np.ones((2, 64), "float32")
    with pytest.raises(SimDivergenceError, match="divergent"):
        ptxforge.backend_sim.run(mod, [x, np.zeros(2, "float32")])


# -- on a GPU -----------------------------------------------------------------------------


def _lower_with(s, tensors, warp_shuffle: bool):
    from ptxforge.driver import scheduled_module
    from ptxforge.passes import PassContext
    from ptxforge.passes.lower import LOWERING_PIPELINE

    text = LOWERING_PIPELINE.replace(
        "cross_thread_reduction()", f"cross_thread_reduction(warp_shuffle={warp_shuffle})")
    return Pipeline.parse(text)(scheduled_module(s, tensors), PassContext.current())


@pytest.mark.gpu
@pytest.mark.parametrize("fn,args,threads", [
    (shfl_softmax, (12 * 128, 128), 32), (shfl_softmax, (12 * 128, 128), 128),
    (shfl_layer_norm, (128, 768), 128), (shfl_layer_norm, (128, 768), 256),
    (shfl_layer_norm, (128, 768), 1024)],
    ids=["softmax-32", "softmax-128", "layer_norm-128", "layer_norm-256", "layer_norm-1024"])
def test_shuffled_row_kernels_on_the_gpu(fn, args, threads):
    """BERT-base's softmax and layer norm as fused-rows kernels, with shuffled reductions
    and with the shared-memory tree: both match numpy; ``-s`` prints their times."""
    from ptxforge.backend_ptx import array, compile_module, cuda, empty

    dev = cuda(0)
    s, tensors = _fused_rows(fn, args, threads)
    x = RNG.standard_normal(args).astype("float32")
    times = {}
    for shuffle in (True, False):
        mod = _lower_with(s, tensors, shuffle)
        assert ("shfl_xor" in str(mod)) == shuffle
        loaded = compile_module(mod).load(dev)
        xd, out = array(x, dev), empty(args, "float32", dev)
        loaded(xd, out)
        np.testing.assert_allclose(out.numpy(), _numpy(fn, x), rtol=1e-4, atol=1e-5)
        timer = loaded.time_evaluator("main", number=100, repeat=5, graph=True)
        times[shuffle] = timer(xd, out).median * 1e6
    print(f"\n{fn.__name__}{args} {threads} threads: shuffles {times[True]:.2f} us, "
          f"shared tree {times[False]:.2f} us")
