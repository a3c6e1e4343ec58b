"""Fused attention on one GPU against PyTorch's fastest SDPA backend, in one process.

Shapes: batch 1, 16 heads, head dim 128, fp16, sequence lengths 512 to 4096
(``--seqs``), causal and not (``--dtype bfloat16``, ``--heads``, ``--dim``, ``--batch``
for others). Ours: the fused kernel with the default chooser's configuration
(``choose_attention_config``), then each of the ``--configs`` next configurations by its
time estimate (``attention_time``; on sm_90a the chooser takes the wgmma form, and the
best ``mma.sync`` configuration is timed too, and the ``--registers`` best of the wgmma form
with the scores in registers, ``scores="registers"``, with the fastest of each wgmma form
printed; ``--overlap``: every configuration of the overlapped register form,
``overlap="intra"``, and the non-overlapped twin of each; ``--copy-offsets``: each wgmma
configuration again with its copies at constant offsets, ``copy_offsets=True``;
``--pingpong``: every configuration of the ping-pong schedule, ``schedule="pingpong"``,
and the cooperative twin of each). PyTorch:
``scaled_dot_product_attention`` under each backend it has (flash, memory-efficient,
cuDNN, math), the fastest one reported. Every result is checked against the math backend
in float32; times are medians of ``--repeat`` replays of a CUDA graph of ``--number``
launches (CUDA events; ours through the module's ``time_evaluator(graph=True)``), TFLOP/s
with the causal work halved as FlashAttention counts it.

    python3 bench/bench_attention.py [--seqs 512 1024 2048 4096] [--configs 3] [--json out.json]
        [--all] [--combined] [--overlap] [--copy-offsets] [--pingpong]
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import numpy as np


def torch_backends():
    from torch.nn.attention import SDPBackend

    names = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
             "cudnn": "CUDNN_ATTENTION", "math": "MATH"}
    return {k: getattr(SDPBackend, v) for k, v in names.items() if hasattr(SDPBackend, v)}


def event_median(fn, number: int, repeat: int) -> float:
    """Median seconds per call of ``fn`` over ``repeat`` replays of a CUDA graph of
    ``number`` calls, timed by CUDA events (no host launch overhead)."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):  # warm-up (and the backend's workspace) outside the capture
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
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 1e3 / number)
    return float(np.median(times))


def run_one(seq: int, causal: bool, args, dev, target) -> dict:
    import torch
    import torch.nn.functional as F
    from ptxforge.backend_ptx import compile_module, from_dlpack
    from ptxforge.ops.schedules.attention import (
        AttentionWorkload,
        attention_candidates,
        attention_module,
        attention_time,
        choose_attention_config,
    )
    from ptxforge.ops.schedules.attention.knobs import raw_attention_time
    from torch.nn.attention import sdpa_kernel

    dtype = getattr(torch, args.dtype)
    w = AttentionWorkload(args.batch, args.heads, args.heads, seq, seq, args.dim, args.dim,
                          args.dtype, causal)
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(w.shapes()[n], device="cuda", dtype=dtype, generator=g)
               for n in ("q", "k", "v"))
    with sdpa_kernel(torch_backends()["math"]):
        want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                              is_causal=causal)
    row = {"seq": seq, "causal": causal, "flop": w.flops}
    best_torch = None
    for name, backend in torch_backends().items():
        try:
            with sdpa_kernel(backend):
                got = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                t = event_median(lambda b=backend: F.scaled_dot_product_attention(
                    q, k, v, is_causal=causal), args.number, args.repeat)
        except RuntimeError as e:  # a backend that does not take this shape or dtype
            row[f"torch_{name}"] = f"unavailable: {str(e).splitlines()[0][:80]}"
            continue
        err = float((got.float() - want).abs().max())
        row[f"torch_{name}_us"] = t * 1e6
        if name != "math" and (best_torch is None or t < best_torch[1]):
            best_torch = (name, t, err)
    if best_torch is not None:
        row["torch_best"] = best_torch[0]
        row["torch_us"] = best_torch[1] * 1e6
        row["torch_tflops"] = w.flops / best_torch[1] / 1e12
    chosen = choose_attention_config(w, target)
    ranked = sorted((c for c in attention_candidates(w, target) if c != chosen),
                    key=lambda c: attention_time(w, c, target))
    out = torch.empty_like(q)
    ours = []
    configs = [chosen] + (ranked if args.all else ranked[:args.configs])
    if not any(c.mma == "mma_sync" for c in configs):
        # the best mma.sync configuration too, for the wgmma form's gain
        configs += [c for c in ranked if c.mma == "mma_sync"][:1]
    if not args.all:
        # the wgmma form with the scores in registers (untimed so far, so never the
        # default): the default's twin, then its configurations ranked first
        twin = dataclasses.replace(chosen, scores="registers")
        regs = [c for c in ranked if c.scores == "registers"]
        regs = [twin] * (twin in regs) + [c for c in regs if c != twin]
        configs += [c for c in regs if c not in configs][:args.registers]
    if args.overlap and target.has_wgmma:
        from ptxforge.ops.schedules.attention.knobs_wgmma import overlap_candidates

        # the overlapped register form (kept from the chooser until timed) and, for its
        # gain, each one's twin without the overlap
        for c in overlap_candidates(w, target):
            configs += [x for x in (dataclasses.replace(c, overlap="none"), c)
                        if x not in configs]
    if args.pingpong and target.has_wgmma:
        from ptxforge.ops.schedules.attention.knobs_wgmma import pingpong_candidates

        # the ping-pong schedule (kept from the chooser until timed) and, for its gain,
        # each one's cooperative twin
        for c in pingpong_candidates(w, target):
            configs += [x for x in (dataclasses.replace(c, schedule="cooperative"), c)
                        if x not in configs]
    runs = [(cfg, None) for cfg in configs]
    if args.copy_offsets:
        # the wgmma forms with constant-offset copies (fewer registers: the overlapped
        # form has them already), beside each as the calibration timed it
        runs += [(cfg, True) for cfg in configs if cfg.mma == "wgmma" and cfg.overlap == "none"]
    for cfg, offsets in runs:
        loaded = compile_module(attention_module(w, cfg, copy_offsets=offsets),
                                target).load(dev)
        arrays = [from_dlpack(t) for t in (q, k, v, out)]
        loaded(*arrays)
        torch.cuda.synchronize()
        err = float((out.float() - want).abs().max())
        t = loaded.time_evaluator("main", number=args.number, repeat=args.repeat,
                                  graph=True)(*arrays).median
        ours.append({"config": cfg.to_dict(), "us": t * 1e6, "tflops": w.flops / t / 1e12,
                     "max_err": err, "estimate_us": attention_time(w, cfg, target) * 1e6,
                     "raw_estimate_us": raw_attention_time(w, cfg, target) * 1e6,
                     "default": cfg == chosen and offsets is None,
                     **({"copy_offsets": True} if offsets else {})})
    row["ours"] = ours
    if args.combined:
        row["combined"] = run_combined(w, chosen, want, args, dev, target)
    for form in FORMS:
        mine = [o for o in ours if o["config"].get("mma") == "wgmma" and _of_form(o, form)]
        if mine:
            fastest = min(mine, key=lambda o: o["us"])
            row[f"wgmma_{form}_us"] = fastest["us"]
            row[f"wgmma_{form}_config"] = fastest["config"]
    best = min(ours, key=lambda o: o["us"])
    row["ours_us"] = best["us"]
    row["ours_tflops"] = best["tflops"]
    if best_torch is not None:
        row["speedup_vs_torch"] = best_torch[1] * 1e6 / best["us"]
    return row


FORMS = ("shared", "registers", "overlap", "pingpong", "copy_offsets")
"""The wgmma forms whose fastest configuration each row prints."""


def _of_form(o: dict, form: str) -> bool:
    """Whether result ``o`` (a wgmma configuration) is of ``form``: constant-offset copies,
    else the ping-pong schedule, else the overlapped register form, else its scores'."""
    cfg = o["config"]
    if form == "copy_offsets" or o.get("copy_offsets", False):
        return form == "copy_offsets" and o.get("copy_offsets", False)
    if form == "pingpong" or "schedule" in cfg:
        return form == "pingpong" and "schedule" in cfg
    if form == "overlap" or "overlap" in cfg:
        return form == "overlap" and "overlap" in cfg
    return cfg.get("scores", "shared") == form


def run_combined(w, cfg, want, args, dev, target) -> dict:
    """The configuration ``cfg`` reading q, k, v as views of one ``[B * L, 3 H E]`` tensor
    (a combined projection's output, ``layout="bshd"``: ``OperandView``), the output as
    ``[B, L, H, E]``: its time and error against ``want`` (``[B, H, L, E]``)."""
    import dataclasses

    import torch
    from ptxforge.backend_ptx import compile_module, from_dlpack
    from ptxforge.ops.schedules.attention import attention_module
    from ptxforge.ops.schedules.attention.workload import AttentionMask, OperandView

    b, h, seq, e = w.batch, w.heads, w.q_len, w.head_dim
    cols = 3 * h * e
    views = tuple(OperandView(cols, o, (b * seq, cols)) for o in (0, h * e, 2 * h * e))
    wv = dataclasses.replace(w, layout="bshd", views=views)
    g = torch.Generator(device="cuda").manual_seed(0)
    # the same q, k, v as the plain run (the same generator), laid into one tensor
    q, k, v = (torch.randn(w.shapes()[n], device="cuda", dtype=getattr(torch, args.dtype),
                           generator=g) for n in ("q", "k", "v"))
    qkv = torch.cat([x.transpose(1, 2).reshape(b * seq, h * e) for x in (q, k, v)], dim=1)
    out = torch.empty((b, seq, h, e), device="cuda", dtype=q.dtype)
    arrays = [from_dlpack(t) for t in (qkv.contiguous(), out)]
    result = {}
    masked = args.mask != "none" and not w.causal
    sdpa_fn = torch.nn.functional.scaled_dot_product_attention
    for kind in ("none",) + ((args.mask,) if masked else ()):
        mask, ref, wm = None, want, wv
        if kind != "none":
            mask, ref = key_mask(kind, q, k, v)
            wm = dataclasses.replace(wv, mask=AttentionMask(tuple(mask.shape),
                                                            str(mask.dtype)[6:]))
        loaded = compile_module(attention_module(wm, cfg), target).load(dev)
        args_k = [arrays[0]] * 3 + ([from_dlpack(mask)] if mask is not None else []) + [
            arrays[1]]
        loaded(*args_k)
        torch.cuda.synchronize()
        err = float((out.float().transpose(1, 2) - ref).abs().max())
        t = loaded.time_evaluator("main", number=args.number, repeat=args.repeat,
                                  graph=True)(*args_k).median
        one = {"config": cfg.to_dict(), "us": t * 1e6, "tflops": w.flops / t / 1e12,
               "max_err": err}
        if kind == "none":
            result = one
        else:
            # PyTorch's SDPA (its own choice of backend) under the same mask, in q's dtype
            tm = mask if mask.dtype == torch.bool else mask.to(q.dtype)
            one["torch_us"] = event_median(lambda tm=tm: sdpa_fn(q, k, v, attn_mask=tm),
                                           args.number, args.repeat) * 1e6
            result["masked"] = {"mask": kind, **one}
    return result


def key_mask(kind: str, q, k, v):
    """A padding mask over the keys as an imported BERT passes it, ``[B, 1, 1, S]`` (batch
    ``b`` keeps its first ``S - b S / (2 B)`` keys): ``key-f32`` / ``key-f16`` additive
    (``finfo.min`` on the padded keys), ``key-bool`` True where kept; with the float32
    reference of the masked attention (``[B, H, L, E]``)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    b, s = q.shape[0], k.shape[2]
    keep = torch.ones((b, 1, 1, s), dtype=torch.bool, device=q.device)
    for i in range(b):
        keep[i, ..., s - i * s // (2 * b):] = False
    if kind == "key-bool":
        mask = keep
    else:
        dtype = torch.float32 if kind == "key-f32" else torch.float16
        mask = torch.zeros(keep.shape, dtype=dtype, device=q.device)
        mask.masked_fill_(~keep, torch.finfo(dtype).min)
    with sdpa_kernel(torch_backends()["math"]):
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                             attn_mask=keep if kind == "key-bool"
                                             else mask.float())
    return mask.contiguous(), ref


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seqs", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    p.add_argument("--configs", type=int, default=3)
    p.add_argument("--all", action="store_true",
                   help="time every legal configuration (the data to recalibrate the "
                        "estimate: ops/schedules/attention/calibration.py)")
    p.add_argument("--registers", type=int, default=4,
                   help="also time this many configurations of the wgmma form with the "
                        "scores in registers (scores='registers'), best estimates first")
    p.add_argument("--overlap", action="store_true",
                   help="also time every configuration of the overlapped register form "
                        "(overlap='intra': the next tile's Q K^T and the previous tile's "
                        "P V in flight during the softmax) and each one's twin without it")
    p.add_argument("--copy-offsets", action="store_true",
                   help="also time each wgmma configuration (but the overlapped ones, which "
                        "have them) with constant-offset copies (attention_module's "
                        "copy_offsets: the same kernel in 40-80 fewer registers)")
    p.add_argument("--pingpong", action="store_true",
                   help="also time every configuration of the ping-pong schedule "
                        "(schedule='pingpong': two warpgroups issuing their products in "
                        "turns) and the cooperative twin of each")
    p.add_argument("--mask", default="none", choices=("none", "key-f32", "key-f16", "key-bool"),
                   help="with --combined: also time the combined views under a padding "
                        "mask over the keys ([B, 1, 1, S], as an imported BERT passes it)")
    p.add_argument("--combined", action="store_true",
                   help="also time the default configuration reading q, k, v as views of "
                        "one [B*L, 3*H*E] tensor (the slices of a combined projection)")
    p.add_argument("--number", type=int, default=20)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--json", default="")
    args = p.parse_args()

    from ptxforge.backend_ptx import cuda

    dev = cuda(0)
    target = dev.target  # sm_90a on Hopper: the wgmma form is a candidate
    rows = []
    print(f"{'seq':>6} {'causal':>6} {'ours us':>9} {'TFLOP/s':>8} {'torch us':>9} "
          f"{'TFLOP/s':>8} {'backend':>9} {'ratio':>6}  default config")
    for seq in args.seqs:
        for causal in (False, True):
            r = run_one(seq, causal, args, dev, target)
            rows.append(r)
            d = next(o for o in r["ours"] if o["default"])
            print(f"{seq:>6} {str(causal):>6} {r['ours_us']:>9.1f} {r['ours_tflops']:>8.1f} "
                  f"{r.get('torch_us', float('nan')):>9.1f} "
                  f"{r.get('torch_tflops', float('nan')):>8.1f} "
                  f"{r.get('torch_best', '-'):>9} {r.get('speedup_vs_torch', float('nan')):>6.2f}"
                  f"  {d['config']} ({d['us']:.1f} us, err {d['max_err']:.2g})")
            for form in FORMS:
                if f"wgmma_{form}_us" in r:
                    what = {"overlap": "overlap=intra", "copy_offsets": "copy offsets",
                            "pingpong": "schedule=pingpong"}.get(form, f"scores={form}")
                    print(f"{'':>14} wgmma {what}: fastest "
                          f"{r[f'wgmma_{form}_us']:.1f} us {r[f'wgmma_{form}_config']}")
            if "combined" in r:
                c = r["combined"]
                print(f"{'':>14} combined q/k/v views: {c['us']:.1f} us, "
                      f"{c['tflops']:.1f} TFLOP/s, err {c['max_err']:.2g}")
                if "masked" in c:
                    m = c["masked"]
                    print(f"{'':>14} combined, {m['mask']} padding mask: {m['us']:.1f} us, "
                          f"err {m['max_err']:.2g}; PyTorch SDPA with it {m['torch_us']:.1f} us")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev.name if hasattr(dev, "name") else str(dev),
                       "arch": dev.sm, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
