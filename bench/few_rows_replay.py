"""A replay of the few-row sweep (``bench/bench_gemm_few_rows.py --json``) against the
default chooser: no GPU, only the sweep's own measurements.

For each shape of the sweep it prints cuBLAS, the default the sweep measured (the chooser
of the day of the sweep), the pick of today's chooser (``wgmma_choice``, else
``choose_gemm_config``) with the sweep's time of that configuration, and the best measured
configuration; a pick the sweep did not time is ``unknown`` and left out of the geometric
means (cuBLAS / ours, above 1: faster than cuBLAS), which are over the shapes both picks
have a time for. Where today's pick is the sweep's default, the default's own time counts.

    PYTHONPATH=<parent of the checkout> python3 bench/few_rows_replay.py \\
        [bench/results/gemm_few_rows_sweep_h100_2026-11-27.jsonl ...]
    PYTHONPATH=... python3 bench/few_rows_replay.py --mid   # the mid-size sweep
    PYTHONPATH=... python3 bench/few_rows_replay.py --m1024 --within 1.05   # the H200's

Several sweeps are replayed together (a shape measured twice keeps the later file's
lines); ``--mid`` replays ``bench/results/gemm_mid_sweep_h100_2026-11-28.jsonl`` (M of 77
to 4,096: BERT at batch 8, GPT-2 at 1,024 tokens, odd shapes) and the H100 knob sweep of
BERT's batch-8 products; ``--m1024`` the H200 knob sweep of GPT-2's four products at 1,024
tokens (:data:`M1024_KNOBS`, after the others: it replaces their ``M`` = 1,024 shapes).
Each sweep's GPU is read from the ``device:`` line of the ``.txt`` beside it (else the
file's name) and printed with its shapes. ``--within`` also prints how many shapes' picks
are within that factor of the best measured (as ``within 1.05: n of m``). The summary also
gives, over all shapes, over those of ``M`` = 1,024 and over the LM heads, the geometric
mean of pick / best measured (1: the best) and of cuBLAS/ours for the sweep's default,
today's chooser and the best measured, and the count within ``--within``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
SWEEP = os.path.join(HERE, "results", "gemm_few_rows_sweep_h100_2026-11-27.jsonl")
MID_SWEEP = os.path.join(HERE, "results", "gemm_mid_sweep_h100_2026-11-28.jsonl")
MID_KNOBS = os.path.join(HERE, "results", "gemm_mid_knobs_h100_2026-11-28.jsonl")
"""The knob sweep of BERT's four products at batch 8 x 512 tokens (128 x 192 tiles, block
orders, the staged epilogue besides every configuration of the space, unsplit): it replaces
those shapes of :data:`MID_SWEEP`."""
M1024_KNOBS = os.path.join(HERE, "results", "gemm_m1024_knobs_h200_2026-11-28.jsonl")
"""The knob sweep of GPT-2's four products at 1,024 tokens on an H200 (192-wide tiles, in
flight 0 and 1, block orders 1, 4, 8, the staged epilogue: 844 kernels); its default is
the chooser of main at ab91752."""


def device_of(path: str) -> str:
    """The GPU a sweep ran on: the ``device:`` line of the ``.txt`` beside ``path`` (the
    sweep's printed output), else a GPU named in the file's name, else ``unknown GPU``."""
    txt = os.path.splitext(path)[0] + ".txt"
    if os.path.exists(txt):
        with open(txt) as f:
            for line in f:
                if line.startswith("device:"):
                    return line.split(":", 1)[1].split(";")[0].strip()
    name = os.path.basename(path).lower()
    for gpu in ("h200", "h100", "a100"):
        if f"_{gpu}" in name:
            return f"NVIDIA {gpu.upper()}"
    return "unknown GPU"


def load_all(paths: list) -> dict:
    """:func:`load` of each sweep of ``paths``, a later file's shapes replacing earlier ones."""
    shapes: dict = {}
    for path in paths:
        gpu = device_of(path)
        for shape, s in load(path).items():
            s["device"] = gpu
            shapes[shape] = s
    return shapes


def load(path: str) -> dict:
    """``{(M, N, K): {"cublas": us, "default": (config, us), "times": {config: us}}}``
    (``times``: the sweep's explicit configurations, without its default); failed or
    unchecked kernels (no time) are left out."""
    shapes: dict = defaultdict(lambda: {"times": {}, "default": None, "cublas": math.nan})
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            us = r.get("us")
            if us is None or not math.isfinite(us):
                continue
            s = shapes[(r["M"], r["N"], r["K"])]
            s["cublas"] = r["cublas_us"]
            s["epilogue"] = r.get("epilogue", "none")
            if r["kind"] == "default":
                s["default"] = (r["config"].removeprefix("default "), us)
            else:
                s["times"][r["config"]] = us
    return dict(shapes)


def todays_pick(M: int, N: int, K: int, epilogue: str = "none") -> str:
    """The description (as the sweep writes it) of today's default for the fp16 product
    (with the sweep's ``epilogue``)."""
    sys.path.insert(0, HERE)
    from bench_gemm_few_rows import TARGET, describe, layer_args
    from ptxforge.ops.schedules.gemm.chooser import choose_gemm_config, wgmma_choice
    from ptxforge.target import as_target

    _, y, prod, form = layer_args(M, N, K, epilogue)
    target = as_target(TARGET)
    w = wgmma_choice(prod, None if y.op is prod else y.op, form, target)
    return describe("wgmma", w) if w is not None else describe(
        "mma", choose_gemm_config(form, target))


LM_HEAD_N = 32768
"""Products at least this wide are vocabulary projections (GPT-2's head: 50,257)."""


def _groups(M: int, N: int) -> list:
    """The groups of the summary a shape counts in: all, its own ``M`` of 1,024 (GPT-2 at
    1,024 tokens), the LM heads (:data:`LM_HEAD_N`)."""
    out = ["all shapes"]
    if M == 1024:
        out.append("M = 1024")
    if N >= LM_HEAD_N:
        out.append(f"N >= {LM_HEAD_N} (LM head)")
    return out


def geomean(xs: list) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweep", nargs="*")
    ap.add_argument("--mid", action="store_true", help=f"replay {os.path.basename(MID_SWEEP)} "
                    f"and {os.path.basename(MID_KNOBS)}")
    ap.add_argument("--m1024", action="store_true",
                    help=f"replay {os.path.basename(M1024_KNOBS)} (an H200) last")
    ap.add_argument("--within", type=float, default=None,
                    help="count the shapes whose pick is within this factor of the best")
    args = ap.parse_args(argv)
    paths = (list(args.sweep) + ([MID_SWEEP, MID_KNOBS] if args.mid else [])
             + ([M1024_KNOBS] if args.m1024 else []))
    paths = paths or [SWEEP]
    for path in paths:
        print(f"sweep {os.path.relpath(path)}: {device_of(path)}")
    shapes = load_all(paths)
    old_r, new_r, best_r, unknown, near = [], [], [], 0, 0
    slow: dict = defaultdict(lambda: ([], []))  # group: (sweep's default / best, today's)
    ratios: dict = defaultdict(lambda: ([], [], [], []))  # group: cuBLAS/ours, near
    for (M, N, K), s in sorted(shapes.items()):
        cb = s["cublas"]
        old_cfg, old_us = s["default"] or ("(not measured)", math.nan)
        new_cfg = todays_pick(M, N, K, s.get("epilogue", "none"))
        # the sweep's default, where today's pick is the same, else its explicit build
        new_us = old_us if new_cfg == old_cfg else s["times"].get(new_cfg, math.nan)
        best_cfg, best_us = min([*s["times"].items(), (old_cfg, old_us)],
                                key=lambda x: x[1])
        new_txt = f"{new_us:6.2f} us {cb / new_us:5.3f}" if math.isfinite(new_us) else \
            "unknown         "
        print(f"{M:4d}x{N:4d}x{K:4d} cuBLAS {cb:6.2f} us | sweep's default {old_cfg:28s} "
              f"{old_us:6.2f} us {cb / old_us:5.3f} | today {new_cfg:28s} {new_txt} | best "
              f"{best_cfg:28s} {best_us:6.2f} us {cb / best_us:5.3f} | {s['device']}")
        best_r.append(cb / best_us)
        close = args.within is not None and new_us <= args.within * best_us
        near += close
        if math.isfinite(new_us) and math.isfinite(old_us):
            old_r.append(cb / old_us)
            new_r.append(cb / new_us)
            for g in _groups(M, N):
                slow[g][0].append(old_us / best_us)
                slow[g][1].append(new_us / best_us)
                for lst, x in zip(ratios[g], (cb / old_us, cb / new_us, cb / best_us, close)):
                    lst.append(x)
        else:
            unknown += 1
    for g, (olds, news) in slow.items():
        print(f"pick / best measured, geometric mean over {g} ({len(news)} shapes): sweep's "
              f"default {geomean(olds):.3f}, today's chooser {geomean(news):.3f} (worst "
              f"{max(news):.3f})")
    for g, (olds, news, bests, closes) in ratios.items():
        print(f"cuBLAS/ours over {g} ({len(news)} shapes, both picks timed): sweep's default "
              f"{geomean(olds):.3f}, today's chooser {geomean(news):.3f}, best measured "
              f"{geomean(bests):.3f}" + (f"; today's within {args.within:g} of the best: "
                                         f"{sum(closes)} of {len(news)}"
                                         if args.within is not None else ""))
    print(f"cuBLAS/ours, geometric mean over {len(new_r)} shapes with both picks timed "
          f"({unknown} unknown): sweep's default {geomean(old_r):.3f} "
          f"({sum(r >= 0.9 for r in old_r)} at 0.9 or more), today's chooser "
          f"{geomean(new_r):.3f} ({sum(r >= 0.9 for r in new_r)}); best measured over all "
          f"{len(best_r)} shapes {geomean(best_r):.3f} ({sum(r >= 0.9 for r in best_r)})")
    if args.within is not None:
        print(f"today's pick within {args.within:g} of the best measured: {near} of "
              f"{len(best_r)} shapes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
