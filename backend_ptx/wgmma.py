"""wgmma code generation for sm_90a (LLVM IR text).

LLVM 22 has intrinsics for the protocol (``llvm.nvvm.wgmma.fence.sync.aligned``,
``...commit_group...``, ``...wait_group...(i64)``, ``llvm.nvvm.fence.proxy.async.shared_cta``)
but none for ``wgmma.mma_async`` itself, which is emitted as inline PTX: N/2 f32
accumulators tied in and out (``=f`` ... with matching ``0``, ``1``, ... inputs), the two
64-bit descriptors (``l``) and the scale-d predicate built from an ``i32`` inside the asm
block. Inline asm text is one line: LLVM would print a ``\\n`` escape verbatim into PTX.

:func:`tile_kernel_ptx` builds a complete one-warpgroup kernel around it: it stores a
``[64, 64]`` A tile and an ``[N, 64]`` B tile from global memory into shared memory in the
swizzled K-major layout (:func:`ptxforge.ir.intrin.wgmma.tile_offsets`), fences the async
proxy, runs the four k16 wgmmas through descriptors, waits, and writes the ``[64, N]`` f32
accumulator to global memory through the ISA's register layout. It is the unit the wgmma
GEMM schedule repeats, and a check of the layouts on the hardware.
"""

from __future__ import annotations

from ..ir.intrin.wgmma import SWIZZLE_BYTES, SWIZZLE_MODES, WgmmaIntrin, require_wgmma

FENCE = "llvm.nvvm.wgmma.fence.sync.aligned"
COMMIT = "llvm.nvvm.wgmma.commit_group.sync.aligned"
WAIT = "llvm.nvvm.wgmma.wait_group.sync.aligned"
FENCE_PROXY_ASYNC = "llvm.nvvm.fence.proxy.async.shared_cta"

DECLARATIONS = (f"declare void @{FENCE}()", f"declare void @{COMMIT}()",
                f"declare void @{WAIT}(i64 immarg)", f"declare void @{FENCE_PROXY_ASYNC}()")
"""The protocol intrinsics' declarations."""


def mma_async_call(spec: WgmmaIntrin, accs: list[str], desc_a: str, desc_b: str,
                   scale_d: str = "1") -> tuple[str, str]:
    """``(struct type, call text)`` of the inline-asm ``wgmma.mma_async`` on the f32 values
    ``accs`` (N/2 of them), with i64 descriptors and an i32 scale-d (0: D = A*B). The
    immediates: scale-a 1, scale-b 1 and, for 16-bit inputs, imm-trans-a 0 (A K-major),
    imm-trans-b ``spec.tnsp_b`` (1: B MN-major, read as ``[K, N]``)."""
    n = spec.regs
    if len(accs) != n:
        raise ValueError(f"{spec.ptx} takes {n} accumulators, got {len(accs)}")
    regs = ", ".join(f"${i}" for i in range(n))
    # scale-a, scale-b 1 (no negation); the transpose immediates exist for 16-bit types only
    imm = "1, 1" if spec.fp8 else f"1, 1, 0, {spec.tnsp_b}"
    asm = (f"{{ .reg .pred p; setp.ne.b32 p, ${n + 2}, 0; "
           f"{spec.ptx} {{{regs}}}, ${n}, ${n + 1}, p, {imm}; }}")
    cons = ",".join(["=f"] * n + ["l", "l", "r"] + [str(i) for i in range(n)])
    ty = "{" + ", ".join(["float"] * n) + "}"
    args = ", ".join([f"i64 {desc_a}", f"i64 {desc_b}", f"i32 {scale_d}"]
                     + [f"float {a}" for a in accs])
    return ty, f'call {ty} asm sideeffect "{asm}", "{cons}"({args})'


def _offset_ir(out: list, rows: int, r: str, k: str, swizzle: str, tag: str,
               itemsize: int = 2) -> str:
    """IR computing the byte offset of element ``(r, k)`` (of ``itemsize`` bytes: 2 for
    fp16/bf16, 1 for fp8) of a K-major tile."""
    def op(text):
        name = f"%{tag}{len(out)}"
        out.append(f"  {name} = {text}")
        return name

    kb = op(f"shl i32 {k}, {itemsize.bit_length() - 1}")
    rg, rr = op(f"lshr i32 {r}, 3"), op(f"and i32 {r}, 7")
    if swizzle == "none":
        ka, kr = op(f"lshr i32 {kb}, 4"), op(f"and i32 {kb}, 15")
        a = op(f"mul i32 {ka}, {rows * 16}")
        b, c = op(f"shl i32 {rg}, 7"), op(f"shl i32 {rr}, 4")
        return op(f"add i32 {op(f'add i32 {a}, {b}')}, {op(f'add i32 {c}, {kr}')}")
    w = SWIZZLE_BYTES[swizzle]
    ka, kr = op(f"udiv i32 {kb}, {w}"), op(f"urem i32 {kb}, {w}")
    a = op(f"mul i32 {ka}, {rows * w}")
    b, c = op(f"mul i32 {rg}, {8 * w}"), op(f"mul i32 {rr}, {w}")
    plain = op(f"add i32 {op(f'add i32 {a}, {b}')}, {op(f'add i32 {c}, {kr}')}")
    mask = {"128B": 7, "64B": 3, "32B": 1}[swizzle]
    hi = op(f"and i32 {op(f'lshr i32 {plain}, 7')}, {mask}")
    x = op(f"shl i32 {hi}, 4")
    return op(f"xor i32 {plain}, {x}")


def tile_kernel_ir(spec: WgmmaIntrin, swizzle: str, name: str = "wgmma_tile") -> str:
    """LLVM IR of the one-warpgroup kernel ``C[64, N] = A[64, K] x B[N, K]^T`` with K one
    128-byte row (64 16-bit elements, 128 fp8 ones): four wgmmas of 32 bytes of K."""
    n = spec.n
    eb = spec.itemsize
    kel = 128 // eb  # K elements in a 128-byte row
    ty = f"i{8 * eb}"
    a_elems, a_bytes = 64 * kel, 64 * 128
    total = a_bytes + n * 128
    shift = kel.bit_length() - 1
    body = ["entry:",
            "  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()",
            "  br label %copy"]
    # copy loop: element e = tid + 128 q of A (64 kel) then B (n kel)
    body += ["copy:",
             "  %e = phi i32 [ %tid, %entry ], [ %e.next, %copy.end ]",
             f"  %isa = icmp ult i32 %e, {a_elems}",
             "  br i1 %isa, label %copy.a, label %copy.b",
             "copy.a:",
             f"  %ar = lshr i32 %e, {shift}",
             f"  %ak = and i32 %e, {kel - 1}"]
    out: list = []
    ao = _offset_ir(out, 64, "%ar", "%ak", swizzle, "oa", eb)
    body += out
    body += [f"  %ag = getelementptr inbounds {ty}, ptr addrspace(1) %A, i32 %e",
             f"  %av = load {ty}, ptr addrspace(1) %ag, align {eb}",
             f"  %as = getelementptr inbounds i8, ptr addrspace(3) @smem, i32 {ao}",
             f"  store {ty} %av, ptr addrspace(3) %as, align {eb}",
             "  br label %copy.end",
             "copy.b:",
             f"  %be = sub i32 %e, {a_elems}",
             f"  %br = lshr i32 %be, {shift}",
             f"  %bk = and i32 %be, {kel - 1}"]
    out = []
    bo = _offset_ir(out, n, "%br", "%bk", swizzle, "ob", eb)
    body += out
    body += [f"  %bg = getelementptr inbounds {ty}, ptr addrspace(1) %B, i32 %be",
             f"  %bv = load {ty}, ptr addrspace(1) %bg, align {eb}",
             f"  %bo2 = add i32 {bo}, {a_bytes}",
             "  %bs = getelementptr inbounds i8, ptr addrspace(3) @smem, i32 %bo2",
             f"  store {ty} %bv, ptr addrspace(3) %bs, align {eb}",
             "  br label %copy.end",
             "copy.end:",
             "  %e.next = add i32 %e, 128",
             f"  %more = icmp ult i32 %e.next, {a_elems + kel * n}",
             "  br i1 %more, label %copy, label %mma",
             "mma:",
             "  call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)",
             # generic-proxy stores must be made visible to the async proxy wgmma reads with
             f"  call void @{FENCE_PROXY_ASYNC}()",
             f"  call void @{FENCE}()",
             "  %base64 = ptrtoint ptr addrspace(3) @smem to i64"]
    mode = SWIZZLE_MODES[swizzle]
    accs = ["0.0"] * spec.regs
    for ks in range(4):
        for op_name, rows, start in (("a", 64, 0), ("b", n, a_bytes)):
            kb = ks * 32
            if swizzle == "none":
                off, lbo, sbo = start + (kb // 16) * rows * 16, rows * 16, 128
            else:
                w = SWIZZLE_BYTES[swizzle]
                off, lbo, sbo = start + (kb // w) * rows * w + kb % w, 16, 8 * w
            const = (lbo >> 4) << 16 | (sbo >> 4) << 32 | mode << 62
            v = f"%d{op_name}{ks}"
            body += [f"  {v}.a = add i64 %base64, {off}",
                     f"  {v}.s = lshr i64 {v}.a, 4",
                     f"  {v}.m = and i64 {v}.s, 16383",
                     f"  {v} = or i64 {v}.m, {const - (1 << 64) if const >= 1 << 63 else const}"]
        ty, call = mma_async_call(spec, accs, f"%da{ks}", f"%db{ks}", "0" if ks == 0 else "1")
        body.append(f"  %acc{ks} = {call}")
        accs = [f"%acc{ks}.{i}" for i in range(spec.regs)]
        body += [f"  %acc{ks}.{i} = extractvalue {ty} %acc{ks}, {i}" for i in range(spec.regs)]
    body += [f"  call void @{COMMIT}()",
             f"  call void @{WAIT}(i64 0)",
             "  %warp = lshr i32 %tid, 5",
             "  %lane = and i32 %tid, 31",
             "  %g = lshr i32 %lane, 2",
             "  %t = and i32 %lane, 3",
             "  %r0w = shl i32 %warp, 4",
             "  %r0 = add i32 %g, %r0w",
             "  %c0 = shl i32 %t, 1"]
    # the accumulator layout: register i is (r0 + 8 ((i/2)%2), c0 + 8 (i/4) + i%2)
    for i in range(spec.regs):
        row = f"%row{i}"
        body += [f"  {row} = add i32 %r0, {8 * ((i // 2) % 2)}",
                 f"  %col{i} = add i32 %c0, {8 * (i // 4) + i % 2}",
                 f"  %rm{i} = mul i32 {row}, {n}",
                 f"  %idx{i} = add i32 %rm{i}, %col{i}",
                 f"  %cp{i} = getelementptr inbounds float, ptr addrspace(1) %C, i32 %idx{i}",
                 f"  store float {accs[i]}, ptr addrspace(1) %cp{i}, align 4"]
    body.append("  ret void")
    head = [
        'target triple = "nvptx64-nvidia-cuda"',
        f"@smem = internal addrspace(3) global [{total} x i8] undef, align 1024",
        "declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()",
        "declare void @llvm.nvvm.barrier.cta.sync.aligned.all(i32)",
        *DECLARATIONS,
        f"define ptx_kernel void @{name}(ptr addrspace(1) noalias %A, "
        "ptr addrspace(1) noalias %B, ptr addrspace(1) noalias %C) "
        '"nvvm.maxntid"="128,1,1" {',
    ]
    return "\n".join(head + body + ["}"]) + "\n"


def tile_kernel_ptx(spec: WgmmaIntrin, swizzle: str = "128B",
                    target: str = "cuda -arch=sm_90a", name: str = "wgmma_tile") -> str:
    """PTX of :func:`tile_kernel_ir` for ``target`` (which must have wgmma)."""
    from .compile import optimize, parse_llvm, target_machine

    require_wgmma(target)
    module = parse_llvm(tile_kernel_ir(spec, swizzle, name), f"wgmma kernel {name}")
    optimize(module, "sm_90a")
    return target_machine("sm_90a").emit_assembly(module)
