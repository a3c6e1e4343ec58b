"""wgmma (sm_90a) on the GPU: the layouts checked on the hardware, then the wgmma GEMM kernel
against cuBLAS (torch.matmul).

1. The one-warpgroup tile kernel (``backend_ptx.wgmma.tile_kernel_ptx``) for every swizzle
   mode, N in 64/128/256, fp16 and bf16, against numpy: the descriptor, swizzle and
   accumulator layouts the simulator assumes are the hardware's.
2. ``C[M, N] (f32) = A[M, K] x B[N, K]^T`` with ``tests/wgmma_llvm_gemm.gemm_kernel_ptx``, fp16
   and bf16, checked on random inputs against a float64 reference, then timed with
   ``torch.matmul`` (bf16/fp16 out, cuBLAS) in the same process: ``--number`` launches in a
   CUDA graph replayed ``--repeat`` times between CUDA events, median per launch.
3. ``--sanitize``: compute-sanitizer memcheck and racecheck on one small wgmma GEMM.
4. ``--mode te`` (or ``all``, the default): the te schedule
   (``ops/schedules/tensorcore_wgmma.schedule_dense_wgmma``, through ``tensorize``) for
   ``D[M, N] = A x B^T`` with the output in the input dtype (as cuBLAS writes it): its
   default configuration, the configurations given with ``--te-config BN,WG,STAGES,FLIGHT``,
   and, with ``--trials N``, the AutoTVM template ``dense_wgmma.cuda`` tuned for N trials
   (every configuration when N covers its space) and rebuilt from its best record; each
   checked against float64 and graph-timed like the others, beside ``torch.matmul``.

    python3 bench/bench_wgmma.py [--size 4096 8192] [--mode all|template|te] [--trials 60]
        [--te-config 256,2,4,1 ...] [--sanitize]
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
from ptxforge.backend_ptx.wgmma import tile_kernel_ptx
from ptxforge.ir.intrin.wgmma import get_wgmma
from ptxforge.tests.wgmma_llvm_gemm import GEMM_THREADS, gemm_kernel_ptx, gemm_shared_bytes


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


TE_TARGET = "cuda -arch=sm_90a"


def te_build(M, N, K, ab, cfg=None, log=None):
    """Compile the te wgmma dense: ``cfg`` (a WgmmaScheduleConfig), else the template with
    the best record of ``log``, else the template's default configuration."""
    import ptxforge
    from ptxforge import autotvm
    from ptxforge.autotvm import tensorcore_wgmma as tw
    from ptxforge.backend_ptx import compile_module
    from ptxforge.ops.schedules.gemm.schedule import dense_tensorcore_compute
    from ptxforge.tests.tensorcore_dense import schedule_dense_wgmma

    target = ptxforge.target.as_target(TE_TARGET)
    t0 = time.perf_counter()
    with target:
        if cfg is not None:
            tensors = dense_tensorcore_compute(M, N, K, ab, ab)
            s = schedule_dense_wgmma(tensors, cfg, target)
        elif log is not None:
            with autotvm.apply_history_best(log):
                s, tensors = tw.dense_wgmma(M, N, K, ab)
        else:  # the template's configuration without a record
            s, tensors = tw.dense_wgmma(M, N, K, ab)
        mod = compile_module(ptxforge.lower(s, tensors), target)
    return mod, time.perf_counter() - t0


def te_tune(M, N, K, ab, trials, log, seed=0):
    """Tune ``dense_wgmma.cuda`` on this GPU into ``log``; a summary dict."""
    from ptxforge import autotvm
    from ptxforge.autotvm import tensorcore_wgmma as tw

    task = autotvm.task.create(tw.NAME, args=(M, N, K, ab), target=TE_TARGET)
    if trials >= len(task.config_space):
        tuner, kind = autotvm.tuner.GridSearchTuner(task), "grid"
    else:
        try:
            import xgboost  # noqa: F401

            tuner, kind = autotvm.tuner.XGBTuner(task, seed=seed), "xgb"
        except ImportError:
            tuner, kind = autotvm.tuner.RandomTuner(task, seed=seed), "random"
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(),
                                    runner=autotvm.LocalRunner(number=10, repeat=3,
                                                               timeout=20))
    t0 = time.perf_counter()
    n = min(trials, len(task.config_space))
    tuner.tune(n_trial=n, measure_option=option,
               callbacks=[autotvm.callback.log_to_file(log)])
    return {"tuner": kind, "trials": n, "seconds": time.perf_counter() - t0,
            "best": str(tuner.best_config)}


def te_rows(M, N, K, ab, a, b, want, cublas, args) -> bool:
    """Time the te wgmma dense (default, given configs, tuned) against cuBLAS."""
    import tempfile

    import numpy as np
    from ptxforge.backend_ptx import array, cuda, empty
    from ptxforge.ir import dtype as dt
    from ptxforge.ops.schedules.gemm.knobs import WgmmaScheduleConfig

    dev = cuda(0)
    flop = 2.0 * M * N * K
    host = [x.float().cpu().numpy() for x in (a, b)]  # exact in float32
    arrs = [array(x, dev, ab) for x in host]
    want = want.cpu().numpy()
    runs = [("default", None, None)]
    for text in args.te_config:
        cfg = WgmmaScheduleConfig(*(int(v) for v in text.split(",")))
        runs.append((f"{cfg.block_m}x{cfg.block_n} {cfg.stages} st {cfg.in_flight} fl", cfg,
                     None))
    info = None
    if args.trials:
        log = os.path.join(tempfile.mkdtemp(), f"dense_wgmma_{M}_{ab}.json")
        info = te_tune(M, N, K, ab, args.trials, log)
        runs.append(("tuned", None, log))
    ok = True
    for label, cfg, log in runs:
        mod, secs = te_build(M, N, K, ab, cfg, log)
        loaded = mod.load(dev)
        out = empty((M, N), ab, dev)
        loaded(*arrs, out)
        got = out.numpy()
        if ab == "bfloat16" and got.dtype == np.uint16:
            got = dt.from_bfloat16(got)
        err = float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())
        good = err < (4e-3 if ab == "float16" else 2e-2)
        ok &= good
        ms = loaded.time_evaluator("main", number=args.number, repeat=args.repeat,
                                   graph=True)(*arrs, out).median * 1e3
        extra = ""
        if log is not None and info is not None:
            extra = (f"; {info['trials']} trials ({info['tuner']}) in {info['seconds']:.0f} s, "
                     f"best {info['best']}")
        print(f"  te wgmma {label}: {ms:.4f} ms {flop / ms / 1e9:.1f} TFLOP/s  ours/cuBLAS "
              f"speed {cublas / ms:.3f}  rel err {err:.1e} {'ok' if good else 'WRONG'} "
              f"(compile {secs:.2f} s){extra}", flush=True)
    return ok


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, nargs="+", default=[4096, 8192])
    p.add_argument("--number", type=int, default=10)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--sanitize", action="store_true")
    p.add_argument("--mode", choices=["all", "template", "te"], default="all")
    p.add_argument("--trials", type=int, default=0,
                   help="tune dense_wgmma.cuda for this many trials (te mode; 0: no tuning)")
    p.add_argument("--te-config", nargs="*", default=[],
                   help="extra te configs as block_n,warpgroups,stages,in_flight")
    args = p.parse_args(argv)
    import torch

    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.zeros(1, device="cuda")  # torch's primary context first; ours is the same one
    dev = cuda(0)
    dev.activate()
    print(f"device: {dev.name} ({dev.sm}); torch {torch.__version__}", flush=True)
    ok = check_tiles() if args.mode != "te" else True
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
            if args.mode != "template":
                ok &= te_rows(M, N, K, ab, a, b, want, cublas, args)
            kernels = ((256, 4, 0), (256, 3, 1), (256, 4, 1), (128, 4, 1), (128, 5, 1))
            for bn, stages, fl in kernels if args.mode != "te" else ():
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
