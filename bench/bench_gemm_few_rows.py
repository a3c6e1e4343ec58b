"""A sweep of the few-row fp16 products over the legal tensor-core configurations, against
cuBLAS, for fitting the default chooser (issue 26, item 3).

Shapes: ``y[M, N] = fp16(x[M, K] @ w[N, K]^T)`` for M in 1, 8, 16, 32, 64, 128, 256 and N, K
in 768, 3072, 4096 (``--m``, ``--nk`` to narrow); ``--epilogue bias`` adds a bias first
(``fp16(x @ w^T + b)``: a fused epilogue, which goes through the shared C tile);
``--epilogue f32`` casts the fp16 product to float32 (``f32(fp16(x @ w^T))``: GPT-2's LM
head as its ONNX graph computes it, logits in float32; cuBLAS then runs ``linear`` and the
cast). Per
shape, built for ``cuda -arch=sm_90a`` by ``--jobs`` worker processes and then, on the
GPU, checked against a float64 reference and graph-timed (``--number`` launches in a CUDA
graph, median of ``--repeat`` replays):

- ``default``: ``default_schedule`` (the chooser's pick, wgmma or mma.sync);
- ``wgmma``: every ``block_n`` (the knob space's and ``--block-n``, e.g. 192) x
  ``warpgroups`` x ``stages`` (``--stages``) x groups in flight from 3 stages
  (``--in-flight``, 1 by default) x ``split_k`` (``--splits``) x block order (``--raster``,
  1 by default: groups of row blocks, written ``r8`` after the config) x epilogue
  (``--staged``: 1 stores through the shared C tile where the fragments could go straight
  to the output, written ``staged``) the rules allow (``wgmma_rules``); one group covering
  all row blocks is built only where B exceeds the L2 (elsewhere the order of raster 1
  turned; where B does not stay in the L2 it reads B once instead of once a row block);
- ``mma``: the ``--top-mma`` candidates of the mma.sync chooser (``gemm_candidates``) that
  its estimate ranks first;
- ``cuBLAS``: ``torch.nn.functional.linear`` in fp16 (reduced-precision reductions off).

It prints per shape cuBLAS, the default and the best measured configuration with
cuBLAS/ours, and the estimate's own pick among what was measured; ``--json`` writes one
line per measured kernel (shape, kind, knobs, microseconds, the estimate in microseconds)
for fitting the estimates. The default sweep builds about 2,600 kernels: about 4 minutes on
an H100 host with 16 build workers.

    python3 bench/bench_gemm_few_rows.py [--m 1,8,16,32,64,128,256] [--nk 768,3072,4096]
        [--stages 3,4,5] [--splits 1,2,4,8] [--top-mma 8] [--json sweep.jsonl]
    python3 bench/bench_gemm_few_rows.py --shapes 4096x2304x768,1024x50257x768  # exact shapes
    python3 bench/bench_gemm_few_rows.py --shapes ... --block-n 192 --in-flight 0,1 \\
        --raster 1,8 --staged 0,1   # the mid-size kernel's knobs: 192-wide tiles,
        # block order, waits, staged epilogue
    python3 bench/bench_gemm_few_rows.py --shapes 1024x50257x768 --epilogue f32 --splits 1 \
        --in-flight 0,1 --raster 1,2,4,8,16   # GPT-2's LM head, float32 logits
    python3 bench/bench_gemm_few_rows.py --dry-run --m 16,128 --nk 768   # no GPU: builds
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

TARGET = "cuda -arch=sm_90a"
TOLERANCE = 1e-2  # of the largest output: fp16 output, fp32 sums


def layer(M: int, N: int, K: int):
    """``(x, w, y, product op, form)`` of the fp16 product cast to fp16."""
    (x, w), y, prod, form = layer_args(M, N, K)
    return x, w, y, prod, form


def layer_args(M: int, N: int, K: int, epilogue: str = "none"):
    """``(inputs, y, product op, form)`` of the fp16 product cast to fp16, with a bias
    added first where ``epilogue`` is ``"bias"`` (a fused epilogue: the C tile), then cast
    to float32 where it is ``"f32"``."""
    from ptxforge import ops, te
    from ptxforge.ops.schedules.gemm.forms import gemm_form

    if epilogue not in EPILOGUES:
        raise ValueError(f"epilogue is one of {EPILOGUES}, got {epilogue!r}")
    x = te.placeholder((M, K), "float16", name="x")
    w = te.placeholder((N, K), "float16", name="w")
    b = te.placeholder((N,), "float16", name="b") if epilogue == "bias" else None
    y = ops.nn.dense(x, w, b)
    if epilogue == "f32":
        y = ops.cast(y, "float32")
    prod = next(op for op in te.create_schedule(y.op).dag.ops
                if getattr(op, "reduce_axis", None))
    return [x, w] + ([b] if b is not None else []), y, prod, gemm_form(prod, TARGET)


EPILOGUES = ("none", "bias", "f32")


def configs(M: int, N: int, K: int, args) -> list:
    """``[(kind, knobs or None, estimate seconds)]`` of the sweep for one shape."""
    from ptxforge.ops.schedules.gemm.chooser import gemm_candidates
    from ptxforge.ops.schedules.gemm.estimate import gemm_time, wgmma_time
    from ptxforge.ops.schedules.gemm.forms import direct_store
    from ptxforge.ops.schedules.gemm.knobs import WgmmaScheduleConfig, wgmma_choices
    from ptxforge.ops.schedules.gemm.rules import first_broken, needs_c_tile, wgmma_rules
    from ptxforge.target import as_target

    _, y, prod, form = layer_args(M, N, K, getattr(args, "epilogue", "none"))
    epi_tile = not direct_store(prod, None if y.op is prod else y.op, form)
    b_in_l2 = N * K * form.elem_bytes <= as_target(TARGET).l2_bytes
    out = [("default", None, float("nan"))]
    ch = wgmma_choices(form)
    widths = ch["block_n"] + tuple(n for n in args.block_n if n not in ch["block_n"]
                                   and n <= max(ch["block_n"]))
    for bn, wg, st, sk, fl, ras, staged in itertools.product(
            widths, ch["warpgroups"], args.stages, args.splits, args.in_flight, args.raster,
            args.staged):
        if st not in ch["stages"] or sk not in ch["split_k"]:
            continue
        cfg = WgmmaScheduleConfig(bn, wg, st, fl if st >= 3 else 0, sk, ras, bool(staged))
        if staged and needs_c_tile(WgmmaScheduleConfig(bn, wg, st, 0, sk), form, epi_tile):
            continue  # the C tile is there anyway: the same kernel
        if ras > 1 and -(-M // cfg.block_m) <= ras and b_in_l2:
            continue  # one group covers every row block: the order of raster 1 transposed
        c_tile = needs_c_tile(cfg, form, epi_tile)
        if first_broken(wgmma_rules(cfg, form, TARGET, c_tile)) is None:
            out.append(("wgmma", cfg, wgmma_time(cfg, form, TARGET, c_tile)))
    mma = sorted(((gemm_time(c, form, TARGET), c) for c in gemm_candidates(form, TARGET)),
                 key=lambda x: x[0])[:args.top_mma]
    out += [("mma", c, t) for t, c in mma]
    return out


def describe(kind: str, cfg) -> str:
    if cfg is None:
        return kind
    if kind == "wgmma":
        return (f"wgmma {cfg.block_m}x{cfg.block_n} s{cfg.stages} f{cfg.in_flight} "
                f"sk{cfg.split_k}" + (f" r{cfg.raster}" if cfg.raster > 1 else "")
                + (" staged" if cfg.staged_epilogue else ""))
    return (f"mma {cfg.block_m}x{cfg.block_n}x{cfg.block_k} w{cfg.warps_m}x{cfg.warps_n} "
            f"s{cfg.stages} sk{cfg.split_k}")


def build(job):
    """A build worker: ``(job, compiled module or an error text, description)``."""
    import warnings

    import ptxforge
    from ptxforge import te
    from ptxforge.backend_ptx import compile_module
    from ptxforge.ir.te import ComputeOp
    from ptxforge.ops.schedules import default_schedule
    from ptxforge.ops.schedules.gemm.chooser import choose_gemm_config, wgmma_choice
    from ptxforge.ops.schedules.gemm.schedule import schedule_gemm_tensorcore, schedule_gemm_wgmma
    from ptxforge.target import as_target

    warnings.simplefilter("ignore")
    (M, N, K), kind, cfg, *epilogue = job
    inputs, y, prod, form = layer_args(M, N, K, *epilogue)
    target = as_target(TARGET)
    epi = None if y.op is prod else y.op
    try:
        with target:
            if kind == "default":
                s = default_schedule(y, target)
                wc = wgmma_choice(prod, epi, form, target)
                desc = ("default " + describe("wgmma", wc) if wc is not None else
                        "default " + describe("mma", choose_gemm_config(form, target)))
            else:
                s = te.create_schedule(y.op)
                for op in s.dag.ops:  # what lies between the product and the output
                    if isinstance(op, ComputeOp) and op is not prod and op is not y.op:
                        s[op].compute_inline()
                (schedule_gemm_wgmma if kind == "wgmma" else schedule_gemm_tensorcore)(
                    s, prod, epi, cfg, target=target, form=form)
                desc = describe(kind, cfg)
            return job, compile_module(ptxforge.lower(s, inputs + [y]), target), desc
    except Exception as e:  # a refused or failing build is reported, never hidden
        return job, f"{type(e).__name__}: {str(e)[:200]}", describe(kind, cfg)


def build_all(jobs: list, n_workers: int):
    """Build ``jobs`` in ``n_workers`` spawned processes (a forked child of a process
    holding a CUDA context must not use CUDA), in order."""
    if n_workers <= 1:
        return [build(j) for j in jobs]
    with ProcessPoolExecutor(n_workers, mp_context=multiprocessing.get_context("spawn")) as p:
        return list(p.map(build, jobs, chunksize=4))


def shapes(args) -> list:
    if args.shapes:
        return args.shapes
    return [(m, n, k) for m in args.m for n in args.nk for k in args.nk]


def all_jobs(args) -> tuple[list, dict]:
    estimates, jobs = {}, []
    for shape in shapes(args):
        for kind, cfg, est in configs(*shape, args):
            jobs.append((shape, kind, cfg, args.epilogue))
            estimates[(shape, kind, cfg)] = est
    return jobs, estimates


def geomean(xs) -> float:
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def dry_run(args) -> int:
    t0 = time.perf_counter()
    jobs, _ = all_jobs(args)
    built = build_all(jobs, args.jobs)
    bad = [(j, m) for j, m, _ in built if isinstance(m, str)]
    for (shape, kind, cfg, _), m in bad:
        print(f"  {shape} {describe(kind, cfg)}: {m}")
    print(f"{len(jobs)} kernels over {len(shapes(args))} shapes, {len(bad)} failed; "
          f"{time.perf_counter() - t0:.0f} s")
    return 1 if bad else 0


def run_gpu(args) -> int:
    import torch
    from bench_tensorcore import torch_time
    from ptxforge.backend_ptx import array, cuda, empty

    t0 = time.perf_counter()
    jobs, estimates = all_jobs(args)
    built = build_all(jobs, args.jobs)
    print(f"built {len(jobs)} kernels over {len(shapes(args))} shapes in "
          f"{time.perf_counter() - t0:.0f} s", flush=True)
    dev = cuda(0)
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    print(f"device: {dev.name}; torch {torch.__version__}", flush=True)
    by_shape: dict = {}
    for job, mod, desc in built:
        by_shape.setdefault(job[0], []).append((job, mod, desc))
    rng = np.random.default_rng(args.seed)
    out = open(args.json, "w") if args.json else None
    ok, ratios_default, ratios_best = True, [], []
    for (M, N, K), entries in by_shape.items():
        xh = (rng.standard_normal((M, K)) * 0.5).astype(np.float16)
        wh = (rng.standard_normal((N, K)) / np.sqrt(K)).astype(np.float16)
        want = xh.astype(np.float64) @ wh.astype(np.float64).T
        tx, tw = torch.from_numpy(xh).cuda(), torch.from_numpy(wh).cuda()
        tb, bias, f32 = None, [], args.epilogue == "f32"
        if args.epilogue == "bias":
            bh = rng.standard_normal(N).astype(np.float16)
            want = want + bh.astype(np.float64)
            tb, bias = torch.from_numpy(bh).cuda(), [array(bh, dev)]
        def torch_layer(tx=tx, tw=tw, tb=tb, f32=f32):
            z = torch.nn.functional.linear(tx, tw, tb)
            return z.float() if f32 else z

        cublas = torch_time(torch_layer, args.number, args.repeat) * 1e3
        xd, wd = array(xh, dev), array(wh, dev)
        yd = empty((M, N), "float32" if f32 else "float16", dev)
        rows = []
        for (shape, kind, cfg, _), mod, desc in entries:
            if isinstance(mod, str):
                print(f"  {M}x{N}x{K} {desc}: build failed: {mod}", flush=True)
                ok &= kind != "default"
                continue
            loaded = mod.load(dev)
            loaded(xd, wd, *bias, yd)
            got = yd.numpy().astype(np.float64)
            err = float(np.abs(got - want).max() / np.abs(want).max())
            us = loaded.time_evaluator("main", number=args.number, repeat=args.repeat,
                                       graph=True)(xd, wd, *bias, yd).median * 1e6
            est = estimates[(shape, kind, cfg)] * 1e6
            rows.append((us, kind, desc, est, err))
            ok &= err <= TOLERANCE
            if out:
                out.write(json.dumps({"M": M, "N": N, "K": K, "epilogue": args.epilogue,
                                      "kind": kind, "config": desc,
                                      "us": us, "estimate_us": est, "err": err,
                                      "cublas_us": cublas}) + "\n")
            del loaded
        if not rows:
            continue
        default = next((r for r in rows if r[1] == "default"), (math.nan, "", "default ?"))
        best = min(rows, key=lambda r: r[0])
        ranked = [r for r in rows if r[1] != "default" and math.isfinite(r[3])]
        est_pick = min(ranked, key=lambda r: r[3]) if ranked else default
        ratios_default.append(cublas / default[0])
        ratios_best.append(cublas / best[0])
        print(f"{M:4d}x{N:4d}x{K:4d} cuBLAS {cublas:7.2f} us | {default[2]:34s} "
              f"{default[0]:7.2f} us {cublas / default[0]:.3f} | best {best[2]:34s} "
              f"{best[0]:7.2f} us {cublas / best[0]:.3f} | estimate's pick {est_pick[2]} "
              f"{est_pick[0]:.2f} us | {len(rows)} kernels"
              f"{'' if all(r[4] <= TOLERANCE for r in rows) else '  WRONG'}", flush=True)
    if out:
        out.close()
    print(f"cuBLAS/ours, geometric mean over {len(ratios_default)} shapes: default "
          f"{geomean(ratios_default):.3f} ({sum(r >= 0.9 for r in ratios_default)} at 0.9 or "
          f"more), best measured {geomean(ratios_best):.3f} "
          f"({sum(r >= 0.9 for r in ratios_best)}); {time.perf_counter() - t0:.0f} s in all")
    return 0 if ok else 1


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def shape_list(text: str) -> list[tuple[int, int, int]]:
    """``"4096x768x3072,1024x50257x768"`` -> ``[(M, N, K), ...]``."""
    out = []
    for item in text.split(","):
        dims = item.strip().lower().split("x")
        if len(dims) != 3 or not all(d.isdigit() and int(d) > 0 for d in dims):
            raise argparse.ArgumentTypeError(
                f"--shapes takes MxNxK items separated by commas, got {item!r}")
        out.append(tuple(int(d) for d in dims))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--m", type=ints, default=[1, 8, 16, 32, 64, 128, 256])
    p.add_argument("--nk", type=ints, default=[768, 3072, 4096])
    p.add_argument("--shapes", type=shape_list, default=None,
                   help="exact MxNxK shapes, comma-separated (instead of --m x --nk x --nk)")
    p.add_argument("--stages", type=ints, default=[3, 4, 5])
    p.add_argument("--splits", type=ints, default=[1, 2, 4, 8])
    p.add_argument("--block-n", type=ints, default=[],
                   help="wgmma widths besides the knob space's (192: 128 x 192 tiles)")
    p.add_argument("--in-flight", type=ints, default=[1],
                   help="wgmma groups in flight from 3 stages (0,1: both)")
    p.add_argument("--raster", type=ints, default=[1],
                   help="block orders: 1, or groups of that many row blocks (1,8: both)")
    p.add_argument("--staged", type=ints, default=[0],
                   help="wgmma epilogues: 0 as the default stores, 1 through the shared C "
                        "tile with row-wise stores (0,1: both)")
    p.add_argument("--epilogue", choices=EPILOGUES, default="none",
                   help="none: the cast only; bias: a bias added first (the fused "
                        "epilogue over the shared C tile), cuBLAS with its bias; f32: the "
                        "fp16 output cast to float32 (an LM head's logits), cuBLAS + cast")
    p.add_argument("--top-mma", type=int, default=8)
    p.add_argument("--number", type=int, default=20)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1))
    p.add_argument("--json")
    p.add_argument("--dry-run", action="store_true", help="no GPU: build every kernel")
    args = p.parse_args(argv)
    return dry_run(args) if args.dry_run else run_gpu(args)


if __name__ == "__main__":
    sys.exit(main())
