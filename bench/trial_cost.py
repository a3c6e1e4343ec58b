"""Where one auto-scheduler trial's time goes, measured on the CPU: the main process's
part (turn a searched state into a measure input) and the builder's part per stage
(schedule, lower, LLVM IR, O3, PTX, ptxas), for states of the fp16 tasks of BERT and
ResNet-18 on sm_90a sketches (tensor-core, wgmma and CUDA-core sketches alike).

    PYTHONPATH=<parent of the checkout> python3 bench/trial_cost.py [--states 12]
        [--compile-to ptx|ir|cubin] [--tasks bert:1,bert:2,resnet-18:3]

States come from one round of the search policy with a random model, so they are the
states a tuning run measures first. Both parts run in this process, one after the other.
"""

from __future__ import annotations

import argparse
import statistics
import time

from ptxforge import autosched
from ptxforge.graph.zoo import get_network
from ptxforge.measure.build import BuildOptions, build_candidate
from ptxforge.stages import TOP_LEVEL


def tasks_of(spec: str, target: str) -> list:
    """``[(label, SearchTask)]`` for ``net:index`` items of ``spec``."""
    nets: dict = {}
    out = []
    for item in spec.split(","):
        name, idx = item.rsplit(":", 1)
        if name not in nets:
            net, params, _, _ = get_network(name, 1, "NHWC", "float32")
            nets[name] = autosched.extract_tasks(net, params, target, precision="float16")[0]
        task = nets[name][int(idx)]
        out.append((f"{name}:{idx} {task.desc[8:60]}", task))
    return out


def make_inputs(task, rows) -> list:
    """The measure inputs of searched states, as the tuner makes them."""
    from ptxforge.autosched import tuner

    if hasattr(tuner, "candidate_inputs"):
        return tuner.candidate_inputs(task, rows)
    from ptxforge.autosched.state import State, state_payload
    from ptxforge.measure import MeasureInput

    return [MeasureInput(task.task_spec, s.pipeline_text(task), state_payload(task, s))
            for s in (State.from_row(r, task) for r in rows)]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--states", type=int, default=12)
    ap.add_argument("--tasks", default="bert:1,bert:2,resnet-18:3")
    ap.add_argument("--compile-to", default="ptx", choices=("ir", "ptx", "cubin"))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    target = "cuda -arch=sm_90a"
    opts = BuildOptions(target_sm="sm_90a", compile_to=args.compile_to)
    for label, task in tasks_of(args.tasks, target):
        policy = autosched.SketchPolicy(task, autosched.RandomModel(seed=args.seed),
                                        seed=args.seed, verbose=0)
        rows = policy.search_one_round(args.states)
        task.task_spec.module()  # parsed once per builder process, not per candidate
        main_s, build_s, stages = [], [], {}
        for r in rows:
            t = time.perf_counter()
            inp = make_inputs(task, [r])[0]
            main_s.append(time.perf_counter() - t)
            res = build_candidate(inp, opts)
            build_s.append(res.time_cost)
            for k, v in res.stage_seconds.items():
                stages.setdefault(k, []).append(v)
        sk = sorted({task.sketches[int(r[0])].name for r in rows})
        print(f"{label}: {len(rows)} states of {len(sk)} sketches ({', '.join(sk)[:90]})")
        print(f"  main process per trial: {1e3 * statistics.mean(main_s):7.1f} ms "
              f"(median {1e3 * statistics.median(main_s):.1f})")
        print(f"  builder per candidate:  {1e3 * statistics.mean(build_s):7.1f} ms "
              f"(median {1e3 * statistics.median(build_s):.1f})")
        shown = [k for k in (*TOP_LEVEL, "parse", "apply", "analyze", "llvm_opt")
                 if k in stages]
        print("  by stage (mean ms): " + ", ".join(
            f"{k} {1e3 * sum(stages[k]) / len(rows):.1f}" for k in shown))


if __name__ == "__main__":
    main()
