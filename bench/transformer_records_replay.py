"""A replay of a transformer's tuning records against the default product and attention
choosers: no GPU, only the records' own measurements.

For every dense product (``wgmma_gemm`` sketch) and fused attention (``fused_attention``
sketch) the records measured, it prints the default configuration (for a product
:func:`~ptxforge.ops.schedules.gemm.chooser.wgmma_choice` on sm_90a with the epilogue its
function's name spells: a bias, GELU, a residual; for an attention
:func:`~ptxforge.ops.schedules.attention.choose_attention_config`) with its measured time
where the records hold it (``nan`` where not), and the records' fastest; then per network
the calls-weighted sums and the geometric mean of default / best over the judged functions.

The records are the tuner's (``autosched`` record lines) or their distilled form
(``--distill OUT`` writes one line per measured configuration: network, function, shapes,
configuration, microseconds), which ``bench/results/transformer_records_h200_2026-11-28.
jsonl`` holds for ViT-B/16 (197 tokens) and BERT-base (128 tokens), batch 1, fp16, from
1,000-trial tuning runs on an H200 (``bench/bench_hf_onnx.py --trials 1000``).

    PYTHONPATH=<parent of the checkout> python3 bench/transformer_records_replay.py \\
        [--records bench/results/transformer_records_h200_2026-11-28.jsonl] \\
        [--distill OUT --net vit LOG]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RECORDS = os.path.join(HERE, "results", "transformer_records_h200_2026-11-28.jsonl")
TARGET = "cuda -arch=sm_90a"
WG_KNOBS = ("block_n", "warpgroups", "stages", "in_flight", "split_k")
CALLS = {  # calls a run of each network makes of each function (12 layers)
    "vit": {"vm_mod_fused_nn_dense_nn_bias_add_add_1": 11,
            "vm_mod_fused_nn_dense_nn_bias_add_add_cast": 1},
    "bert": {},
}


def distill(path: str, net: str) -> list:
    """The measured product and attention configurations of tuning log ``path``."""
    from ptxforge.ops.schedules.attention import schedule_pass  # noqa: F401 (registers it)
    from ptxforge.passes.pipeline import parse_pass

    out = []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            sketch = r["payload"].get("sketch", "")
            if r["result"]["error_no"] != 0 or not sketch.startswith(
                    ("wgmma_gemm", "fused_attention")):
                continue
            shapes = json.loads(r["task"]["key"])[1:]
            row = {"net": net, "func": r["task"]["name"], "shapes": shapes,
                   "us": round(min(r["result"]["costs"]) * 1e6, 3)}
            if sketch.startswith("wgmma_gemm"):
                state = r["payload"]["state"]
                row["config"] = {k: state[next(s for s in state if s.endswith("." + k))]
                                 for k in WG_KNOBS}
            else:
                p = parse_pass(r["pipeline"])
                row["config"] = {k: getattr(p, k) for k in (
                    "warps", "block_kv", "stages", "mma", "scores", "p_operand", "overlap",
                    "schedule")}
                row["attention"] = {"causal": p.causal, "scale": p.scale,
                                    "layout": p.layout, "views": list(p.views)}
            out.append(row)
    return out


def _product(func: str, shapes: list):
    """The product stage, its epilogue and form of a dense function (fp16, float32
    accumulation then the epilogue its name spells, then the cast)."""
    from ptxforge import ops, te
    from ptxforge.ir.te import ComputeOp
    from ptxforge.ops.schedules.gemm.forms import gemm_form

    (M, K), (N, _) = shapes[0], shapes[1]
    x = te.placeholder((M, K), "float16", name="x")
    w = te.placeholder((N, K), "float16", name="w")
    b = te.placeholder((N,), "float16", name="b") if "bias" in func else None
    y = ops.nn.dense(x, w, b, out_dtype="float32")
    if "erf" in func:  # the erf GELU: x * (erf(x / sqrt 2) + 1) * 0.5
        y = ops.multiply(ops.multiply(y, ops.add(ops.erf(ops.multiply(
            y, 0.7071067811865476)), 1.0)), 0.5)
    elif func.count("_add") >= 2:  # bias_add, then the residual's add
        y = ops.add(y, te.placeholder((M, N), "float32", name="r"))
    y = ops.cast(y, "float16")
    s = te.create_schedule(y.op)
    prod = next(op for op in s.dag.ops if isinstance(op, ComputeOp) and op.reduce_axis)
    return prod, (None if y.op is prod else y.op), gemm_form(prod, TARGET)


def _attention(rows: list):
    from ptxforge.ops.schedules.attention import AttentionWorkload
    from ptxforge.ops.schedules.attention.workload import OperandView

    a, shapes = rows[0]["attention"], rows[0]["shapes"]
    views = a["views"]
    out = shapes[-1]  # [B, L, H, E] (bshd) or [B, H, L, E]
    b, l, h, e = (out if a["layout"] == "bshd" else (out[0], out[2], out[1], out[3]))
    ov = None
    if views:
        base = tuple(shapes[0])
        ov = tuple(OperandView(base[-1], views[5 * i + 4], base) for i in range(3))
    return AttentionWorkload(b, h, h, l, l, e, e, "float16", a["causal"], a["scale"],
                             None, a["layout"], ov)


def default_of(func: str, rows: list) -> dict:
    """The default configuration of a function as a record's ``config`` dict."""
    from ptxforge.ops.schedules.attention import choose_attention_config
    from ptxforge.ops.schedules.gemm.chooser import wgmma_choice
    from ptxforge.target import as_target

    if "attention" in rows[0]:
        c = choose_attention_config(_attention(rows), as_target(TARGET))
        return {k: getattr(c, k) for k in rows[0]["config"]}
    prod, epi, form = _product(func, rows[0]["shapes"])
    c = wgmma_choice(prod, epi, form, TARGET)
    return {} if c is None else {k: getattr(c, k) for k in WG_KNOBS}


def replay(rows: list) -> dict:
    """Print each function's default against the records' best; return per network the
    calls-weighted microseconds (default where judged, best) and the ratios."""
    by = {}
    for r in rows:
        by.setdefault((r["net"], r["func"]), []).append(r)
    summary = {}
    for (net, func), rs in sorted(by.items()):
        best = min(rs, key=lambda r: r["us"])
        pick = default_of(func, rs)
        times = [r["us"] for r in rs if r["config"] == pick]
        us = min(times) if times else math.nan
        calls = CALLS.get(net, {}).get(func, 12)
        s = summary.setdefault(net, {"default": 0.0, "best": 0.0, "ratios": [], "unjudged": 0})
        if times:
            s["default"] += calls * us
            s["best"] += calls * best["us"]
            s["ratios"].append(us / best["us"])
        else:
            s["unjudged"] += 1
        name = func.removeprefix("vm_mod_fused_")[:46]
        print(f"{net:5s} {name:46s} x{calls:<2d} default {us:6.2f} us "
              f"{_short(pick)}\n{'':56s}best    {best['us']:6.2f} us {_short(best['config'])}")
    for net, s in summary.items():
        g = math.exp(sum(map(math.log, s["ratios"])) / max(1, len(s["ratios"])))
        print(f"{net}: calls x us, default {s['default']:.1f} / best {s['best']:.1f} "
              f"({s['default'] / max(s['best'], 1e-9):.3f}); geomean {g:.3f} over "
              f"{len(s['ratios'])} functions ({s['unjudged']} not judged)")
    return summary


def _short(cfg: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in cfg.items()
                    if v not in ("cooperative", "none") or k == "overlap")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", default=RECORDS)
    ap.add_argument("--distill", metavar="OUT", help="distil tuning logs (LOG ...) into OUT")
    ap.add_argument("--net", action="append", default=[],
                    help="with --distill: the network of each LOG, in order")
    ap.add_argument("logs", nargs="*")
    args = ap.parse_intermixed_args(argv)
    if args.distill:
        if len(args.net) != len(args.logs):
            ap.error("--distill needs one --net for each LOG")
        with open(args.distill, "w") as f:
            for net, log in zip(args.net, args.logs):
                for row in distill(log, net):
                    f.write(json.dumps(row) + "\n")
        return 0
    with open(args.records) as f:
        replay([json.loads(line) for line in f if line.strip()])
    return 0


if __name__ == "__main__":
    sys.exit(main())
