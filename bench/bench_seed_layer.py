"""The seed layer (conv2d 7x7, 512 -> 512, 3x3, pad 1, batch 1, float32, NCHW) on one GPU:
ptxforge's kernels against cuDNN (through PyTorch) in the same run.

Ours: the tutorial's seed schedule and the default schedule (conv + bias + relu), the
AutoTVM template's best config (the convolution alone), optionally the best record of a
tuning log (``--log``), and optionally the next tilings the default schedule's cost model
ranks (``--candidates K``). cuDNN: ``conv2d`` with and without bias + relu, TF32 off,
``cudnn.benchmark`` on.

Both sides are graph-timed: ``--number`` launches captured in one CUDA graph, replayed
``--repeat`` times between CUDA events; the figure is the median time per launch. Every
result is checked against numpy (float64) before it is timed.

    python3 bench/bench_seed_layer.py [--log tuned.json] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict, dataclass

import numpy as np
import ptxforge
from ptxforge import workloads
from ptxforge.backend_ptx import array, compile_module, cuda, empty
from ptxforge.ir.compute_dag import ComputeDAG
from ptxforge.ir.to_ir import to_ir
from ptxforge.ops.schedules import default_schedule, rank_tilings, schedule_tiled
from ptxforge.ops.testing import conv2d_nchw_python
from ptxforge.passes import Pipeline

N, H, W, CO, CI, KH, KW, STRIDE, PAD = workloads.SEED_ARGS
FLOP = 2.0 * N * CO * H * W * CI * KH * KW  # the convolution; bias and relu add 0.2%
FUSED = "conv+bias+relu"
CONV = "conv"


@dataclass
class Row:
    """One timed kernel (or cuDNN call)."""

    name: str
    computation: str
    ms: float
    tflops: float
    max_abs_err: float
    correct: bool
    vs_cudnn: float = float("nan")
    note: str = ""


def check(got: np.ndarray, want: np.ndarray) -> tuple[float, bool]:
    """Max abs error, and whether it is within float32 accumulation error (rtol 1e-3)."""
    err = float(np.abs(got - want).max())
    ok = bool(np.allclose(got, want, rtol=1e-3, atol=1e-4 * max(1.0, float(np.abs(want).max()))))
    return err, ok


def time_ours(loaded, arrays, number: int, repeat: int) -> float:
    timer = loaded.time_evaluator("main", number=number, repeat=repeat, graph=True)
    return timer(*arrays).median * 1e3


@dataclass
class Candidate:
    """One of our kernels: a schedule (or scheduled module) of the seed layer."""

    name: str
    computation: str
    schedule: object
    tensors: list
    note: str = ""


def run_ours(c: Candidate, host, want, dev, args) -> Row:
    """Compile, check and time one of our schedules; ``host`` are the numpy inputs."""
    loaded = compile_module(ptxforge.lower(c.schedule, c.tensors)).load(dev)
    arrays = [array(x, dev) for x in host[:len(c.tensors) - 1]]
    out = empty(c.tensors[-1].shape, "float32", dev)
    loaded(*arrays, out)
    err, ok = check(out.numpy(), want[c.computation])
    ms = time_ours(loaded, arrays + [out], args.number, args.repeat)
    return Row(c.name, c.computation, ms, FLOP / ms / 1e9, err, ok, note=c.note)


def candidates(args) -> list[Candidate]:
    """Our kernels of the seed layer, in the order the table lists them."""
    out = []
    s, tensors, _ = workloads.seed_schedule()
    out.append(Candidate("ptxforge seed schedule", FUSED, s, tensors))
    s, tensors = workloads.conv2d_no_batching_schedule()
    out.append(Candidate("ptxforge AutoTVM best config", CONV, s, tensors))
    data, kernel, bias, relu = workloads.conv2d_layer(*workloads.SEED_ARGS)
    tensors = [data, kernel, bias, relu]
    out.append(Candidate("ptxforge default schedule", FUSED, default_schedule(relu), tensors))
    if args.candidates:
        t_add = relu.op.input_tensors[0].op
        conv = t_add.input_tensors[0].op
        ranked = rank_tilings(conv, count=args.candidates + 1)
        for k, tiling in enumerate(ranked[1:], start=2):
            s = ptxforge.te.create_schedule(relu)
            s[t_add].compute_inline()
            schedule_tiled(s, conv, relu.op, tiling=tiling)
            s[conv.input_tensors[0].op].compute_inline()
            out.append(Candidate(f"ptxforge default, model's choice #{k}", FUSED, s, tensors,
                                 tiling.describe()))
    if args.log:
        module, note = tuned_schedule(args.log, tensors)
        out.append(Candidate("ptxforge tuned (--log)", FUSED, module, tensors, note))
    return out


def tuned_schedule(path: str, tensors):
    """The best record of ``path`` for the seed layer, as a scheduled module."""
    from ptxforge.measure import best_records

    best = best_records(path)
    if not best:
        raise SystemExit(f"{path}: no successful record")
    key = ComputeDAG(tensors).workload_key()
    matching = {k: v for k, v in best.items() if k[0] == key}
    if not matching:
        if len(best) != 1:
            raise SystemExit(f"{path}: no record for the seed layer (key {key}) among "
                             f"{len(best)} workloads")
        matching = best
    inp, res = next(iter(matching.values()))
    module = Pipeline.parse(inp.pipeline_text)(to_ir(tensors))
    return module, f"record {res.mean * 1e3:.4f} ms when tuned"


def torch_rows(host, want_fused, want_conv, args) -> tuple[list[Row], dict]:
    """cuDNN through PyTorch, graph-timed, TF32 off."""
    try:
        import torch
    except ImportError:
        print("PyTorch is not installed: no cuDNN figures", file=sys.stderr)
        return [], {}
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    device = torch.device("cuda", 0)
    x, w, b = (torch.from_numpy(a).to(device) for a in host)
    b1 = b.reshape(-1)

    def fused():
        return torch.relu(torch.nn.functional.conv2d(x, w, b1, STRIDE, PAD))

    def conv():
        return torch.nn.functional.conv2d(x, w, None, STRIDE, PAD)

    rows = []
    for name, computation, fn, want in (("cuDNN conv2d + bias + relu", FUSED, fused, want_fused),
                                        ("cuDNN conv2d", CONV, conv, want_conv)):
        with torch.no_grad():
            for _ in range(10):  # warm-up, and cudnn.benchmark's algorithm search
                out = fn()
            torch.cuda.synchronize()
            err, ok = check(out.cpu().numpy().astype(np.float64), want)
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(3):
                    fn()
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(args.number):
                    fn()
            graph.replay()
            torch.cuda.synchronize()
            times = []
            for _ in range(args.repeat):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                graph.replay()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / args.number)
        ms = statistics.median(times)
        rows.append(Row(name, computation, ms, FLOP / ms / 1e9, err, ok))
    info = {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version()}
    return rows, info


def _json_row(r: Row) -> dict:
    return {k: (None if isinstance(v, float) and np.isnan(v) else v)
            for k, v in asdict(r).items()}


def print_table(rows: list[Row]) -> None:
    head = f"{'kernel':<46} {'computes':<15} {'ms':>9} {'TFLOP/s':>8} {'cuDNN/ours':>10}  check"
    print(head)
    print("-" * len(head))
    for r in rows:
        ratio = "" if np.isnan(r.vs_cudnn) else f"{r.vs_cudnn:.2f}x"
        status = "ok" if r.correct else f"WRONG (max err {r.max_abs_err:.2e})"
        note = f"  [{r.note}]" if r.note else ""
        print(f"{r.name:<46} {r.computation:<15} {r.ms:>9.4f} {r.tflops:>8.2f} {ratio:>10}  "
              f"{status}{note}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--log", help="a tuning record file; its best seed-layer record is timed")
    p.add_argument("--json", help="write the figures to this JSON file")
    p.add_argument("--number", type=int, default=200, help="launches per CUDA graph")
    p.add_argument("--repeat", type=int, default=10, help="timed replays (median taken)")
    p.add_argument("--candidates", type=int, default=0,
                   help="also time the next K tilings the default schedule's model ranks")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--compile-only", action="store_true",
                   help="only compile our kernels and print their resources (no GPU needed)")
    args = p.parse_args(argv)

    ours = candidates(args)
    if args.compile_only:
        for c in ours:
            module = compile_module(ptxforge.lower(c.schedule, c.tensors))
            for k in module.kernels.values():
                print(f"{c.name:<40} {k.launch.grid} x {k.launch.block}: {k.resources}")
        return 0

    dev = cuda(args.device)
    major, minor = dev.compute_capability
    print(f"device: {dev.name} (sm_{major}{minor}, {dev.multiprocessor_count} SMs)")
    print(f"seed layer: {N}x{CI}x{H}x{W} by {CO}x{CI}x{KH}x{KW}, stride {STRIDE}, pad {PAD}, "
          f"{FLOP / 1e6:.1f} MFLOP; graph-timed, median of {args.repeat} x {args.number}\n")

    rng = np.random.default_rng(0)
    shapes = [(N, CI, H, W), (CO, CI, KH, KW), (1, CO, 1, 1)]
    host = [rng.uniform(-1, 1, shape).astype("float32") for shape in shapes]
    host64 = [x.astype(np.float64) for x in host]
    want_conv = conv2d_nchw_python(host64[0], host64[1], STRIDE, PAD)
    want = {CONV: want_conv, FUSED: np.maximum(want_conv + host64[2], 0)}

    rows = [run_ours(c, host, want, dev, args) for c in ours]

    cudnn, info = torch_rows(host, want[FUSED], want[CONV], args)
    by_computation = {r.computation: r.ms for r in cudnn}
    for r in rows:
        if r.computation in by_computation:
            r.vs_cudnn = by_computation[r.computation] / r.ms
    rows += cudnn
    for r in cudnn:
        r.vs_cudnn = 1.0
    print_table(rows)
    if info:
        print(f"\nPyTorch {info['torch']}, cuDNN {info['cudnn']}; cuDNN/ours > 1 means ours "
              "is faster")

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev.name, "sm": f"sm_{major}{minor}",
                       "sms": dev.multiprocessor_count, "flop": FLOP, "number": args.number,
                       "repeat": args.repeat, **info,
                       "rows": [_json_row(r) for r in rows]}, f, indent=2)
        print(f"wrote {args.json}")
    return 0 if all(r.correct for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
