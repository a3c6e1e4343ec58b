"""The CPU simulator of device IR: results against numpy, GPU semantics, every error path,
and speed."""

from __future__ import annotations

import time

import numpy as np
import pytest
from ptxforge import backend_sim as sim
from ptxforge.ir.attrs import FuncAttrs
from ptxforge.ir.expr import (
    Bin,
    Call,
    Cast,
    Cmp,
    FloatImm,
    IRError,
    IntImm,
    Not,
    Select,
    Var,
    call,
    cast,
    emax,
    emin,
    select,
)
from ptxforge.ir.stmt import (
    Alloc,
    Barrier,
    Buffer,
    For,
    If,
    Launch,
    Let,
    Module,
    PrimFunc,
    Seq,
    Store,
)

RNG = np.random.default_rng(1234)


# ---------------------------------------------------------------------------------------
# building device IR by hand


def thread(var: Var, extent: int, tag: str, body) -> For:
    return For(var, extent, body, kind="thread", thread=tag)


def serial(var: Var, extent: int, body, kind: str = "serial") -> For:
    return For(var, extent, body, kind=kind)


def f32(x: float) -> FloatImm:
    return FloatImm(x, "float32")


def i32(x: int) -> IntImm:
    return IntImm(x, "int32")


def kernel(name: str, params: list, body, grid=(1, 1, 1), block=(1, 1, 1)) -> PrimFunc:
    return PrimFunc(name, params, body, FuncAttrs.kernel(grid, block))


def single_kernel_module(k: PrimFunc, shapes: dict | None = None) -> Module:
    """A host function taking one buffer per kernel param (shaped as in ``shapes``)."""
    shapes = shapes or {}
    host = [Buffer(p.name, p.dtype, shapes.get(p.name, p.shape)) for p in k.params]
    main = PrimFunc("main", host, Seq([Launch(k.name, host)]), FuncAttrs.host())
    return Module([main, k])


def run_kernel(k: PrimFunc, *arrays, **kw) -> None:
    sim.run(single_kernel_module(k, {p.name: a.shape for p, a in zip(k.params, arrays)}),
            list(arrays), **kw)


def randn(*shape) -> np.ndarray:
    return RNG.standard_normal(shape, dtype=np.float32)


# ---------------------------------------------------------------------------------------
# kernels used by several tests


def vector_add(n: int = 120, blocks: int = 4, threads: int = 32, a_size: int | None = None,
               guard: bool = True) -> PrimFunc:
    A = Buffer("A", "float32", (a_size or n,))
    B, C = (Buffer(x, "float32", (n,)) for x in "BC")
    bx, tx = Var("bx"), Var("tx")
    i = bx * threads + tx
    store = Store(C, [i], A[i] + B[i])
    body = thread(bx, blocks, "blockIdx.x", thread(tx, threads, "threadIdx.x",
                  If(i < n, store) if guard else store))
    return kernel("vadd", [A, B, C], body, (blocks, 1, 1), (threads, 1, 1))


def tiled_matmul(M=64, N=48, K=80, T=16, barrier_before=True, barrier_after=True):
    """C = A @ B with T x T tiles in shared memory, one output element per thread."""
    A = Buffer("A", "float32", (M * K,))
    B = Buffer("B", "float32", (K * N,))
    C = Buffer("C", "float32", (M * N,))
    As = Buffer("A.shared", "float32", (T * T,), "shared")
    Bs = Buffer("B.shared", "float32", (T * T,), "shared")
    acc = Buffer("C.local", "float32", (1,), "local")
    by, bx, ty, tx, ko, ki = (Var(n) for n in ("by", "bx", "ty", "tx", "ko", "ki"))
    step = [Store(As, [ty * T + tx], A[(by * T + ty) * K + ko * T + tx]),
            Store(Bs, [ty * T + tx], B[(ko * T + ty) * N + bx * T + tx])]
    if barrier_before:
        step.append(Barrier())
    step.append(serial(ki, T, Store(acc, [i32(0)], acc[0] + As[ty * T + ki] * Bs[ki * T + tx]),
                       kind="unroll"))
    if barrier_after:
        step.append(Barrier())
    body = Seq([Store(acc, [i32(0)], f32(0.0)), serial(ko, K // T, Seq(step)),
                Store(C, [(by * T + ty) * N + bx * T + tx], acc[0])])
    body = Alloc(As, Alloc(Bs, Alloc(acc, body)))
    body = thread(by, M // T, "blockIdx.y", thread(bx, N // T, "blockIdx.x",
                  thread(ty, T, "threadIdx.y", thread(tx, T, "threadIdx.x", body))))
    k = kernel("matmul_kernel0", [A, B, C], body, (N // T, M // T, 1), (T, T, 1))
    return single_kernel_module(k, {"A": (M, K), "B": (K, N), "C": (M, N)})


# ---------------------------------------------------------------------------------------
# results


def test_vector_add_with_guard():
    k = vector_add()
    a, b = randn(120), randn(120)
    c = np.full(120, 7.0, np.float32)
    run_kernel(k, a, b, c)
    np.testing.assert_array_equal(c, a + b)


def test_tiled_matmul_with_shared_memory_and_barriers():
    m = tiled_matmul()
    a, b = randn(64, 80), randn(80, 48)
    c = np.zeros((64, 48), np.float32)
    sim.run(m, [a, b, c])
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    c2 = np.zeros_like(c)
    sim.run(m, [a, b, c2], check_races=False)
    np.testing.assert_array_equal(c, c2)


def test_row_sum_with_local_accumulator():
    rows, cols = 96, 37
    A = Buffer("A", "float32", (rows * cols,))
    out = Buffer("out", "float32", (rows,))
    acc = Buffer("acc", "float32", (1,), "local")
    bx, tx, j = Var("bx"), Var("tx"), Var("j")
    r = bx * 32 + tx
    body = Alloc(acc, Seq([
        Store(acc, [i32(0)], f32(0.0)),
        serial(j, cols, Store(acc, [i32(0)], acc[0] + A[r * cols + j])),
        Store(out, [r], acc[0]),
    ]))
    k = kernel("rowsum", [A, out], thread(bx, 3, "blockIdx.x", thread(tx, 32, "threadIdx.x",
                                                                       body)), (3, 1, 1),
               (32, 1, 1))
    a = randn(rows, cols)
    o = np.zeros(rows, np.float32)
    run_kernel(k, a, o)
    expect = np.zeros(rows, np.float32)
    for jj in range(cols):  # same order and precision as the kernel
        expect += a[:, jj]
    np.testing.assert_array_equal(o, expect)


def test_thread_loop_smaller_than_launch_extent():
    n = 48
    A = Buffer("A", "float32", (64,))
    B = Buffer("B", "float32", (64,))
    tx, tx2 = Var("tx"), Var("tx2")
    # the first stage uses all 64 threads, the second only 48 of them
    body = Seq([thread(tx, 64, "threadIdx.x", Store(B, [tx], A[tx] * f32(2.0))),
                thread(tx2, n, "threadIdx.x", Store(A, [tx2], f32(-1.0)))])
    k = kernel("partial", [A, B], body, block=(64, 1, 1))
    a = randn(64)
    original = a.copy()
    b = np.zeros(64, np.float32)
    run_kernel(k, a, b)
    np.testing.assert_array_equal(b, original * 2)
    np.testing.assert_array_equal(a[:n], -1.0)
    np.testing.assert_array_equal(a[n:], original[n:])


def test_host_launches_two_kernels_through_a_global_temporary():
    n = 100
    A, T1, C = (Buffer(x, "float32", (n,)) for x in ("A", "T", "C"))
    T2 = Buffer("T", "float32", (n,))
    b1, t1, b2, t2 = Var("bx"), Var("tx"), Var("bx"), Var("tx")
    i1, i2 = b1 * 64 + t1, b2 * 64 + t2
    k1 = kernel("k1", [A, T1], thread(b1, 2, "blockIdx.x", thread(t1, 64, "threadIdx.x", If(
        i1 < n, Store(T1, [i1], A[i1] * A[i1])))), (2, 1, 1), (64, 1, 1))
    k2 = kernel("k2", [T2, C], thread(b2, 2, "blockIdx.x", thread(t2, 64, "threadIdx.x", If(
        i2 < n, Store(C, [i2], T2[i2] + f32(1.0))))), (2, 1, 1), (64, 1, 1))
    HA, HC = Buffer("A", "float32", (10, 10)), Buffer("C", "float32", (10, 10))
    HT = Buffer("tmp", "float32", (n,))
    main = PrimFunc("main", [HA, HC], Alloc(HT, Seq([Launch("k1", [HA, HT]),
                                                     Launch("k2", [HT, HC])])),
                    FuncAttrs.host())
    a = randn(10, 10)
    c = np.zeros((10, 10), np.float32)
    sim.run(Module([main, k1, k2]), [a, c])
    np.testing.assert_array_equal(c, a * a + np.float32(1.0))


def test_nested_if_else_under_lane_masks():
    A = Buffer("out", "int32", (64,))
    tx = Var("tx")
    body = thread(tx, 64, "threadIdx.x", If(
        tx % 2 == 0,
        If(tx % 3 == 0, Store(A, [tx], i32(1)), Store(A, [tx], i32(2))),
        If(tx < 10, Store(A, [tx], i32(3)))))
    k = kernel("branches", [A], body, block=(64, 1, 1))
    out = np.full(64, -5, np.int32)
    run_kernel(k, out)
    t = np.arange(64)
    expect = np.where(t % 2 == 0, np.where(t % 3 == 0, 1, 2), np.where(t < 10, 3, -5))
    np.testing.assert_array_equal(out, expect)


def test_select_does_not_load_for_lanes_that_do_not_choose_it():
    n = 100
    A = Buffer("A", "float32", (n,))
    B = Buffer("B", "float32", (128,))
    bx, tx = Var("bx"), Var("tx")
    i = bx * 32 + tx
    # lanes 100..127 would read A out of bounds if the load ran for them
    body = thread(bx, 4, "blockIdx.x", thread(tx, 32, "threadIdx.x",
                  Store(B, [i], select(i < n, A[i] * f32(3.0), f32(-1.0)))))
    k = kernel("sel", [A, B], body, (4, 1, 1), (32, 1, 1))
    a = randn(n)
    b = np.zeros(128, np.float32)
    run_kernel(k, a, b)
    np.testing.assert_array_equal(b, np.concatenate([a * np.float32(3), np.full(28, -1.0)]))


def test_select_with_lane_independent_condition_guards_its_load():
    A = Buffer("A", "float32", (10,))
    B = Buffer("B", "float32", (20,))
    k_ = Var("k")
    body = serial(k_, 20, Store(B, [k_], select(k_ < 10, A[k_], A[k_ - 10] + f32(100.0))))
    a = randn(10)
    b = np.zeros(20, np.float32)
    run_kernel(kernel("sel_scalar", [A, B], body), a, b)
    np.testing.assert_array_equal(b, np.concatenate([a, a + np.float32(100)]))


def test_select_reports_an_out_of_bounds_load_on_the_chosen_side():
    A = Buffer("A", "float32", (100,))
    B = Buffer("B", "float32", (128,))
    bx, tx = Var("bx"), Var("tx")
    i = bx * 32 + tx
    body = thread(bx, 4, "blockIdx.x", thread(tx, 32, "threadIdx.x",
                  Store(B, [i], select(i < 110, A[i], f32(-1.0)))))
    with pytest.raises(sim.SimMemoryError, match=r"buffer A index 100 outside \[0, 100\) "
                       r"\(thread \(4, 0, 0\) of block \(3, 0, 0\)\)"):
        run_kernel(kernel("sel_oob", [A, B], body, (4, 1, 1), (32, 1, 1)), randn(100),
                   np.zeros(128, np.float32))


def test_logical_and_loads_its_right_side_only_where_the_left_holds():
    A = Buffer("A", "float32", (10,))
    B = Buffer("B", "int32", (32,))
    tx = Var("tx")
    body = thread(tx, 32, "threadIdx.x",
                  Store(B, [tx], cast("int32", (tx < 10) & (A[tx] > f32(0.0)))))
    a = randn(10)
    b = np.full(32, 7, np.int32)
    run_kernel(kernel("andload", [A, B], body, block=(32, 1, 1)), a, b)
    np.testing.assert_array_equal(b, np.concatenate([a > 0, np.zeros(22, bool)]))


def test_int32_arithmetic_wraps_in_twos_complement():
    out = Buffer("out", "int32", (64,))
    tx, k_ = Var("tx"), Var("k")
    big = i32(1_000_003)
    # lane-dependent (numpy int32) and lane-independent (Python int) arithmetic must agree
    body = Seq([
        thread(tx, 32, "threadIdx.x", Store(out, [tx], (tx + 2000) * big * i32(7))),
        serial(k_, 32, Store(out, [k_ + 32], (k_ + 2000) * big * i32(7))),
    ])
    o = np.zeros(64, np.int32)
    run_kernel(kernel("wrap", [out], body, block=(32, 1, 1)), o)
    expect = ((np.arange(32, dtype=np.int32) + 2000) * np.int32(1_000_003)) * np.int32(7)
    np.testing.assert_array_equal(o[:32], expect)
    np.testing.assert_array_equal(o[32:], expect)


def test_floordiv_and_floormod_round_toward_minus_infinity():
    out = Buffer("out", "int32", (4 * 40,))
    tx, k_ = Var("tx"), Var("k")
    x = tx - 20
    y = k_ - 20

    def stores(v, base):
        return [Store(out, [base], v // 7), Store(out, [base + 40], v % 7),
                Store(out, [base + 80], v // -3), Store(out, [base + 120], v % -3)]

    body = Seq([thread(tx, 20, "threadIdx.x", Seq(stores(x, tx))),
                serial(k_, 40, If(k_ >= 20, Seq(stores(y, k_))))])
    o = np.zeros(160, np.int32)
    run_kernel(kernel("divmod", [out], body, block=(20, 1, 1)), o)
    v = np.arange(40) - 20
    np.testing.assert_array_equal(o.reshape(4, 40), [v // 7, v % 7, v // -3, v % -3])


def test_float32_math_stays_float32():
    n = 64
    A = Buffer("A", "float32", (n,))
    B = Buffer("B", "float32", (8 * n,))
    tx = Var("tx")
    x = A[tx]
    ops = [x * f32(0.1) + f32(0.3), call("exp", x), call("sqrt", call("fabs", x)),
           call("rsqrt", call("fabs", x) + f32(1.0)), call("sigmoid", x), call("tanh", x),
           call("round", x * f32(2.5)), call("fma", x, f32(1.1), f32(0.7))]
    body = thread(tx, n, "threadIdx.x", Seq([Store(B, [tx + n * j], op)
                                             for j, op in enumerate(ops)]))
    a = randn(n)
    b = np.zeros(8 * n, np.float32)
    run_kernel(kernel("math", [A, B], body, block=(n, 1, 1)), a, b)
    one = np.float32(1)
    expect = [a * np.float32(0.1) + np.float32(0.3), np.exp(a), np.sqrt(np.abs(a)),
              one / np.sqrt(np.abs(a) + one), one / (one + np.exp(-a)), np.tanh(a)]
    # float32 evaluation rounds differently from float64 for x * 0.1 + 0.3
    np.testing.assert_array_equal(b[:n], expect[0])
    np.testing.assert_allclose(b[n:6 * n].reshape(5, n), np.array(expect[1:]), rtol=1e-6)
    scaled = a * np.float32(2.5)
    whole = np.trunc(scaled)
    away = np.where(np.abs(scaled - whole) >= 0.5, whole + np.sign(scaled), whole)
    np.testing.assert_array_equal(b[6 * n:7 * n], away)
    fused = (a.astype(np.float64) * np.float32(1.1) + np.float32(0.7)).astype(np.float32)
    np.testing.assert_array_equal(b[7 * n:], fused)


def test_erf_pow_and_casts():
    A = Buffer("A", "float32", (16,))
    I = Buffer("I", "int32", (16,))
    F = Buffer("F", "float32", (16,))
    k_ = Var("k")
    body = serial(k_, 16, Seq([
        Store(I, [k_], cast("int32", A[k_] * f32(10.0))),
        Store(F, [k_], call("erf", A[k_]) + call("pow", call("fabs", A[k_]), f32(1.5))
              + cast("float32", k_ // 3)),
    ]))
    a = randn(16)
    i = np.zeros(16, np.int32)
    f = np.zeros(16, np.float32)
    run_kernel(kernel("casts", [A, I, F], body), a, i, f)
    np.testing.assert_array_equal(i, (a * np.float32(10)).astype(np.int32))
    from math import erf

    expect = np.array([erf(v) for v in a], np.float32) + np.abs(a) ** np.float32(1.5) + (
        np.arange(16) // 3).astype(np.float32)
    np.testing.assert_allclose(f, expect, rtol=1e-6, atol=1e-6)


def test_float_to_int_casts_truncate_and_saturate():
    A = Buffer("A", "float32", (6,))
    I = Buffer("I", "int32", (12,))
    tx, k_ = Var("tx"), Var("k")
    # the same casts per lane and in a serial loop
    body = Seq([thread(tx, 6, "threadIdx.x", Store(I, [tx], cast("int32", A[tx]))),
                serial(k_, 6, Store(I, [k_ + 6], cast("int32", A[k_])))])
    a = np.array([2.7, -2.7, 3e9, -3e9, np.nan, np.inf], np.float32)
    i = np.zeros(12, np.int32)
    run_kernel(kernel("sat", [A, I], body, block=(6, 1, 1)), a, i)
    expect = [2, -2, 2**31 - 1, -2**31, 0, 2**31 - 1]
    np.testing.assert_array_equal(i, expect + expect)


def test_float_min_max_propagate_nan():
    A = Buffer("A", "float32", (4,))
    B = Buffer("B", "float32", (8,))
    tx = Var("tx")
    body = thread(tx, 4, "threadIdx.x", Seq([Store(B, [tx], emin(A[tx], f32(0.0))),
                                             Store(B, [tx + 4], emax(A[tx], f32(0.0)))]))
    a = np.array([1.0, -1.0, np.nan, 0.5], np.float32)
    b = np.zeros(8, np.float32)
    run_kernel(kernel("minmax", [A, B], body, block=(4, 1, 1)), a, b)
    np.testing.assert_array_equal(b, np.concatenate([np.minimum(a, 0), np.maximum(a, 0)]))


def test_let_binds_a_value_for_its_body():
    A = Buffer("A", "float32", (32,))
    B = Buffer("B", "float32", (32,))
    acc = Buffer("acc", "float32", (2,), "local")
    tx, v, w = Var("tx"), Var("v", "float32"), Var("w", "int32")
    body = thread(tx, 32, "threadIdx.x", Alloc(acc, Seq([
        Store(acc, [i32(0)], A[tx]),
        # v keeps the loaded value even after acc[0] changes
        Let(v, acc[0], Seq([
            Store(acc, [i32(0)], f32(5.0)),
            Let(w, 31 - tx, Store(B, [w], v + acc[0])),
        ])),
    ])))
    a = randn(32)
    b = np.zeros(32, np.float32)
    run_kernel(kernel("let", [A, B], body, block=(32, 1, 1)), a, b)
    np.testing.assert_array_equal(b, (a + np.float32(5))[::-1])


def test_local_buffer_indexed_by_thread():
    A = Buffer("A", "float32", (64,))
    loc = Buffer("loc", "float32", (4,), "local")
    tx, j = Var("tx"), Var("j")
    body = thread(tx, 64, "threadIdx.x", Alloc(loc, Seq([
        serial(j, 4, Store(loc, [j], cast("float32", j * 10))),
        Store(loc, [tx % 4], loc[tx % 4] + f32(0.5)),
        Store(A, [tx], loc[tx % 4] + loc[(tx + 1) % 4]),
    ])))
    a = np.zeros(64, np.float32)
    run_kernel(kernel("localidx", [A], body, block=(64, 1, 1)), a)
    t = np.arange(64)
    np.testing.assert_array_equal(a, (t % 4) * 10 + 0.5 + ((t + 1) % 4) * 10)


def test_shared_reduction_tree_with_barriers():
    n = 128
    A = Buffer("A", "float32", (4 * n,))
    out = Buffer("out", "float32", (4,))
    s = Buffer("red.shared", "float32", (n,), "shared")
    bx, tx = Var("bx"), Var("tx")
    steps = [Store(s, [tx], A[bx * n + tx]), Barrier()]
    half = n // 2
    while half >= 1:
        steps += [If(tx < half, Store(s, [tx], s[tx] + s[tx + half])), Barrier()]
        half //= 2
    steps.append(If(tx == 0, Store(out, [bx], s[0])))
    body = thread(bx, 4, "blockIdx.x", thread(tx, n, "threadIdx.x", Alloc(s, Seq(steps))))
    a = randn(4, n)
    o = np.zeros(4, np.float32)
    run_kernel(kernel("treesum", [A, out], body, (4, 1, 1), (n, 1, 1)), a, o)
    np.testing.assert_allclose(o, a.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_many_blocks_run_in_chunks():
    blocks, threads = 400, 256  # more lanes than one chunk holds
    A = Buffer("A", "float32", (blocks * threads,))
    B = Buffer("B", "float32", (blocks * threads,))
    s = Buffer("s.shared", "float32", (threads,), "shared")
    bx, tx = Var("bx"), Var("tx")
    body = thread(bx, blocks, "blockIdx.x", thread(tx, threads, "threadIdx.x", Alloc(s, Seq([
        Store(s, [tx], A[bx * threads + tx]),
        Barrier(),
        Store(B, [bx * threads + tx], s[threads - 1 - tx] + cast("float32", bx)),
    ]))))
    a = randn(blocks * threads)
    b = np.zeros_like(a)
    run_kernel(kernel("chunks", [A, B], body, (blocks, 1, 1), (threads, 1, 1)), a, b)
    expect = a.reshape(blocks, threads)[:, ::-1] + np.arange(blocks, dtype=np.float32)[:, None]
    np.testing.assert_array_equal(b, expect.reshape(-1))


def test_three_dimensional_launch_indices():
    grid, block = (3, 2, 2), (4, 2, 3)
    total = np.prod(grid) * np.prod(block)
    out = Buffer("out", "int32", (int(total) * 6,))
    names = ("bz", "by", "bx", "tz", "ty", "tx")
    tags = ("blockIdx.z", "blockIdx.y", "blockIdx.x", "threadIdx.z", "threadIdx.y",
            "threadIdx.x")
    v = {n: Var(n) for n in names}
    lin = ((((v["bz"] * 2 + v["by"]) * 3 + v["bx"]) * 3 + v["tz"]) * 2 + v["ty"]) * 4 + v["tx"]
    body = Seq([Store(out, [lin * 6 + j], v[n]) for j, n in enumerate(names)])
    extent = dict(zip(tags, (2, 2, 3, 3, 2, 4)))
    for n, t in reversed(list(zip(names, tags))):
        body = thread(v[n], extent[t], t, body)
    o = np.zeros(int(total) * 6, np.int32)
    run_kernel(kernel("dims", [out], body, grid, block), o)
    idx = np.indices((2, 2, 3, 3, 2, 4)).reshape(6, -1).T
    np.testing.assert_array_equal(o.reshape(-1, 6), idx)


def test_deep_nesting_and_long_expressions_compile():
    F = Buffer("F", "float32", (1,))
    tx = Var("tx")
    loops = [Var(f"i{d}") for d in range(8)]
    total = F[0]
    for j in range(250):  # a left-deep sum, deeper than Python's parser accepts at once
        total = total + f32(j % 3)
    body = If(tx == 0, Store(F, [i32(0)], total))
    for d in range(12):  # 8 loops and 13 ifs: more nested blocks than one function allows
        body = If(tx >= d - 20, body) if d % 2 else If(loops[d // 2] >= 0, body)
    for lp in loops:
        body = serial(lp, 2, body)
    f = np.zeros(1, np.float32)
    run_kernel(kernel("deep", [F], thread(tx, 4, "threadIdx.x", body), block=(4, 1, 1)), f)
    assert f[0] == 2**8 * sum(j % 3 for j in range(250))


def _mixed_expressions(v: Var, F: Buffer, I: Buffer) -> tuple[list, list]:
    """Integer and float expressions of ``v`` and of loads indexed by it."""
    x, y, k = v - 30, F[v], I[v]
    ints = [x // 7, x % 7, x // -4, x % -4, emin(x, k), emax(x, k), x * k, k // (x + 100),
            k % (x + 100), cast("int32", y * f32(100.0)), select(x < 3, k, x * 3),
            cast("int32", Not(x < 0) | (k > 0)), cast("int32", (x < 5) & (k < 0)),
            call("abs", x), x * 123456789 + k, cast("int32", cast("int8", x * 37)),
            cast("int32", cast("uint8", x * 37)), cast("int32", cast("int64", k) * 100000),
            Bin("div", x, i32(-7)), cast("int32", cast("bool", x % 3))]
    floats = [y * f32(0.1) + f32(0.3), call("exp", y), call("log", call("fabs", y)),
              call("rsqrt", call("fabs", y)), call("tanh", y), call("sigmoid", y),
              call("erf", y), call("floor", y), call("ceil", y), call("round", y * f32(2.5)),
              call("sin", y), call("cos", y), call("pow", call("fabs", y), f32(0.7)),
              call("fma", y, f32(1.3), f32(-0.2)), emin(y, f32(0.2)), emax(y, f32(0.2)),
              y / (y - f32(0.5)), select(y < f32(0.0), y * f32(2.0), y + f32(1.0)),
              cast("float32", x) / f32(3.0), cast("float32", cast("float16", y)),
              Bin("floordiv", y, f32(0.3)),
              cast("float32", cast("float64", y) * cast("float64", y))]
    return ints, floats


def test_lane_arrays_and_scalars_compute_the_same_bits():
    """The same expressions evaluated per lane (numpy arrays) and in a serial loop of a
    single-thread kernel (Python scalars) give identical results."""
    n = 64
    F, I = Buffer("F", "float32", (n,)), Buffer("I", "int32", (n,))
    outputs = []
    for lanes in (True, False):
        v = Var("v")
        ints, floats = _mixed_expressions(v, F, I)
        OI = Buffer("OI", "int32", (len(ints) * n,))
        OF = Buffer("OF", "float32", (len(floats) * n,))
        body = Seq([Store(OI, [v + j * n], e) for j, e in enumerate(ints)]
                   + [Store(OF, [v + j * n], e) for j, e in enumerate(floats)])
        if lanes:
            k = kernel("lanes", [F, I, OI, OF], thread(v, n, "threadIdx.x", body),
                       block=(n, 1, 1))
        else:
            k = kernel("scalars", [F, I, OI, OF], serial(v, n, body))
        fi = (np.linspace(-3, 3, n) + 0.01).astype(np.float32)
        ii = ((np.arange(n) * 7919) % 2001 - 1000).astype(np.int32)
        oi = np.zeros(OI.size, np.int32)
        of = np.zeros(OF.size, np.float32)
        run_kernel(k, fi, ii, oi, of)
        outputs.append((oi.reshape(-1, n), of.reshape(-1, n)))
    (ai, af), (si, sf) = outputs
    np.testing.assert_array_equal(ai, si)
    np.testing.assert_array_equal(af.view(np.uint32), sf.view(np.uint32))
    x = np.arange(n) - 30
    np.testing.assert_array_equal(ai[:4], [x // 7, x % 7, x // -4, x % -4])
    np.testing.assert_array_equal(ai[14], (x.astype(np.int64) * 123456789 + ii).astype(np.int32))
    np.testing.assert_array_equal(ai[15], (x * 37).astype(np.int8))
    np.testing.assert_array_equal(ai[16], (x * 37).astype(np.uint8))
    np.testing.assert_array_equal(ai[18], np.trunc(x / -7))


def test_barrier_in_a_branch_taken_by_whole_blocks():
    A = Buffer("A", "float32", (4 * 32,))
    s = Buffer("s.shared", "float32", (32,), "shared")
    bx, tx = Var("bx"), Var("tx")
    i = bx * 32 + tx
    body = thread(bx, 4, "blockIdx.x", thread(tx, 32, "threadIdx.x", Alloc(s, If(
        bx % 2 == 0,
        Seq([Store(s, [tx], A[i]), Barrier(), Store(A, [i], s[31 - tx])]),
        Store(A, [i], f32(0.0))))))
    a = randn(4 * 32)
    expect = a.reshape(4, 32)[:, ::-1].copy()
    expect[1::2] = 0
    run_kernel(kernel("uniform", [A], body, (4, 1, 1), (32, 1, 1)), a)
    np.testing.assert_array_equal(a, expect.reshape(-1))


def test_one_lane_wins_a_store_of_many_lanes_to_one_element():
    A = Buffer("A", "float32", (1,))
    tx, j = Var("tx"), Var("j")
    # every thread of the vectorized loop stores the same value; then thread 5 alone stores
    body = thread(tx, 32, "threadIdx.x", Seq([
        serial(j, 1, Store(A, [j], cast("float32", tx * 0 + 3)), kind="vectorize"),
        If(tx == 5, Store(A, [i32(0)], A[0] + cast("float32", tx))),
    ]))
    a = np.zeros(1, np.float32)
    run_kernel(kernel("onewins", [A], body, block=(32, 1, 1)), a)
    assert a[0] == 8.0


# ---------------------------------------------------------------------------------------
# errors


def test_out_of_bounds_load_names_kernel_buffer_index_and_thread():
    k = vector_add(n=128, a_size=120, guard=False)
    with pytest.raises(sim.SimMemoryError) as err:
        run_kernel(k, randn(120), randn(128), np.zeros(128, np.float32))
    msg = str(err.value)
    assert msg.startswith("illegal memory access: kernel vadd, buffer A index 120 outside "
                          "[0, 120)"), msg
    assert "(thread (24, 0, 0) of block (3, 0, 0)) on a load" in msg


def test_out_of_bounds_store_is_reported_only_for_active_lanes():
    B = Buffer("B", "float32", (100,))
    bx, tx = Var("bx"), Var("tx")
    i = bx * 32 + tx
    guarded = thread(bx, 4, "blockIdx.x", thread(tx, 32, "threadIdx.x",
                     If(i * 2 < 200, Store(B, [i * 2 - 100], f32(1.0)))))
    with pytest.raises(sim.SimMemoryError, match=r"buffer B index -100 outside \[0, 100\) "
                       r"\(thread \(0, 0, 0\) of block \(0, 0, 0\)\) on a store"):
        run_kernel(kernel("oobstore", [B], guarded, (4, 1, 1), (32, 1, 1)),
                   np.zeros(100, np.float32))
    # the same store under a guard that keeps every active lane in bounds runs
    ok = thread(bx, 4, "blockIdx.x", thread(tx, 32, "threadIdx.x",
                If(i >= 50, If(i < 100, Store(B, [i * 2 - 100], f32(1.0))))))
    b = np.zeros(100, np.float32)
    run_kernel(kernel("okstore", [B], ok, (4, 1, 1), (32, 1, 1)), b)
    assert b[::2].sum() == 50 and b[1::2].sum() == 0


def test_out_of_bounds_in_serial_loop_of_single_thread_kernel():
    A = Buffer("A", "float32", (10,))
    k_ = Var("k")
    k = kernel("st", [A], serial(k_, 11, Store(A, [k_], f32(0.0))))
    with pytest.raises(sim.SimMemoryError, match="buffer A index 10 outside"):
        run_kernel(k, np.zeros(10, np.float32))


@pytest.mark.parametrize("grid, block, pattern", [
    ((1, 1, 1), (32, 33, 1), "1056 threads per block"),
    ((1, 1, 1), (1, 1, 65), r"blockDim.z = 65; the limit is 64"),
    ((1, 70000, 1), (1, 1, 1), r"gridDim.y = 70000; the limit is 65535"),
])
def test_launch_limits(grid, block, pattern):
    A = Buffer("A", "float32", (1,))
    k = kernel("big", [A], Store(A, [i32(0)], f32(1.0)), grid, block)
    with pytest.raises(sim.SimLaunchError, match=pattern):
        run_kernel(k, np.zeros(1, np.float32))
    # an empty extent cannot even be written down: the kernel attributes refuse it
    with pytest.raises(IRError, match=r"kernel block \(0, 1, 1\) has an extent below 1"):
        kernel("empty", [A], Store(A, [i32(0)], f32(1.0)), (1, 1, 1), (0, 1, 1))


def test_too_much_shared_memory():
    A = Buffer("A", "float32", (1,))
    s1 = Buffer("a.shared", "float32", (8192,), "shared")
    s2 = Buffer("b.shared", "float32", (8192,), "shared")
    tx = Var("tx")
    body = thread(tx, 32, "threadIdx.x", Alloc(s1, Alloc(s2, If(
        tx == 0, Store(A, [i32(0)], s1[0] + s2[0])))))
    with pytest.raises(sim.SimLaunchError, match="65536 bytes of shared memory"):
        run_kernel(kernel("smem", [A], body, block=(32, 1, 1)), np.zeros(1, np.float32))


def test_missing_barrier_before_reading_shared_memory():
    m = tiled_matmul(barrier_before=False)
    args = [randn(64, 80), randn(80, 48), np.zeros((64, 48), np.float32)]
    with pytest.raises(sim.SimRaceError, match=r"missing barrier: kernel matmul_kernel0, "
                       r"thread \(\d+, \d+, 0\) of block \(\d+, \d+, 0\) reads A\.shared\["
                       r"\d+\] written by thread"):
        sim.run(m, args)
    sim.run(m, args, check_races=False)  # the checker is what stops it


def test_write_after_read_race_without_trailing_barrier():
    m = tiled_matmul(barrier_after=False)
    args = [randn(64, 80), randn(80, 48), np.zeros((64, 48), np.float32)]
    with pytest.raises(sim.SimRaceError, match=r"writes A\.shared\[\d+\] read by thread"):
        sim.run(m, args)


@pytest.mark.parametrize("log_limit", [1 << 22, 100])
@pytest.mark.parametrize("barrier", [True, False])
def test_reads_logged_over_a_long_interval_are_checked_at_the_next_write(
        monkeypatch, log_limit, barrier):
    from ptxforge.backend_sim import runtime

    monkeypatch.setattr(runtime.SharedRace, "LOG_LIMIT", log_limit)  # fold the log early
    A = Buffer("A", "float32", (32,))
    s = Buffer("s.shared", "float32", (32,), "shared")
    acc = Buffer("acc", "float32", (1,), "local")
    tx, k_ = Var("tx"), Var("k")
    steps = [Store(s, [tx], A[tx]), Barrier(), Store(acc, [i32(0)], f32(0.0)),
             serial(k_, 20, Store(acc, [i32(0)], acc[0] + s[(tx + k_) % 32]))]
    if barrier:
        steps.append(Barrier())
    steps += [Store(s, [tx], acc[0]), Barrier(), Store(A, [tx], s[31 - tx])]
    k = kernel("longread", [A], thread(tx, 32, "threadIdx.x", Alloc(s, Alloc(acc, Seq(
        steps)))), block=(32, 1, 1))
    a = randn(32)
    if not barrier:
        with pytest.raises(sim.SimRaceError, match=r"writes s\.shared\[\d+\] read by thread"):
            run_kernel(k, a.copy())
        return
    out = a.copy()
    run_kernel(k, out)
    sums = np.zeros(32, np.float32)
    for j in range(20):
        sums += a[(np.arange(32) + j) % 32]
    np.testing.assert_array_equal(out, sums[::-1])


def test_conflicting_writes_in_one_interval():
    A = Buffer("A", "float32", (32,))
    s = Buffer("s.shared", "float32", (16,), "shared")
    tx = Var("tx")

    def body(value):
        return thread(tx, 32, "threadIdx.x", Alloc(s, Seq([
            Store(s, [tx % 16], value), Barrier(), Store(A, [tx], s[tx % 16])])))

    # every pair of threads tx, tx + 16 writes one element: fine with equal values
    a = np.zeros(32, np.float32)
    run_kernel(kernel("same", [A], body(cast("float32", tx % 16)), block=(32, 1, 1)), a)
    np.testing.assert_array_equal(a, np.arange(32) % 16)
    with pytest.raises(sim.SimRaceError, match="writes a different value to s.shared"):
        run_kernel(kernel("differ", [A], body(cast("float32", tx)), block=(32, 1, 1)), a)


def test_divergent_barrier():
    A = Buffer("A", "float32", (64,))
    s = Buffer("s.shared", "float32", (64,), "shared")
    tx = Var("tx")
    body = thread(tx, 64, "threadIdx.x", Alloc(s, If(tx < 40, Seq([
        Store(s, [tx], f32(1.0)), Barrier(), Store(A, [tx], s[tx])]))))
    with pytest.raises(sim.SimBarrierError, match="barrier reached by thread .* but not by "
                       r"thread \(40, 0, 0\)"):
        run_kernel(kernel("diverge", [A], body, block=(64, 1, 1)), np.zeros(64, np.float32))


def test_arguments_are_checked():
    m = tiled_matmul()
    good = [randn(64, 80), randn(80, 48), np.zeros((64, 48), np.float32)]
    with pytest.raises(sim.SimArgumentError, match="takes 3 arrays"):
        sim.run(m, good[:2])
    with pytest.raises(sim.SimArgumentError, match=r"B: expected an array of shape \(80, 48\)"):
        sim.run(m, [good[0], randn(48, 80), good[2]])
    with pytest.raises(sim.SimArgumentError, match="dtype float32"):
        sim.run(m, [good[0], good[1], good[2].astype(np.float64)])


def test_output_written_into_non_contiguous_array():
    m = tiled_matmul()
    a, b = randn(64, 80), randn(80, 48)
    c = np.zeros((48, 64), np.float32).T  # Fortran-ordered view
    sim.run(m, [a, b, c])
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_malformed_ir_is_rejected_with_a_message():
    A = Buffer("A", "float32", (4,))
    tx, stray = Var("tx"), Var("stray")
    k = kernel("bad", [A], thread(tx, 8, "threadIdx.x", Store(A, [tx], f32(0.0))),
               block=(4, 1, 1))
    with pytest.raises(sim.SimIRError, match="extent 8, but the launch has only 4"):
        run_kernel(k, np.zeros(4, np.float32))
    k = kernel("bad2", [A], Store(A, [stray], f32(0.0)))
    with pytest.raises(sim.SimIRError, match="var stray is used but no loop"):
        run_kernel(k, np.zeros(4, np.float32))


# ---------------------------------------------------------------------------------------
# speed


def conv_like_kernel(nblocks=64, H=7, W=14, RC=64, FF=8, XX=4):
    """A direct-convolution-shaped kernel: nblocks x (H*W) threads, a local accumulator of
    FF*XX values, RC*3*3*FF*XX leaf statements of two global loads and a multiply-add."""
    threads = H * W
    D = Buffer("data", "float32", (RC * (H + 2) * (W * XX + 2),))
    Wt = Buffer("weight", "float32", (nblocks * FF * XX * RC * 9,))
    O = Buffer("out", "float32", (nblocks * FF * XX * threads,))
    acc = Buffer("acc", "float32", (FF * XX,), "local")
    bx, tx, rc, ry, rx, ff, xx, i = (Var(n) for n in ("bx", "tx", "rc", "ry", "rx", "ff", "xx",
                                                      "i"))
    y, x = tx // W, tx % W
    didx = (rc * (H + 2) + y + ry) * (W * XX + 2) + x * XX + xx + rx
    widx = (((bx * FF + ff) * XX + xx) * RC + rc) * 9 + ry * 3 + rx
    leaf = Store(acc, [ff * XX + xx], acc[ff * XX + xx] + D[didx] * Wt[widx])
    body = Seq([
        serial(i, FF * XX, Store(acc, [i], f32(0.0))),
        serial(rc, RC, serial(ry, 3, serial(rx, 3, serial(ff, FF, serial(xx, XX, leaf,
                                                                          "unroll"))))),
        serial(i, FF * XX, Store(O, [(bx * FF * XX + i) * threads + tx], acc[i])),
    ])
    body = thread(bx, nblocks, "blockIdx.x", thread(tx, threads, "threadIdx.x", Alloc(acc, body)))
    k = kernel("conv_kernel0", [D, Wt, O], body, (nblocks, 1, 1), (threads, 1, 1))

    def reference(d, w):
        d = d.reshape(RC, H + 2, W * XX + 2).astype(np.float64)
        w = w.reshape(nblocks, FF, XX, RC, 3, 3).astype(np.float64)
        out = np.zeros((nblocks, FF, XX, H, W))
        for a in range(3):
            for b in range(3):
                patch = np.stack([d[:, a:a + H, c + b:c + b + W * XX:XX] for c in range(XX)],
                                 axis=-1)
                out += np.einsum("rhwx,bfxr->bfxhw", patch, w[..., a, b])
        return out.reshape(-1)

    return k, reference, RC * 9 * FF * XX


def test_speed_of_a_many_thread_kernel():
    k, reference, leaves = conv_like_kernel()
    assert leaves > 18000
    d = randn(k.params[0].size)
    w = randn(k.params[1].size)
    o = np.zeros(k.params[2].size, np.float32)
    start = time.perf_counter()
    run_kernel(k, d, w, o)
    elapsed = time.perf_counter() - start
    np.testing.assert_allclose(o, reference(d, w), rtol=1e-4, atol=1e-3)
    assert elapsed < 10.0, f"{leaves} leaf statements over 64 x 98 threads took {elapsed:.1f} s"


def test_speed_of_a_single_thread_kernel():
    n = 30
    A, B, C = (Buffer(x, "float32", (n ** 3,)) for x in "ABC")
    i, j, k_ = Var("i"), Var("j"), Var("k")
    idx = (i * n + j) * n + k_
    body = serial(i, n, serial(j, n, serial(k_, n, Store(
        C, [idx], A[idx] * B[(k_ * n + j) * n + i] + f32(1.0)))))
    a, b = randn(n, n, n), randn(n, n, n)
    c = np.zeros((n, n, n), np.float32)
    start = time.perf_counter()
    run_kernel(kernel("loops", [A, B, C], body), a, b, c)
    elapsed = time.perf_counter() - start
    np.testing.assert_array_equal(c, a * b.transpose(2, 1, 0) + np.float32(1))
    assert elapsed < 3.0, f"27,000 iterations of one store took {elapsed:.1f} s"


def test_kernels_are_compiled_once():
    k = vector_add()
    first = sim.compiled(k)
    assert sim.compiled(k) is first
    assert "def kernel" in first.source
    assert sim.compiled(k, check_races=False) is not first


def test_ir_nodes_built_directly():
    # Bin/Cmp/Not/Cast/Call/Select nodes made by their constructors, as passes make them
    A = Buffer("A", "int32", (8,))
    k_ = Var("k")
    e = Select(Not(Cmp("lt", k_, i32(4))), Bin("max", k_, i32(6)),
               Cast("int32", Call("floor", (Cast("float32", k_),), "float32")))
    a = np.zeros(8, np.int32)
    run_kernel(kernel("direct", [A], serial(k_, 8, Store(A, [k_], e))), a)
    np.testing.assert_array_equal(a, [0, 1, 2, 3, 6, 6, 6, 7])
