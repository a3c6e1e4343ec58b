"""A replay of tuned conv records against the default conv chooser: no GPU, only the
records' own measurements.

For every tensor-core convolution of a zoo network (fp16, NHWC, batch 1 by default) it
prints the default configuration (:func:`~ptxforge.ops.schedules.gemm.chooser.
wgmma_conv_choice` on sm_90a, else :func:`~ptxforge.ops.schedules.gemm.chooser.
conv_config`'s mma.sync tiles) with its measured time where the records hold that
configuration, and the best measured configuration of the records; then the geometric
mean of default / best over the layers whose default was measured, and the layers'
calls x times summed both ways.

The records are the tuner's (``autosched`` record lines: a ``wgmma_conv`` or
``tensorcore_conv`` sketch, its slot values, measured seconds) or their distilled form
(``--distill OUT`` writes one line per measured conv configuration: task name, input
shapes, kind, knobs, microseconds), which ``bench/results/resnet50_conv_records_h100_
2026-11-27.jsonl`` holds for ResNet-50 b1 fp16 (800 trials on an H100). Records match a
layer by the fused function's name and its data and kernel shapes.

    PYTHONPATH=<parent of the checkout> python3 bench/conv_records_replay.py \\
        [--records bench/results/resnet50_conv_records_h100_2026-11-27.jsonl] \\
        [--network resnet_v1-50] [--all] [--distill OUT]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
RECORDS = os.path.join(HERE, "results", "resnet50_conv_records_h100_2026-11-27.jsonl")
TARGET = "cuda -arch=sm_90a"
WG_KNOBS = ("block_n", "warpgroups", "stages", "in_flight", "split_k")
TC_KNOBS = ("block_m", "block_n", "block_k", "warps_m", "warps_n", "stages", "layout", "vec",
            "split_k")


@dataclass(frozen=True)
class Layer:
    """One conv function of the network: its name, calls, data and kernel shapes, the conv
    stage and its epilogue (te ops)."""

    name: str
    calls: int
    shapes: str
    op: object
    epilogue: object


def layers(network: str, batch: int = 1) -> list:
    """The tensor-core conv functions of zoo ``network`` in fp16 (one :class:`Layer` each)."""
    from ptxforge import autosched, graph
    from ptxforge.autosched.tensorcore import _single_product

    net, params, _, _ = graph.get_network(network, batch, "NHWC")
    tasks, weights = autosched.extract_tasks(net, params, "cuda", precision="float16")
    out = []
    for task, w in zip(tasks, weights):
        if "conv2d" not in task.desc:
            continue
        prod = _single_product(task, remap=False)
        if prod is None:
            continue
        op, res = prod[0], prod[1]
        out.append(Layer(task.desc, w, json.dumps(json.loads(task.workload_key)[1:3]), op,
                         None if res.op is op else res.op))
    return out


def config_of(kind: str, knobs: dict):
    """The schedule configuration of a distilled record."""
    from ptxforge.ops.schedules.gemm.knobs import TensorCoreConfig, WgmmaScheduleConfig

    if kind == "wgmma":
        return WgmmaScheduleConfig(*(int(knobs[k]) for k in WG_KNOBS))
    v = int(knobs["vec"])
    return TensorCoreConfig(int(knobs["block_m"]), int(knobs["block_n"]),
                            int(knobs["block_k"]), int(knobs["warps_m"]),
                            int(knobs["warps_n"]), vec=v, pad=int(knobs["layout"]),
                            stages=int(knobs["stages"]), frag_load="ldmatrix",
                            async_copy=v * 2 in (4, 8, 16), split_k=int(knobs["split_k"]))


def distilled(line: dict) -> dict | None:
    """The distilled form of one tuner record line, or None (not a measured tensor-core
    conv configuration)."""
    sketch = line.get("payload", {}).get("sketch", "")
    res = line.get("result", {})
    if res.get("error_no") or not sketch.startswith(("wgmma_conv", "tensorcore_conv")):
        return None
    kind, tag = ("wgmma", ".wg.") if sketch.startswith("wgmma") else ("mma", ".tc.")
    state = line["payload"]["state"]
    knobs = {k.split(tag, 1)[1]: v for k, v in state.items() if tag in k}
    return {"name": line["task"]["name"],
            "shapes": json.dumps(json.loads(line["task"]["key"])[1:3]), "kind": kind,
            "knobs": knobs, "us": min(res["costs"]) * 1e6}


def load(path: str) -> dict:
    """``{(name, shapes): {config: best us}}`` of a tuner record file or a distilled one."""
    out: dict = {}
    with open(path) as f:
        for text in f:
            if not text.strip():
                continue
            line = json.loads(text)
            d = line if "kind" in line else distilled(line)
            if d is None:
                continue
            cfg = config_of(d["kind"], d["knobs"])
            times = out.setdefault((d["name"], d["shapes"]), {})
            times[cfg] = min(d["us"], times.get(cfg, math.inf))
    return out


def describe(cfg) -> str:
    if hasattr(cfg, "warpgroups"):
        return (f"wgmma {64 * cfg.warpgroups}x{cfg.block_n} s{cfg.stages} f{cfg.in_flight} "
                f"sk{cfg.split_k}")
    return (f"mma {cfg.block_m}x{cfg.block_n}x{cfg.block_k} w{cfg.warps_m}x{cfg.warps_n} "
            f"s{cfg.stages} sk{cfg.split_k}")


def default_config(layer: Layer, target):
    """Today's default of ``layer`` (wgmma where chosen, else the mma.sync tiles the conv
    schedule takes)."""
    from ptxforge.ops.schedules.gemm.chooser import conv_config, wgmma_conv_choice

    w = wgmma_conv_choice(layer.op, layer.epilogue, target)
    return w if w is not None else conv_config(layer.op, target, layer.epilogue)


def replay(network: str, records: dict, show_all: bool = False) -> dict:
    """Print the per-layer table; return ``{"ratios": [...], "default_us", "best_us",
    "unknown"}`` (sums of calls x us over the layers whose default was measured)."""
    from ptxforge.ops.schedules.gemm.forms import conv_gemm_form
    from ptxforge.target import as_target

    target = as_target(TARGET)
    ratios, dsum, bsum, unknown = [], 0.0, 0.0, 0
    for layer in layers(network):
        times = records.get((layer.name, layer.shapes))
        if not times:
            continue
        form = conv_gemm_form(layer.op)
        d = default_config(layer, target)
        best_cfg, best = min(times.items(), key=lambda x: x[1])
        dus = times.get(d, math.nan)
        if math.isfinite(dus):
            ratios.append(dus / best)
            dsum += layer.calls * dus
            bsum += layer.calls * best
        else:
            unknown += 1
        shape = f"M{form.M} N{form.N} K{form.K}"
        print(f"{layer.name.removeprefix('vm_mod_fused_'):26s} x{layer.calls} {shape:18s} "
              f"default {describe(d):30s} {dus:6.2f} us | best {describe(best_cfg):30s} "
              f"{best:6.2f} us | {dus / best:5.3f}")
        if show_all:
            for cfg, us in sorted(times.items(), key=lambda x: x[1])[:8]:
                print(f"{'':30s}{describe(cfg):36s} {us:6.2f} us")
    g = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else math.nan
    print(f"default / best measured, geometric mean over {len(ratios)} layers with the "
          f"default measured ({unknown} not measured): {g:.3f}; calls x us over those: "
          f"default {dsum:.1f}, best {bsum:.1f}")
    return {"ratios": ratios, "default_us": dsum, "best_us": bsum, "unknown": unknown}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", default=RECORDS)
    ap.add_argument("--network", default="resnet_v1-50")
    ap.add_argument("--all", action="store_true", help="also list each layer's 8 best")
    ap.add_argument("--distill", metavar="OUT",
                    help="write the records' measured conv configurations to OUT and stop")
    args = ap.parse_args(argv)
    if args.distill:
        with open(args.records) as f, open(args.distill, "w") as out:
            for text in f:
                d = distilled(json.loads(text)) if text.strip() else None
                if d is not None:
                    out.write(json.dumps(d) + "\n")
        return 0
    replay(args.network, load(args.records), args.all)
    return 0


if __name__ == "__main__":
    sys.exit(main())
