"""The default tensor-core GEMM chooser against measurements of every configuration.

``measure`` (needs a GPU) builds every configuration the default chooser ranks
(:func:`~ptxforge.ops.schedules.gemm.chooser.gemm_candidates`) plus the other stage
counts of each, for each product (fp16 in, fp32 accumulation, fp16 out), checks each on
random inputs against a float64 reference, times it (CUDA graph of ``--number`` launches,
median of ``--repeat``) next to cuBLAS (``torch.matmul``) in the same process, and writes
one JSON line per configuration to ``--out``, as soon as it is measured.

``evaluate`` (no GPU) reads such a file and prints, per product, cuBLAS, the fastest
measured configuration, the chooser's pick on the target of ``--target`` and its measured
time, and the geometric mean of pick / fastest: how far the chooser is from the best of
its own candidates. ``bench/results/gemm_chooser_sweep_h200.jsonl`` holds the H200
measurements the chooser's figures (``gemm_time``) were fitted to.

    python3 bench/calibrate_gemm_chooser.py measure --out sweep.jsonl [--shapes 128x768x768,...]
    python3 bench/calibrate_gemm_chooser.py evaluate bench/results/gemm_chooser_sweep_h200.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import defaultdict

import numpy as np

SHAPES = ((16, 4096, 4096), (128, 4096, 4096), (128, 2304, 768), (128, 768, 768),
          (128, 3072, 768), (128, 768, 3072), (512, 768, 768), (256, 1024, 4096))
"""Small-M inference products: BERT-base's layers at batch 1 (seq 128) and the anchors'
M = 16 and 128 of 4096^2."""

TARGET = "cuda -arch=sm_90a"


def _form(M, N, K, target):
    from ptxforge.autotvm.tensorcore_dense import dense_declaration
    from ptxforge.ops.schedules.gemm.forms import gemm_form

    data, weight, out, prod = dense_declaration(M, N, K, "float16", "float16")
    return (data, weight, out, prod), gemm_form(prod, target)


def key_of(cfg) -> tuple:
    return (cfg.block_m, cfg.block_n, cfg.block_k, cfg.warps_m, cfg.warps_n, cfg.stages,
            cfg.split_k, cfg.vec)


def _row_key(r: dict) -> tuple:
    return (r["bm"], r["bn"], r["bk"], r["wm"], r["wn"], r["stages"], r["split"], r["vec"])


def configs(M, N, K, target=TARGET) -> list:
    """The chooser's candidates and each at every other legal stage count (2 to 4)."""
    from dataclasses import replace

    from ptxforge.ops.schedules.gemm.chooser import gemm_candidates
    from ptxforge.ops.schedules.gemm.rules import check_gemm_config
    from ptxforge.passes.schedule.common import ScheduleError

    _, form = _form(M, N, K, target)
    seen = {}
    for c in gemm_candidates(form, target):
        for st in (c.stages, 2, 3, 4):
            v = replace(c, stages=st)
            try:
                check_gemm_config(v, form, target=target)
            except ScheduleError:
                continue
            seen.setdefault(key_of(v), v)
    return list(seen.values())


def _build(args):
    M, N, K, cfg, target = args
    import ptxforge
    from ptxforge import te
    from ptxforge.backend_ptx import compile_module
    from ptxforge.ops.schedules.gemm.schedule import schedule_gemm_tensorcore

    (data, weight, out, prod), _ = _form(M, N, K, target)
    s = te.create_schedule(out.op)
    try:
        schedule_gemm_tensorcore(s, prod, out.op if out.op is not prod else None, cfg=cfg,
                                 target=target)
        return compile_module(ptxforge.lower(s, [data, weight, out]), target), None
    except Exception as e:  # reported in the row
        return None, f"{type(e).__name__}: {str(e)[:200]}"


def _cublas_us(a, b, number, repeat) -> float:
    import torch

    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for _ in range(3):
            torch.matmul(a, b.T)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(number):
            torch.matmul(a, b.T)
    times = []
    for _ in range(repeat):
        e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
        e0.record()
        g.replay()
        e1.record()
        torch.cuda.synchronize()
        times.append(e0.elapsed_time(e1) * 1e3 / number)
    return float(np.median(times))


def measure(args) -> int:
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    import torch
    from ptxforge.backend_ptx import array, cuda, empty

    dev = cuda(0)
    print(f"device: {dev.name}; torch {torch.__version__}", flush=True)
    bad = 0
    with open(args.out, "w") as out, ProcessPoolExecutor(
            args.jobs, mp_context=mp.get_context("spawn")) as ex:
        for M, N, K in args.shapes:
            cands = configs(M, N, K, args.target)
            t0 = time.time()
            mods = list(ex.map(_build, [(M, N, K, c, args.target) for c in cands]))
            print(f"{M}x{N}x{K}: {len(cands)} configurations built in "
                  f"{time.time() - t0:.1f} s", flush=True)
            rng = np.random.default_rng(0)
            a = rng.uniform(-1, 1, (M, K)).astype("float16")
            b = rng.uniform(-1, 1, (N, K)).astype("float16")
            want = a.astype(np.float64) @ b.astype(np.float64).T
            ref = _cublas_us(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(),
                             args.number, args.repeat)
            da, db = array(a, dev), array(b, dev)
            for cfg, (mod, err) in zip(cands, mods):
                row = dict(zip(("bm", "bn", "bk", "wm", "wn", "stages", "split", "vec"),
                               key_of(cfg)))
                row = dict(M=M, N=N, K=K, **row, cublas_us=round(ref, 3))
                if mod is None:
                    row["error"] = err
                else:
                    lm = mod.load(dev)
                    c = empty((M, N), "float16", dev)
                    lm(da, db, c)
                    rel = float(np.abs(c.numpy().astype(np.float64) - want).max()
                                / np.abs(want).max())
                    row["rel_err"] = float(f"{rel:.2e}")
                    if rel > 3e-3:
                        row["error"] = "WRONG"
                        bad += 1
                    else:
                        t = lm.time_evaluator("main", number=args.number, repeat=args.repeat,
                                              graph=True)(da, db, c)
                        row["us"] = round(t.median * 1e6, 3)
                out.write(json.dumps(row, separators=(",", ":")) + "\n")
                out.flush()
            print(f"  cuBLAS {ref:.2f} us", flush=True)
    return 1 if bad else 0


def evaluate(path: str, target: str = TARGET, quiet: bool = False) -> float:
    """Print the chooser's picks against the measurements in ``path``; return the
    geometric mean of pick / fastest over the products whose pick was measured."""
    from ptxforge.ops.schedules.gemm.chooser import choose_gemm_config

    by = defaultdict(dict)
    cublas = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if "us" in r:
                by[(r["M"], r["N"], r["K"])][_row_key(r)] = r["us"]
                cublas[(r["M"], r["N"], r["K"])] = r["cublas_us"]
    logs = []
    if not quiet:
        print("| product | cuBLAS us | fastest measured us | default pick | its time us |"
              " pick / fastest |")
        print("| --- | --- | --- | --- | --- | --- |")
    for shape, meas in by.items():
        _, form = _form(*shape, target)
        pick = choose_gemm_config(form, target)
        fastest = min(meas.values())
        got = meas.get(key_of(pick))
        if got is not None:
            logs.append(math.log(got / fastest))
        if not quiet:
            label = (f"{pick.block_m}x{pick.block_n}x{pick.block_k} warps "
                     f"{pick.warps_m}x{pick.warps_n}, {pick.stages} stages"
                     + (f", {pick.split_k} parts" if pick.split_k > 1 else ""))
            print(f"| {'x'.join(map(str, shape))} | {cublas[shape]:.2f} | {fastest:.2f} | "
                  f"{label} | {'not measured' if got is None else f'{got:.2f}'} | "
                  f"{'' if got is None else f'{got / fastest:.2f}x'} |")
    gm = math.exp(sum(logs) / len(logs)) if logs else float("nan")
    if not quiet:
        print(f"geometric mean of pick / fastest: {gm:.3f} over {len(logs)} of {len(by)} "
              "products")
    return gm


def _shapes(text: str):
    return tuple(tuple(int(x) for x in s.split("x")) for s in text.split(","))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="time every configuration (GPU)")
    m.add_argument("--out", required=True)
    m.add_argument("--shapes", type=_shapes, default=SHAPES)
    m.add_argument("--target", default=TARGET)
    m.add_argument("--number", type=int, default=30)
    m.add_argument("--repeat", type=int, default=7)
    m.add_argument("--jobs", type=int, default=8, help="parallel builds")
    e = sub.add_parser("evaluate", help="the chooser's picks against a measurement file")
    e.add_argument("path")
    e.add_argument("--target", default=TARGET)
    args = p.parse_args(argv)
    if args.cmd == "measure":
        return measure(args)
    evaluate(args.path, args.target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
