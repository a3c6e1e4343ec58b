"""The persistent wgmma GEMM (``WgmmaScheduleConfig.persistent``) against the same kernels
without it, the default schedule and cuBLAS, fp16 products with their epilogues (issue 26).

Per shape (``MxNxK:epilogue``; epilogues: ``none``, the product cast to fp16; ``f32``, the
product in float32; ``gelu``, bias and exact GELU in float32, cast; ``residual``, bias, cast,
residual add), built for ``cuda -arch=sm_90a`` by ``--jobs`` worker processes:

- ``default``: ``default_schedule`` (the chooser's pick);
- each wgmma configuration of ``--configs`` (``BN,WG,ST,FL,SK,R,STAGED,P``: block_n,
  warpgroups, stages, in_flight, split_k, raster, staged epilogue 0/1, persistent blocks an
  SM) or, without it, a built-in list of candidates (the default's pick and the mid-size
  tiles 128 x 128/192/256, 64 x 128/256), each as given with ``persistent`` 0 and with 1
  and 2 blocks an SM where the rules take them; a persistent kernel both with the next
  tile's prologue before this tile's epilogue and, written ``no-overlap`` (``--overlap``
  to choose), with each tile's prologue in the tile (the pass option
  ``cross_tile_prologue``), so the two effects are told apart;
- cuBLAS: ``torch.nn.functional.linear`` and the epilogue as PyTorch ops, fp16
  (reduced-precision reductions off).

On the GPU each kernel is first checked against PyTorch in float32 on the same inputs, then
graph-timed (``--number`` launches in a CUDA graph, median of ``--repeat`` replays); it
prints per shape cuBLAS and every kernel with cuBLAS/ours, and ``--json`` one line per
kernel. ``--dry-run`` builds without a GPU and prints each kernel's grid, registers and
spills (ptxas).

    python3 bench/bench_gemm_persistent.py --shapes 4096x2304x768,4096x3072x768:gelu,\\
        4096x768x3072:residual,1024x50257x768:f32,1024x2304x768
    python3 bench/bench_gemm_persistent.py --shapes 4096x2304x768 \\
        --configs 128,2,4,1,1,1,0,1 192,2,3,1,1,1,1,1
    python3 bench/bench_gemm_persistent.py --dry-run --shapes 4096x2304x768
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

TARGET = "cuda -arch=sm_90a"
EPILOGUES = ("none", "f32", "gelu", "residual")
TOLERANCE = 1e-2  # of the largest output: fp16 output, fp32 sums
CANDIDATES = (
    # (block_n, warpgroups, stages, in_flight, split_k, raster, staged)
    (128, 2, 4, 1, 1, 1, False),
    (128, 2, 3, 0, 1, 1, False),   # small enough for two blocks an SM
    (192, 2, 3, 1, 1, 1, True),    # the mid-size rule's pick at K = 768
    (192, 2, 4, 1, 1, 1, False),
    (256, 2, 3, 1, 1, 1, False),
    (128, 1, 5, 1, 1, 1, False),   # 64 x 128
    (128, 1, 4, 1, 1, 1, False),   # 64 x 128 of 4 stages: two blocks an SM fit
    (256, 1, 4, 1, 1, 1, False),   # 64 x 256
    (128, 2, 5, 1, 1, 8, False),   # the lm head's order: B read once
)
"""The configurations tried with and without ``persistent`` where ``--configs`` is not
given (those the rules refuse for a shape are left out)."""


def layer(M: int, N: int, K: int, epilogue: str):
    """``(inputs, output, product op)`` of the fp16 layer (see the module doc)."""
    from bench_wgmma_default import layer as fp16_layer
    from ptxforge import ops, te

    if epilogue != "f32":
        return fp16_layer(M, N, K, epilogue)
    x = te.placeholder((M, K), "float16", name="x")
    w = te.placeholder((N, K), "float16", name="w")
    y = ops.nn.dense(x, w, out_dtype="float32")
    prod = next(op for op in te.create_schedule(y.op).dag.ops
                if getattr(op, "reduce_axis", None))
    return [x, w], y, prod


def describe(cfg, overlap: bool = True) -> str:
    if cfg is None:
        return "default"
    return (f"{cfg.block_m}x{cfg.block_n} s{cfg.stages} f{cfg.in_flight}"
            + (f" sk{cfg.split_k}" if cfg.split_k > 1 else "")
            + (f" r{cfg.raster}" if cfg.raster > 1 else "")
            + (" staged" if cfg.staged_epilogue else "")
            + (f" p{cfg.persistent}" if cfg.persistent else "")
            + (" no-overlap" if cfg.persistent and not overlap else ""))


def configs(shape, epilogue: str, given: list) -> list:
    """The wgmma configurations to build for ``shape`` (None: the default schedule)."""
    from ptxforge.ops.schedules.gemm.chooser import wgmma_choice
    from ptxforge.ops.schedules.gemm.forms import gemm_form
    from ptxforge.ops.schedules.gemm.knobs import WgmmaScheduleConfig
    from ptxforge.target import as_target

    if given:
        return [None] + list(given)
    target = as_target(TARGET)
    _, y, prod = layer(*shape, epilogue)
    with target:
        form = gemm_form(prod, target)
        pick = wgmma_choice(prod, None if y.op is prod else y.op, form, target)
    base = [WgmmaScheduleConfig(*c) for c in CANDIDATES]
    if pick is not None and pick not in base:
        base.insert(0, pick)
    out = [None]
    for cfg in base:
        for per_sm in (0, 1, 2):
            out.append(WgmmaScheduleConfig(**{**cfg.__dict__, "persistent": per_sm}))
    return out


def build(job):
    """A build worker: ``(job, compiled module or an error text)``."""
    import warnings

    import ptxforge
    from ptxforge import te
    from ptxforge.backend_ptx import compile_module
    from ptxforge.ir.te import ComputeOp
    from ptxforge.ops.schedules import default_schedule
    from ptxforge.ops.schedules.gemm.schedule import schedule_gemm_wgmma
    from ptxforge.passes import PassContext
    from ptxforge.passes.lower.inject_software_pipeline import CROSS_TILE_OPTION
    from ptxforge.target import as_target

    warnings.simplefilter("ignore")
    shape, epilogue, cfg, overlap = job
    inputs, y, prod = layer(*shape, epilogue)
    target = as_target(TARGET)
    try:
        with target:
            if cfg is None:
                s = default_schedule(y, target)
            else:
                s = te.create_schedule(y.op)
                for op in s.dag.ops:  # what lies between the product and the output
                    if isinstance(op, ComputeOp) and op is not prod and op is not y.op:
                        s[op].compute_inline()
                schedule_gemm_wgmma(s, prod, None if y.op is prod else y.op, cfg, target)
            ctx = PassContext(config={CROSS_TILE_OPTION: overlap})
            return job, compile_module(ptxforge.lower(s, inputs + [y], ctx), target)
    except Exception as e:  # a refused or failing build is reported, never hidden
        return job, f"{type(e).__name__}: {str(e)[:240]}"


def build_all(jobs: list, n_workers: int) -> list:
    """Build ``jobs`` in ``n_workers`` spawned processes (no CUDA context in a fork)."""
    if n_workers <= 1:
        return [build(j) for j in jobs]
    with ProcessPoolExecutor(n_workers, mp_context=multiprocessing.get_context("spawn")) as p:
        return list(p.map(build, jobs, chunksize=2))


def kernel_facts(mod) -> str:
    return "; ".join(
        f"grid {tuple(k.launch.grid)}" + (f" regs {k.resources.registers} spills "
                                          f"{k.resources.spill_store_bytes}"
                                          if k.resources else "")
        for k in mod.kernels.values())


def refused(text: str) -> bool:
    return text.startswith("ScheduleError")


def dry_run(built) -> int:
    bad = 0
    for (shape, epi, cfg, overlap), mod in built:
        name = f"{'x'.join(map(str, shape))}:{epi} {describe(cfg, overlap)}"
        if isinstance(mod, str):
            print(f"{name}: {'refused' if refused(mod) else 'FAILED'}: {mod}")
            bad += not refused(mod)
        else:
            print(f"{name}: {kernel_facts(mod)}")
    return 1 if bad else 0


def torch_layer(th: list, epilogue: str):
    """The layer as PyTorch runs it in fp16 (what cuBLAS is timed on)."""
    import torch

    if epilogue == "f32":
        # cuBLAS's fp16 x fp16 -> fp32 product where this PyTorch has it (torch.mm's
        # out_dtype), else the fp16 product and a cast
        try:
            return torch.mm(th[0], th[1].t(), out_dtype=torch.float32)
        except (TypeError, RuntimeError, NotImplementedError):
            return torch.nn.functional.linear(th[0], th[1]).float()
    z = torch.nn.functional.linear(th[0], th[1], None if epilogue == "none" else th[2])
    if epilogue == "gelu":
        return torch.nn.functional.gelu(z.float()).half()
    return z if epilogue == "none" else z + th[3]


def torch_reference(th: list, epilogue: str):
    """The layer in float32 from the same fp16 inputs."""
    import torch

    z = th[0].float() @ th[1].float().t()
    if epilogue in ("none", "f32"):
        return z
    z = z + th[2].float()
    if epilogue == "gelu":
        return torch.nn.functional.gelu(z)
    return z + th[3].float()


def run_gpu(args, built) -> int:
    import torch
    from bench_tensorcore import torch_time
    from ptxforge.backend_ptx import array, cuda, empty

    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.zeros(1, device="cuda")
    dev = cuda(0)
    dev.activate()
    print(f"device: {dev.name} ({dev.sm}); torch {torch.__version__}", flush=True)
    rng = np.random.default_rng(args.seed)
    out = open(args.json, "w") if args.json else None
    by_shape: dict = {}
    for (shape, epi, cfg, overlap), mod in built:
        by_shape.setdefault((shape, epi), []).append((cfg, overlap, mod))
    ok = True
    for ((M, N, K), epi), entries in by_shape.items():
        inputs, y, _ = layer(M, N, K, epi)
        host = [(rng.standard_normal([int(d) for d in t.shape]) *
                 (0.5 if i == 0 else 1 / math.sqrt(K) if i == 1 else 0.5)).astype(np.float16)
                for i, t in enumerate(inputs)]
        th = [torch.from_numpy(h).cuda() for h in host]
        want = torch_reference(th, epi)
        scale = float(want.abs().max())
        cublas = torch_time(lambda th=th, epi=epi: torch_layer(th, epi), args.number,
                            args.repeat) * 1e3
        flop = 2.0 * M * N * K
        print(f"\n{M}x{N}x{K} {epi}: cuBLAS {cublas:.2f} us "
              f"({flop / cublas / 1e6:.0f} TFLOP/s)", flush=True)
        arrs = [array(h, dev, "float16") for h in host]
        res = empty((M, N), y.dtype, dev)
        for cfg, overlap, mod in entries:
            name = describe(cfg, overlap)
            if isinstance(mod, str):
                if not refused(mod) or cfg is None:
                    print(f"  {name:<30} build failed: {mod}", flush=True)
                    ok = False
                continue
            loaded = mod.load(dev)
            loaded(*arrs, res)
            got = torch.from_numpy(res.numpy().astype(np.float32)).cuda()
            err = float((got - want).abs().max()) / scale
            good = err <= TOLERANCE
            ok &= good
            us = loaded.time_evaluator("main", number=args.number, repeat=args.repeat,
                                       graph=True)(*arrs, res).median * 1e6
            print(f"  {name:<30} {us:8.2f} us  {flop / us / 1e6:5.0f} TFLOP/s  cuBLAS/ours "
                  f"{cublas / us:.3f}  err {err:.1e} {'ok' if good else 'WRONG'}  "
                  f"{kernel_facts(mod)}", flush=True)
            if out:
                out.write(json.dumps({"M": M, "N": N, "K": K, "epilogue": epi,
                                      "config": name, "us": us, "cublas_us": cublas,
                                      "err": err}) + "\n")
            del loaded
    if out:
        out.close()
    return 0 if ok else 1


def shape_list(text: str) -> list:
    """``"4096x768x3072:residual,1024x50257x768:f32"`` -> ``[((M, N, K), epilogue), ...]``."""
    out = []
    for item in text.split(","):
        dims, _, epi = item.strip().partition(":")
        epi = epi or "none"
        parts = dims.lower().split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts) or (
                epi not in EPILOGUES):
            raise argparse.ArgumentTypeError(
                f"--shapes takes MxNxK[:epilogue] items ({', '.join(EPILOGUES)}) separated "
                f"by commas, got {item!r}")
        out.append((tuple(int(p) for p in parts), epi))
    return out


def config(text: str):
    """``"128,2,4,1,1,1,0,1"`` -> a WgmmaScheduleConfig (the staged epilogue as 0/1)."""
    from ptxforge.ops.schedules.gemm.knobs import WgmmaScheduleConfig

    v = [int(x) for x in text.split(",")]
    if len(v) != 8:
        raise argparse.ArgumentTypeError(
            f"--configs takes BN,WG,ST,FL,SK,R,STAGED,P (8 ints), got {text!r}")
    return WgmmaScheduleConfig(*v[:6], bool(v[6]), v[7])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", type=shape_list, required=True)
    p.add_argument("--configs", type=config, nargs="*", default=[])
    p.add_argument("--number", type=int, default=50)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1))
    p.add_argument("--json", default="")
    p.add_argument("--overlap", type=lambda t: [bool(int(v)) for v in t.split(",")],
                   default=[True, False],
                   help="persistent kernels with (1) and without (0) the next tile's "
                        "prologue before this tile's epilogue (default 1,0)")
    p.add_argument("--dry-run", action="store_true")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    jobs = [(shape, epi, cfg, overlap) for shape, epi in args.shapes
            for cfg in configs(shape, epi, args.configs)
            for overlap in (args.overlap if cfg is not None and cfg.persistent else [True])]
    built = build_all(jobs, args.jobs)
    print(f"built {len(jobs)} kernels in {time.perf_counter() - t0:.0f} s", flush=True)
    return dry_run(built) if args.dry_run else run_gpu(args, built)


if __name__ == "__main__":
    sys.exit(main())
