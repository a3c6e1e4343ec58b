"""The tensor-core GEMM schedule (mma.sync) on the shapes the anchors name, against cuBLAS
(torch.matmul) in the same process: TF32 at 4096^3 (float32 in, TF32 multiply, float32
out, against cuBLAS with ``allow_tf32``), and the small-M fp16 products of inference (M = 1,
16, 128; N = K = 4096; fp32 accumulation, fp16 out). M = 1 runs the M = 16 kernel on an
A padded with zero rows (the schedule's smallest warp tile is 16 rows), which the table
says. ``padded``: dense layers whose shapes no tensor-core tile divides (ResNet's
classifier, N = 1000 and K = 512, at M = 1, 49 and 100; M = 1 of 4096^2 without the
hand-made padding), built with the default schedule of ``ops.nn.dense``, which pads them
to whole tiles itself (``implicit_gemm``) and picks its tiles, and with the CUDA-core
schedule these shapes fell back to before. Every kernel is checked on
random inputs against a float64 reference first, then timed as in ``bench_tensorcore.py``
(CUDA graph of ``--number`` launches, median of ``--repeat``); the compile time of each
candidate is printed.

    python3 bench/bench_gemm_shapes.py [--only tf32,small,padded] [--compile-only]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import ptxforge
from bench_tensorcore import describe, rel_err, torch_time
from ptxforge.ops.schedules.gemm.knobs import TensorCoreConfig
from ptxforge.ops.schedules.gemm.schedule import dense_tensorcore_compute
from ptxforge.tests.tensorcore_dense import schedule_dense_tensorcore

TF32_CONFIGS = [
    # fragments through ldmatrix (rows padded by 4 fp32: no bank conflicts), then the
    # lane-by-lane loads of before (rows padded by 8) for comparison
    TensorCoreConfig(128, 128, 32, 2, 4, vec=4, pad=4, tf32=True),
    TensorCoreConfig(128, 128, 32, 2, 4, vec=4, pad=4, tf32=True, async_copy=True, stages=3),
    TensorCoreConfig(128, 128, 16, 2, 4, vec=4, pad=4, tf32=True, async_copy=True, stages=4),
    TensorCoreConfig(128, 128, 32, 2, 4, vec=4, tf32=True, frag_load="load"),
    TensorCoreConfig(128, 128, 32, 2, 4, vec=4, tf32=True, frag_load="load",
                     async_copy=True, stages=3),
    TensorCoreConfig(128, 128, 16, 2, 4, vec=4, tf32=True, frag_load="load",
                     async_copy=True, stages=4),
]

SMALL_M_CONFIGS = {
    16: [TensorCoreConfig(16, 64, 64, 1, 2), TensorCoreConfig(16, 32, 64, 1, 1),
         TensorCoreConfig(16, 64, 64, 1, 2, async_copy=True, stages=3),
         TensorCoreConfig(16, 32, 128, 1, 1, async_copy=True, stages=3)],
    128: [TensorCoreConfig(128, 64, 32, 2, 2, async_copy=True, stages=3),
          TensorCoreConfig(64, 64, 32, 2, 2, async_copy=True, stages=3),
          TensorCoreConfig(32, 64, 64, 1, 2, async_copy=True, stages=3),
          TensorCoreConfig(64, 32, 64, 2, 1, async_copy=True, stages=3)],
}


PADDED_SHAPES = ((1, 1000, 512), (49, 1000, 512), (100, 1000, 512), (1, 4096, 4096))
"""(M, N, K) of the ``padded`` cases: M or N not a multiple of 16."""


CUDA_CORES = "cuda_cores"
"""The candidate of a ``padded`` case that runs the CUDA-core schedule (``schedule_tiled``,
what these shapes got before the tensor-core default padded them)."""


def build(M, N, K, in_dtype, out_dtype, cfg):
    """(compiled module, seconds): lower, LLVM, PTX, ptxas of one candidate; ``cfg`` None:
    the default schedule of ``ops.nn.dense`` (padded to whole tiles where it must be);
    :data:`CUDA_CORES`: the CUDA-core schedule of the same dense layer."""
    from ptxforge.backend_ptx import compile_module

    if cfg is None or cfg == CUDA_CORES:
        from ptxforge import ops, te
        from ptxforge.ops.schedules import default_schedule
        from ptxforge.ops.schedules.tiled import schedule_tiled

        a = te.placeholder((M, K), in_dtype, name="A")
        b = te.placeholder((N, K), in_dtype, name="B")
        out = ops.nn.dense(a, b, out_dtype=out_dtype)
        t0 = time.perf_counter()
        if cfg is None:
            s = default_schedule(out, "cuda")
            if "tensorize" not in str(s.pipeline):
                raise RuntimeError(f"{M}x{N}x{K} fell back to the CUDA cores")
        else:
            s = te.create_schedule(out.op)
            schedule_tiled(s, out.op.input_tensors[0].op, out.op, target="cuda")
        mod = compile_module(ptxforge.lower(s, [a, b, out]))
        return mod, time.perf_counter() - t0
    tensors = dense_tensorcore_compute(M, N, K, in_dtype, out_dtype)
    t0 = time.perf_counter()
    s = schedule_dense_tensorcore(tensors, cfg)
    mod = compile_module(ptxforge.lower(s, tensors))
    return mod, time.perf_counter() - t0


def label_of(cfg) -> str:
    if cfg == CUDA_CORES:
        return "CUDA cores (schedule_tiled)"
    return "default schedule (padded)" if cfg is None else describe(cfg)


def cases(only: set):
    """(label, M run, M real, N, K, in dtype, out dtype, configs, tolerance)."""
    if "tf32" in only:
        yield ("TF32 4096^3", 4096, 4096, 4096, 4096, "float32", "float32", TF32_CONFIGS,
               4e-3)
    if "small" in only:
        for m_real in (1, 16, 128):
            m = max(m_real, 16)
            label = f"fp16 M={m_real}" + (" (padded to 16)" if m != m_real else "")
            yield (label, m, m_real, 4096, 4096, "float16", "float16",
                   SMALL_M_CONFIGS[16 if m == 16 else 128], 3e-3)
    if "padded" in only:
        for m, n, k in PADDED_SHAPES:
            yield (f"fp16 M={m}, N={n}, K={k} (default, padded)", m, m, n, k, "float16",
                   "float16", [None, CUDA_CORES], 3e-3)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default="tf32,small,padded")
    p.add_argument("--number", type=int, default=50)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--compile-only", action="store_true",
                   help="build every candidate (no GPU needed) and print compile times")
    args = p.parse_args(argv)
    only = set(args.only.split(","))
    if args.compile_only:
        for label, m, _, n, k, idt, odt, cfgs, _ in cases(only):
            for cfg in cfgs:
                _, secs = build(m, n, k, idt, odt, cfg)
                print(f"{label}: {label_of(cfg)}: built in {secs:.2f} s", flush=True)
        return 0
    import torch
    from ptxforge.backend_ptx import array, cuda, empty

    dev = cuda(0)
    print(f"device: {dev.name}; torch {torch.__version__}", flush=True)
    ok_all = True
    for label, m, m_real, n, k, idt, odt, cfgs, tol in cases(only):
        rng = np.random.default_rng(0)
        a_real = rng.uniform(-1, 1, (m_real, k)).astype(idt)
        b = rng.uniform(-1, 1, (n, k)).astype(idt)
        a = np.zeros((m, k), idt)
        a[:m_real] = a_real
        want = a_real.astype(np.float64) @ b.astype(np.float64).T
        tf32 = idt == "float32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
        ta, tb = torch.from_numpy(a_real).cuda(), torch.from_numpy(b).cuda()
        t_err = rel_err(torch.matmul(ta, tb.T).float().cpu().numpy(), want)
        ref_ms = torch_time(lambda x=ta, y=tb: torch.matmul(x, y.T), args.number, args.repeat)
        flop = 2.0 * m_real * n * k
        print(f"\n{label} x {n}x{k}: cuBLAS{' TF32' if tf32 else ''} {ref_ms:.4f} ms "
              f"({flop / ref_ms / 1e9:.1f} TFLOP/s), rel err {t_err:.1e}", flush=True)
        da, db = array(a, dev), array(b, dev)
        best = None
        for cfg in cfgs:
            try:
                mod, secs = build(m, n, k, idt, odt, cfg)
            except Exception as e:  # a tiling this shape does not allow
                print(f"  {label_of(cfg)}: {type(e).__name__}: {str(e)[:160]}", flush=True)
                continue
            loaded = mod.load(dev)
            c = empty((m, n), odt, dev)
            loaded(da, db, c)
            err = rel_err(c.numpy()[:m_real], want)
            good = err <= tol
            ok_all &= good
            ms = loaded.time_evaluator("main", number=args.number, repeat=args.repeat,
                                       graph=True)(da, db, c).median * 1e3
            print(f"  ours {label_of(cfg)}: {ms:.4f} ms  cuBLAS/ours {ref_ms / ms:.3f}  "
                  f"rel err {err:.1e} {'ok' if good else 'WRONG'}  (compile {secs:.2f} s)",
                  flush=True)
            if good and (best is None or ms < best[0]):
                best = (ms, label_of(cfg))
        if best:
            print(f"best {label}: {best[0]:.4f} ms = {ref_ms / best[0]:.3f}x cuBLAS "
                  f"({ref_ms:.4f} ms) [{best[1]}]", flush=True)
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
