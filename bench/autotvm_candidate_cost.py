"""What one AutoTVM candidate costs before it reaches LLVM: the tuner's part (instantiate the
template with a config and make the measure input) and the builder's part (parse and apply
the schedule, lower). Measured in one process, over configs of the tutorial's conv2d
template (seed layer) that instantiate.

    PYTHONPATH=<parent of the checkout> python3 bench/autotvm_candidate_cost.py [--configs 40]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from ptxforge import autotvm
from ptxforge.measure.build import BuildOptions, build_candidate


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--configs", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    from ptxforge.tests.test_autotvm import SEED_ARGS  # noqa: F401  (registers the template)

    task = autotvm.task.create("test/conv2d_no_batching", args=SEED_ARGS, target="cuda")
    rng = np.random.default_rng(args.seed)
    opts = BuildOptions(compile_to="ir")
    tuner_s, apply_s, lower_s, build_s = [], [], [], []
    tried = 0
    while len(tuner_s) < args.configs and tried < 50 * args.configs:
        tried += 1
        cfg = task.config_space.get(int(rng.integers(len(task.config_space))))
        t = time.perf_counter()
        try:
            inp = task.measure_input(cfg).to_measure()
        except Exception:
            continue
        tuner = time.perf_counter() - t
        task.spec.module()  # parsed once per builder process: not part of a candidate
        res = build_candidate(inp, opts)
        if res.error_no != 0:
            continue
        tuner_s.append(tuner)
        st = res.stage_seconds
        apply_s.append(st.get("parse", 0.0) + st.get("apply", 0.0))
        lower_s.append(st.get("lower", 0.0))
        build_s.append(res.time_cost)

    def ms(xs):
        return f"{1e3 * statistics.median(xs):7.1f} ms (mean {1e3 * statistics.mean(xs):.1f})"

    print(f"{len(tuner_s)} candidates of test/conv2d_no_batching {SEED_ARGS}")
    print(f"tuner: instantiate + measure input   {ms(tuner_s)}")
    print(f"builder: parse + apply the schedule  {ms(apply_s)}")
    print(f"builder: lower                       {ms(lower_s)}")
    print(f"builder: total to device IR          {ms(build_s)}")


if __name__ == "__main__":
    main()
