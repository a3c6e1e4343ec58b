"""A wgmma GEMM whose operand stages are filled by TMA under full/empty mbarriers, built as
device IR (sm_90a): ``C[M, N] = A[M, K] B[N, K]^T`` (B as a linear layer's weight), 16-bit
inputs, float32 accumulation, C in the inputs' dtype.

A block computes a ``64 consumers`` x ``block_n`` tile of C with ``consumers + 1``
warpgroups (``threadIdx.y``):

* the last warpgroup is the producer: its thread 0, for each 64-wide step ``k`` of the
  reduction, waits until stage ``k % stages`` is free (``empty``), arms ``full`` with the
  bytes of both boxes and issues two TMA copies (A's ``64 consumers`` x 64 box and B's
  ``block_n`` x 64 box, 128B-swizzled: the layout wgmma's descriptors read);
* consumer warpgroup ``g`` (one or two) waits for ``full``, runs four ``wgmma
  m64n{block_n}k16`` over its 64 rows of the stage, waits for them and arrives at ``empty``
  (128 arrivals per consumer warpgroup a phase).

As in :mod:`.copy`, both roles sit in one loop skewed by ``stages - 1`` steps (the order
the simulator follows is one the GPU may take; on the GPU the producer runs ahead, bounded
by ``empty``). Boxes past the ends of A and B are zero-filled by the TMA, so any M, N and K
(K a multiple of 8: rows of a tensor map are 16-byte multiples) need no predicates but the
final store's. Each consumer thread stores its accumulator registers to C directly
(:mod:`~ptxforge.ir.intrin.wgmma_regs`): no C tile in shared memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from ....ir import dtype as dt
from ....ir.attrs import FuncAttrs
from ....ir.expr import Cast, Expr, FloatImm, IntImm, Var, floordiv, floormod
from ....ir.intrin import ANNOTATION
from ....ir.intrin.keys import IntrinKey
from ....ir.intrin.registry import lookup
from ....ir.intrin.wgmma_regs import acc_col, acc_row, acc_slot
from ....ir.stmt import (
    Alloc,
    Barrier,
    Buffer,
    For,
    If,
    Launch,
    Module,
    PrimFunc,
    Seq,
    Stmt,
    Store,
    WgmmaSync,
)
from ....ir.stmt_tma import (
    FenceMbarrierInit,
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
    TensorMap,
    TmaLoad,
)

WG = 128
BM = 64
BK = 64
"""The reduction step: one 128-byte row of 16-bit elements, the 128B swizzle's span."""
F32 = "float32"


def _i(v: int) -> IntImm:
    return IntImm(v, dt.INDEX)


@dataclass(frozen=True)
class TmaGemm:
    """``C[M, N] = A[M, K] B[N, K]^T`` in tiles of 64 x ``block_n`` over ``stages``."""

    m: int
    n: int
    k: int
    dtype: str = "float16"
    block_n: int = 128
    stages: int = 4
    consumers: int = 1

    def check(self) -> None:
        """Raise ValueError naming what cannot be built."""
        if self.dtype not in ("float16", "bfloat16"):
            raise ValueError(f"TMA GEMM: wgmma takes float16 or bfloat16, not {self.dtype}")
        if self.block_n not in (64, 128, 256):
            raise ValueError(f"TMA GEMM: block_n is 64, 128 or 256, not {self.block_n}")
        if self.consumers not in (1, 2):
            raise ValueError(f"TMA GEMM: consumers is 1 or 2 warpgroups, not {self.consumers}")
        if not 1 <= self.stages <= 8:
            raise ValueError(f"TMA GEMM: stages must be 1-8, got {self.stages}")
        if min(self.m, self.n, self.k) < 1 or self.k % 8:
            raise ValueError(f"TMA GEMM {self.m} x {self.n} x {self.k}: K must be a positive "
                             "multiple of 8 (a tensor map's rows are 16-byte multiples)")
        if self.shared_bytes > 227 * 1024:
            raise ValueError(f"TMA GEMM: {self.shared_bytes} bytes of shared memory; lower "
                             "stages or block_n")

    @property
    def block_m(self) -> int:
        """Rows of C a block computes: 64 per consumer warpgroup."""
        return BM * self.consumers

    @property
    def a_stage(self) -> int:
        return self.block_m * BK

    @property
    def b_stage(self) -> int:
        return self.block_n * BK

    @property
    def offsets(self) -> dict:
        """Byte offsets in dynamic shared memory (stages on 1024-byte boundaries)."""
        e = dt.nbytes(self.dtype)
        a = 0
        b = a + self.stages * self.a_stage * e
        bars = b + self.stages * self.b_stage * e
        return {"A_s": a, "B_s": b, "full": bars,
                "empty": bars + -(-8 * self.stages // 16) * 16}

    @property
    def shared_bytes(self) -> int:
        return self.offsets["empty"] + -(-8 * self.stages // 16) * 16


def tma_gemm_module(g: TmaGemm, name: str = "tma_gemm") -> Module:
    """The device IR: a host function ``main(a, b, c)`` and one kernel."""
    g.check()
    bn, stages = g.block_n, g.stages
    steps = -(-g.k // BK)
    bm, nc = g.block_m, g.consumers
    a = TensorMap("a", g.dtype, (g.m, g.k), (bm, BK), "128B")
    b = TensorMap("b", g.dtype, (g.n, g.k), (bn, BK), "128B")
    c = Buffer("c", g.dtype, [g.m * g.n])
    a_s = Buffer("A_s", g.dtype, [stages * g.a_stage], "shared")
    b_s = Buffer("B_s", g.dtype, [stages * g.b_stage], "shared")
    full = Buffer("full", "uint64", [stages], "shared")
    empty = Buffer("empty", "uint64", [stages], "shared")
    acc = Buffer("C_acc", F32, [BM * bn], "warpgroup")
    wg, bx, by = Var("wg"), Var("bn"), Var("bm")
    key = IntrinKey("wgmma", ab=g.dtype, acc=F32, n=bn)

    def produce(k: Expr) -> Stmt:
        s = floormod(k, stages)
        use = floordiv(k, stages)
        return Seq([
            MbarrierWait(empty, s, _i(1) - floormod(use, 2)),
            MbarrierArrive(full, s, a.box_bytes + b.box_bytes),
            TmaLoad(a_s, s * _i(g.a_stage), a, [by * _i(bm), k * _i(BK)], full, s),
            TmaLoad(b_s, s * _i(g.b_stage), b, [bx * _i(bn), k * _i(BK)], full, s),
        ])

    def wgmma(s: Expr, kk: int) -> Stmt:
        # consumer wg reads rows 64 wg.. of the stage (8 swizzle atoms further per 64)
        a0 = s * _i(g.a_stage) + wg * _i(BM * BK) + _i(16 * kk)
        b0 = s * _i(g.b_stage) + _i(16 * kk)

        def inner(i, j, q):
            ci = i * _i(bn) + j
            prod = Cast(F32, a_s[a0 + i * _i(BK) + q]) * Cast(F32, b_s[b0 + j * _i(BK) + q])
            return Store(acc, [ci], acc[ci] + prod)
        i, j, q = Var("wi"), Var("wj"), Var("wk")
        return For(i, BM, For(j, bn, For(q, 16, inner(i, j, q))),
                   annotations={ANNOTATION: lookup(key).name})

    def consume(jstep: Expr) -> Stmt:
        s = floormod(jstep, stages)
        return Seq([
            MbarrierWait(full, s, floormod(floordiv(jstep, stages), 2)),
            WgmmaSync("fence"), *[wgmma(s, kk) for kk in range(BK // 16)],
            WgmmaSync("commit"), WgmmaSync("wait", 0),
            MbarrierArrive(empty, s),
        ])

    k = Var("k")
    loop = For(k, steps + stages - 1, Seq([
        If((wg == _i(nc)) & (k < _i(steps)), thread0(lambda: produce(k))),
        If((wg < _i(nc)) & (k >= _i(stages - 1)), consume(k - _i(stages - 1))),
    ]))
    init = If(wg == _i(0), thread0(lambda: Seq(
        [MbarrierInit(full, _i(s), 1) for s in range(stages)]
        + [MbarrierInit(empty, _i(s), WG * nc) for s in range(stages)]
        + [FenceMbarrierInit()])))
    fill_key = IntrinKey("fill", acc=F32, n=bn, scope="warpgroup")
    fi, fj = Var("fi"), Var("fj")
    fill = For(fi, BM, For(fj, bn, Store(acc, [fi * _i(bn) + fj], FloatImm(0.0, F32))),
               annotations={ANNOTATION: lookup(fill_key).name})
    # code outside a threadIdx.x loop runs on every thread of the warpgroup (the wgmmas,
    # the consumers' waits and arrivals); thread 0's parts sit in loops of their own
    body = Seq([init, Barrier(), If(wg < _i(nc), fill), loop,
                If(wg < _i(nc), epilogue(g, acc, c, wg, bx, by))])
    body = Alloc(acc, body)
    body = For(wg, nc + 1, body, "thread", "threadIdx.y")
    off = g.offsets
    for buf in (empty, full, b_s, a_s):
        body = Alloc(buf, body, off[buf.name])
    body = For(by, -(-g.m // bm), body, "thread", "blockIdx.y")
    body = For(bx, -(-g.n // bn), body, "thread", "blockIdx.x")
    grid = (-(-g.n // bn), -(-g.m // bm), 1)
    kernel = PrimFunc(f"{name}_kernel0", [a, b, c], body, FuncAttrs.kernel(
        grid, (WG, nc + 1, 1), stages=("c",), dynamic_shared_bytes=g.shared_bytes).replace(
        swizzle={"A_s": 3, "B_s": 3}))
    ha, hb = Buffer("a", g.dtype, [g.m, g.k]), Buffer("b", g.dtype, [g.n, g.k])
    hc = Buffer("c", g.dtype, [g.m, g.n])
    host = PrimFunc("main", [ha, hb, hc], Launch(kernel.name, [ha, hb, hc]), FuncAttrs.host())
    return Module([host, kernel])


def thread0(fn) -> Stmt:
    """``fn()`` on thread 0 of the warpgroup."""
    tx = Var("tx")
    return For(tx, WG, If(tx == _i(0), fn()), "thread", "threadIdx.x")


def epilogue(g: TmaGemm, acc: Buffer, c: Buffer, wg: Var, bx: Var, by: Var) -> Stmt:
    """Each consumer thread stores its accumulator registers (two rows, ``block_n / 4``
    columns of each) to C in the inputs' dtype, rows and columns past C's ends left
    out."""
    bn = g.block_n
    tx = Var("tx")

    def half(h: Var) -> Stmt:
        row = by * _i(g.block_m) + wg * _i(BM) + acc_row(tx, h)

        def pair(b: Var) -> Stmt:
            e = Var("oe")
            col = bx * _i(bn) + acc_col(tx, b, e)
            store = Store(c, [row * _i(g.n) + col], Cast(g.dtype, acc[acc_slot(b, h, e)]))
            if g.n % bn:
                store = If(col < _i(g.n), store)
            return For(e, 2, store, "unroll")
        b = Var("ob")
        stores = For(b, bn // 8, pair(b), "unroll")
        return stores if g.m % g.block_m == 0 else If(row < _i(g.m), stores)
    h = Var("oh")
    return For(tx, WG, For(h, 2, half(h), "unroll"), "thread", "threadIdx.x")


def tma_gemm_reference(a, b, dtype: str):
    """``a @ b.T`` in float64, as float32 (the tolerance is the caller's)."""
    import numpy as np

    from ....ir.dtype import from_bfloat16

    def wide(x):
        return from_bfloat16(x).astype(np.float64) if dtype == "bfloat16" else \
            x.astype(np.float64)
    return (wide(a) @ wide(b).T).astype(np.float32)
