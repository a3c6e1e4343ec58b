"""wgmma (sm_90a) on the GPU: the layouts checked on the hardware, then the wgmma GEMM kernel
against cuBLAS (torch.matmul).

1. The one-warpgroup tile kernel (``backend_ptx.wgmma.tile_kernel_ptx``) for every swizzle
   mode, N in 64/128/256, fp16 and bf16, against numpy: the descriptor, swizzle and
   accumulator layouts the simulator assumes are the hardware's.
2. ``C[M, N] (f32) = A[M, K] x B[N, K]^T`` with ``backend_ptx.wgmma.gemm_kernel_ptx``, fp16
   and bf16, checked on random inputs against a float64 reference, then timed with
   ``torch.matmul`` (bf16/fp16 out, cuBLAS) in the same process: ``--number`` launches in a
   CUDA graph replayed ``--repeat`` times between CUDA events, median per launch.
3. ``--sanitize``: compute-sanitizer memcheck and racecheck on one small wgmma GEMM.

    python3 bench/bench_wgmma.py [--size 4096 8192] [--sanitize]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import time

from bench_tensorcore import torch_time
from ptxforge.backend_ptx.assemble import AssemblerError, run_ptxas
from ptxforge.backend_ptx.cuda_driver import call, cuda, driver
from ptxforge.backend_ptx.wgmma import (
    GEMM_THREADS,
    gemm_kernel_ptx,
    gemm_shared_bytes,
    tile_kernel_ptx,
)
from ptxforge.ir.intrin.wgmma import get_wgmma


class Kernel:
    """A cubin's one kernel, launched with raw device pointers on a given stream."""

    def __init__(self, ptx: str, name: str, grid, block, smem: int = 0):
        try:
            image = run_ptxas(ptx, "sm_90a")[0]
        except AssemblerError as e:  # no ptxas on this machine: the driver's JIT assembles
            print(f"({str(e).splitlines()[0][:80]}; loading PTX)", flush=True)
            image = ptx.encode() + b"\0"
        self.module = call("cuModuleLoadData", image)
        self.function = call("cuModuleGetFunction", self.module, name.encode())
        if smem:
            attr = driver().CUfunction_attribute
            call("cuFuncSetAttribute", self.function,
                 attr.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
        self.grid, self.block, self.smem = grid, block, smem
        self._vals = (ctypes.c_uint64 * 3)()
        base = ctypes.addressof(self._vals)
        self._slots = (ctypes.c_void_p * 3)(*[base + 8 * i for i in range(3)])

    def __call__(self, *ptrs, stream: int = 0) -> None:
        self._vals[:] = list(ptrs)
        call("cuLaunchKernel", self.function, *self.grid, *self.block, self.smem, stream,
             ctypes.addressof(self._slots), 0)


def torch_dtype(ab):
    import torch

    return {"float16": torch.float16, "bfloat16": torch.bfloat16}[ab]


def check_tiles() -> bool:
    import torch

    ok = True
    for ab in ("float16", "bfloat16"):
        for n in (64, 128, 256):
            for swz in ("128B", "64B", "32B", "none"):
                k = Kernel(tile_kernel_ptx(get_wgmma(n, ab), swz), "wgmma_tile", (1, 1, 1),
                           (128, 1, 1))
                a = (torch.rand(64, 64, device="cuda") * 2 - 1).to(torch_dtype(ab))
                b = (torch.rand(n, 64, device="cuda") * 2 - 1).to(torch_dtype(ab))
                c = torch.full((64, n), float("nan"), device="cuda")
                k(a.data_ptr(), b.data_ptr(), c.data_ptr())
                torch.cuda.synchronize()
                want = a.double() @ b.double().T
                err = float((c.double() - want).abs().max() / want.abs().max())
                good = err < 1e-5
                ok &= good
                print(f"tile m64n{n}k16 {ab} swizzle {swz}: rel err {err:.1e} "
                      f"{'ok' if good else 'WRONG'}", flush=True)
    return ok


def gemm(M, N, K, ab, bn, stages, in_flight=0):
    t0 = time.perf_counter()
    ptx = gemm_kernel_ptx(M, N, K, ab, bn, stages, in_flight=in_flight)
    k = Kernel(ptx, "wgmma_gemm", (N // bn, M // 128, 1), (GEMM_THREADS, 1, 1),
               gemm_shared_bytes(bn, stages))
    return k, time.perf_counter() - t0


def sanitize() -> None:
    code = (
        "import sys, torch\n"
        f"sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})\n"
        "from bench_wgmma import gemm\n"
        "a = torch.rand(256, 256, device='cuda').half() - 0.5\n"
        "b = torch.rand(256, 256, device='cuda').half() - 0.5\n"
        "c = torch.zeros(256, 256, device='cuda')\n"
        "k, _ = gemm(256, 256, 256, 'float16', 128, 3, 1)\n"
        "k(a.data_ptr(), b.data_ptr(), c.data_ptr()); torch.cuda.synchronize()\n"
        "print('max abs err', float((c - a.float() @ b.float().T).abs().max()))\n")
    import shutil

    tool = shutil.which("compute-sanitizer") or (
        "/usr/local/cuda/bin/compute-sanitizer"
        if os.path.exists("/usr/local/cuda/bin/compute-sanitizer") else None)
    if tool is None:
        print("compute-sanitizer: not found; not run")
        return
    # Driver-API probes that return errors by design (cuGetProcAddress looking up symbols
    # the driver lacks, from torch and cuda-python) are not kernel faults: leave them out.
    for check in ("memcheck", "racecheck"):
        r = subprocess.run([tool, "--tool", check, "--report-api-errors", "no",
                            "--error-exitcode", "3", sys.executable, "-c", code],
                           capture_output=True, text=True, timeout=200, env=dict(os.environ))
        lines = (r.stdout + r.stderr).strip().splitlines()
        print(f"compute-sanitizer {check}: exit {r.returncode}", flush=True)
        for line in lines[:12] + ["..."] + lines[-3:]:
            print("   ", line[:160])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, nargs="+", default=[4096, 8192])
    p.add_argument("--number", type=int, default=10)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--sanitize", action="store_true")
    args = p.parse_args(argv)
    import torch

    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.zeros(1, device="cuda")  # torch's primary context first; ours is the same one
    dev = cuda(0)
    dev.activate()
    print(f"device: {dev.name} ({dev.sm}); torch {torch.__version__}", flush=True)
    ok = check_tiles()
    for size in args.size:
        M = N = K = size
        flop = 2.0 * M * N * K
        for ab in ("float16", "bfloat16"):
            g = torch.Generator(device="cuda").manual_seed(0)
            a = (torch.rand(M, K, device="cuda", generator=g) * 2 - 1).to(torch_dtype(ab))
            b = (torch.rand(N, K, device="cuda", generator=g) * 2 - 1).to(torch_dtype(ab))
            want = a.double() @ b.double().T
            ref = torch.matmul(a, b.T)
            ref_err = float((ref.double() - want).abs().max() / want.abs().max())
            cublas = torch_time(lambda a=a, b=b: torch.matmul(a, b.T), args.number, args.repeat)
            print(f"\n{M}x{N}x{K} {ab}: torch.matmul (cuBLAS) {cublas:.4f} ms "
                  f"{flop / cublas / 1e9:.1f} TFLOP/s rel err {ref_err:.1e}", flush=True)
            for bn, stages, fl in ((256, 4, 0), (256, 3, 1), (256, 4, 1), (128, 4, 1),
                                   (128, 5, 1)):
                k, secs = gemm(M, N, K, ab, bn, stages, fl)
                c = torch.full((M, N), float("nan"), device="cuda")
                k(a.data_ptr(), b.data_ptr(), c.data_ptr())
                torch.cuda.synchronize()
                err = float((c.double() - want).abs().max() / want.abs().max())
                good = err < 1e-4
                ok &= good
                ms = torch_time(lambda k=k, a=a, b=b, c=c: k(
                    a.data_ptr(), b.data_ptr(), c.data_ptr(),
                    stream=torch.cuda.current_stream().cuda_stream), args.number, args.repeat)
                print(f"  wgmma 128x{bn}x64 {stages} stages {fl} in flight: {ms:.4f} ms "
                      f"{flop / ms / 1e9:.1f} TFLOP/s  ours/cuBLAS speed {cublas / ms:.3f}  "
                      f"rel err {err:.1e} {'ok' if good else 'WRONG'} (compile {secs:.2f} s)",
                      flush=True)
            del want
    if args.sanitize:
        sanitize()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
