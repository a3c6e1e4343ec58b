"""PTX of wgmma with A from registers (the ISA's "RS" form, ``..._rs`` intrinsics).

``wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}.{f16,bf16} d, {a0, a1, a2, a3},
b-desc, scale-d, imm-scale-a, imm-scale-b, imm-trans-b``: A is four ``.b32`` registers a
thread (8 16-bit elements in role ``wg_a16``'s order: pairs ``(g, 2t..)``, ``(g + 8, 2t..)``,
``(g, 2t + 8..)``, ``(g + 8, 2t + 8..)``), B a shared tile read through its 128B-swizzled
descriptor as the shared form reads it; there is no ``imm-trans-a``. Emitted as inline PTX
like :func:`.wgmma.mma_async_call`: the N/2 f32 accumulators tied in and out.

:func:`emit_wgmma_rs` lowers a tensorized ``_rs`` nest for the kernel code generator's
tensor-intrinsic emitter (``backend_ptx/tensorcore.py``): the fragment's alloca elements are
read as four ``i32`` pairs, so after SROA the A registers are the registers the f32 -> 16
bit conversions wrote (``cvt.rn.f16x2.f32``), with no move through memory.
"""

from __future__ import annotations

from ..ir.intrin.wgmma import WgmmaIntrin, descriptor_for, wgmma_of

A_REGISTERS = 4
"""``.b32`` registers of A a thread passes (8 16-bit elements)."""


def mma_async_rs_call(spec: WgmmaIntrin, accs: list[str], a_regs: list[str], desc_b: str,
                      scale_d: str = "1") -> tuple[str, str]:
    """``(struct type, call text)`` of the inline-asm RS ``wgmma.mma_async`` on the f32
    values ``accs`` (N/2), the four i32 A registers ``a_regs``, B's i64 descriptor and an
    i32 scale-d (0: D = A*B). Immediates: scale-a 1, scale-b 1, imm-trans-b
    ``spec.tnsp_b`` (1: B MN-major, read as ``[K, N]``)."""
    n = spec.regs
    if len(accs) != n:
        raise ValueError(f"{spec.ptx} takes {n} accumulators, got {len(accs)}")
    if len(a_regs) != A_REGISTERS or spec.fp8:
        raise ValueError(f"{spec.ptx} with A from registers takes {A_REGISTERS} .b32 "
                         "registers of 16-bit elements")
    d = ", ".join(f"${i}" for i in range(n))
    a = ", ".join(f"${n + i}" for i in range(A_REGISTERS))
    b, p = n + A_REGISTERS, n + A_REGISTERS + 1
    asm = (f"{{ .reg .pred p; setp.ne.b32 p, ${p}, 0; "
           f"{spec.ptx} {{{d}}}, {{{a}}}, ${b}, p, 1, 1, {spec.tnsp_b}; }}")
    cons = ",".join(["=f"] * n + ["r"] * A_REGISTERS + ["l", "r"] + [str(i) for i in range(n)])
    ty = "{" + ", ".join(["float"] * n) + "}"
    args = ", ".join([f"i32 {x}" for x in a_regs] + [f"i64 {desc_b}", f"i32 {scale_d}"]
                     + [f"float {x}" for x in accs])
    return ty, f'call {ty} asm sideeffect "{asm}", "{cons}"({args})'


def emit_wgmma_rs(em) -> None:
    """Emit the tensorized RS wgmma nest that ``em`` (the tensor-intrinsic emitter of
    ``backend_ptx/tensorcore.py``) matched: B's descriptor from its shared address, A's
    four pairs from the fragment's alloca, the accumulators loaded, the asm, stored
    back."""
    spec, w = em.spec, em.w
    if spec.role("A") is None:
        raise ValueError(f"{spec.name} reads A from shared memory: not an RS wgmma")
    intrin = wgmma_of(spec)
    # K-major B: LBO 16 (unused), SBO 1024; MN-major: LBO between the 64-element panels
    const = descriptor_for(intrin, "B", 0).encode() - (1 << 64)
    ptr, _ = em.mem_ptr("B", em.i32(em.bound.operands["B"].base))
    addr = w.value(f"ptrtoint ptr addrspace(3) {ptr} to i64", "saddr")
    addr = w.value(f"lshr i64 {addr}, 4", "saddr")
    addr = w.value(f"and i64 {addr}, 16383", "saddr")
    desc_b = w.value(f"or i64 {addr}, {const}", "descb")
    a_slot = em.i32(em.bound.frag_slot("A"))
    if spec.dtypes["A"] == "float32":
        # float32 registers (an accumulator) rounded to B's 16-bit type in pairs: one
        # cvt.rn.{f16x2,bf16x2}.f32 a register
        half = {"float16": "half", "bfloat16": "bfloat"}[spec.dtypes["B"]]
        a_regs = []
        for k in range(A_REGISTERS):
            lo, hi = (w.value(f"load float, ptr {em.frag_ptr('A', a_slot, 2 * k + e)}, "
                              "align 4", "p") for e in (0, 1))
            v = w.value(f"insertelement <2 x float> poison, float {lo}, i32 0", "pp")
            v = w.value(f"insertelement <2 x float> {v}, float {hi}, i32 1", "pp")
            v = w.value(f"fptrunc <2 x float> {v} to <2 x {half}>", "p16")
            a_regs.append(w.value(f"bitcast <2 x {half}> {v} to i32", "a"))
    else:
        a_regs = [w.value(f"load i32, ptr {em.frag_ptr('A', a_slot, 2 * k)}, align 4", "a")
                  for k in range(A_REGISTERS)]
    slot = em.i32(em.bound.frag_slot("C"))
    ptrs = [em.frag_ptr("C", slot, e) for e in range(intrin.regs)]
    accs = [w.value(f"load float, ptr {p}, align 4", "acc") for p in ptrs]
    ty, call = mma_async_rs_call(intrin, accs, a_regs, desc_b)
    d = w.value(call, "wgmma")
    for e, p in enumerate(ptrs):
        v = w.value(f"extractvalue {ty} {d}, {e}", "d")
        w.op(f"store float {v}, ptr {p}, align 4")
