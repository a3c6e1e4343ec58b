"""Networks in mixed precision against PyTorch in the same precision, in one process.

For each network (ResNet-18 at batch 1 and 16, ResNet-50 and MobileNetV2 at batch 1 and 32, the
12-layer BERT-base encoder at seq 128, batch 1), with the same random weights:

- ours: ``graph.build(..., layout="NHWC", precision=--dtype)`` with the default schedules,
  or the records of ``--log`` where it has them, for ``--target`` (default ``cuda``: the
  GPU present; ``"cuda -arch=sm_90"`` keeps an H100/H200's products on mma.sync, where
  sm_90a runs them with wgmma); run as one CUDA graph;
- PyTorch: the same graph as a PyTorch model (``graph.torch_reference.torch_twin``: cuDNN
  convolutions, cuBLAS products) in float32 (TF32 off) as the accuracy reference, and in
  ``--dtype`` with channels_last, timed as a CUDA graph of the eager model and as
  ``torch.compile(mode="reduce-overhead")`` (``--no-compile`` skips the latter, which
  takes minutes to compile).

Accuracy: our output on random inputs against PyTorch float32 (the largest difference, as
a share of the largest output, must be within ``--tolerance``, 1e-2), and for the CNNs the
top-1 agreement with PyTorch float32 over ``--inputs`` random inputs, next to PyTorch
``--dtype``'s own agreement with its float32. The twin itself is first checked against the
numpy reference executor (``--no-check-twin`` skips that; it takes seconds per network).

    python3 bench/bench_network_precision.py [--networks resnet18_b1,bert_b1] \\
        [--dtype float16] [--log tuned.json] [--pad-channels 8] [--no-compile] [--inputs 100]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import numpy as np
import ptxforge
from ptxforge import autosched, graph
from ptxforge.graph.torch_reference import (
    TORCH_DTYPES,
    cuda_graph,
    set_torch_precision,
    time_cuda,
    torch_twin,
)
from ptxforge.graph.zoo.bert import bert_encoder

CASES = {
    "resnet18_b1": ("resnet_v1-18", 1),
    "resnet18_b16": ("resnet_v1-18", 16),
    "resnet50_b1": ("resnet_v1-50", 1),
    "resnet50_b32": ("resnet_v1-50", 32),
    "mobilenetv2_b1": ("mobilenet_v2", 1),
    "mobilenetv2_b32": ("mobilenet_v2", 32),
    "bert_b1": ("bert12", 1),
}


def networks(name: str, batch: int):
    """(ours: graph, params, input shape), (twin: graph, params, input shape), is_cnn.

    CNNs: ours is the zoo's NHWC network, the twin the NCHW one with the same weights
    (HWIO = OIHW transposed), fed the same values in channels_last."""
    if name == "bert12":
        out, params, shape = bert_encoder(batch, "float32", layers=12, seq_len=128)
        net = graph.function(out)
        return (net, params, shape), (net, params, shape), False
    nchw, p_nchw, s_nchw, _ = graph.get_network(name, batch, "NCHW")
    nhwc, p_nhwc, s_nhwc, _ = graph.get_network(name, batch, "NHWC")
    params = {}
    for k, v in p_nchw.items():
        params[k] = v.transpose(2, 3, 1, 0) if v.ndim == 4 else v
        if params[k].shape != p_nhwc[k].shape:
            raise SystemExit(f"{name}: weight {k} has shape {p_nhwc[k].shape} in NHWC but "
                             f"{v.shape} in NCHW")
    return (nhwc, params, s_nhwc), (nchw, p_nchw, s_nchw), True


def to_ours(x_twin: np.ndarray, cnn: bool) -> np.ndarray:
    return np.ascontiguousarray(x_twin.transpose(0, 2, 3, 1)) if cnn else x_twin


def run_ours(module, x: np.ndarray) -> np.ndarray:
    module.set_input("data", x)
    module.run()
    return module.get_output(0).numpy()


def bench_case(torch, case: str, args) -> dict:
    name, batch = CASES[case]
    (net, params, shape), (tnet, tparams, tshape), cnn = networks(name, batch)
    rng = np.random.default_rng(args.seed)
    tdtype = getattr(torch, TORCH_DTYPES[args.dtype])
    row: dict = {"case": case}

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", graph.NoTuningRecordWarning)
        if args.log:
            with autosched.ApplyHistoryBest(args.log):
                lib = graph.build(net, args.target, params, precision=args.dtype,
                                  pad_channels=args.pad_channels)
        else:
            lib = graph.build(net, args.target, params, precision=args.dtype,
                              pad_channels=args.pad_channels)
    tuned = sum(f.tuned for f in lib.functions.values())
    row["compile_s"] = time.perf_counter() - t0
    print(f"[{case}] built in {row['compile_s']:.1f} s: {len(lib.functions)} functions, "
          f"{tuned} from the log", flush=True)
    dev = ptxforge.cuda(0)
    module = graph.GraphModule(lib, dev)

    twin32 = torch_twin(torch, tnet, tparams).cuda()
    twin_lo = torch_twin(torch, tnet, tparams).to(tdtype).cuda()
    if cnn:
        twin32 = twin32.to(memory_format=torch.channels_last)
        twin_lo = twin_lo.to(memory_format=torch.channels_last)

    def torch_in(x, dtype):
        t = torch.from_numpy(x).cuda().to(dtype)
        return t.to(memory_format=torch.channels_last) if cnn else t.contiguous()

    x = rng.standard_normal(tshape).astype("float32")
    with torch.no_grad():
        set_torch_precision(torch, "float32")
        ref32 = twin32(torch_in(x, torch.float32)).float().cpu().numpy()
        if args.check_twin:
            ref_np = graph.evaluate(tnet, {"data": x}, tparams)
            twin_err = float(np.abs(ref32 - ref_np).max() / np.abs(ref_np).max())
            print(f"[{case}] PyTorch twin vs the numpy reference executor: {twin_err:.1e}")
            if twin_err > 1e-3:
                raise SystemExit(f"{case}: the PyTorch twin differs from the graph ({twin_err})")
        ours = run_ours(module, to_ours(x, cnn))
        row["err"] = float(np.abs(ours - ref32).max() / np.abs(ref32).max())
        set_torch_precision(torch, args.dtype)
        lo = twin_lo(torch_in(x, tdtype)).float().cpu().numpy()
        row["torch_err"] = float(np.abs(lo - ref32).max() / np.abs(ref32).max())
        print(f"[{case}] largest difference from PyTorch float32: ours {row['err']:.2e}, "
              f"PyTorch {args.dtype} {row['torch_err']:.2e} (of the largest output; "
              f"tolerance {args.tolerance:g})", flush=True)

        if cnn and args.inputs:
            agree = agree_torch = total = 0
            while total < args.inputs:
                xi = rng.standard_normal(tshape).astype("float32")
                set_torch_precision(torch, "float32")
                top32 = twin32(torch_in(xi, torch.float32)).argmax(-1).cpu().numpy()
                set_torch_precision(torch, args.dtype)
                toplo = twin_lo(torch_in(xi, tdtype)).argmax(-1).cpu().numpy()
                topours = run_ours(module, to_ours(xi, cnn)).argmax(-1)
                agree += int((topours == top32).sum())
                agree_torch += int((toplo == top32).sum())
                total += len(top32)
            row["top1"], row["top1_torch"] = agree / total, agree_torch / total
            print(f"[{case}] top-1 agreement with PyTorch float32 over {total} random inputs: "
                  f"ours {row['top1']:.1%}, PyTorch {args.dtype} {row['top1_torch']:.1%}")

        row["ours_ms"] = module.benchmark(dev, repeat=args.repeat,
                                          min_repeat_ms=args.min_repeat_ms).median * 1e3
        # the same kernels with plain launches: the same bits, the gain of dependent launch
        plain = graph.GraphModule(lib, dev, dependent_launch=False)
        if run_ours(plain, to_ours(x, cnn)).tobytes() != ours.tobytes():
            raise SystemExit(f"{case}: dependent and plain launches give different outputs")
        row["plain_ms"] = plain.benchmark(dev, repeat=args.repeat,
                                          min_repeat_ms=args.min_repeat_ms).median * 1e3
        print(f"[{case}] ours with plain launches (no dependent launch) {row['plain_ms']:.4f} "
              "ms, the same output bits", flush=True)
        del plain
        xt = torch_in(x, tdtype)
        row["graph_ms"] = time_cuda(torch, cuda_graph(torch, lambda: twin_lo(xt)),
                                    args.min_repeat_ms, args.repeat) * 1e3
        print(f"[{case}] ours {row['ours_ms']:.4f} ms, PyTorch {args.dtype} CUDA graph "
              f"{row['graph_ms']:.4f} ms", flush=True)
        if args.compile:
            t0 = time.perf_counter()
            compiled = torch.compile(twin_lo, mode="reduce-overhead")
            for _ in range(5):
                compiled(xt)
            torch.cuda.synchronize()
            print(f"[{case}] torch.compile took {time.perf_counter() - t0:.0f} s", flush=True)
            row["compile_ms"] = time_cuda(torch, lambda: compiled(xt), args.min_repeat_ms,
                                          args.repeat) * 1e3
            print(f"[{case}] torch.compile(reduce-overhead) {row['compile_ms']:.4f} ms",
                  flush=True)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--networks", default=",".join(CASES),
                    help=f"comma-separated cases of {', '.join(CASES)}")
    ap.add_argument("--dtype", choices=("float16", "bfloat16", "tf32", "float32"),
                    default="float16")
    ap.add_argument("--log", default=None, help="tuning records to build with (optional)")
    ap.add_argument("--pad-channels", type=int, default=None,
                    help="the channel multiple of the stem's input (graph.build's "
                         "pad_channels: 4 by default, 8, or 1 for none)")
    ap.add_argument("--target", default="cuda",
                    help="what to build for (default: the GPU present; on an H100/H200 that is "
                         "sm_90a, whose default products run wgmma; 'cuda -arch=sm_90' keeps "
                         "them on mma.sync, for a comparison without --log)")
    ap.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True,
                    help="also time torch.compile(mode='reduce-overhead') (minutes to compile)")
    ap.add_argument("--check-twin", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--inputs", type=int, default=100,
                    help="random inputs for the top-1 agreement (CNNs; 0: skip)")
    ap.add_argument("--tolerance", type=float, default=1e-2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--min-repeat-ms", type=float, default=200.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    cases = [c.strip() for c in args.networks.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        raise SystemExit(f"unknown networks {unknown}; choose from {', '.join(CASES)}")
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("this benchmark needs a CUDA GPU that PyTorch sees")
    print(f"PyTorch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          f"{torch.cuda.get_device_name()}; precision {args.dtype}; "
          f"{'log ' + args.log if args.log else 'default schedules'}", flush=True)
    rows, failed = [], []
    for case in cases:
        try:
            rows.append(bench_case(torch, case, args))
        except Exception as e:  # noqa: BLE001 - report and go on with the other networks
            print(f"[{case}] FAILED: {type(e).__name__}: {e}", flush=True)
            failed.append(case)
    print(f"\n| network | ours {args.dtype} ms | PyTorch CUDA graph ms | ratio | "
          "torch.compile ms | ratio | err vs fp32 (ours / torch) | top-1 (ours / torch) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    bad = []
    for r in rows:
        comp = r.get("compile_ms")
        comp_ratio = f"{comp / r['ours_ms']:.2f}" if comp else ""
        top = (f"{r['top1']:.0%} / {r['top1_torch']:.0%}" if "top1" in r else "")
        print(f"| {r['case']} | {r['ours_ms']:.4f} | {r['graph_ms']:.4f} | "
              f"{r['graph_ms'] / r['ours_ms']:.2f} | "
              f"{f'{comp:.4f}' if comp else 'skipped'} | "
              f"{comp_ratio} | "
              f"{r['err']:.1e} / {r['torch_err']:.1e} | {top} |")
        if r["err"] > args.tolerance:
            bad.append(r["case"])
    print("(ratio: PyTorch time / ours; above 1 means ours is faster)")
    if bad:
        print(f"accuracy out of tolerance: {', '.join(bad)}")
    return 1 if bad or failed else 0


if __name__ == "__main__":
    sys.exit(main())
