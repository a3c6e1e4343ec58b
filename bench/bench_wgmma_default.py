"""The default schedule of a dense layer with wgmma (sm_90a) against the same layer with
mma.sync and against cuBLAS, on BERT-base's products at batch 1 (and any ``--shape``).

Each shape is the fp16 layer ``y = epilogue(x @ w^T + b)`` as BERT's and GPT-2's fused
functions run it (``--epilogue``: ``none``: the product cast to fp16; ``gelu``: bias, exact
GELU in float32, cast; ``residual``: bias, cast, residual add, BERT's FFN2
``dense_bias_add_cast_cast_add``; ``gelu_tanh``: GPT-2's FFN1
``dense_multiply_cast_cast_power_multiply_add_multiply_tanh_add_multiply``, the tanh GELU in
fp16 with the cube in float32; ``gelu16``: the exact GELU with every step in fp16;
``bias``: the bias alone, GPT-2's QKV ``dense``; ``f32``: the fp16 product cast to float32,
GPT-2's LM head ``dense_cast``), built four ways in one process:

- ``wgmma default``: ``default_schedule`` for ``cuda -arch=sm_90a`` (the chooser's
  wgmma tiles, split-K where it picks it; the row says which);
- ``wgmma BN,WG,ST,FL,SK[,RASTER[,STAGED]]``: ``schedule_gemm_wgmma`` with each
  ``--wgmma-config`` (``raster`` 1 by default, ``staged`` 0 or 1);
- ``mma.sync default``: ``default_schedule`` for ``cuda -arch=sm_90`` (the mma.sync GEMM;
  sm_90 code runs on every Hopper);
- ``cuBLAS``: ``torch.nn.functional.linear`` (+ the epilogue in torch), fp16, reduced
  precision reductions off.

Every kernel is checked against a float64 reference first, then graph-timed
(``--number`` launches in a CUDA graph, median of ``--repeat``). ``--compile-only`` builds
and assembles every kernel without a GPU (launch shapes, registers, spills).

    python3 bench/bench_wgmma_default.py [--shape 128,3072,768 ...] [--epilogue none gelu]
        [--wgmma-config 64,1,4,1,1 ...] [--compile-only]
    python3 bench/bench_wgmma_default.py --shape 1024,3072,768 --epilogue gelu_tanh \
        --wgmma-config 128,1,3,0,1,4 128,2,3,1,1   # GPT-2's FFN1: the rule, the pair
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

BERT_SHAPES = ((128, 2304, 768), (128, 768, 768), (128, 3072, 768), (128, 768, 3072),
               (128, 4096, 4096))
"""(M, N, K): BERT-base's QKV, attention output, FFN1 and FFN2 products at batch 1
(sequence 128), and a square 4096 layer at M = 128."""

EPILOGUES = ("none", "gelu", "residual", "gelu_tanh", "gelu16", "bias", "f32")
"""The ``--epilogue`` choices (see the module doc)."""

SM90A = "cuda -arch=sm_90a"
SM90 = "cuda -arch=sm_90"


def layer(M, N, K, epilogue):
    """``(inputs, output, product op)`` of the fp16 layer (see the module doc)."""
    from ptxforge import ops, te

    def h(v):  # a float16 constant, as the fp16 graphs hold them
        return te.const(v, "float16")

    x = te.placeholder((M, K), "float16", name="x")
    w = te.placeholder((N, K), "float16", name="w")
    args = [x, w]
    if epilogue in ("none", "f32"):
        y = ops.nn.dense(x, w)
        if epilogue == "f32":
            y = ops.cast(y, "float32")
    else:
        b = te.placeholder((N,), "float16", name="b")
        args.append(b)
        if epilogue == "bias":
            y = ops.nn.dense(x, w, b)
        elif epilogue == "gelu":
            z = ops.nn.dense(x, w, ops.cast(b, "float32"), out_dtype="float32")
            g = ops.multiply(z, 0.5)
            e = ops.erf(ops.multiply(z, 0.7071067811865476))
            y = ops.cast(ops.multiply(g, ops.add(e, 1.0)), "float16")
        elif epilogue == "gelu16":
            z = ops.nn.dense(x, w, b)
            e = ops.erf(ops.multiply(z, h(0.7071067811865476)))
            y = ops.multiply(ops.multiply(z, h(0.5)), ops.add(e, h(1.0)))
        elif epilogue == "gelu_tanh":
            z = ops.nn.dense(x, w, b)
            cube = ops.cast(ops.power(ops.cast(z, "float32"), 3.0), "float16")
            t = ops.tanh(ops.multiply(ops.add(z, ops.multiply(cube, h(0.044715))),
                                      h(0.7978845608028654)))
            y = ops.multiply(ops.multiply(z, h(0.5)), ops.add(t, h(1.0)))
        else:
            r = te.placeholder((M, N), "float16", name="r")
            args.append(r)
            y = ops.add(ops.nn.dense(x, w, b), r)
    prod = next(op for op in te.create_schedule(y.op).dag.ops
                if getattr(op, "reduce_axis", None))
    return args, y, prod


def reference(vals, epilogue):
    z = vals[0] @ vals[1].T
    if epilogue in ("none", "f32"):
        return z
    z = z + vals[2]
    if epilogue in ("gelu", "gelu16"):
        from math import erf

        return 0.5 * z * (1 + np.vectorize(erf)(z / np.sqrt(2)))
    if epilogue == "gelu_tanh":
        return 0.5 * z * (1 + np.tanh(0.7978845608028654 * (z + 0.044715 * z ** 3)))
    return z if epilogue == "bias" else z + vals[3]


def build(M, N, K, epilogue, how):
    """(compiled module, description, seconds) for ``how``: ``"wgmma"`` / ``"mma"``
    (default schedules) or a WgmmaScheduleConfig."""
    import ptxforge
    from ptxforge import te
    from ptxforge.backend_ptx import compile_module
    from ptxforge.ir.te import ComputeOp
    from ptxforge.ops.schedules import default_schedule
    from ptxforge.ops.schedules.gemm.chooser import choose_gemm_config, wgmma_choice
    from ptxforge.ops.schedules.gemm.forms import gemm_form
    from ptxforge.ops.schedules.gemm.schedule import schedule_gemm_wgmma
    from ptxforge.target import as_target

    args, y, prod = layer(M, N, K, epilogue)
    target = as_target(SM90 if how == "mma" else SM90A)
    t0 = time.perf_counter()
    with target:
        form = gemm_form(prod, target)
        epi = None if y.op is prod else y.op
        if how in ("wgmma", "mma"):
            s = default_schedule(y, target)
            if how == "wgmma":
                w = wgmma_choice(prod, epi, form, target)
                desc = f"{w}" if w is not None else "mma.sync (the estimate prefers it)"
            else:
                desc = f"{choose_gemm_config(form, target)}"
        else:
            s = te.create_schedule(y.op)
            ops_ = [op for op in s.dag.ops if isinstance(op, ComputeOp)]
            for op in reversed(ops_):
                if op is not prod and op is not y.op:
                    s[op].compute_inline()
            schedule_gemm_wgmma(s, prod, epi, how, target, form)
            desc = f"{how}"
        mod = compile_module(ptxforge.lower(s, args + [y]), target)
    return mod, args, y, desc, time.perf_counter() - t0


def try_build(M, N, K, epilogue, how):
    """:func:`build`, or None (after saying why) for a config that does not fit."""
    from ptxforge.passes.schedule.common import ScheduleError

    try:
        return build(M, N, K, epilogue, how)
    except ScheduleError as e:
        print(f"  {how}: skipped ({e})", flush=True)
        return None


def wgmma_config(text: str):
    """``"BN,WG,ST,FL,SK[,RASTER[,STAGED]]"`` -> :class:`WgmmaScheduleConfig`."""
    from ptxforge.ops.schedules.gemm.knobs import WgmmaScheduleConfig

    v = [int(x) for x in text.split(",")]
    if not 5 <= len(v) <= 7:
        raise SystemExit(f"--wgmma-config takes BN,WG,ST,FL,SK[,RASTER[,STAGED]], got {text!r}")
    return WgmmaScheduleConfig(*v[:6], *(bool(x) for x in v[6:]))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", nargs="*", default=None, help="M,N,K (default: BERT's)")
    p.add_argument("--epilogue", nargs="+", default=["none", "gelu"],
                   choices=list(EPILOGUES))
    p.add_argument("--wgmma-config", nargs="*", default=[],
                   help="block_n,warpgroups,stages,in_flight,split_k")
    p.add_argument("--number", type=int, default=50)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--compile-only", action="store_true")
    args = p.parse_args(argv)
    shapes = ([tuple(int(v) for v in s.split(",")) for s in args.shape] if args.shape
              else BERT_SHAPES)
    configs = [wgmma_config(c) for c in args.wgmma_config]
    ok = True
    if args.compile_only:
        for M, N, K in shapes:
            for epi in args.epilogue:
                for how in ["wgmma", "mma", *configs]:
                    built = try_build(M, N, K, epi, how)
                    if built is None:
                        continue
                    mod, _, _, desc, secs = built
                    kernels = [f"grid {tuple(k.launch.grid)} block {tuple(k.launch.block)}"
                               + (f" regs {k.resources.registers} spills "
                                  f"{k.resources.spill_store_bytes}" if k.resources else "")
                               for k in mod.kernels.values()]
                    print(f"{M}x{N}x{K} {epi} {how if isinstance(how, str) else 'config'}: "
                          f"{desc} ({secs:.2f} s) {'; '.join(kernels)}", flush=True)
        return 0

    import torch
    from bench_tensorcore import torch_time
    from ptxforge.backend_ptx import array, cuda, empty

    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.zeros(1, device="cuda")
    dev = cuda(0)
    dev.activate()
    print(f"device: {dev.name} ({dev.sm}); torch {torch.__version__}", flush=True)
    rng = np.random.default_rng(0)
    for M, N, K in shapes:
        flop = 2.0 * M * N * K
        for epi in args.epilogue:
            targs, y, _ = layer(M, N, K, epi)
            host = [rng.uniform(-1, 1, [int(d) for d in t.shape]).astype(np.float16)
                    for t in targs]
            want = reference([h.astype(np.float64) for h in host], epi)
            th = [torch.from_numpy(h).cuda() for h in host]

            def torch_layer(th=th, epi=epi):
                z = torch.nn.functional.linear(th[0], th[1],
                                               None if epi in ("none", "f32") else th[2])
                if epi == "f32":
                    return z.float()
                if epi == "gelu":
                    return torch.nn.functional.gelu(z.float()).half()
                if epi == "gelu16":
                    return torch.nn.functional.gelu(z)
                if epi == "gelu_tanh":
                    return torch.nn.functional.gelu(z, approximate="tanh")
                return z if epi in ("none", "bias") else z + th[3]

            cublas = torch_time(torch_layer, args.number, args.repeat)
            print(f"\n{M}x{N}x{K} epilogue {epi}: cuBLAS {cublas * 1e3:.2f} us "
                  f"{flop / cublas / 1e9:.1f} TFLOP/s", flush=True)
            for how in ["wgmma", "mma", *configs]:
                label = how if isinstance(how, str) else "wgmma config"
                built = try_build(M, N, K, epi, how)
                if built is None:
                    continue
                mod, _, _, desc, secs = built
                loaded = mod.load(dev)
                arrs = [array(h, dev, "float16") for h in host]
                out = empty((M, N), y.dtype, dev)
                loaded(*arrs, out)
                err = float(np.abs(out.numpy().astype(np.float64) - want).max()
                            / np.abs(want).max())
                good = err < 5e-3
                ok &= good
                ms = loaded.time_evaluator("main", number=args.number, repeat=args.repeat,
                                           graph=True)(*arrs, out).median * 1e3
                print(f"  {label:<14} {ms * 1e3:8.2f} us  {flop / ms / 1e9:6.1f} TFLOP/s  "
                      f"cuBLAS/ours {cublas / ms:.3f}  err {err:.1e} "
                      f"{'ok' if good else 'WRONG'}  {desc} (compile {secs:.1f} s)",
                      flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
