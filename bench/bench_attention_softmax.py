"""BERT-base's attention scores and softmax on one GPU: the row-epilogue kernel (the
product and the softmax in one kernel, ``ops/schedules/gemm_rows.py``) against the two
kernels it replaces (the scores' product with its float32 store, then the softmax).

Shapes: 12 heads x 128 x 128 scores of 64-wide fp16 heads (``--heads``, ``--seq``,
``--dim``), scaled by 1/8, the softmax in float32 rounded to fp16 at its store, as a
float16 BERT layer computes them. Ours: the default schedule of the fused computation,
then each of the ``--configs`` fastest tile configurations by the default chooser's
estimate (``row_time``; wgmma ones among them on sm_90a); the separate pair with their
default schedules. Every kernel is checked against numpy (float64) and graph-timed
(``--number`` launches in one CUDA graph, ``--repeat`` replays, the median per launch).

    python3 bench/bench_attention_softmax.py [--configs 4] [--json out.json]
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import ptxforge
from ptxforge import ops, te
from ptxforge.backend_ptx import array, compile_module, cuda, empty
from ptxforge.ir.te import ComputeOp
from ptxforge.ops.schedules import default_schedule
from ptxforge.ops.schedules.gemm.forms import gemm_form
from ptxforge.ops.schedules.gemm_rows import (
    row_configs,
    row_epilogue,
    row_time,
    schedule_gemm_rows,
)
from ptxforge.target import Target


def scores(heads, seq, dim, softmax=True):
    q = te.placeholder((heads, seq, dim), "float16", name="query")
    k = te.placeholder((heads, seq, dim), "float16", name="key")
    c = ops.nn.batch_matmul(q, k, out_dtype="float16")
    s = ops.cast(ops.multiply(c, te.const(1.0 / np.sqrt(dim), "float16")), "float32")
    return q, k, (ops.nn.softmax(s, -1, "float16") if softmax else s)


def reference(qv, kv, dim):
    s = (np.matmul(qv, kv.transpose(0, 2, 1)).astype(np.float16)
         * np.float16(1.0 / np.sqrt(dim))).astype(np.float64)
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def timed(sched, tensors, arrays, target, dev, args) -> float:
    with target:
        loaded = compile_module(ptxforge.lower(sched, tensors), target).load(dev)
    loaded(*arrays)
    timer = loaded.time_evaluator("main", number=args.number, repeat=args.repeat, graph=True)
    return timer(*arrays).median * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--configs", type=int, default=4)
    p.add_argument("--number", type=int, default=200)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--json")
    args = p.parse_args()
    dev = cuda(0)
    target = Target("cuda")
    rng = np.random.default_rng(0)
    h, n, d = args.heads, args.seq, args.dim
    qv = rng.uniform(-1, 1, (h, n, d)).astype("float16")
    kv = rng.uniform(-1, 1, (h, n, d)).astype("float16")
    want = reference(qv.astype(np.float64), kv.astype(np.float64), d)
    rows = []

    def fused(name, build):
        q, k, prob = scores(h, n, d)
        sched = build(q, k, prob)
        out = empty(prob.shape, "float16", dev)
        arrays = [array(qv, dev, "float16"), array(kv, dev, "float16"), out]
        us = timed(sched, [q, k, prob], arrays, target, dev, args)
        err = float(np.abs(out.numpy().astype(np.float64) - want).max())
        rows.append({"kernel": name, "us": us, "max_abs_err": err, "ok": err < 4e-3})

    fused("fused default", lambda q, k, prob: default_schedule(prob, target))
    q, k, prob = scores(h, n, d)
    s0 = te.create_schedule(prob.op)
    plan = row_epilogue([op for op in s0.dag.ops if isinstance(op, ComputeOp)], [prob])
    form = gemm_form(plan.product, target)
    cands = sorted(row_configs(form, target), key=lambda c: row_time(c, form, target))
    for cfg in cands[:args.configs]:
        def build(q, k, prob, cfg=cfg):
            s = te.create_schedule(prob.op)
            r = row_epilogue([op for op in s.dag.ops if isinstance(op, ComputeOp)], [prob])
            schedule_gemm_rows(s, r, target, cfg)
            return s
        fused(f"fused {cfg} (est {row_time(cfg, form, target) * 1e6:.2f} us)", build)

    # the two kernels the fusion replaces
    q, k, sc = scores(h, n, d, softmax=False)
    mid = empty(sc.shape, "float32", dev)
    arrays = [array(qv, dev, "float16"), array(kv, dev, "float16"), mid]
    t1 = timed(default_schedule(sc, target), [q, k, sc], arrays, target, dev, args)
    x = te.placeholder(sc.shape, "float32", name="x")
    sm = ops.nn.softmax(x, -1, "float16")
    out = empty(sm.shape, "float16", dev)
    t2 = timed(default_schedule(sm, target), [x, sm], [mid, out], target, dev, args)
    err = float(np.abs(out.numpy().astype(np.float64) - want).max())
    rows.append({"kernel": "separate: scores", "us": t1, "max_abs_err": float("nan"),
                 "ok": True})
    rows.append({"kernel": "separate: softmax", "us": t2, "max_abs_err": err,
                 "ok": err < 4e-3})
    rows.append({"kernel": "separate: both", "us": t1 + t2, "max_abs_err": err,
                 "ok": err < 4e-3})
    print(f"{dev.name} {target.arch}: {h} x {n} x {n} scores of {d}-wide heads")
    for r in rows:
        print(f"{r['us']:9.2f} us  {'ok ' if r['ok'] else 'BAD'} {r['kernel']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
