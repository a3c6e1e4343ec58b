"""How well the kernel model's unrolled-code cap separates slow builds, on the records of
tuning runs, and those records without the states it refuses.

Each ``DIR/NET.json`` (``tune-network`` records: per candidate its sketch, state and
``all_cost``, build and run seconds) is read against the tasks of ``NET`` as
``tune-network NET --batch-size 1 --dtype float16`` extracts them (NHWC, sm_90a); the
state of every record that the current sketches still read is judged by
:class:`~ptxforge.autosched.kernel_model.SketchModel`. Printed per network and in all: the
records the cap refuses among those within 5% of their task's best (which it must keep),
among the builds over 2 s and over 1 s, and among those under 0.5 s; with ``--cap N``, the
same for another cap. ``--write OUT`` copies the records the current sketches read, and
``OUT/after/`` those the cap keeps (with the runs' ``NET.log``), for
``bench/tune_pool_sim.py --records``.

    PYTHONPATH=<parent of the checkout> python3 bench/build_guard_report.py \\
        --records /work/scratch/r37/f --nets mobilenet_v2,bert [--cap 512] [--write OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil

import numpy as np
from ptxforge import autosched
from ptxforge.autosched.kernel_model import MAX_UNROLLED_PER_THREAD
from ptxforge.autosched.state import state_from_payload
from ptxforge.graph.zoo import get_network

TARGET = "cuda -arch=sm_90a"


def judge(records_dir: str, net: str) -> list[dict]:
    """``[{line, task, cost, all_cost, ok, code, valid}]`` of the records of ``net`` that
    the current sketches read (``code``: the largest unrolled code of its kernels, 0 for
    sketches without a tile step; ``valid``: the model's validity, the cap included)."""
    graph, params, _, _ = get_network(net, 1, "NHWC", "float32")
    tasks = {t.workload_key: t for t in
             autosched.extract_tasks(graph, params, TARGET, precision="float16")[0]}
    out = []
    with open(os.path.join(records_dir, f"{net}.json")) as f:
        for line in f:
            rec = json.loads(line)
            task = tasks.get(rec["task"]["key"])
            st = state_from_payload(task, rec["payload"]) if task is not None else None
            if st is None:
                continue
            model = task.models[st.sketch]
            rows = np.array([st.values], dtype=np.int64)
            kernels = model.kernels(rows)
            res = rec["result"]
            out.append({
                "line": line, "task": rec["task"]["key"], "all_cost": res["all_cost"],
                "ok": res["error_no"] == 0, "cost": float(np.mean(res["costs"])),
                "code": max([int(k["unrolled_code"][0]) for _, k in kernels
                             if "unrolled_code" in k] or [0]),
                "valid": bool(model.valid(rows, kernels)[0])})
    best: dict = {}
    for r in out:
        if r["ok"]:
            best[r["task"]] = min(best.get(r["task"], np.inf), r["cost"])
    for r in out:
        r["near_best"] = r["ok"] and r["cost"] <= 1.05 * best[r["task"]]
    return out


def summary(rows: list, refused) -> str:
    def part(sel) -> str:
        chosen = [r for r in rows if sel(r)]
        return f"{sum(refused(r) for r in chosen)}/{len(chosen)}"

    seconds = sum(r["all_cost"] for r in rows if refused(r))
    return (f"refused {sum(refused(r) for r in rows)}/{len(rows)}; near-best "
            f"{part(lambda r: r['near_best'])}, >2 s {part(lambda r: r['all_cost'] > 2)}, "
            f">1 s {part(lambda r: r['all_cost'] > 1)}, <0.5 s "
            f"{part(lambda r: r['all_cost'] < 0.5)}; {seconds:.1f} of "
            f"{sum(r['all_cost'] for r in rows):.1f} s; largest near-best code "
            f"{max([r['code'] for r in rows if r['near_best']] or [0])}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", required=True, help="a folder of runs' NET.json")
    ap.add_argument("--nets", default="resnet_v1-18,resnet_v1-50,mobilenet_v2,bert")
    ap.add_argument("--cap", type=int, default=0, help="also judge this cap (code > cap)")
    ap.add_argument("--write", metavar="OUT", help="the records read, and OUT/after/ kept")
    args = ap.parse_args(argv)
    everything = []
    for net in args.nets.split(","):
        rows = judge(args.records, net)
        everything += rows
        print(f"{net}: cap {MAX_UNROLLED_PER_THREAD}: {summary(rows, lambda r: not r['valid'])}")
        if args.write:
            for sub, keep in (("", lambda r: True), ("after", lambda r: r["valid"])):
                folder = os.path.join(args.write, sub)
                os.makedirs(folder, exist_ok=True)
                with open(os.path.join(folder, f"{net}.json"), "w") as f:
                    f.writelines(r["line"] for r in rows if keep(r))
                log = os.path.join(args.records, f"{net}.log")
                if os.path.exists(log):
                    shutil.copy(log, folder)
    print(f"all: cap {MAX_UNROLLED_PER_THREAD}: {summary(everything, lambda r: not r['valid'])}")
    if args.cap:
        print(f"all: cap {args.cap}: {summary(everything, lambda r: r['code'] > args.cap)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
