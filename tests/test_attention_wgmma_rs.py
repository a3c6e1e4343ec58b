"""wgmma with A from registers (the ``..._rs`` and ``..._rs_cvt`` intrinsics):
registration and lookup, the simulator against numpy (fp16 and bf16, N 16 and 64), the
cast of an f32 accumulator into the A fragment of the next product by register access
(slot for slot) or by the wgmma itself (``_rs_cvt``), the protocol (A's
registers held until the wait, a fence after they are written), the verifier's fragment
rule, and the PTX of ``backend_ptx/wgmma_regs.py`` assembled by ptxas."""

from __future__ import annotations

import numpy as np
import pytest
from ptxforge import backend_sim
from ptxforge.backend_ptx.assemble import find_ptxas
from ptxforge.backend_sim.wgmma import WgmmaProtocolError
from ptxforge.graph.opdefs.elemwise import cast_array
from ptxforge.ir.attrs import FuncAttrs
from ptxforge.ir.dtype import round_to
from ptxforge.ir.expr import Cast, FloatImm, IntImm, Var
from ptxforge.ir.intrin import ANNOTATION, IntrinError
from ptxforge.ir.intrin.keys import IntrinKey
from ptxforge.ir.intrin.registry import get_intrin, lookup
from ptxforge.ir.intrin.wgmma_regs import acc_col, acc_elements, acc_row
from ptxforge.ir.stmt import (
    Alloc,
    Barrier,
    Buffer,
    For,
    Launch,
    Module,
    PrimFunc,
    Seq,
    Store,
    WgmmaSync,
)
from ptxforge.ir.verify import verify
from ptxforge.ops.schedules.attention.kernel_wgmma import swizzled
from ptxforge.ops.testing import widen
from ptxforge.target import as_target

H100 = as_target("cuda -arch=sm_90a")
RNG = np.random.default_rng(17)


def _i(v: int) -> IntImm:
    return IntImm(v, "int32")


def _rs(acc, n, a_frag, b_s, ab, b_base=0) -> For:
    """``acc += a_frag x b_s^T``: the nest of an RS wgmma (B K-major rows of 64); a float32
    ``a_frag`` (an accumulator) is rounded to ``ab`` by the wgmma (``_rs_cvt``)."""
    i, j, k = Var("i"), Var("j"), Var("k")
    ci = i * _i(n) + j
    a = a_frag[i * _i(16) + k]
    cvt = a_frag.dtype == "float32"
    a = Cast("float32", Cast(ab, a) if cvt else a)
    prod = a * Cast("float32", b_s[_i(b_base) + j * _i(64) + k])
    key = IntrinKey("wgmma", ab=ab, acc="float32", n=n, a_regs=True, a_cvt=cvt)
    return For(i, 64, For(j, n, For(k, 16, Store(acc, [ci], acc[ci] + prod))),
               annotations={ANNOTATION: lookup(key).name})


def _fill(acc, n) -> For:
    i, j = Var("i"), Var("j")
    key = IntrinKey("fill", acc="float32", n=n, scope="warpgroup")
    return For(i, 64, For(j, n, Store(acc, [i * _i(n) + j], FloatImm(0.0, "float32"))),
               annotations={ANNOTATION: lookup(key).name})


def _store(acc, n, out) -> list:
    def tile(t):
        i, j = Var("i"), Var("j")
        at = i * _i(n) + _i(8 * t) + j
        key = IntrinKey("store", "C", acc="float32", scope="warpgroup")
        return For(i, 64, For(j, 8, Store(out, [at], acc[at])),
                   annotations={ANNOTATION: lookup(key).name})
    return [tile(t) for t in range(n // 8)]


def _copy_b(b_s, b, n, base=0) -> For:
    """B ``[n, 16]`` from global memory into rows of 64 of the 128B swizzle."""
    it, tx = Var("it"), Var("tx")
    el = it * _i(128) + tx
    body = Store(b_s, [_i(base) + swizzled(el // _i(16), el % _i(16))], b[el])
    return For(it, n * 16 // 128, For(tx, 128, body, "thread", "threadIdx.x"))


def _module(n: int, ab: str, chain: bool = False, drop: str = "", cvt: bool = False) -> Module:
    """One warpgroup: A ``[64, 16]`` into its registers by register access (the ISA's
    layout), ``C = A B1^T`` by an RS wgmma; with ``chain``, ``P = 16-bit(C)`` slot for
    slot (n = 16) and ``O = P B2^T`` by a second RS wgmma (``cvt``: the second wgmma reads
    ``C``'s float32 registers and rounds them itself, ``_rs_cvt``). ``drop``: a protocol
    step left out ("fence": the second product's fence; "wait": the first product's
    wait)."""
    a = Buffer("a", ab, [64 * 16])
    b1, b2 = Buffer("b1", ab, [n * 16]), Buffer("b2", ab, [n * 16])
    out = Buffer("out", "float32", [64 * n])
    af = Buffer("A_frag", ab, [64 * 16], "warpgroup")
    c = Buffer("C_acc", "float32", [64 * n], "warpgroup")
    o = Buffer("O_acc", "float32", [64 * n], "warpgroup")
    b_s = Buffer("B_s", ab, [2 * n * 64], "shared")
    tx = Var("tx")
    load_a = For(tx, 128, Seq([Store(af, [_i(s)], a[acc_row(tx, h) * _i(16) + acc_col(tx, b, e)])
                               for h, b, e, s in acc_elements(16)]), "thread", "threadIdx.x")
    steps = [_fill(c, n), load_a, _copy_b(b_s, b1, n), _copy_b(b_s, b2, n, n * 64),
             WgmmaSync("fence_proxy_async"), Barrier(), WgmmaSync("fence"),
             _rs(c, n, af, b_s, ab), WgmmaSync("commit")]
    if drop != "wait":
        steps.append(WgmmaSync("wait", 0))
    result = c
    if chain:
        tx2 = Var("tx")
        cast = For(tx2, 128, Seq([Store(af, [_i(s)], Cast(ab, c[_i(s)]))
                                  for _, _, _, s in acc_elements(16)]),
                   "thread", "threadIdx.x")
        steps += [_fill(o, n)] if cvt else [cast, _fill(o, n)]
        steps += [] if drop == "fence" else [WgmmaSync("fence")]
        steps += [_rs(o, n, c if cvt else af, b_s, ab, n * 64), WgmmaSync("commit"),
                  WgmmaSync("wait", 0)]
        result = o
    steps += _store(result, n, out)
    body = Alloc(b_s, Alloc(af, Alloc(c, Alloc(o, Seq(steps)))), dyn_offset=0)
    body = For(Var("bx"), 1, body, "thread", "blockIdx.x")
    attrs = FuncAttrs.kernel((1, 1, 1), (128, 1, 1), dynamic_shared_bytes=2 * n * 128)
    kernel = PrimFunc("rs_kernel0", [a, b1, b2, out], body,
                      attrs.replace(swizzle={"B_s": 3}))
    host = [Buffer("a", ab, [64, 16]), Buffer("b1", ab, [n, 16]), Buffer("b2", ab, [n, 16]),
            Buffer("out", "float32", [64, n])]
    return Module([PrimFunc("main", host, Launch(kernel.name, host), FuncAttrs.host()),
                   kernel])


def _inputs(n, ab):
    ins = [cast_array(RNG.standard_normal(s), ab) for s in ((64, 16), (n, 16), (n, 16))]
    return [*ins, np.zeros((64, n), np.float32)]


def _wide(x, ab):
    return widen(x, ab).astype(np.float64)


def test_the_rs_intrinsics_are_registered_by_key():
    key = IntrinKey("wgmma", ab="bfloat16", acc="float32", n=128, b_kn=True, a_regs=True)
    spec = lookup(key)
    assert spec.name == "wgmma_m64n128k16_bf16_f32_kn_rs" and spec.kind == "wgmma"
    assert spec.role("A").name == "wg_a16" and spec.role("B") is None
    cvt = lookup(IntrinKey("wgmma", ab="float16", acc="float32", n=64, a_regs=True,
                           a_cvt=True))
    assert cvt.name == "wgmma_m64n64k16_f16_f32_rs_cvt" and cvt.dtypes["A"] == "float32"
    assert "float32(float16(A[i, k]))" in str(cvt.declaration.op.body)
    assert cvt.backends == ("sim", "ptx")  # both backends lower the RS nests
    assert get_intrin("wgmma_m64n64k16_f16_f32_rs").shapes["B"] == (64, 16)


@pytest.mark.parametrize("n,ab", [(16, "float16"), (64, "bfloat16")])
def test_rs_wgmma_matches_numpy(n, ab):
    mod = _module(n, ab)
    verify(mod, target=H100)
    args = _inputs(n, ab)
    backend_sim.run(mod, args)
    want = _wide(args[0], ab) @ _wide(args[1], ab).T
    np.testing.assert_allclose(args[-1], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ab,cvt", [("float16", False), ("bfloat16", False),
                                    ("float16", True), ("bfloat16", True)])
def test_an_accumulator_cast_slot_for_slot_is_the_next_products_a(ab, cvt):
    # S = A B1^T (64 x 16), P = 16-bit(S) in place of A (or, cvt, S's registers rounded by
    # the next wgmma), O = P B2^T: the accumulator's k-th 16 columns and A's k-th tile
    # share their register order
    mod = _module(16, ab, chain=True, cvt=cvt)
    verify(mod, target=H100)
    args = _inputs(16, ab)
    backend_sim.run(mod, args)
    s = _wide(args[0], ab) @ _wide(args[1], ab).T
    p = round_to(s.astype(np.float32), ab).astype(np.float64)
    want = p @ _wide(args[2], ab).T
    np.testing.assert_allclose(args[-1], want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("drop,error", [("fence", "no wgmma.fence"),
                                        ("wait", "in flight")])
def test_the_a_registers_follow_the_protocol(drop, error):
    with pytest.raises(WgmmaProtocolError, match=error):
        backend_sim.run(_module(16, "float16", chain=True, drop=drop),
                        _inputs(16, "float16"))


def test_a_shared_a_is_not_an_rs_operand():
    from ptxforge.ir.intrin.match import match_nest

    af = Buffer("A_s", "float16", [64 * 16], "shared")
    acc = Buffer("acc", "float32", [64 * 16], "warpgroup")
    b_s = Buffer("B_s", "float16", [16 * 64], "shared")
    with pytest.raises(IntrinError, match="it is a fragment"):
        loop = _rs(acc, 16, af, b_s, "float16")
        match_nest(loop, loop.annotations[ANNOTATION], device=True)


@pytest.mark.parametrize("ab,cvt", [("float16", False), ("bfloat16", True)])
def test_ptx_passes_a_as_four_registers(ab, cvt):
    from ptxforge.backend_ptx import compile_module

    src = compile_module(_module(16, ab, chain=True, cvt=cvt), H100).get_source("ptx")
    s = {"float16": "f16", "bfloat16": "bf16"}[ab]
    lines = [x for x in src.splitlines() if "wgmma.mma_async" in x]
    assert len(lines) == 2
    for x in lines:
        assert f"m64n16k16.f32.{s}.{s}" in x
        # {d0..d7}, {a0..a3}, descB, p, 1, 1, 0: A as four .b32 registers, no trans-a
        a_regs = x.split("}, {")[1].split("}")[0]
        assert len(a_regs.split(",")) == 4 and x.rstrip().endswith("p, 1, 1, 0; }")
    assert ".local" not in src and "cvt.rn." in src
    if cvt:  # the float32 accumulator rounded in pairs into A's four registers
        assert src.count(f"cvt.rn.{s}x2.f32") == 4


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas is not installed")
def test_ptxas_assembles_the_rs_form():
    from ptxforge.backend_ptx.compile import compile_kernel

    ck = compile_kernel(_module(64, "bfloat16").kernels()[0], H100, stop_after="cubin",
                        assembler="ptxas")
    assert not ck.resources.spills
