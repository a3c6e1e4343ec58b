"""The AutoTVM tensor-core dense template, tuned on this GPU, against cuBLAS in one process.

For each size and dtype: ``dense_tensorcore.cuda`` (``C = A x B^T``, ``A [M, K]``,
``B [N, K]``, float32 sums, the output in the input dtype; ``float32`` means TF32 products)
is tuned for ``--trials`` trials with XGBoost's tuner (random search where xgboost is
missing) and the GPU runner, from an empty log; the best record is rebuilt, checked on
random inputs against PyTorch's float64 product (``WRONG`` and exit status 1 past the
tolerance), then graph-timed (``--number`` launches in one CUDA graph, the median of
``--repeat`` replays) beside ``torch.matmul`` in the same precision (cuBLAS; TF32 allowed
only for the float32 rows, reduced-precision reductions off). The default configuration
(no record) is timed too, and the time per trial (build and measurement) is reported.

    python3 bench/bench_dense_template.py [--size 4096 8192] [--dtype float16 bfloat16 float32]
        [--trials 64] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np
import ptxforge
from ptxforge import autotvm
from ptxforge.autotvm import tensorcore_dense as template
from ptxforge.backend_ptx import compile_module

TOLERANCE = {"float16": 4e-3, "bfloat16": 2e-2, "float32": 5e-3}


def build(args, log, target):
    t0 = time.perf_counter()
    with ptxforge.target.as_target(target):
        if log is None:
            s, tensors = template.dense_tensorcore(*args)
        else:
            with autotvm.apply_history_best(log):
                s, tensors = template.dense_tensorcore(*args)
        mod = compile_module(ptxforge.lower(s, tensors), target)
    return mod, time.perf_counter() - t0


def tune(args, trials, log, target, seed):
    task = autotvm.task.create(template.NAME, args=args, target=target)
    try:
        import xgboost  # noqa: F401

        tuner, kind = autotvm.tuner.XGBTuner(task, seed=seed), "xgb"
    except ImportError:
        tuner, kind = autotvm.tuner.RandomTuner(task, seed=seed), "random"
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(),
                                    runner=autotvm.LocalRunner(number=10, repeat=3,
                                                               timeout=20))
    t0 = time.perf_counter()
    tuner.tune(n_trial=trials, measure_option=option,
               callbacks=[autotvm.callback.log_to_file(log)])
    secs = time.perf_counter() - t0
    return {"tuner": kind, "trials": trials, "seconds": secs, "space": len(task.config_space),
            "best": str(tuner.best_config)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, nargs="+", default=[4096])
    p.add_argument("--dtype", nargs="+", default=["float16"],
                   choices=["float16", "bfloat16", "float32"])
    p.add_argument("--trials", type=int, default=64)
    p.add_argument("--number", type=int, default=20)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json")
    args = p.parse_args(argv)

    import torch
    from bench_tensorcore import torch_time
    from ptxforge.backend_ptx import array, cuda, empty
    from ptxforge.ir import dtype as dt

    dev = cuda(0)
    target = ptxforge.target.as_target("cuda")
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    print(f"device: {dev.name}; torch {torch.__version__}", flush=True)
    rows, ok_all = [], True
    rng = np.random.default_rng(args.seed)
    for size in args.size:
        for dtype in args.dtype:
            targs = (size, size, size, dtype)
            torch.backends.cuda.matmul.allow_tf32 = dtype == "float32"
            a32 = rng.uniform(-1, 1, size=(size, size)).astype(np.float32)
            b32 = rng.uniform(-1, 1, size=(size, size)).astype(np.float32)
            tdt = getattr(torch, dtype)
            ta, tb = (torch.from_numpy(x).cuda().to(tdt) for x in (a32, b32))
            want = (ta.double() @ tb.double().T).cpu().numpy()
            host = [x.float().cpu().numpy() for x in (ta, tb)]  # exact in float32
            cublas_ms = torch_time(lambda: torch.matmul(ta, tb.T), args.number, args.repeat)
            cublas_err = float(np.abs((ta @ tb.T).double().cpu().numpy() - want).max()
                               / np.abs(want).max())
            log = os.path.join(tempfile.mkdtemp(), f"dense_{size}_{dtype}.json")
            info = tune(targs, args.trials, log, target, args.seed) if args.trials else None
            flop = 2.0 * size ** 3
            for kind, rec in (("default", None), ("tuned", log if info else None)):
                if kind == "tuned" and rec is None:
                    continue
                mod, secs = build(targs, rec, target)
                loaded = mod.load(dev)
                arrs = [array(x, dev, dtype) for x in host]
                out = empty((size, size), dtype, dev)
                loaded(*arrs, out)
                got = out.numpy()
                if dtype == "bfloat16" and got.dtype == np.uint16:
                    got = dt.from_bfloat16(got)
                err = float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())
                ok = err <= TOLERANCE[dtype]
                ok_all &= ok
                ms = loaded.time_evaluator("main", number=args.number, repeat=args.repeat,
                                           graph=True)(*arrs, out).median * 1e3
                row = dict(size=size, dtype=dtype, kind=kind, ms=ms, tflops=flop / ms / 1e9,
                           cublas_ms=cublas_ms, ratio=cublas_ms / ms, rel_err=err,
                           cublas_rel_err=cublas_err, correct=ok, compile_s=secs,
                           tuning=info if kind == "tuned" else None)
                rows.append(row)
                extra = ""
                if kind == "tuned":
                    extra = (f"; {info['trials']} trials ({info['tuner']}) in "
                             f"{info['seconds']:.0f} s, {info['seconds'] / info['trials']:.2f} "
                             f"s/trial, best {info['best']}")
                print(f"{size}^3 {dtype:9s} {kind:8s} ours {ms:.4f} ms ({row['tflops']:6.1f} "
                      f"TFLOP/s)  cuBLAS {cublas_ms:.4f} ms  cuBLAS/ours {cublas_ms / ms:.3f}"
                      f"  rel err {err:.1e} {'ok' if ok else 'WRONG'} (cuBLAS "
                      f"{cublas_err:.1e}; compile {secs:.2f} s){extra}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev.name, "results": rows}, f, indent=1)
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
