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


# ---------------------------------------------------------------------------------------
# a dense GEMM kernel: C[M, N] (f32) = A[M, K] x B[N, K]^T


GEMM_THREADS = 256
"""Two warpgroups per block; warpgroup ``w`` owns rows ``64 w .. 64 w + 63`` of the tile."""


def _gemm_check(M: int, N: int, K: int, bn: int, stages: int, in_flight: int) -> None:
    from ..ir.intrin.wgmma import WgmmaError

    if bn not in (128, 256):
        raise WgmmaError(f"wgmma GEMM: block N {bn} must be 128 or 256")
    if M % 128 or N % bn or K % 64:
        raise WgmmaError(f"wgmma GEMM: M={M}, N={N}, K={K} must be multiples of 128, {bn} "
                         "and 64 (this kernel neither pads nor predicates)")
    if in_flight not in (0, 1):
        raise WgmmaError(f"wgmma GEMM: in_flight {in_flight} must be 0 or 1")
    ahead = stages - 1 - in_flight
    if not 2 <= stages <= 5 or ahead < 1 or K // 64 < ahead:
        raise WgmmaError(f"wgmma GEMM: {stages} stages with {in_flight} wgmma group in "
                         f"flight need 2..5 stages, stages - 1 - in_flight >= 1 and K/64 >= "
                         "that")


def gemm_shared_bytes(bn: int, stages: int) -> int:
    """Dynamic shared memory of :func:`gemm_kernel_ir`: ``stages`` A and B tiles."""
    return stages * (128 * 64 * 2 + bn * 64 * 2)


def gemm_kernel_ir(M: int, N: int, K: int, ab: str = "float16", bn: int = 256,
                   stages: int = 4, name: str = "wgmma_gemm", in_flight: int = 0) -> str:
    """LLVM IR of a GEMM on a ``(N / bn, M / 128)`` grid of 256-thread blocks: K in steps of
    64 through ``stages`` shared buffers filled by 16-byte cp.async into the 128B-swizzled
    layout (a 16-byte chunk ``c`` of row ``r`` lands on chunk ``c ^ (r % 8)``), ``stages - 1``
    tiles in flight; per step a cp.async wait, ``fence.proxy.async`` (cp.async writes are
    generic-proxy writes), a barrier, the next tile's copies, then ``wgmma.fence``, four
    ``m64n{bn}k16`` wgmmas per warpgroup, commit and ``wait_group in_flight``.

    With ``in_flight=1`` a step's wgmmas still run while the next step waits for its tiles
    and issues copies; copies then run ``stages - 2`` tiles ahead, so the buffer a copy
    overwrites was read by a group that every warpgroup has waited for before the barrier."""
    from ..ir.intrin.wgmma import get_wgmma

    _gemm_check(M, N, K, bn, stages, in_flight)
    ahead = stages - 1 - in_flight
    spec = get_wgmma(bn, ab)
    a_bytes, stage_bytes = 128 * 64 * 2, gemm_shared_bytes(bn, 1)
    kt_n = K // 64
    regs = spec.regs
    ty = "{" + ", ".join(["float"] * regs) + "}"
    cp = "llvm.nvvm.cp.async.cg.shared.global.16"
    L = []

    def load_stage(tag: str, kt: str, buf: str) -> None:
        """cp.async of k tile ``kt`` into buffer ``buf`` (both i32 values)."""
        L.append(f"  %{tag}.sb = mul i32 {buf}, {stage_bytes}")
        L.append(f"  %{tag}.k0 = shl i32 {kt}, 6")
        for op, rows, row0, ptr, off in (("a", 128, "%m0", "%A", 0),
                                         ("b", bn, "%n0", "%B", a_bytes)):
            for j in range(rows * 8 // GEMM_THREADS):
                v = f"%{tag}.{op}{j}"
                q = j * GEMM_THREADS
                L.extend([
                    f"  {v}.q = add i32 %tid, {q}",
                    f"  {v}.r = lshr i32 {v}.q, 3",
                    f"  {v}.c = and i32 {v}.q, 7",
                    f"  {v}.gr = add i32 {row0}, {v}.r",
                    f"  {v}.g0 = mul i32 {v}.gr, {K}",
                    f"  {v}.g1 = shl i32 {v}.c, 3",
                    f"  {v}.g2 = add i32 {v}.g0, {v}.g1",
                    f"  {v}.g3 = add i32 {v}.g2, %{tag}.k0",
                    f"  {v}.g = zext i32 {v}.g3 to i64",
                    f"  {v}.gp = getelementptr inbounds i16, ptr addrspace(1) {ptr}, i64 {v}.g",
                    f"  {v}.s0 = lshr i32 {v}.r, 3",
                    f"  {v}.s1 = shl i32 {v}.s0, 10",
                    f"  {v}.rr = and i32 {v}.r, 7",
                    f"  {v}.s2 = shl i32 {v}.rr, 7",
                    f"  {v}.x = xor i32 {v}.c, {v}.rr",
                    f"  {v}.s3 = shl i32 {v}.x, 4",
                    f"  {v}.s4 = add i32 {v}.s1, {v}.s2",
                    f"  {v}.s5 = add i32 {v}.s4, {v}.s3",
                    f"  {v}.s6 = add i32 {v}.s5, %{tag}.sb",
                    f"  {v}.s = add i32 {v}.s6, {off}",
                    f"  {v}.sp = getelementptr inbounds i8, ptr addrspace(3) @smem, i32 {v}.s",
                    f"  call void @{cp}(ptr addrspace(3) {v}.sp, ptr addrspace(1) {v}.gp)"])

    L += ["entry:",
          "  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()",
          "  %bx = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()",
          "  %by = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.y()",
          "  %m0 = shl i32 %by, 7",
          f"  %n0 = mul i32 %bx, {bn}",
          "  %wg = lshr i32 %tid, 7",
          "  %base64 = ptrtoint ptr addrspace(3) @smem to i64"]
    for s in range(ahead):
        load_stage(f"p{s}", str(s), str(s))
        L.append("  call void @llvm.nvvm.cp.async.commit.group()")
    L += ["  br label %loop",
          "loop:",
          "  %kt = phi i32 [ 0, %entry ], [ %kt.next, %mma ]",
          f"  %acc = phi {ty} [ zeroinitializer, %entry ], [ %acc.next, %mma ]",
          f"  call void @llvm.nvvm.cp.async.wait.group(i32 {ahead - 1})",
          f"  call void @{FENCE_PROXY_ASYNC}()",
          "  call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)",
          f"  %nk = add i32 %kt, {ahead}",
          f"  %more = icmp ult i32 %nk, {kt_n}",
          "  br i1 %more, label %fetch, label %issue",
          "fetch:",
          f"  %nbuf = urem i32 %nk, {stages}"]
    load_stage("f", "%nk", "%nbuf")
    L += ["  br label %issue",
          "issue:",
          "  call void @llvm.nvvm.cp.async.commit.group()",
          f"  %buf = urem i32 %kt, {stages}",
          f"  %sb = mul i32 %buf, {stage_bytes}",
          "  %sb64 = zext i32 %sb to i64",
          "  %wgoff = mul i32 %wg, 8192",  # 64 rows x 128 bytes of A per warpgroup
          "  %wgoff64 = zext i32 %wgoff to i64",
          "  br label %mma",
          "mma:",
          f"  call void @{FENCE}()"]
    const = (16 >> 4) << 16 | (1024 >> 4) << 32 | SWIZZLE_MODES["128B"] << 62
    const -= 1 << 64  # bit 62 set: as a signed i64 literal
    accs = [f"%acc.in{i}" for i in range(regs)]
    L += [f"  %acc.in{i} = extractvalue {ty} %acc, {i}" for i in range(regs)]
    for ks in range(4):
        for op, extra in (("a", "%wgoff64"), ("b", str(a_bytes))):
            v = f"%d{op}{ks}"
            L += [f"  {v}.0 = add i64 %base64, %sb64",
                  f"  {v}.1 = add i64 {v}.0, {extra}",
                  f"  {v}.2 = add i64 {v}.1, {ks * 32}",
                  f"  {v}.3 = lshr i64 {v}.2, 4",
                  f"  {v}.4 = and i64 {v}.3, 16383",
                  f"  {v} = or i64 {v}.4, {const}"]
        t, call = mma_async_call(spec, accs, f"%da{ks}", f"%db{ks}")
        L.append(f"  %w{ks} = {call}")
        accs = [f"%w{ks}.{i}" for i in range(regs)]
        L += [f"  %w{ks}.{i} = extractvalue {t} %w{ks}, {i}" for i in range(regs)]
    L += [f"  call void @{COMMIT}()",
          f"  call void @{WAIT}(i64 {in_flight})"]
    prev = "undef"
    for i in range(regs):
        cur = f"%an{i}" if i < regs - 1 else "%acc.next"
        L.append(f"  {cur} = insertvalue {ty} {prev}, float {accs[i]}, {i}")
        prev = cur
    L += ["  %kt.next = add i32 %kt, 1",
          f"  %again = icmp ult i32 %kt.next, {kt_n}",
          "  br i1 %again, label %loop, label %done",
          "done:",
          f"  call void @{WAIT}(i64 0)",
          "  %lane = and i32 %tid, 31",
          "  %warp = lshr i32 %tid, 5",
          "  %g = lshr i32 %lane, 2",
          "  %t = and i32 %lane, 3",
          "  %r0a = shl i32 %warp, 4",  # 16 rows per warp, warps of both warpgroups in order
          "  %r0b = add i32 %r0a, %g",
          "  %r0 = add i32 %r0b, %m0",
          "  %c0a = shl i32 %t, 1",
          "  %c0 = add i32 %c0a, %n0"]
    for i in range(regs):
        L += [f"  %o{i} = extractvalue {ty} %acc.next, {i}",
              f"  %or{i} = add i32 %r0, {8 * ((i // 2) % 2)}",
              f"  %oc{i} = add i32 %c0, {8 * (i // 4) + i % 2}",
              f"  %om{i} = mul i32 %or{i}, {N}",
              f"  %oi{i} = add i32 %om{i}, %oc{i}",
              f"  %oz{i} = zext i32 %oi{i} to i64",
              f"  %op{i} = getelementptr inbounds float, ptr addrspace(1) %C, i64 %oz{i}",
              f"  store float %o{i}, ptr addrspace(1) %op{i}, align 4"]
    L.append("  ret void")
    head = [
        'target triple = "nvptx64-nvidia-cuda"',
        "@smem = external addrspace(3) global [0 x i8], align 1024",
        "declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()",
        "declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()",
        "declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.y()",
        "declare void @llvm.nvvm.barrier.cta.sync.aligned.all(i32)",
        f"declare void @{cp}(ptr addrspace(3), ptr addrspace(1))",
        "declare void @llvm.nvvm.cp.async.commit.group()",
        "declare void @llvm.nvvm.cp.async.wait.group(i32 immarg)",
        *DECLARATIONS,
        f"define ptx_kernel void @{name}(ptr addrspace(1) noalias %A, "
        "ptr addrspace(1) noalias %B, ptr addrspace(1) noalias %C) "
        f'"nvvm.maxntid"="{GEMM_THREADS},1,1" {{',
    ]
    return "\n".join(head + L + ["}"]) + "\n"


def gemm_kernel_ptx(M: int, N: int, K: int, ab: str = "float16", bn: int = 256,
                    stages: int = 4, target: str = "cuda -arch=sm_90a",
                    name: str = "wgmma_gemm", in_flight: int = 0) -> str:
    """PTX of :func:`gemm_kernel_ir` for ``target`` (which must have wgmma)."""
    from .compile import optimize, parse_llvm, target_machine

    require_wgmma(target)
    module = parse_llvm(gemm_kernel_ir(M, N, K, ab, bn, stages, name, in_flight),
                        f"wgmma kernel {name}")
    optimize(module, "sm_90a")
    return target_machine("sm_90a").emit_assembly(module)
