"""Register access to a wgmma accumulator (``ir/intrin/wgmma_regs.py``): a thread's slots
hold the elements the ISA's layout gives it (checked against the warpgroup store
intrinsic on the simulator), the row reductions over a quad and an element-wise map with
a per-row operand built on it against numpy, the PTX keeps them in registers, the
verifier and the simulator refuse a slot that differs between threads and plain accesses
of ``warp`` fragments."""

from __future__ import annotations

import numpy as np
import pytest
from ptxforge import backend_sim
from ptxforge.backend_sim.errors import SimIRError
from ptxforge.ir.attrs import FuncAttrs
from ptxforge.ir.expr import Cast, FloatImm, IntImm, IRError, Var
from ptxforge.ir.intrin import ANNOTATION
from ptxforge.ir.intrin.keys import IntrinKey
from ptxforge.ir.intrin.registry import lookup
from ptxforge.ir.intrin.wgmma import accumulator_map
from ptxforge.ir.intrin.wgmma_regs import acc_col, acc_elements, acc_row
from ptxforge.ir.stmt import Alloc, Buffer, For, If, Launch, Module, PrimFunc, Seq, Store
from ptxforge.ir.verify import verify
from ptxforge.target import as_target

H100 = as_target("cuda -arch=sm_90a")


def _i(v: int) -> IntImm:
    return IntImm(v, "int32")


def _module(n: int, slot=None, scope: str = "warpgroup") -> Module:
    """A warpgroup zeroes a 64 x n accumulator (intrinsic), adds ``1000 row + col`` to
    each element by register access (its position from the helpers) and stores the tile
    (intrinsic): ``slot(tx, s)`` replaces the register slot where given."""
    out = Buffer("out", "float32", [64 * n])
    acc = Buffer("acc", "float32", [64 * n], scope)
    tx = Var("tx")
    i, j = Var("i"), Var("j")
    fill = For(i, 64, For(j, n, Store(acc, [i * _i(n) + j], FloatImm(0.0, "float32"))),
               annotations={ANNOTATION: lookup(IntrinKey("fill", acc="float32", n=n,
                                                         scope="warpgroup")).name})
    regs = []
    for h, b, e, s in acc_elements(n):
        at = _i(s) if slot is None else slot(tx, s)
        value = Cast("float32", acc_row(tx, h) * _i(1000) + acc_col(tx, b, e))
        regs.append(Store(acc, [at], acc[at] + value))

    def store(t):
        i, j = Var("i"), Var("j")
        at = i * _i(n) + _i(8 * t) + j
        key = IntrinKey("store", "C", acc="float32", scope="warpgroup")
        return For(i, 64, For(j, 8, Store(out, [at], acc[at])),
                   annotations={ANNOTATION: lookup(key).name})
    body = Alloc(acc, Seq([fill, For(tx, 128, Seq(regs), "thread", "threadIdx.x"),
                           *[store(t) for t in range(n // 8)]]))
    body = For(Var("bx"), 1, body, "thread", "blockIdx.x")
    kernel = PrimFunc("regs_kernel0", [out], body, FuncAttrs.kernel((1, 1, 1), (128, 1, 1)))
    host = [Buffer("out", "float32", [64, n])]
    return Module([PrimFunc("main", host, Launch(kernel.name, host), FuncAttrs.host()),
                   kernel])


@pytest.mark.parametrize("n", [8, 64])
def test_register_slots_hold_the_layouts_elements(n):
    mod = _module(n)
    verify(mod, target=H100)
    out = np.zeros((64, n), np.float32)
    backend_sim.run(mod, [out])
    r, c = np.mgrid[0:64, 0:n]
    np.testing.assert_array_equal(out, 1000 * r + c)


def test_the_helpers_agree_with_the_accumulator_map():
    rows, cols = accumulator_map(32)
    for h, b, e, s in acc_elements(32):
        for tx in (0, 5, 37, 127):
            w, g, t = tx // 32, (tx % 32) // 4, tx % 4
            assert rows[tx, s] == 16 * w + g + 8 * h
            assert cols[tx, s] == 8 * b + 2 * t + e


def test_ptx_keeps_the_registers_out_of_local_memory():
    from ptxforge.backend_ptx import compile_module

    src = compile_module(_module(64), H100).get_source("ptx")
    assert ".local" not in src and "st.global" in src


def test_a_slot_that_depends_on_the_thread_is_refused():
    mod = _module(8, slot=lambda tx, s: (tx + _i(s)) % _i(4))
    with pytest.raises(IRError, match="depends on .*threadIdx.x"):
        verify(mod, target=H100)
    with pytest.raises(SimIRError, match="differs between threads"):
        backend_sim.run(mod, [np.zeros((64, 8), np.float32)])


def test_warp_fragments_stay_intrinsic_only():
    from ptxforge.ir.intrin.verify import check_fragment_access

    class V:
        kind, intrin_loop, hw_loops = "kernel", None, {}

        def fail(self, describe):
            raise IRError(describe(lambda b: b.name))

    frag = Buffer("frag", "float32", [128], "warp")
    with pytest.raises(IRError, match="only by tensor intrinsics"):
        check_fragment_access(V(), frag, "load", (_i(0),))


def _row_module(n: int) -> Module:
    """A warpgroup loads a 64 x n tile ``x`` into an accumulator's registers (register
    writes at the layout's positions), takes each row's maximum and sum (its own n / 4
    elements of a row, then two shuffles over the quad), writes ``exp2(x - max[row])``
    back in place (a map with a per-row operand) and stores the tile (intrinsic) and the
    rows' sums of the mapped values (the quad's first thread)."""
    from ptxforge.ir.expr import call, emax
    from ptxforge.ops.schedules.attention.lanes import quad_reduce

    x = Buffer("x", "float32", [64 * n])
    out = Buffer("out", "float32", [64 * n])
    sums = Buffer("sums", "float32", [64])
    acc = Buffer("acc", "float32", [64 * n], "warpgroup")
    tx = Var("tx")
    elems = acc_elements(n)
    load = [Store(acc, [_i(s)], x[acc_row(tx, h) * _i(n) + acc_col(tx, b, e)])
            for h, b, e, s in elems]

    def row(h):
        mine = [s for hh, _, _, s in elems if hh == h]
        m, total = Var(f"m{h}", "float32"), Var(f"sum{h}", "float32")
        partial = acc[_i(mine[0])]
        for s in mine[1:]:
            partial = emax(partial, acc[_i(s)])
        mapped = [Store(acc, [_i(s)], call("exp2", acc[_i(s)] - m)) for s in mine]
        add = acc[_i(mine[0])]
        for s in mine[1:]:
            add = add + acc[_i(s)]
        store = If(tx % _i(4) == _i(0), Store(sums, [acc_row(tx, h)], total))
        return quad_reduce(partial, emax, m, Seq([
            *mapped, quad_reduce(add, lambda a, b: a + b, total, store)]))
    body = Seq([*load, row(0), row(1)])
    i, j = Var("i"), Var("j")
    fill = For(i, 64, For(j, n, Store(acc, [i * _i(n) + j], FloatImm(0.0, "float32"))),
               annotations={ANNOTATION: lookup(IntrinKey("fill", acc="float32", n=n,
                                                         scope="warpgroup")).name})

    def store(t):
        i, j = Var("i"), Var("j")
        at = i * _i(n) + _i(8 * t) + j
        key = IntrinKey("store", "C", acc="float32", scope="warpgroup")
        return For(i, 64, For(j, 8, Store(out, [at], acc[at])),
                   annotations={ANNOTATION: lookup(key).name})
    kbody = Alloc(acc, Seq([fill, For(tx, 128, body, "thread", "threadIdx.x"),
                            *[store(t) for t in range(n // 8)]]))
    kbody = For(Var("bx"), 1, kbody, "thread", "blockIdx.x")
    kernel = PrimFunc("rows_kernel0", [x, out, sums], kbody,
                      FuncAttrs.kernel((1, 1, 1), (128, 1, 1)))
    host = [Buffer("x", "float32", [64, n]), Buffer("out", "float32", [64, n]),
            Buffer("sums", "float32", [64])]
    return Module([PrimFunc("main", host, Launch(kernel.name, host), FuncAttrs.host()),
                   kernel])


@pytest.mark.parametrize("n", [16, 64])
def test_row_reductions_and_a_per_row_map_on_the_registers(n):
    mod = _row_module(n)
    verify(mod, target=H100)
    x = np.random.default_rng(n).standard_normal((64, n)).astype(np.float32) * 4
    out, sums = np.zeros((64, n), np.float32), np.zeros(64, np.float32)
    backend_sim.run(mod, [x, out, sums])
    want = np.exp2(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out, want, rtol=1e-6)
    np.testing.assert_allclose(sums, want.sum(axis=1), rtol=1e-5)


def test_ptx_of_the_row_reductions_stays_in_registers():
    from ptxforge.backend_ptx import compile_module

    src = compile_module(_row_module(64), H100).get_source("ptx")
    assert ".local" not in src and src.count("shfl.sync.bfly") == 8  # 2 a reduction
    assert "ex2.approx" in src
