"""Where one auto-scheduler trial's time goes, measured on the CPU: the main process's
part (turn a searched state into a measure input) and the builder's part per stage
(schedule, lower, LLVM IR, O3, PTX, ptxas), for states of the fp16 tasks of BERT and
ResNet-18 on sm_90a sketches (tensor-core, wgmma and CUDA-core sketches alike).

    PYTHONPATH=<parent of the checkout> python3 bench/trial_cost.py [--states 12]
        [--compile-to ptx|ir|cubin] [--tasks bert:1,bert:2,resnet-18:3] [--path new]
        [--cpu]

States come from one round of the search policy with a random model, so they are the
states a tuning run measures first. Both parts run in this process, one after the other,
for the path before the one-way change (the tuner builds the state's pipeline and sends
text; the builder parses and applies it) and for the one-way path (the tuner sends the
state; the builder makes and applies the pipeline). ``--path new`` measures the one-way
path only (what builders run today); ``--cpu`` reads every stage's time as this process's
CPU time (``time.process_time``) instead of wall time, which other work on the machine
disturbs less; ptxas, a child process, is then reported by its own CPU time (user and
system, from ``resource.getrusage``), and the builder's total includes it.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

from ptxforge import autosched
from ptxforge.autosched.state import State, candidate_input, state_payload
from ptxforge.graph.zoo import get_network
from ptxforge.measure.build import BuildOptions, build_candidate
from ptxforge.stages import TOP_LEVEL, merge


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


def old_input(task, state):
    """The measure input as the tuner made it before the one-way path: the state's
    pipeline built here (a tensor-core sketch builds its te schedule) and sent as text."""
    from ptxforge.measure import MeasureInput

    return MeasureInput(task.task_spec, state.pipeline_text(task), state_payload(task, state))


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _cpu(fn, *args):
    """``(fn(*args), CPU seconds of this process, CPU seconds of its children)``."""
    # both paths build the same kernels: without this, the second would load them from
    # the builder's kernel cache instead of compiling them
    from ptxforge.backend_ptx import compile as backend
    from ptxforge.measure import build

    build._kernel_caches.clear()
    getattr(backend, "forget_compiled", lambda: None)()  # and the reuse by LLVM IR, PTX
    c = _children_cpu()
    t = time.process_time()
    out = fn(*args)
    return out, time.process_time() - t, _children_cpu() - c


def reuse_counts(built: list) -> dict:
    """How many of the kernels of ``built`` (build results kept with their sources) are
    distinct by device IR (what the kernel cache finds), by LLVM IR and by PTX (what a
    builder reuses within its process since the LLVM IR and assembler tables)."""
    import hashlib

    from ptxforge.ir.printer import print_func

    seen: dict = {"kernels": 0, "device IR": set(), "LLVM IR": set(), "PTX": set()}
    for res in built:
        if res.error_no:
            continue
        for f in res.artifact.module.kernels():
            k = res.artifact.kernels[f.name]
            seen["kernels"] += 1
            for key, text in (("device IR", print_func(f)), ("LLVM IR", k.sources["llvm_ir"]),
                              ("PTX", k.sources["ptx"])):
                seen[key].add(hashlib.sha256(text.encode()).hexdigest())
    return {k: v if isinstance(v, int) else len(v) for k, v in seen.items()}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--states", type=int, default=12)
    ap.add_argument("--tasks", default="bert:1,bert:2,resnet-18:3")
    ap.add_argument("--compile-to", default="ptx", choices=("ir", "ptx", "cubin"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--path", default="both", choices=("both", "new"),
                    help="measure the path before the one-way change too, or only the "
                         "one-way path builders run today")
    ap.add_argument("--cpu", action="store_true",
                    help="stage times in CPU seconds of this process (ptxas: of the child)")
    ap.add_argument("--reuse", action="store_true",
                    help="also build every state to PTX with its sources and count the "
                         "distinct device IR, LLVM IR and PTX texts of all the kernels")
    args = ap.parse_args(argv)
    if args.cpu:
        import types

        from ptxforge import stages as stage_clock

        # the stage markers read their clock through the module's ``time``
        stage_clock.time = types.SimpleNamespace(perf_counter=time.process_time)
    target = "cuda -arch=sm_90a"
    opts = BuildOptions(target_sm="sm_90a", compile_to=args.compile_to)
    paths = ("old", "new") if args.path == "both" else ("new",)
    clock = "CPU" if args.cpu else "wall"
    print("CPU seconds of this process (time.process_time) and of ptxas, mean per candidate; "
          "with both paths, the old and the one-way path alternate on each state, so both "
          "see the same machine load")
    kept: list = []  # with --reuse: every state built to PTX, sources kept
    for label, task in tasks_of(args.tasks, target):
        policy = autosched.SketchPolicy(task, autosched.RandomModel(seed=args.seed),
                                        seed=args.seed, verbose=0)
        rows = policy.search_one_round(args.states)
        task.task_spec.module()  # parsed once per builder process, not per candidate
        cost: dict = {f"{p}_{k}": [] for p in paths for k in ("main", "build")}
        stages: dict = {p: {} for p in paths}
        for r in rows:
            st = State.from_row(r, task)
            for path in paths:
                make = old_input if path == "old" else candidate_input
                inp, t, _ = _cpu(make, task, st)
                cost[f"{path}_main"].append(t)
                res, t, child = _cpu(build_candidate, inp, opts)
                cost[f"{path}_build"].append(t + (child if args.cpu else 0.0))
                times = dict(res.stage_seconds)
                if args.cpu and "ptxas" in times:
                    times["ptxas"] = child
                merge(stages[path], times)
            if args.reuse:
                sources = BuildOptions(target_sm="sm_90a", compile_to="ptx", keep_sources=True)
                kept.append(_cpu(build_candidate, candidate_input(task, st), sources)[0])
        sk = sorted({task.sketches[int(r[0])].name for r in rows})
        print(f"{label}: {len(rows)} states of {', '.join(sk)[:100]}")
        for path in paths:
            m = 1e3 * statistics.mean(cost[f"{path}_main"])
            b = 1e3 * statistics.mean(cost[f"{path}_build"])
            # ``llvm_opt`` is the compiler's own wall-clock figure for ``opt``: not with --cpu
            extra = ("parse", "apply", "analyze") + (() if args.cpu else ("llvm_opt",))
            shown = [k for k in (*TOP_LEVEL, *extra) if k in stages[path]]
            split = ", ".join(f"{k} {1e3 * stages[path][k] / len(rows):.0f}" for k in shown)
            print(f"  {path}: main process {m:7.1f} ms/trial, builder {b:7.1f} ms/candidate "
                  f"({clock} ms by stage: {split})")
    if args.reuse:
        counts = reuse_counts(kept)
        print(f"{counts['kernels']} kernels of {len(kept)} states: distinct "
              + ", ".join(f"{k} {v}" for k, v in counts.items() if k != "kernels"))


if __name__ == "__main__":
    main()
