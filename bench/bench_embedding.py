"""An embedding lookup on one GPU: ``out[i, j] = table[ids[i], j]`` with int64 token ids
(negative ids counted from the end, out-of-range ids clamped), our default schedule
against ``torch.nn.functional.embedding`` on the same GPU.

Shapes: BERT-base's word embeddings by default (``--vocab 30522 --dim 768``), ``--tokens``
ids (a batch of sequences flattened), float32 or float16 (``--dtype``). The kernel is
checked against numpy; both sides are graph-timed (``--number`` launches in one CUDA
graph, ``--repeat`` replays, the median per launch). The effective bandwidth counts the
rows read and written.

    python3 bench/bench_embedding.py [--tokens 4096] [--dtype float16] [--json out.json]
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import ptxforge
from ptxforge import te
from ptxforge.backend_ptx import array, compile_module, cuda, empty
from ptxforge.ops.schedules import default_schedule


def lookup(tokens: int, vocab: int, dim: int, dtype: str):
    table = te.placeholder((vocab, dim), dtype, name="table")
    ids = te.placeholder((tokens,), "int64", name="ids")
    out = te.compute((tokens, dim), lambda i, j: table[te.normalize_index(ids[i], vocab), j],
                     name="out")
    return table, ids, out


def torch_time_us(tab, idv, number: int, repeat: int) -> float | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    t = torch.from_numpy(tab).cuda()
    i = torch.from_numpy(idv).cuda()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):  # warm up outside the capture, as CUDA graphs ask
        for _ in range(3):
            torch.nn.functional.embedding(i, t)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(number):
            torch.nn.functional.embedding(i, t)
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        g.replay()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop) * 1e3 / number)
    return float(np.median(times))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--vocab", type=int, default=30522)
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--dtype", default="float32", choices=("float32", "float16"))
    p.add_argument("--number", type=int, default=100)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--json", default=None)
    args = p.parse_args()

    dev = cuda(0)
    rng = np.random.default_rng(0)
    tab = rng.standard_normal((args.vocab, args.dim)).astype(args.dtype)
    idv = rng.integers(-args.vocab, args.vocab, args.tokens).astype("int64")
    tensors = lookup(args.tokens, args.vocab, args.dim, args.dtype)
    loaded = compile_module(ptxforge.lower(default_schedule([tensors[-1]]), tensors)).load(dev)
    arrays = [array(tab, dev), array(idv, dev), empty((args.tokens, args.dim), args.dtype, dev)]
    loaded(*arrays)
    np.testing.assert_array_equal(arrays[-1].numpy(), tab[idv])
    timer = loaded.time_evaluator("main", number=args.number, repeat=args.repeat, graph=True)
    ours = timer(*arrays).median * 1e6
    theirs = torch_time_us(tab, np.where(idv < 0, idv + args.vocab, idv), args.number,
                           args.repeat)
    moved = 2 * args.tokens * args.dim * np.dtype(args.dtype).itemsize + 8 * args.tokens
    result = {"tokens": args.tokens, "vocab": args.vocab, "dim": args.dim,
              "dtype": args.dtype, "ours_us": ours, "torch_us": theirs,
              "ours_GBps": moved / ours / 1e3,
              "torch_over_ours": None if theirs is None else theirs / ours}
    print(f"embedding {args.tokens} x {args.dim} from {args.vocab} ({args.dtype}): "
          f"ours {ours:.2f} us ({result['ours_GBps']:.0f} GB/s)"
          + ("" if theirs is None else f", torch {theirs:.2f} us, torch/ours "
             f"{theirs / ours:.2f}"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
