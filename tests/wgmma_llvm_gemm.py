"""A hand-written wgmma GEMM kernel in LLVM IR text (sm_90a): ``C[M, N] (f32) = A[M, K] x
B[N, K]^T``, fp16 or bf16 inputs, outside te.

The loop nest is written here directly (nothing schedules it, the simulator cannot run
it), so it serves as a check of the wgmma layouts, descriptors and protocol on the
hardware (``tests/test_wgmma.py`` assembles it, ``bench/bench_wgmma.py`` times it) next to
the te schedule of the same GEMM (``schedule_dense_wgmma`` of
``tests/tensorcore_dense.py``). :func:`compile_wgmma_dense` checks target, dtypes and
shapes and returns the PTX and its launch.
"""

from __future__ import annotations

from dataclasses import dataclass

from ptxforge.backend_ptx.wgmma import (
    COMMIT,
    DECLARATIONS,
    FENCE,
    FENCE_PROXY_ASYNC,
    WAIT,
    mma_async_call,
)
from ptxforge.ir.intrin.wgmma import SWIZZLE_MODES, WgmmaError, get_wgmma, require_wgmma

GEMM_THREADS = 256
"""Two warpgroups per block; warpgroup ``w`` owns rows ``64 w .. 64 w + 63`` of the tile."""


def _gemm_check(M: int, N: int, K: int, bn: int, stages: int, in_flight: int) -> None:
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
    from ptxforge.backend_ptx.compile import optimize, parse_llvm, target_machine

    require_wgmma(target)
    module = parse_llvm(gemm_kernel_ir(M, N, K, ab, bn, stages, name, in_flight),
                        f"wgmma kernel {name}")
    optimize(module, "sm_90a")
    return target_machine("sm_90a").emit_assembly(module)


@dataclass(frozen=True)
class WgmmaConfig:
    """``block_n``: 128 or 256 (block tile 128 x block_n, K step 64); ``stages``: shared
    buffers (2-5); ``in_flight``: wgmma groups left running across a K step (0 or 1)."""

    block_n: int = 256
    stages: int = 4
    in_flight: int = 1


@dataclass(frozen=True)
class WgmmaKernel:
    """A compiled wgmma GEMM: PTX for sm_90a and how to launch it (params A, B, C)."""

    name: str
    ptx: str
    grid: tuple
    block: tuple
    dynamic_shared_bytes: int


def compile_wgmma_dense(M: int, N: int, K: int, in_dtype: str = "float16",
                        config: WgmmaConfig | None = None, target="cuda -arch=sm_90a",
                        out_dtype: str = "float32", name: str = "wgmma_gemm") -> WgmmaKernel:
    """The wgmma GEMM kernel for these sizes, or an error naming what does not fit."""
    cfg = config or WgmmaConfig()
    require_wgmma(target)
    if in_dtype not in ("float16", "bfloat16"):
        raise WgmmaError(f"wgmma dense takes float16 or bfloat16 inputs, not {in_dtype} "
                         "(TF32 runs on the mma.sync schedule)")
    if out_dtype != "float32":
        raise WgmmaError(f"wgmma dense writes float32 C; out_dtype {out_dtype} is not "
                         "supported yet (cast afterwards)")
    ptx = gemm_kernel_ptx(M, N, K, in_dtype, cfg.block_n, cfg.stages, target, name,
                          cfg.in_flight)
    return WgmmaKernel(name, ptx, (N // cfg.block_n, M // 128, 1), (GEMM_THREADS, 1, 1),
                       gemm_shared_bytes(cfg.block_n, cfg.stages))
