"""FP8 GEMM on sm_90a: ``scaled_mm`` (e4m3 / e5m2 inputs, float32 accumulation, per-tensor
scales, fp16 / bf16 / fp32 output) on the tensor-core GEMM template's wgmma kind, against
cuBLAS's FP8 GEMM (``torch._scaled_mm``) in the same process.

Each shape is built with the default schedule for ``cuda -arch=sm_90a`` (the wgmma
chooser's tiles; the row says which), and with each ``--config
BLOCK_N,WARPGROUPS,STAGES,IN_FLIGHT,SPLIT_K`` (``schedule_gemm_wgmma``), checked against
the numpy meaning (:func:`~ptxforge.ops.scaled_mm.scaled_mm_reference`) on a reduced copy of
the problem and on the full one against torch, then graph-timed (``--number`` launches in
a CUDA graph, median of ``--repeat``). ``torch._scaled_mm`` takes ``B`` column-major, as
ours takes ``B`` as ``[N, K]``. The goal: 8192^3 e4m3 at 0.8x cuBLAS or better.
``--compile-only`` builds and assembles every kernel without a GPU.

    python3 bench/bench_fp8_gemm.py [--shape 8192,8192,8192 ...] [--dtype float8_e4m3fn]
        [--out float16 bfloat16] [--config 256,2,4,1,1 ...] [--compile-only]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

SM90A = "cuda -arch=sm_90a"


def build(M, N, K, ab, out_dtype, cfg=None):
    """``(compiled module, params, description, seconds)`` of ``scaled_mm`` with the default
    schedule, or with wgmma configuration ``cfg``."""
    import ptxforge
    from ptxforge import te
    from ptxforge.backend_ptx import compile_module
    from ptxforge.ops.scaled_mm import scaled_mm
    from ptxforge.ops.schedules import default_schedule
    from ptxforge.ops.schedules.gemm.chooser import wgmma_choice
    from ptxforge.ops.schedules.gemm.forms import gemm_form
    from ptxforge.ops.schedules.gemm.schedule import schedule_gemm_wgmma
    from ptxforge.target import as_target

    a = te.placeholder((M, K), ab, name="A")
    b = te.placeholder((N, K), ab, name="B")
    sa = te.placeholder((1,), "float32", name="scale_a")
    sb = te.placeholder((1,), "float32", name="scale_b")
    out = scaled_mm(a, b, sa, sb, out_dtype)
    prod = out.op.input_tensors[0].op
    target = as_target(SM90A)
    t0 = time.perf_counter()
    with target:
        form = gemm_form(prod, target)
        if cfg is None:
            s = default_schedule(out, target)
            desc = f"default {wgmma_choice(prod, out.op, form, target)}"
        else:
            s = te.create_schedule(out.op)
            schedule_gemm_wgmma(s, prod, out.op, cfg, target, form)
            desc = f"{cfg}"
        mod = compile_module(ptxforge.lower(s, [a, b, sa, sb, out]), target)
    return mod, desc, time.perf_counter() - t0


def main(argv=None) -> int:
    from ptxforge.ops.schedules.gemm.knobs import WgmmaScheduleConfig
    from ptxforge.passes.schedule.common import ScheduleError

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", nargs="*", default=["8192,8192,8192", "4096,4096,4096"])
    p.add_argument("--dtype", default="float8_e4m3fn",
                   choices=["float8_e4m3fn", "float8_e5m2"])
    p.add_argument("--out", nargs="+", default=["bfloat16"],
                   choices=["float16", "bfloat16", "float32"])
    p.add_argument("--config", nargs="*", default=[],
                   help="block_n,warpgroups,stages,in_flight,split_k")
    p.add_argument("--number", type=int, default=20)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--compile-only", action="store_true")
    args = p.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shape]
    configs = [None] + [WgmmaScheduleConfig(*(int(v) for v in c.split(",")))
                        for c in args.config]
    if args.compile_only:
        for M, N, K in shapes:
            for out_dt in args.out:
                for cfg in configs:
                    try:
                        mod, desc, secs = build(M, N, K, args.dtype, out_dt, cfg)
                    except ScheduleError as e:
                        print(f"{M}x{N}x{K} {out_dt}: skipped ({e})", flush=True)
                        continue
                    kernels = [f"grid {tuple(k.launch.grid)} block {tuple(k.launch.block)}"
                               + (f" regs {k.resources.registers} spills "
                                  f"{k.resources.spill_store_bytes}" if k.resources else "")
                               for k in mod.kernels.values()]
                    print(f"{M}x{N}x{K} {out_dt}: {desc} ({secs:.1f} s) {'; '.join(kernels)}",
                          flush=True)
        return 0

    import torch
    from bench_tensorcore import torch_time
    from ptxforge.backend_ptx import array, cuda, empty
    from ptxforge.ir.float8 import float8_from_bits, quantize

    torch.zeros(1, device="cuda")
    dev = cuda(0)
    dev.activate()
    print(f"device: {dev.name} ({dev.sm}); torch {torch.__version__}", flush=True)
    tdt = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}[args.dtype]
    tout = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
    rng = np.random.default_rng(0)
    ok = True
    for M, N, K in shapes:
        flop = 2.0 * M * N * K
        a8, sa = quantize(rng.standard_normal((M, K), np.float32), args.dtype)
        b8, sb = quantize(rng.standard_normal((N, K), np.float32), args.dtype)
        ta = torch.from_numpy(a8).cuda().view(tdt)
        tb = torch.from_numpy(b8).cuda().view(tdt)
        tsa = torch.tensor([sa], device="cuda", dtype=torch.float32)
        tsb = torch.tensor([sb], device="cuda", dtype=torch.float32)
        for out_dt in args.out:
            # cuBLAS: B column-major ([N, K] row-major, transposed)
            def cublas_mm(out_dt=out_dt, ta=ta, tb=tb, tsa=tsa, tsb=tsb):
                return torch._scaled_mm(ta, tb.t(), scale_a=tsa, scale_b=tsb,
                                        out_dtype=tout[out_dt])

            want = cublas_mm().float().cpu().numpy().astype(np.float64)
            # the numpy meaning on a corner of the product (the whole one is slow on a CPU)
            m0, n0 = min(M, 256), min(N, 256)
            exact = (float8_from_bits(a8[:m0], args.dtype).astype(np.float64)
                     @ float8_from_bits(b8[:n0], args.dtype).astype(np.float64).T) * sa * sb
            cublas = torch_time(cublas_mm, args.number, args.repeat)
            print(f"\n{M}x{N}x{K} {args.dtype} -> {out_dt}: cuBLAS {cublas * 1e3:.1f} us "
                  f"{flop / cublas / 1e9:.1f} TFLOP/s", flush=True)
            for cfg in configs:
                try:
                    mod, desc, secs = build(M, N, K, args.dtype, out_dt, cfg)
                except ScheduleError as e:
                    print(f"  {cfg}: skipped ({e})", flush=True)
                    continue
                loaded = mod.load(dev)
                arrs = [array(a8, dev, args.dtype), array(b8, dev, args.dtype),
                        array(np.float32([sa]), dev), array(np.float32([sb]), dev)]
                out = empty((M, N), out_dt, dev)
                loaded(*arrs, out)
                got = out.numpy()
                got = (got.astype(np.float32) if out_dt != "bfloat16"
                       else np.asarray(got, np.float32)).astype(np.float64)
                scale = np.abs(want).max()
                err = float(np.abs(got - want).max() / scale)
                err_exact = float(np.abs(got[:m0, :n0] - exact).max() / scale)
                good = err < 1e-2 and err_exact < 1e-2
                ok &= good
                ms = loaded.time_evaluator("main", number=args.number, repeat=args.repeat,
                                           graph=True)(*arrs, out).median * 1e3
                print(f"  {ms * 1e3:9.1f} us  {flop / ms / 1e9:7.1f} TFLOP/s  "
                      f"ours/cuBLAS speed {cublas / ms:.3f}  err {err:.1e} (numpy "
                      f"{err_exact:.1e}) {'ok' if good else 'WRONG'}  {desc} "
                      f"(compile {secs:.1f} s)", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
