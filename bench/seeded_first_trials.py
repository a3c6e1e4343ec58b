"""Do the first trials of a network find better kernels with a cost model seeded by another
network's records? Measured on the CPU with the simulator runner (its estimate of each
candidate's lowered kernels is the "truth"; no GPU).

For each pair ``A:B`` a model is trained on A's records (``records train-model``, the
records of ``bench/cost_model_data.py``), then B is tuned from an empty log for ``--trials``
trials on the simulator runner, with and without ``--load-model`` of it, for each seed. The
figure is the network's estimated latency at the end (the weighted sum of the tasks' best
estimated times, as the task table prints it): lower is better.

    PYTHONPATH=<parent of the checkout> python3 bench/seeded_first_trials.py \
        --pair resnet_v1-18:mobilenet_v2 --trials 200 --seeds 0 1
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RECORDS = os.path.join(HERE, "results", "costmodel_{}_sim.json")


def cli(*args) -> str:
    proc = subprocess.run([sys.executable, "-m", "ptxforge", *args], capture_output=True,
                          text=True, timeout=3600)
    if proc.returncode:
        raise SystemExit(f"ptxforge {' '.join(args)} failed:\n{proc.stdout[-2000:]}\n"
                         f"{proc.stderr[-2000:]}")
    return proc.stdout + proc.stderr


def latency(out: str) -> float:
    m = re.findall(r"Estimated total latency: ([\d.]+) ms", out)
    if not m:
        raise SystemExit(f"no estimated latency in the output:\n{out[-2000:]}")
    return float(m[-1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pair", action="append", default=[],
                    help="SOURCE:TARGET networks (default resnet_v1-18:mobilenet_v2)")
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--dtype", default="float16")
    args = ap.parse_args(argv)
    pairs = [p.split(":") for p in (args.pair or ["resnet_v1-18:mobilenet_v2"])]
    common = ("--dtype", args.dtype, "--runner", "sim", "--no-sim-check")
    with tempfile.TemporaryDirectory() as tmp:
        for source, target in pairs:
            model = os.path.join(tmp, f"{source}.npz")
            cli("records", "train-model", RECORDS.format(source), "-o", model, "--network",
                source, "--dtype", args.dtype)
            print(f"{target}, {args.trials} trials from an empty log, simulator runner; "
                  f"model trained on {source}'s records")
            for seed in args.seeds:
                row = []
                for label, extra in (("without", ()), ("seeded", ("--load-model", model))):
                    log = os.path.join(tmp, f"{target}-{seed}-{label}.json")
                    t = time.perf_counter()
                    out = cli("tune-network", target, *common, "--trials", str(args.trials),
                              "--seed", str(seed), "--log", log, *extra)
                    row.append((label, latency(out), time.perf_counter() - t))
                text = ", ".join(f"{lab} {ms:.4f} ms ({s:.0f} s)" for lab, ms, s in row)
                gain = row[0][1] / row[1][1]
                print(f"  seed {seed}: {text}; without / seeded {gain:.3f}")


if __name__ == "__main__":
    main()
