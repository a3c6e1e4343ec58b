"""The conv records' judgement of the default conv picks, counting a pick the records hold
only as its twin: the same tiles, split and stages with the other ``in_flight`` (wgmma) or
the other of 8- and 16-byte copies (mma.sync). Those knobs measured within noise of each
other in the same records (ResNet-50 b1 fp16, an H100: ``in_flight`` 1 / 0 a geometric
mean 0.995 over 74 pairs, 16-byte / 8-byte copies 1.004 over 7 pairs), where
``bench/conv_records_replay.py`` leaves such a layer out of its sums.

Per layer it prints the pick, its measured time (``=`` the pick itself, ``~`` its twin,
``nan`` neither: the records cannot judge it) and the records' best; then the summed calls
x us of the judged layers both ways and how many layers it could not judge. On networks the
records do not cover it prints the picks alone (``--picks``), for comparing two checkouts.

    PYTHONPATH=<parent of the checkout> python3 bench/conv_records_judge.py \\
        [--records FILE] [--network resnet_v1-50 ...] [--picks]
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys
from dataclasses import replace

HERE = os.path.dirname(os.path.abspath(__file__))


def _replay():
    spec = importlib.util.spec_from_file_location(
        "conv_records_replay", os.path.join(HERE, "conv_records_replay.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


REPLAY = _replay()


def twins(cfg) -> list:
    """The configurations the records' time of ``cfg`` may be read from: ``cfg`` itself,
    then its twin (the other ``in_flight`` of a wgmma one; the other of 8 and 4 16-bit
    elements a copy of an mma.sync one)."""
    if hasattr(cfg, "warpgroups"):
        return [cfg, replace(cfg, in_flight=1 - cfg.in_flight)]
    if cfg.vec in (4, 8):
        return [cfg, replace(cfg, vec=12 - cfg.vec)]
    return [cfg]


def measured(cfg, times: dict) -> tuple:
    """``(us, mark)``: the records' time of ``cfg`` (``=``) or of its twin (``~``), else
    ``(nan, " ")``."""
    for i, c in enumerate(twins(cfg)):
        if c in times:
            return times[c], "=~"[min(i, 1)]
    return math.nan, " "


def judge(network: str, records: dict, target: str = REPLAY.TARGET) -> dict:
    """Print the per-layer table of ``network``; return ``{"default_us", "best_us",
    "judged", "unjudged", "ratios"}`` (calls x us summed over the judged layers)."""
    from ptxforge.ops.schedules.gemm.forms import conv_gemm_form
    from ptxforge.target import as_target

    t = as_target(target)
    out = {"default_us": 0.0, "best_us": 0.0, "judged": 0, "unjudged": 0, "ratios": []}
    for layer in REPLAY.layers(network):
        times = records.get((layer.name, layer.shapes))
        if not times:
            continue
        form = conv_gemm_form(layer.op)
        pick = REPLAY.default_config(layer, t)
        best_cfg, best = min(times.items(), key=lambda x: x[1])
        us, mark = measured(pick, times)
        if math.isfinite(us):
            out["default_us"] += layer.calls * us
            out["best_us"] += layer.calls * best
            out["judged"] += 1
            out["ratios"].append(us / best)
        else:
            out["unjudged"] += 1
        print(f"{layer.name.removeprefix('vm_mod_fused_'):28s} x{layer.calls} "
              f"M{form.M} N{form.N} K{form.K}  {REPLAY.describe(pick):30s} {us:6.2f}{mark} | "
              f"best {REPLAY.describe(best_cfg):30s} {best:6.2f} | {us / best:5.3f}")
    r = out["ratios"]
    g = math.exp(sum(map(math.log, r)) / len(r)) if r else math.nan
    print(f"{network}: {out['judged']} layers judged ({out['unjudged']} not): calls x us "
          f"default {out['default_us']:.2f}, best {out['best_us']:.2f}, ratio "
          f"{out['default_us'] / max(out['best_us'], 1e-9):.3f}; geometric mean {g:.3f}")
    return out


def picks(network: str, target: str = REPLAY.TARGET, batch: int = 1) -> list:
    """Print and return ``(layer name, calls, M x N x K, pick)`` of every conv of
    ``network`` the tensor cores run."""
    from ptxforge.ops.schedules.gemm.forms import conv_gemm_form, tensorcore_conv_unsupported
    from ptxforge.target import as_target

    t = as_target(target)
    rows = []
    for layer in REPLAY.layers(network, batch):
        if tensorcore_conv_unsupported(layer.op, t) is not None:
            continue  # a depthwise conv: the tensor cores do not run it
        form = conv_gemm_form(layer.op)
        rows.append((layer.name.removeprefix("vm_mod_fused_"), layer.calls,
                     f"{form.M}x{form.N}x{form.K}", REPLAY.describe(
                         REPLAY.default_config(layer, t))))
        print(f"{rows[-1][0]:28s} x{rows[-1][1]} {rows[-1][2]:16s} {rows[-1][3]}")
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", default=REPLAY.RECORDS)
    ap.add_argument("--network", nargs="+", default=["resnet_v1-50"])
    ap.add_argument("--picks", action="store_true", help="print the picks only")
    ap.add_argument("--batch", type=int, default=1, help="the batch of --picks")
    args = ap.parse_args(argv)
    records = None if args.picks else REPLAY.load(args.records)
    for net in args.network:
        print(f"== {net}")
        if args.picks:
            picks(net, batch=args.batch)
        else:
            judge(net, records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
