"""The TMA-fed wgmma GEMM (``ops/schedules/tma/gemm.py``: a producer warpgroup filling
128B-swizzled stages by TMA under full/empty mbarriers, one consumer warpgroup of wgmma)
against cuBLAS (``torch.nn.functional.linear``, fp16 reduced-precision reductions off) and
against the tree's default wgmma schedule of the same product, in one process.

Each kernel is checked against a float64 reference first, then graph-timed (``--number``
launches in a CUDA graph, median of ``--repeat``). ``--compile-only`` builds and assembles
every kernel without a GPU (registers, spills, build time).

    python3 bench/bench_tma_gemm.py [--shape 4096,4096,4096 ...] [--config 128,6,2 ...]
        [--compile-only]
"""

from __future__ import annotations

import argparse
import functools
import sys
import time

import numpy as np

SHAPES = ((4096, 4096, 4096), (2048, 2048, 2048), (1024, 4096, 4096), (128, 4096, 4096))
"""(M, N, K) of ``C = A B^T``."""
CONFIGS = ((128, 4, 1), (256, 4, 1), (128, 6, 2), (256, 4, 2))
"""(block_n, stages, consumer warpgroups) of the TMA GEMM."""
SM90A = "cuda -arch=sm_90a"


def _default_module(M, N, K, dtype):
    """The tree's default schedule of the same product (``ops.nn.dense``), sm_90a."""
    import ptxforge
    from ptxforge import ops, te
    from ptxforge.ops.schedules.default import default_schedule
    from ptxforge.target import as_target

    x = te.placeholder((M, K), dtype, name="x")
    w = te.placeholder((N, K), dtype, name="w")
    y = ops.nn.dense(x, w)
    with as_target(SM90A):
        s = default_schedule(y, target=SM90A)
        return ptxforge.lower(s, [x, w, y])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", nargs="*", default=None, help="M,N,K (default: a few)")
    p.add_argument("--config", nargs="*", default=None,
                   help="block_n,stages,consumers")
    p.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    p.add_argument("--number", type=int, default=50)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--no-default", action="store_true", help="skip the default schedule")
    p.add_argument("--compile-only", action="store_true")
    args = p.parse_args(argv)
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from ptxforge.backend_ptx import compile_module
    from ptxforge.backend_ptx.compile import compile_kernel
    from ptxforge.ops.schedules.tma import TmaGemm, tma_gemm_module

    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shape] if args.shape \
        else SHAPES
    configs = [tuple(int(v) for v in c.split(",")) for c in args.config] if args.config \
        else CONFIGS
    if args.compile_only:
        for M, N, K in shapes:
            for bn, st, nc in configs:
                g = TmaGemm(M, N, K, args.dtype, bn, st, nc)
                t0 = time.perf_counter()
                ck = compile_kernel(tma_gemm_module(g).kernels()[0], SM90A,
                                    stop_after="cubin", assembler="ptxas")
                print(f"{M}x{N}x{K} n{bn} s{st} c{nc}: {ck.resources} "
                      f"({time.perf_counter() - t0:.2f} s)", flush=True)
        return 0

    import torch
    from bench_tensorcore import torch_time
    from ptxforge.backend_ptx import array, cuda, empty
    from ptxforge.ir import dtype as dt

    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.zeros(1, device="cuda")
    dev = cuda(0)
    dev.activate()
    print(f"device: {dev.name} ({dev.sm}); torch {torch.__version__}", flush=True)
    tdt = torch.float16 if args.dtype == "float16" else torch.bfloat16
    rng = np.random.default_rng(0)
    for M, N, K in shapes:
        flop = 2.0 * M * N * K
        a = rng.uniform(-1, 1, (M, K))
        b = rng.uniform(-1, 1, (N, K))
        if args.dtype == "bfloat16":
            hosts = [dt.to_bfloat16(a), dt.to_bfloat16(b)]
            wide = [dt.from_bfloat16(h).astype(np.float64) for h in hosts]
        else:
            hosts = [a.astype(np.float16), b.astype(np.float16)]
            wide = [h.astype(np.float64) for h in hosts]
        want = wide[0] @ wide[1].T
        ta, tb = (torch.from_numpy(w).to(tdt).cuda() for w in wide)
        cublas = torch_time(functools.partial(torch.nn.functional.linear, ta, tb),
                            args.number, args.repeat)
        print(f"{M}x{N}x{K} {args.dtype}: cuBLAS {cublas:.4f} ms "
              f"({flop / cublas / 1e9:.0f} TFLOP/s)", flush=True)
        arrs = [array(h, dev, args.dtype) for h in hosts]
        rows = [(f"tma n{bn} s{st} c{nc}", tma_gemm_module,
                 TmaGemm(M, N, K, args.dtype, bn, st, nc)) for bn, st, nc in configs]
        if not args.no_default:
            rows.append(("default wgmma", _default_module, (M, N, K, args.dtype)))
        for label, make, what in rows:
            try:
                module = make(*what) if isinstance(what, tuple) else make(what)
                loaded = compile_module(module, SM90A).load(dev)
            except Exception as e:  # noqa: BLE001 - one row fails, the others run
                print(f"  {label}: build failed: {e}", flush=True)
                continue
            out = empty((M, N), args.dtype, dev)
            loaded(*arrs, out)
            got = out.numpy()
            got = (dt.from_bfloat16(got) if args.dtype == "bfloat16" else got).astype(
                np.float64)
            err = float(np.abs(got - want).max())
            ms = loaded.time_evaluator("main", number=args.number, repeat=args.repeat,
                                       graph=True)(*arrs, out).median * 1e3
            print(f"  {label}: {ms:.4f} ms ({flop / ms / 1e9:.0f} TFLOP/s, "
                  f"{cublas / ms:.2f}x cuBLAS), max error {err:.3g}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
