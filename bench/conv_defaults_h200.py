"""Every fused function of a zoo network side by side: the default schedule's pick and the
tuned records' fastest, judged by the records where they hold the pick (no GPU).

Tensor-core convolutions are judged as ``bench/conv_records_judge.py`` does (``=`` the pick
itself, ``~`` its twin: the other ``in_flight`` or copy width, ``nan`` neither); for the
other functions (depthwise convolutions, pooling, padding, CUDA-core convolutions) it prints
the default's knobs against the records' fastest state: the records hold the default's
exact schedule only where a sketch spells it the same way, which it says.

The records are tuner logs (``autosched`` lines) of the network at the batch given, e.g.
the H200 runs of 1,000 trials (``tune-network NET --batch-size B --dtype float16``); the
conv part of them is kept in ``bench/results/conv_records_*_h200_2026-11-28.jsonl``.

    PYTHONPATH=<parent of the checkout> python3 bench/conv_defaults_h200.py \\
        --network mobilenet_v2 --batch 1 --records LOG [--records-conv DISTILLED]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TARGET = "cuda -arch=sm_90a"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


JUDGE = _load("conv_records_judge")
REPLAY = JUDGE.REPLAY


def results(path: str) -> str:
    """The distilled conv records of ``bench/results`` for a record file's base name."""
    return os.path.join(HERE, "results", path)


def conv_rows(network: str, batch: int, records: dict, target: str = TARGET) -> list:
    """``(name, calls, shape, pick, us, mark, best, best_us)`` of every tensor-core conv the
    records measured; prints each."""
    from ptxforge.ops.schedules.gemm.forms import conv_gemm_form, tensorcore_conv_unsupported
    from ptxforge.target import as_target

    t = as_target(target)
    rows = []
    for layer in REPLAY.layers(network, batch):
        if tensorcore_conv_unsupported(layer.op, t) is not None:
            continue
        times = records.get((layer.name, layer.shapes))
        if not times:
            continue
        form = conv_gemm_form(layer.op)
        pick = REPLAY.default_config(layer, t)
        us, mark = JUDGE.measured(pick, times)
        best_cfg, best = min(times.items(), key=lambda x: x[1])
        row = (layer.name.removeprefix("vm_mod_fused_nn_"), layer.calls,
               f"{form.batch * form.M}x{form.N}x{form.K}", REPLAY.describe(pick), us, mark,
               REPLAY.describe(best_cfg), best)
        rows.append(row)
        print(f"{row[0]:24s} x{row[1]} {row[2]:16s} {row[3]:30s} {us:6.2f}{mark} | "
              f"best {row[6]:30s} {best:6.2f} | {us / best:5.3f}")
    return rows


def summary(rows: list) -> dict:
    """Calls x us of the judged rows, default and best, and the unjudged count."""
    judged = [r for r in rows if math.isfinite(r[4])]
    d = sum(r[1] * r[4] for r in judged)
    b = sum(r[1] * r[7] for r in judged)
    print(f"judged {len(judged)} of {len(rows)}: calls x us default {d:.2f}, best {b:.2f}, "
          f"ratio {d / max(b, 1e-9):.3f}")
    return {"judged": len(judged), "rows": len(rows), "default_us": d, "best_us": b}


def other_rows(network: str, batch: int, log: str, target: str = TARGET) -> list:
    """The functions the tensor cores do not run: the default's knobs and the records'
    fastest state and time; prints each."""
    from ptxforge import autosched, graph

    best: dict = {}
    with open(log) as f:
        for text in f:
            if not text.strip():
                continue
            line = json.loads(text)
            res = line.get("result", {})
            sketch = line.get("payload", {}).get("sketch", "")
            if res.get("error_no") or sketch.startswith(("wgmma_conv", "tensorcore_conv")):
                continue
            key = line["task"]["name"]
            us = min(res["costs"]) * 1e6
            if key not in best or us < best[key][0]:
                best[key] = (us, sketch, line["payload"].get("state", {}))
    net, params, _, _ = graph.get_network(network, batch, "NHWC")
    tasks, weights = autosched.extract_tasks(net, params, "cuda", precision="float16")
    rows = []
    for task, w in zip(tasks, weights):
        if task.desc not in best or "conv2d" in task.desc and _tensorcore(task, target):
            continue
        us, sketch, state = best[task.desc]
        rows.append((task.desc.removeprefix("vm_mod_fused_"), w, default_knobs(task, target),
                     sketch, _short(state), us))
        print(f"{rows[-1][0]:24s} x{w} default {rows[-1][2]} | best {sketch} "
              f"{rows[-1][4]} {us:.2f} us (the default's own schedule: not in the records)")
    return rows


def _tensorcore(task, target) -> bool:
    from ptxforge.autosched.tensorcore import _single_product
    from ptxforge.ops.schedules.gemm.forms import tensorcore_conv_unsupported

    prod = _single_product(task, remap=False)
    return prod is not None and tensorcore_conv_unsupported(prod[0], target) is None


def default_knobs(task, target=TARGET) -> str:
    """The knobs of the default schedule of ``task`` read off its pipeline: the split
    factors and bound thread extents."""
    import re

    from ptxforge.ops.schedules.default import default_schedule
    from ptxforge.ops.schedules.tiling import choose_tiling

    reds = [st.op for st in task.analysis.stages.values() if st.reduce]
    if len(reds) == 1 and "depthwise" in reds[0].tag:
        t = choose_tiling(reds[0], target)
        return f"threads {list(t.threads)} inner {list(t.inner)} chunk {t.chunk}"
    text = str(default_schedule(list(task.ir_dag.outputs), target).pipeline)
    splits = re.findall(r"(?:factors|nparts)=(\[[^\]]*\]|\d+)", text)
    return f"splits {' '.join(splits)}{' vectorized' if 'vectorize' in text else ''}"


def _short(state: dict) -> str:
    return " ".join(f"{k.split('.', 1)[-1]}={v}" for k, v in state.items())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--network", default="mobilenet_v2")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--records", help="the tuner's log (all functions)")
    ap.add_argument("--records-conv", help="distilled conv records (default: bench/results)")
    args = ap.parse_args(argv)
    conv = args.records_conv or results(
        f"conv_records_{args.network}_b{args.batch}_h200_2026-11-28.jsonl")
    print(f"== {args.network} b{args.batch}: tensor-core convolutions ({conv})")
    summary(conv_rows(args.network, args.batch, REPLAY.load(conv)))
    if args.records:
        print(f"== {args.network} b{args.batch}: the other functions ({args.records})")
        other_rows(args.network, args.batch, args.records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
