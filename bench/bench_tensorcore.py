"""fp16 GEMM on tensor cores (mma.sync m16n8k16 + ldmatrix) against cuBLAS (torch.matmul).

``C[M, N] = A[M, K] x B[N, K]^T`` with fp16 inputs and fp32 accumulation, for several
block / warp tilings of ``ops.schedules.tensorcore``; outputs in fp32 and in fp16. Every
kernel is first checked on random inputs against a float64 reference (relative error of
the fp16 output within fp16 rounding, of the fp32 output within fp32 accumulation error),
then timed, as is ``torch.matmul`` (fp16 in and out, cuBLAS, fp32 accumulation with
reduced-precision reductions off), in the same process: ``--number`` launches captured in
one CUDA graph, replayed ``--repeat`` times between CUDA events, median per launch.

    python3 bench/bench_tensorcore.py [--size 4096] [--json out.json] [--sanitize]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import numpy as np
import ptxforge
from ptxforge.backend_ptx import array, compile_module, cuda, empty
from ptxforge.ops.schedules.gemm.knobs import TensorCoreConfig
from ptxforge.ops.schedules.gemm.schedule import dense_tensorcore_compute
from ptxforge.tests.tensorcore_dense import schedule_dense_tensorcore

CONFIGS = [
    TensorCoreConfig(128, 128, 64, 2, 4),
    TensorCoreConfig(128, 128, 32, 2, 4, async_copy=True, stages=2),
    TensorCoreConfig(128, 128, 32, 2, 4, pad=0, async_copy=True, stages=3),
    TensorCoreConfig(128, 128, 32, 2, 2, async_copy=True, stages=2),
    TensorCoreConfig(64, 128, 32, 2, 2, async_copy=True, stages=3),
    TensorCoreConfig(128, 64, 32, 2, 2, async_copy=True, stages=3),
    TensorCoreConfig(128, 256, 32, 2, 4, async_copy=True),
    TensorCoreConfig(128, 128, 64, 2, 4, async_copy=True),
    TensorCoreConfig(128, 128, 32, 2, 4, async_copy=True, stages=2, frag_load="load"),
]


def describe(cfg: TensorCoreConfig) -> str:
    return (f"block {cfg.block_m}x{cfg.block_n}x{cfg.block_k} warps {cfg.warps_m}x"
            f"{cfg.warps_n} pad {cfg.pad} stages {cfg.stages}"
            f"{' cp.async' if cfg.async_copy else ''} {cfg.frag_load}")


def compile_gemm(M, N, K, out_dtype, cfg):
    tensors = dense_tensorcore_compute(M, N, K, "float16", out_dtype)
    t0 = time.perf_counter()
    s = schedule_dense_tensorcore(tensors, cfg)
    mod = compile_module(ptxforge.lower(s, tensors))
    return mod, time.perf_counter() - t0


def rel_err(got, want) -> float:
    return float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())


def torch_time(fn, number: int, repeat: int) -> float:
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(number):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / number)
    return statistics.median(times)


def sanitize(M: int = 128, N: int = 128, K: int = 64) -> None:
    """Run compute-sanitizer memcheck and racecheck on one small GEMM (a child process)."""
    code = (
        "import numpy as np, ptxforge\n"
        "from ptxforge.backend_ptx import array, compile_module, cuda, empty\n"
        "from ptxforge.ops.schedules.gemm.knobs import TensorCoreConfig\n"
        "from ptxforge.ops.schedules.gemm.schedule import dense_tensorcore_compute\n"
        "from ptxforge.tests.tensorcore_dense import schedule_dense_tensorcore\n"
        f"t = dense_tensorcore_compute({M}, {N}, {K})\n"
        "dev = cuda(0)\n"
        "rng = np.random.default_rng(1)\n"
        f"a = rng.uniform(-1, 1, ({M}, {K})).astype(np.float16)\n"
        f"b = rng.uniform(-1, 1, ({N}, {K})).astype(np.float16)\n"
        "want = a.astype(np.float64) @ b.astype(np.float64).T\n"
        "for cfg in (TensorCoreConfig(64, 64, 32, 2, 2),\n"
        "            TensorCoreConfig(64, 64, 16, 2, 2, async_copy=True, stages=3)):\n"
        "    s = schedule_dense_tensorcore(t, cfg)\n"
        "    mod = compile_module(ptxforge.lower(s, t)).load(dev)\n"
        f"    c = empty(({M}, {N}), 'float32', dev)\n"
        "    mod(array(a, dev), array(b, dev), c)\n"
        "    print('sanitized gemm', cfg.stages, 'stages, max abs err',\n"
        "          float(np.abs(c.numpy() - want).max()))\n"
    )
    import shutil

    tool = shutil.which("compute-sanitizer")
    if tool is None:
        for cand in ("/usr/local/cuda/bin/compute-sanitizer",):
            if shutil.os.path.exists(cand):
                tool = cand
    if tool is None:
        print("compute-sanitizer: not found on this machine; not run")
        return
    for check in ("memcheck", "racecheck"):
        r = subprocess.run([tool, "--tool", check, "--error-exitcode", "3", sys.executable,
                            "-c", code], capture_output=True, text=True, timeout=240)
        tail = (r.stdout + r.stderr).strip().splitlines()[-4:]
        print(f"compute-sanitizer {check}: exit {r.returncode}; " + " | ".join(tail))


def check_variants(dev, n: int = 512) -> None:
    """Correctness of the other instruction paths on the GPU (random inputs, float64
    reference)."""
    rng = np.random.default_rng(3)
    for kw, cfg in (
            (dict(b_layout="kn"), TensorCoreConfig(128, 128, 32, 2, 4)),
            (dict(b_layout="kn"), TensorCoreConfig(64, 32, 32, 2, 2)),
            (dict(acc_dtype="float16", out_dtype="float16"), TensorCoreConfig(128, 128, 32, 2, 4)),
            (dict(), TensorCoreConfig(128, 128, 32, 2, 4, frag_load="load")),
            (dict(b_layout="kn"), TensorCoreConfig(128, 128, 32, 2, 4, frag_load="load")),
            (dict(in_dtype="float32"), TensorCoreConfig(128, 128, 32, 2, 4, vec=4, tf32=True)),
            (dict(), TensorCoreConfig(64, 64, 32, 2, 2, async_copy=True, stages=4))):
        tensors = dense_tensorcore_compute(n, n, n, **kw)
        s = schedule_dense_tensorcore(tensors, cfg)
        loaded = compile_module(ptxforge.lower(s, tensors)).load(dev)
        a = rng.uniform(-1, 1, tensors[0].shape).astype(tensors[0].dtype)
        b = rng.uniform(-1, 1, tensors[1].shape).astype(tensors[1].dtype)
        c = empty(tensors[2].shape, tensors[2].dtype, dev)
        loaded(array(a, dev), array(b, dev), c)
        bt = b.astype(np.float64) if kw.get("b_layout") == "kn" else b.astype(np.float64).T
        err = rel_err(c.numpy(), a.astype(np.float64) @ bt)
        tol = 4e-3 if tensors[2].dtype == "float16" or kw.get("in_dtype") == "float32" \
            else 1e-5
        print(f"variant {kw or 'nk'} {describe(cfg)}: rel err {err:.1e} "
              f"{'ok' if err <= tol else 'WRONG'}", flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, nargs="+", default=[4096])
    p.add_argument("--number", type=int, default=20)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--json")
    p.add_argument("--sanitize", action="store_true")
    p.add_argument("--configs", type=int, default=len(CONFIGS))
    p.add_argument("--variants", action="store_true",
                   help="first check B [k, n] (ldmatrix .trans), fp16 accumulation, "
                        "lane-by-lane loads and TF32 at 512^3")
    args = p.parse_args(argv)
    import torch

    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    dev = cuda(0)
    major, minor = dev.compute_capability
    print(f"device: {dev.name} (sm_{major}{minor}); torch {torch.__version__}", flush=True)
    results = []
    if args.variants:
        check_variants(dev)
    for size in args.size:
        M = N = K = size
        flop = 2.0 * M * N * K
        rng = np.random.default_rng(0)
        a = rng.uniform(-1, 1, (M, K)).astype(np.float16)
        b = rng.uniform(-1, 1, (N, K)).astype(np.float16)
        ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        want = (ta.double() @ tb.double().T).cpu().numpy()
        tc = torch.matmul(ta, tb.T)
        torch_err = rel_err(tc.float().cpu().numpy(), want)
        cublas_ms = torch_time(lambda x=ta, y=tb: torch.matmul(x, y.T), args.number, args.repeat)
        print(f"\n{M}x{N}x{K} fp16: torch.matmul (cuBLAS) {cublas_ms:.4f} ms, "
              f"{flop / cublas_ms / 1e9:.1f} TFLOP/s, rel err {torch_err:.2e}", flush=True)
        da, db = array(a, dev), array(b, dev)
        for cfg in CONFIGS[:args.configs]:
            for out_dtype in ("float32", "float16"):
                try:
                    mod, secs = compile_gemm(M, N, K, out_dtype, cfg)
                except Exception as e:  # an invalid tiling for this size
                    print(f"  {cfg}: {type(e).__name__}: {str(e)[:200]}")
                    continue
                loaded = mod.load(dev)
                c = empty((M, N), out_dtype, dev)
                loaded(da, db, c)
                err = rel_err(c.numpy(), want)
                tol = 2e-3 if out_dtype == "float16" else 1e-4
                ok = err <= tol
                ms = loaded.time_evaluator("main", number=args.number, repeat=args.repeat,
                                           graph=True)(da, db, c).median * 1e3
                row = dict(size=size, out=out_dtype, config=describe(cfg), ms=ms,
                           tflops=flop / ms / 1e9, cublas_ms=cublas_ms,
                           ratio=cublas_ms / ms, rel_err=err, correct=ok,
                           compile_s=secs)
                results.append(row)
                print(f"  ours out={out_dtype:<8} {describe(cfg)}: {ms:.4f} ms "
                      f"{flop / ms / 1e9:7.1f} TFLOP/s  cuBLAS/ours {cublas_ms / ms:.3f}  "
                      f"rel err {err:.1e} {'ok' if ok else 'WRONG'}  (compile {secs:.2f} s)",
                      flush=True)
        good = [r for r in results if r["size"] == size and r["correct"]]
        if good:
            best = min(good, key=lambda r: r["ms"])
            print(f"best at {size}: {best['ms']:.4f} ms ({best['out']}, {best['config']}) = "
                  f"{best['ratio']:.3f}x cuBLAS "
                  f"({cublas_ms:.4f} ms)", flush=True)
    if args.sanitize:
        sanitize()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev.name, "results": results}, f, indent=1)
    return 0 if all(r["correct"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
