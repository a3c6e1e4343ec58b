"""Row-wise normalizations (layer norm, RMS norm, softmax) over their schedule knobs, in a
network's precision: what the default picks against every thread count, with and without
16-byte vectors, and PyTorch's kernel for the same op in the same process.

Each case is one fused function of a graph as the network build lowers it (``x`` of
``rows x cols`` in ``--dtype``, its weights, the output in ``--out-dtype``, by default
``--dtype``), taken as the
auto-scheduler's task (``autosched.extract_tasks``). Per case:

- ``default``: :func:`~ptxforge.graph.build_module.fused_rows_choice` (the scalar
  schedule, at most 8 elements a thread);
- ``vec T u``: 16-byte vectors (``schedule_rows``) with ``T`` threads a row, unrolled or
  not, for every thread count up to the row's vectors;
- ``scalar T u``: the ``fused_rows`` sketch's schedule (one element a thread at a time),
  which the tuner searches;
- ``torch``: ``torch.nn.functional.layer_norm`` / ``rms_norm`` / ``softmax`` on the same
  inputs (the eager kernel, graph-timed).

Every kernel is checked against a float64 numpy reference on random inputs first, then
timed as a CUDA graph of ``--number`` launches (median of ``--repeat``).

    python3 bench/bench_rows.py [--shapes 128x768,197x768,1024x768,4096x768]
        [--ops layer_norm,rms_norm,softmax] [--dtype float16] [--out-dtype float16]
        [--json rows.jsonl]
    python3 bench/bench_rows.py --dry-run   # no GPU: build every kernel for sm_90a
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings

import numpy as np

TARGET = "cuda -arch=sm_90a"
EPS = 1e-5
TOLERANCE = 1e-2  # of the largest output: 16-bit outputs, float32 statistics


def case_task(op: str, rows: int, cols: int, dtype: str, seed: int, out_dtype: str = ""):
    """``(task, inputs)``: the fused-rows task of one normalization over ``rows x cols``
    (``x`` and, for the norms, its weights as constants) and numpy inputs for the task's
    placeholders, in order."""
    from ptxforge import autosched, graph
    from ptxforge.graph import nn
    from ptxforge.graph.opdefs.rms_norm import rms_norm

    rng = np.random.default_rng(seed)
    x = graph.var("x", (rows, cols), dtype)
    g = (1 + 0.1 * rng.standard_normal(cols)).astype(dtype)
    b = (0.1 * rng.standard_normal(cols)).astype(dtype)
    if op == "layer_norm":
        y = nn.layer_norm(x, graph.const(g, "g"), graph.const(b, "b"), epsilon=EPS,
                          out_dtype=out_dtype)
    elif op == "rms_norm":
        y = rms_norm(x, graph.const(g, "g"), epsilon=EPS, out_dtype=out_dtype)
    elif op == "softmax":
        y = nn.softmax(x, axis=-1, out_dtype=out_dtype)
    else:
        raise ValueError(f"--ops: expected layer_norm, rms_norm or softmax, got {op!r}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tasks, _ = autosched.extract_tasks(graph.function(y), {}, TARGET, precision=dtype)
    found = [t for t in tasks if op.split("_")[0] in t.desc]
    if len(found) != 1:
        raise RuntimeError(f"{op} {rows}x{cols}: expected one {op} task, got "
                           f"{[t.desc for t in tasks]}")
    task = found[0]
    xs = rng.standard_normal((rows, cols)).astype(dtype)
    by_shape = {(rows, cols): xs, (cols,): None}
    weights = [g, b] if op == "layer_norm" else [g]
    inputs = []
    for t in task.tensors[:-1]:
        shape = tuple(int(d) for d in t.shape)
        if shape == (rows, cols):
            inputs.append(by_shape[shape])
        elif shape == (cols,) and weights:
            inputs.append(weights.pop(0).astype(t.dtype))
        else:
            raise RuntimeError(f"{op}: unexpected argument {t.name} of shape {shape}")
    return task, inputs, (xs, g, b)


def reference(op: str, xs, g, b) -> np.ndarray:
    x = xs.astype(np.float64)
    if op == "layer_norm":
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + EPS) * g.astype(np.float64) + b.astype(np.float64)
    if op == "rms_norm":
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + EPS) * g.astype(np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def variants(task):
    """``[(name, RowsChoice)]``: the default first, then every vector and scalar knob."""
    from dataclasses import replace

    from ptxforge.graph.build_module import fused_rows_choice
    from ptxforge.ops.schedules.rows import row_lanes

    default = fused_rows_choice(task, TARGET)
    if default is None:
        raise RuntimeError(f"{task.desc} is not a fused-rows task")
    out = [(f"default ({'vec' if default.lanes > 1 else 'scalar'} {default.threads} "
            f"u{int(default.unroll)})", default)]
    vec_lanes = row_lanes(default.step.tensors[0])
    for lanes, kind in ((vec_lanes, "vec"), (1, "scalar")):
        if kind == "vec" and lanes == 1:
            continue
        for threads in default.step.threads():
            if threads > 2 * max(32, default.step.cols // lanes):
                continue
            for unroll in (False, True):
                out.append((f"{kind} {threads} u{int(unroll)}",
                            replace(default, lanes=lanes, threads=threads, unroll=unroll)))
    return out


def build(task, choice):
    import ptxforge
    from ptxforge.backend_ptx import compile_module
    from ptxforge.graph.build_module import schedule_rows_choice
    from ptxforge.target import as_target

    target = as_target(TARGET)
    with target:
        s = schedule_rows_choice(choice)
        return compile_module(ptxforge.lower(s, list(task.tensors)), target)


def torch_op(torch, op: str, tx, tg, tb):
    F = torch.nn.functional
    if op == "layer_norm":
        return lambda: F.layer_norm(tx, (tx.shape[-1],), tg, tb, EPS)
    if op == "rms_norm":
        return lambda: F.rms_norm(tx, (tx.shape[-1],), tg, EPS)
    return lambda: torch.softmax(tx, -1)


def run(args) -> int:
    ok = True
    out = open(args.json, "w") if args.json else None
    dev = torch = None
    if not args.dry_run:
        import torch
        from ptxforge.backend_ptx import cuda

        dev = cuda(0)
        print(f"device: {dev.name}; torch {torch.__version__}", flush=True)
    for op in args.ops:
        for rows, cols in args.shapes:
            task, inputs, (xs, g, b) = case_task(op, rows, cols, args.dtype, args.seed,
                                                 args.out_dtype)
            t0 = time.perf_counter()
            built = []
            for name, choice in variants(task):
                try:
                    built.append((name, choice, build(task, choice)))
                except Exception as e:  # a refused build is reported, never hidden
                    built.append((name, choice, f"{type(e).__name__}: {str(e)[:160]}"))
            print(f"{op} {rows}x{cols} {args.dtype}->{args.out_dtype or args.dtype}: "
                  f"{len(built)} kernels built in "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
            if args.dry_run:
                for name, _, mod in built:
                    if isinstance(mod, str):
                        print(f"  {name}: {mod}")
                        ok &= not name.startswith("default")
                continue
            ok &= measure(torch, dev, op, task, inputs, (xs, g, b), built, args, out)
    if out:
        out.close()
    return 0 if ok else 1


def measure(torch, dev, op, task, inputs, raw, built, args, out) -> bool:
    from bench_tensorcore import torch_time
    from ptxforge.backend_ptx import array, empty

    xs, g, b = raw
    rows, cols = xs.shape
    want = reference(op, xs, g, b)
    scale = float(np.abs(want).max())
    tx = torch.from_numpy(xs).cuda()
    tg, tb = torch.from_numpy(g).cuda(), torch.from_numpy(b).cuda()
    torch_us = torch_time(torch_op(torch, op, tx, tg, tb), args.number, args.repeat) * 1e3
    args_dev = [array(a, dev) for a in inputs]
    res = task.tensors[-1]
    y = empty(tuple(int(d) for d in res.shape), res.dtype, dev)
    ok, lines = True, []
    for name, choice, mod in built:
        if isinstance(mod, str):
            print(f"  {name:22s} build failed: {mod}")
            ok &= not name.startswith("default")
            continue
        loaded = mod.load(dev)
        loaded(*args_dev, y)
        err = float(np.abs(y.numpy().astype(np.float64) - want).max()) / scale
        us = loaded.time_evaluator("main", number=args.number, repeat=args.repeat,
                                   graph=True)(*args_dev, y).median * 1e6
        ok &= err <= TOLERANCE
        lines.append((us, name, err))
        if out:
            out.write(json.dumps({"op": op, "rows": rows, "cols": cols, "dtype": args.dtype,
                                  "variant": name, "lanes": choice.lanes,
                                  "threads": choice.threads, "unroll": choice.unroll,
                                  "us": us, "err": err, "torch_us": torch_us}) + "\n")
        del loaded
    default = next(u for u, n, _ in lines if n.startswith("default"))
    best = min(lines)
    print(f"{op} {rows}x{cols}: torch {torch_us:.2f} us | default {default:.2f} us | best "
          f"{best[1]} {best[0]:.2f} us | torch/default {torch_us / default:.2f}", flush=True)
    for us, name, err in sorted(lines):
        print(f"  {name:22s} {us:7.2f} us  err {err:.1e}"
              f"{'' if err <= TOLERANCE else '  WRONG'}")
    return ok


def shape_list(text: str) -> list:
    try:
        return [tuple(int(v) for v in s.split("x")) for s in text.split(",") if s]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--shapes: expected ROWSxCOLS,..., got {text!r}") from None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", type=shape_list,
                   default=[(128, 768), (197, 768), (1024, 768), (4096, 768)])
    p.add_argument("--ops", type=lambda t: [o for o in t.split(",") if o],
                   default=["layer_norm"])
    p.add_argument("--dtype", default="float16", choices=("float16", "bfloat16", "float32"))
    p.add_argument("--out-dtype", default="", choices=("", "float16", "bfloat16", "float32"),
                   help="the output's dtype (default --dtype's): float32 rows in, float16 out "
                        "is GPT-2's layer norm in a float16 build")
    p.add_argument("--number", type=int, default=100)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json")
    p.add_argument("--dry-run", action="store_true", help="no GPU: build every kernel")
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
