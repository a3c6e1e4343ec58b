"""Code generation of tensorized loop nests: NVVM intrinsics for mma.sync and ldmatrix.

A fragment buffer (``warp`` scope) is an ``alloca`` of ``size / 32`` elements per thread
(SROA keeps it in registers once the warp-tile loops are unrolled); a tile occupies
``per_lane`` consecutive elements in the PTX ISA's register order (``ir/intrin/layout.py``).
The nest under a loop marked with an intrinsic becomes:

* ``mma``: ``llvm.nvvm.mma.m16n8k16.row.col.{f32.f32,f16.f16,bf16}`` or
  ``llvm.nvvm.mma.m16n8k8.row.col.tf32`` on the tiles' registers (pairs of 16-bit values
  as ``<2 x half>`` or ``i32``; fp32 operands of TF32 rounded by ``cvt.rna.tf32.f32``);
* ``ldmatrix``: ``llvm.nvvm.ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].b16.p3``, each lane
  giving the shared address of row ``lane % 8`` of matrix ``lane / 8`` (for the tf32 roles
  a matrix is 8 rows of 4 fp32 values and each register the bits of one fp32 element);
* ``load`` / ``store`` / ``fill``: per-lane loads and stores of the lane's elements.
"""

from __future__ import annotations

from ..ir.intrin import ANNOTATION, IntrinError
from ..ir.intrin.match import match_nest
from ..ir.stmt import For
from ..passes.lower.inject_async_copy import known_divisor
from .exprgen import CodegenError, llvm_type
from .llvm_text import pointer_type

LANEID = "llvm.nvvm.read.ptx.sreg.laneid"


def _declare(cg, name: str, ret: str, args: str) -> str:
    cg.parts.declarations.setdefault(name, f"declare {ret} @{name}({args})")
    return "@" + name


class _Emitter:
    def __init__(self, cg, loop: For):
        self.cg = cg
        self.w = cg.w
        name = loop.annotations[ANNOTATION]
        try:
            self.bound = match_nest(loop, name, f"kernel {cg.func.name}, loop "
                                                f"{loop.var.name}", device=True)
        except IntrinError as e:
            raise CodegenError(str(e)) from None
        self.spec = self.bound.intrin

    # -- helpers -----------------------------------------------------------------------
    def i32(self, e) -> str:
        v = self.cg.expr(e)
        ty = llvm_type(e.dtype)
        if ty != "i32":
            v = self.w.value(f"trunc {ty} {v} to i32", "idx")
        return v

    def lane(self) -> str:
        ref = _declare(self.cg, LANEID, "i32", "")
        return self.w.value(f"call range(i32 0, 32) i32 {ref}()", "lane")

    def arith(self, op: str, a: str, b) -> str:
        return self.w.value(f"{op} i32 {a}, {b}", op)

    def frag_ptr(self, opname: str, slot: str, e: int) -> str:
        op = self.bound.operands[opname]
        ref = self.cg.bufs[op.buffer]
        idx = slot if e == 0 else self.arith("add nsw", slot, e)
        return self.w.value(f"getelementptr inbounds {ref.elem}, "
                            f"{pointer_type(ref.addrspace)} {ref.ptr}, i32 {idx}", "frag")

    def mem_ptr(self, opname: str, offset: str) -> tuple[str, object]:
        op = self.bound.operands[opname]
        ref = self.cg.bufs[op.buffer]
        p = self.w.value(f"getelementptr inbounds {ref.elem}, "
                         f"{pointer_type(ref.addrspace)} {ref.ptr}, i32 {offset}",
                         op.buffer.name + ".addr")
        return p, ref

    def frag_ref(self, opname: str):
        return self.cg.bufs[self.bound.operands[opname].buffer]

    def lane_elements(self, role):
        """Per element of the lane's fragment, its (row, col) from the lane's group ``g =
        lane / 4`` and thread ``t = lane % 4``: ``(r0, c0, rg, rt, cg, ct)`` for
        ``row = r0 + rg * g + rt * t`` and ``col = c0 + cg * g + ct * t``."""
        out = []
        for r0, c0 in role.blocks:
            if role.kind == "b16":
                out += [(r0, c0 + i, 1, 0, 0, 2) for i in range(2)]
            elif role.kind == "b16t":
                out += [(r0 + i, c0, 0, 2, 1, 0) for i in range(2)]
            else:
                out.append((r0, c0, 1, 0, 0, 1))
        return out

    # -- intrinsics --------------------------------------------------------------------
    def run(self) -> None:
        spec = self.spec
        if spec.warpgroup:
            getattr(self, "wg_" + spec.kind)()
            return
        getattr(self, spec.kind)()

    # -- warpgroup intrinsics (wgmma, sm_90a) ------------------------------------------
    def wg_wgmma(self) -> None:
        """``wgmma.mma_async`` (inline PTX) on the accumulator registers, A and B read
        through 128B-swizzled descriptors built from the tiles' shared addresses (a ``_kn``
        intrinsic reads B MN-major: ``imm-trans-b`` 1). An RS intrinsic (A from the
        warpgroup's registers) goes to :func:`.wgmma_regs.emit_wgmma_rs`."""
        from ..ir.intrin.wgmma import descriptor_for, wgmma_of
        from .wgmma import mma_async_call

        if self.spec.role("A") is not None:
            from .wgmma_regs import emit_wgmma_rs

            emit_wgmma_rs(self)
            return
        spec, w = self.spec, self.w
        intrin = wgmma_of(spec)
        descs = []
        for name in ("A", "B"):
            # K-major: LBO 16 (unused by swizzled layouts), SBO 1024 (8 rows of 128 bytes);
            # an MN-major B: LBO between 64-element N atoms, SBO between 8-row K groups
            const = descriptor_for(intrin, name, 0).encode() - (1 << 64)  # bit 62: negative
            ptr, _ = self.mem_ptr(name, self.i32(self.bound.operands[name].base))
            a = w.value(f"ptrtoint ptr addrspace(3) {ptr} to i64", "saddr")
            a = w.value(f"lshr i64 {a}, 4", "saddr")
            a = w.value(f"and i64 {a}, 16383", "saddr")
            descs.append(w.value(f"or i64 {a}, {const}", "desc" + name.lower()))
        slot = self.i32(self.bound.frag_slot("C"))
        ptrs = [self.frag_ptr("C", slot, e) for e in range(intrin.regs)]
        accs = [w.value(f"load float, ptr {p}, align 4", "acc") for p in ptrs]
        ty, call = mma_async_call(intrin, accs, descs[0], descs[1])
        d = w.value(call, "wgmma")
        for e, p in enumerate(ptrs):
            v = w.value(f"extractvalue {ty} {d}, {e}", "d")
            w.op(f"store float {v}, ptr {p}, align 4")

    def wg_fill(self) -> None:
        slot = self.i32(self.bound.frag_slot("C"))
        rows, cols = self.spec.shapes["C"]
        for e in range(rows * cols // 128):
            self.w.op(f"store float 0.0, ptr {self.frag_ptr('C', slot, e)}, align 4")

    def wg_store(self) -> None:
        """Each thread stores its 4 elements of a 64x8 accumulator tile: thread ``32 w + l``
        of the warpgroup holds rows ``16 w + l / 4`` (+ 8), columns ``2 (l % 4)`` (+ 1);
        a scaled store multiplies each by the scalar ``alpha`` first (computed once)."""
        w = self.w
        op = self.bound.operands["M"]
        alpha = self.bound.operands.get("alpha")
        if alpha is not None:
            alpha = self.cg.expr(alpha.base)
        ref = self.cg.parts.declare("llvm.nvvm.read.ptx.sreg.tid.x", "i32 ()")
        tid = w.value(f"call range(i32 0, 128) i32 {ref}()", "tid")
        warp = self.arith("lshr", tid, 5)
        lane = self.arith("and", tid, 31)
        g = self.arith("lshr", lane, 2)
        t = self.arith("and", lane, 3)
        row = self.arith("add nsw", self.arith("shl", warp, 4), g)
        off = self.arith("add nsw", self.arith("mul nsw", row, op.ld),
                         self.arith("shl", t, 1))
        off = self.arith("add nsw", off, self.i32(op.base))
        slot = self.i32(self.bound.frag_slot("F"))
        fref = self.frag_ref("F")
        mref = self.cg.bufs[op.buffer]
        # elements e and e + 1 are neighbours in a row: one store of both where the pair is
        # aligned (an even row length and start)
        pair = op.ld % 2 == 0 and known_divisor(op.base) % 2 == 0
        for e in range(0, 4, 2 if pair else 1):
            at = self.arith("add nsw", off, 8 * ((e // 2) % 2) * op.ld + e % 2) if e else off
            ptr, mref = self.mem_ptr("M", at)
            vals = []
            for x in range(e, e + (2 if pair else 1)):
                v = w.value(f"load {fref.elem}, ptr {self.frag_ptr('F', slot, x)}, "
                            f"align {fref.align}", "st")
                if alpha is not None:
                    v = w.value(f"fmul {fref.elem} {v}, {alpha}", "scaled")
                if mref.elem != fref.elem:
                    v = w.value(f"fptrunc {fref.elem} {v} to {mref.elem}", "cvt")
                vals.append(v)
            if not pair:
                w.op(f"store {mref.elem} {vals[0]}, {pointer_type(mref.addrspace)} {ptr}, "
                     f"align {mref.align}")
                continue
            vt = f"<2 x {mref.elem}>"
            vec = w.value(f"insertelement {vt} poison, {mref.elem} {vals[0]}, i32 0", "pair")
            vec = w.value(f"insertelement {vt} {vec}, {mref.elem} {vals[1]}, i32 1", "pair")
            w.op(f"store {vt} {vec}, {pointer_type(mref.addrspace)} {ptr}, "
                 f"align {2 * mref.align}")

    def mma(self) -> None:
        spec, w = self.spec, self.w
        ab = spec.dtypes["A"]
        acc = spec.dtypes["C"]
        pair = "<2 x half>" if ab == "float16" else "i32"
        types, values = [], []
        for name in ("A", "B"):
            slot = self.i32(self.bound.frag_slot(name))
            role = spec.role(name)
            step = 2 if role.kind in ("b16", "b16t") else 1
            for e in range(0, role.per_lane, step):
                p = self.frag_ptr(name, slot, e)
                types.append(pair)
                if ab == "float32":
                    # cvt.rna.tf32.f32, as the CUDA-core path rounds TF32 (the tensor
                    # cores would otherwise drop the low mantissa bits: truncation)
                    x = w.value(f"load float, ptr {p}, align 4", name.lower())
                    cvt = _declare(self.cg, "llvm.nvvm.f2tf32.rna", "i32", "float")
                    values.append(w.value(f"call i32 {cvt}(float {x})", "tf32"))
                else:
                    values.append(w.value(f"load {pair}, ptr {p}, align 4", name.lower()))
        c_slot = self.i32(self.bound.frag_slot("C"))
        n_c = spec.role("C").per_lane
        # f32 accumulators are 4 floats; f16 ones 2 pairs of halves
        c_ty, c_step = ("float", 1) if acc == "float32" else ("<2 x half>", 2)
        outs = list(range(0, n_c, c_step))
        for e in outs:
            p = self.frag_ptr("C", c_slot, e)
            types.append(c_ty)
            values.append(w.value(f"load {c_ty}, ptr {p}, align 4", "c"))
        ret = "{" + ", ".join([c_ty] * len(outs)) + "}"
        if spec.name.startswith("mma_m16n8k8_tf32"):
            name = "llvm.nvvm.mma.m16n8k8.row.col.tf32"
        elif ab == "bfloat16":
            name = "llvm.nvvm.mma.m16n8k16.row.col.bf16"
        elif acc == "float32":
            name = "llvm.nvvm.mma.m16n8k16.row.col.f32.f32"
        else:
            name = "llvm.nvvm.mma.m16n8k16.row.col.f16.f16"
        ref = _declare(self.cg, name, ret, ", ".join(types))
        args = [f"{t} {v}" for t, v in zip(types, values)]
        d = w.value(f"call {ret} {ref}({', '.join(args)})", "mma")
        for k, e in enumerate(outs):
            v = w.value(f"extractvalue {ret} {d}, {k}", "d")
            w.op(f"store {c_ty} {v}, ptr {self.frag_ptr('C', c_slot, e)}, align 4")

    def fill(self) -> None:
        slot = self.i32(self.bound.frag_slot("C"))
        ref = self.frag_ref("C")
        for e in range(self.spec.role("C").per_lane):
            zero = "0.0" if ref.elem == "float" else "0xH0000"
            self.w.op(f"store {ref.elem} {zero}, ptr {self.frag_ptr('C', slot, e)}, "
                      f"align {ref.align}")

    def ldmatrix(self) -> None:
        spec, w = self.spec, self.w
        role = spec.role("F")
        op = self.bound.operands["S"]
        nb = len(role.blocks)
        tab = []
        dr, dc = spec.tile_step
        for q in range(4):
            qq = q % spec.num
            t, p = divmod(qq, nb)
            tab.append((t * dr + role.blocks[p][0], t * dc + role.blocks[p][1]))
        for k in range(2):
            if tab[3][k] != tab[1][k] + tab[2][k] - tab[0][k]:
                raise CodegenError(f"{spec.name}: matrix order is not bilinear in the lane")
        lane = self.lane()
        q = self.arith("and", self.arith("lshr", lane, 3), spec.num - 1)
        q0 = self.arith("and", q, 1)
        q1 = self.arith("lshr", q, 1)
        rr = self.arith("and", lane, 7)

        def coord(k):
            v = self.arith("mul nsw", q0, tab[1][k] - tab[0][k])
            v = self.arith("add nsw", v, self.arith("mul nsw", q1, tab[2][k] - tab[0][k]))
            return self.arith("add nsw", v, tab[0][k]) if tab[0][k] else v

        # the fragment tile is laid out as the memory tile: lane l points at row l % 8 of
        # matrix l / 8 (.trans only changes which elements each lane receives)
        fr, fc = coord(0), coord(1)
        off = self.arith("add nsw", self.arith("mul nsw", self.arith("add nsw", fr, rr),
                                               op.ld), fc)
        off = self.arith("add nsw", off, self.i32(op.base))
        ptr, _ = self.mem_ptr("S", off)
        ret = "i32" if spec.num == 1 else "{" + ", ".join(["i32"] * spec.num) + "}"
        name = (f"llvm.nvvm.ldmatrix.sync.aligned.m8n8.x{spec.num}"
                f"{'.trans' if spec.trans else ''}.b16.p3")
        ref = _declare(self.cg, name, ret, "ptr addrspace(3)")
        r = w.value(f"call {ret} {ref}(ptr addrspace(3) {ptr})", "ldm")
        slots = [self.i32(self.bound.frag_slot("F", t))
                 for t in range(max(1, spec.num // nb))]
        # register m: a pair of 16-bit elements, or (tf32 roles) the bits of one fp32
        wide = role.kind == "tf32"
        for m in range(spec.num):
            v = r if spec.num == 1 else w.value(f"extractvalue {ret} {r}, {m}", "m")
            t, p = divmod(m, nb)
            if wide:
                x = w.value(f"bitcast i32 {v} to float", "f")
                w.op(f"store float {x}, ptr {self.frag_ptr('F', slots[t], p)}, align 4")
            else:
                w.op(f"store i32 {v}, ptr {self.frag_ptr('F', slots[t], 2 * p)}, align 4")

    def _lane_offsets(self, opname: str, role):
        """For each element of the lane: (memory offset value, element index)."""
        op = self.bound.operands[opname]
        lane = self.lane()
        g = self.arith("lshr", lane, 2)
        t = self.arith("and", lane, 3)
        base = self.i32(op.base)
        out = []
        memo: dict = {}
        for e, (r0, c0, rg, rt, cg, ct) in enumerate(self.lane_elements(role)):
            key = (rg, rt, cg, ct)
            if key not in memo:  # the lane's position in a sub-matrix, shared by its elements
                gm, tm = rg * op.ld + cg, rt * op.ld + ct
                v = self.arith("add nsw", self.arith("mul nsw", g, gm),
                               self.arith("mul nsw", t, tm))
                memo[key] = self.arith("add nsw", v, base)
            out.append((self.arith("add nsw", memo[key], r0 * op.ld + c0), e))
        return out

    def load(self) -> None:
        role = self.spec.role("F")
        slot = self.i32(self.bound.frag_slot("F"))
        fref = self.frag_ref("F")
        for off, e in self._lane_offsets("M", role):
            ptr, ref = self.mem_ptr("M", off)
            v = self.w.value(f"load {ref.elem}, {pointer_type(ref.addrspace)} {ptr}, "
                             f"align {ref.align}", "ld")
            self.w.op(f"store {fref.elem} {v}, ptr {self.frag_ptr('F', slot, e)}, "
                      f"align {fref.align}")

    def store(self) -> None:
        """Each lane stores its elements; two neighbours of a row (an accumulator's
        ``(g, 2t)`` and ``(g, 2t + 1)``) as one access where every lane's pair starts at an
        even element (even row length, start and offsets): one ``st.b32`` of two halves,
        one ``st.v2.b32`` of two floats."""
        role = self.spec.role("F")
        slot = self.i32(self.bound.frag_slot("F"))
        fref = self.frag_ref("F")
        op = self.bound.operands["M"]
        elems = self.lane_elements(role)
        offsets = self._lane_offsets("M", role)
        k = 0
        while k < len(offsets):
            off, e = offsets[k]
            pair = k + 1 < len(offsets) and _pair_start(elems, e, offsets[k + 1][1], op)
            ptr, ref = self.mem_ptr("M", off)
            vals = []
            for x in (e, offsets[k + 1][1]) if pair else (e,):
                v = self.w.value(f"load {fref.elem}, ptr {self.frag_ptr('F', slot, x)}, "
                                 f"align {fref.align}", "st")
                if ref.elem != fref.elem:
                    v = self.w.value(f"fptrunc {fref.elem} {v} to {ref.elem}", "cvt")
                vals.append(v)
            k += len(vals)
            if not pair:
                self.w.op(f"store {ref.elem} {vals[0]}, {pointer_type(ref.addrspace)} {ptr}, "
                          f"align {ref.align}")
                continue
            vt = f"<2 x {ref.elem}>"
            vec = self.w.value(f"insertelement {vt} poison, {ref.elem} {vals[0]}, i32 0", "pair")
            vec = self.w.value(f"insertelement {vt} {vec}, {ref.elem} {vals[1]}, i32 1", "pair")
            self.w.op(f"store {vt} {vec}, {pointer_type(ref.addrspace)} {ptr}, "
                      f"align {2 * ref.align}")


def _pair_start(elems, e: int, nxt: int, op) -> bool:
    """Whether lane element ``nxt`` is the right neighbour of element ``e`` in its row for
    every lane, and the pair starts at an even element for every lane (the row length
    ``op.ld``, the start ``op.base`` and the lane's offsets all even), so both go in one
    access of twice the element's alignment (the buffer's own is 16 bytes)."""
    r0, c0, rg, rt, cg, ct = elems[e]
    if elems[nxt] != (r0, c0 + 1, rg, rt, cg, ct):
        return False
    ld = op.ld
    return (known_divisor(op.base) % 2 == 0
            and all(v % 2 == 0 for v in (rg * ld + cg, rt * ld + ct, r0 * ld + c0)))


def emit_tensor_intrin(cg, loop: For) -> None:
    """Emit the nest under ``loop`` (marked by ``tensorize``) as its intrinsic."""
    _Emitter(cg, loop).run()
