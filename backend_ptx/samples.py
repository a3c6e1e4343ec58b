"""Hand-written device-IR kernels with numpy references.

They show what the backend accepts (thread loops with guards, shared and local buffers,
barriers, unrolled loops, selects that load, floor division, math intrinsics) and serve the
backend's tests and benchmarks, which need kernels without running the whole lowering.
Each builder returns a device-IR module (kernels plus a host ``main``) and a function that
computes the expected outputs from the inputs with numpy.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..ir.attrs import FuncAttrs
from ..ir.expr import Call, Cast, FloatImm, IntImm, Var, select
from ..ir.stmt import (
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


def _thread(var: Var, extent: int, tag: str, body) -> For:
    return For(var, extent, body, kind="thread", thread=tag)


def _host(params, kernels, temps=()) -> PrimFunc:
    body = Seq([Launch(k.name, args) for k, args in kernels])
    for t in reversed(temps):
        body = Alloc(t, body)
    return PrimFunc("main", params, body, FuncAttrs.host())


def vector_add(n: int = 1000, block: int = 256) -> tuple[Module, Callable]:
    """``C = A + 2 B`` over ``n`` elements: one element a thread, guarded past ``n``;
    the last block's thread loop is shorter than the launch (``extent < block``)."""
    A, B, C = (Buffer(x, "float32", (n,)) for x in "ABC")
    grid = -(-n // block)
    bx, tx = Var("bx"), Var("tx")
    i = bx * block + tx
    body = _thread(bx, grid, "blockIdx.x", _thread(tx, block, "threadIdx.x", If(
        i < n, Store(C, (i,), A[i] + B[i] * FloatImm(2.0)))))
    k = PrimFunc("vector_add_kernel0", [A, B, C], body,
                 FuncAttrs.kernel(grid=(grid, 1, 1), block=(block, 1, 1)))
    return Module([_host([A, B, C], [(k, [A, B, C])]), k]), lambda a, b: a + 2 * b


def tiled_matmul(m: int = 128, n: int = 128, k: int = 64, tile: int = 32,
                 ktile: int = 16) -> tuple[Module, Callable]:
    """``C = A @ B`` with 16x16 threads a block, each computing a 2x2 block of ``C`` in a
    local accumulator; A and B tiles staged through shared memory between barriers."""
    threads = tile // 2
    assert m % tile == 0 and n % tile == 0 and k % ktile == 0
    assert (tile * ktile) % (threads * threads) == 0
    A = Buffer("A", "float32", (m * k,))
    B = Buffer("B", "float32", (k * n,))
    C = Buffer("C", "float32", (m * n,))
    acc = Buffer("C.local", "float32", (4,), "local")
    a_sh = Buffer("A.shared", "float32", (tile * ktile,), "shared")
    b_sh = Buffer("B.shared", "float32", (ktile * tile,), "shared")
    by, bx, ty, tx = Var("by"), Var("bx"), Var("ty"), Var("tx")
    i, j, ko, ki, ld = Var("i"), Var("j"), Var("k.outer"), Var("k.inner"), Var("ax0")
    tid = ty * threads + tx
    loads = (tile * ktile) // (threads * threads)

    def unroll(v, ext, body):
        return For(v, ext, body, kind="unroll")

    flat = ld * (threads * threads) + tid
    load_a = unroll(ld, loads, Store(a_sh, (flat,), A[
        (by * tile + flat // ktile) * k + ko * ktile + flat % ktile]))
    ld2 = Var("ax0")
    flat2 = ld2 * (threads * threads) + tid
    load_b = unroll(ld2, loads, Store(b_sh, (flat2,), B[
        (ko * ktile + flat2 // tile) * n + bx * tile + flat2 % tile]))
    i2, j2 = Var("i"), Var("j")
    fma = unroll(ki, ktile, unroll(i2, 2, unroll(j2, 2, Store(acc, (i2 * 2 + j2,), acc[
        i2 * 2 + j2] + a_sh[(ty * 2 + i2) * ktile + ki] * b_sh[ki * tile + tx * 2 + j2]))))
    kloop = For(ko, k // ktile, Seq([load_a, load_b, Barrier(), fma, Barrier()]))
    i3, j3 = Var("i"), Var("j")
    init = unroll(i, 2, unroll(j, 2, Store(acc, (i * 2 + j,), FloatImm(0.0))))
    write = unroll(i3, 2, unroll(j3, 2, Store(C, (
        (by * tile + ty * 2 + i3) * n + bx * tile + tx * 2 + j3,), acc[i3 * 2 + j3])))
    body = _thread(by, m // tile, "blockIdx.y", _thread(bx, n // tile, "blockIdx.x", _thread(
        ty, threads, "threadIdx.y", _thread(tx, threads, "threadIdx.x", Alloc(acc, Seq([
            init, Alloc(a_sh, Alloc(b_sh, kloop)), write]))))))
    kern = PrimFunc("matmul_kernel0", [A, B, C], body,
                    FuncAttrs.kernel(grid=(n // tile, m // tile, 1),
                                     block=(threads, threads, 1)))
    A2 = Buffer("A", "float32", (m, k))
    B2 = Buffer("B", "float32", (k, n))
    C2 = Buffer("C", "float32", (m, n))
    host = _host([A2, B2, C2], [(kern, [A2, B2, C2])])
    return Module([host, kern]), lambda a, b: a @ b


MATH_OPS = ("exp", "log", "tanh", "sigmoid", "erf", "sqrt", "rsqrt", "sin", "cos", "fabs",
            "floor", "ceil", "round")


def _np_math(op: str, x: np.ndarray) -> np.ndarray:
    from math import erf

    if op == "sigmoid":
        return 1.0 / (1.0 + np.exp(-x))
    if op == "rsqrt":
        return 1.0 / np.sqrt(x)
    if op == "erf":
        return np.vectorize(erf, otypes=[x.dtype])(x)
    if op == "fabs":
        return np.abs(x)
    if op == "round":  # halfway cases away from zero, as CUDA's roundf
        t = np.trunc(x)
        return np.where(np.abs(x - t) >= 0.5, t + np.sign(x), t).astype(x.dtype)
    return getattr(np, op)(x)


def select_math(n: int = 500, pad: int = 3, div: int = 5, op: str = "tanh",
                block: int = 128) -> tuple[Module, Callable]:
    """``out[i] = (0 <= i-pad < n ? A[i-pad] : 0) + op(A[floormod(i-7, div)]) +
    float(floordiv(i-7, div))`` for ``i`` in ``[0, n + 2 pad)``: a select whose true branch
    loads out of bounds when taken blindly, floor division of negative numbers by a
    constant that is not a power of two, and a math intrinsic."""
    out_n = n + 2 * pad
    A = Buffer("A", "float32", (n,))
    O = Buffer("out", "float32", (out_n,))
    grid = -(-out_n // block)
    bx, tx, j = Var("bx"), Var("tx"), Var("j")
    i = bx * block + tx
    shifted = j - pad
    padded = select((shifted >= 0) & (shifted < n), A[shifted], FloatImm(0.0))
    src = A[(j - 7) % div]
    value = padded + Call(op, (src,), "float32") + Cast("float32", (j - 7) // div)
    body = _thread(bx, grid, "blockIdx.x", _thread(tx, block, "threadIdx.x", Let(
        j, i, If(j < IntImm(out_n), Store(O, (j,), value)))))
    kern = PrimFunc("select_math_kernel0", [A, O], body,
                    FuncAttrs.kernel(grid=(grid, 1, 1), block=(block, 1, 1)))

    def ref(a: np.ndarray) -> np.ndarray:
        idx = np.arange(out_n)
        s = idx - pad
        inside = (s >= 0) & (s < n)
        padded_v = np.where(inside, a[np.clip(s, 0, n - 1)], np.float32(0))
        return (padded_v + _np_math(op, a[(idx - 7) % div]) +
                ((idx - 7) // div).astype(np.float32)).astype(np.float32)

    return Module([_host([A, O], [(kern, [A, O])]), kern]), ref


def two_stage(n: int = 4096, block: int = 256) -> tuple[Module, Callable]:
    """Two kernels through a global temporary: ``T = exp(A)``, then ``C = T * B``."""
    A, B, C = (Buffer(x, "float32", (n,)) for x in "ABC")
    T = Buffer("T", "float32", (n,))
    grid = n // block

    def kern(name, params, store):
        bx, tx = Var("bx"), Var("tx")
        body = _thread(bx, grid, "blockIdx.x", _thread(tx, block, "threadIdx.x",
                                                       store(bx * block + tx)))
        return PrimFunc(name, params, body,
                        FuncAttrs.kernel(grid=(grid, 1, 1), block=(block, 1, 1)))

    k0 = kern("two_stage_kernel0", [A, T], lambda i: Store(T, (i,), Call("exp", (A[i],),
                                                                         "float32")))
    k1 = kern("two_stage_kernel1", [T, B, C], lambda i: Store(C, (i,), T[i] * B[i]))
    host = _host([A, B, C], [(k0, [A, T]), (k1, [T, B, C])], temps=[T])
    return Module([host, k0, k1]), lambda a, b: np.exp(a) * b


def unary_map(n: int = 4096, op: str = "exp", dtype: str = "float64",
              block: int = 256) -> tuple[Module, Callable]:
    """``out[i] = op(A[i])`` in ``dtype`` (``pow`` raises to the power 1.7)."""
    A = Buffer("A", dtype, (n,))
    O = Buffer("out", dtype, (n,))
    grid = -(-n // block)
    bx, tx = Var("bx"), Var("tx")
    i = bx * block + tx
    args = (A[i], FloatImm(1.7, dtype)) if op == "pow" else (A[i],)
    body = _thread(bx, grid, "blockIdx.x", _thread(tx, block, "threadIdx.x", If(
        i < n, Store(O, (i,), Call(op, args, dtype)))))
    kern = PrimFunc(f"{op}_kernel0", [A, O], body,
                    FuncAttrs.kernel(grid=(grid, 1, 1), block=(block, 1, 1)))

    def ref(a: np.ndarray) -> np.ndarray:
        wide = a.astype(np.float64)
        out = np.power(wide, 1.7) if op == "pow" else _np_math(op, wide)
        return out.astype(a.dtype)

    return Module([_host([A, O], [(kern, [A, O])]), kern]), ref
