"""The builder's cost per candidate on four networks, stage by stage, with the kernels it
makes checked byte for byte.

A fixed list of search states (``bench/data/build_profile_states.json``) drawn from one
search round (random model, seed 0) of tasks of ResNet-18, ResNet-50, MobileNetV2 and BERT
(fp16, NHWC, batch 1, sm_90a sketches: tensor-core, wgmma and CUDA-core; depthwise,
pointwise and 3x3 convolutions, dense layers, batch products), as a tuning run's first
rounds measure them. Each state is built as a builder worker builds it
(``measure.build.build_candidate``, one process, candidates in order, so whatever a worker
keeps between candidates is kept here too, except the kernel caches, emptied before each
build so that every kernel is compiled): ``--save DIR`` writes each candidate's device IR,
PTX and cubin digest; ``--check DIR`` compares with them and exits 1 on any difference.

Stage times are printed per candidate (mean over the corpus, ms; ``--cpu``: CPU time of
this process, ptxas by its own CPU time) and ``--profile N`` prints the top N functions of
a cProfile run of the whole builder path.

    PYTHONPATH=<parent of the checkout> python3 bench/build_profile.py --to cubin \
        --save before/                        # on the old tree
    python3 bench/build_profile.py --to cubin --check before/ --cpu    # after a change
    python3 bench/build_profile.py --to ptx --profile 40 --only bert
    python3 bench/build_profile.py --to cubin --jobs 16 --check before/   # 16 builders
    python3 bench/build_profile.py --regenerate       # draw the states again
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
STATES = os.path.join(HERE, "data", "build_profile_states.json")
TASKS = ("resnet-18:3,resnet-18:8,resnet-18:20,resnet-50:2,resnet-50:4,resnet-50:9,"
         "resnet-50:33,mobilenet_v2:0,mobilenet_v2:2,mobilenet_v2:7,mobilenet_v2:25,"
         "bert:1,bert:2,bert:4,bert:7")
"""Tasks of the four networks (``net:index`` of ``autosched.extract_tasks``)."""
PER_TASK = 6


def draw_states(seed: int = 0, per_task: int = PER_TASK) -> list[dict]:
    """The first ``per_task`` states of one search round (random model) of each task."""
    from candidate_corpus import _tasks
    from ptxforge import autosched
    from ptxforge.autosched.state import State, state_payload

    out = []
    for spec, task in _tasks(TASKS.split(",")).items():
        policy = autosched.SketchPolicy(task, autosched.RandomModel(seed=seed), seed=seed,
                                        verbose=0)
        for i, r in enumerate(policy.search_one_round(per_task)):
            st = State.from_row(r, task)
            sk = task.sketches[st.sketch].name.split("(")[0]
            out.append({"name": f"{spec}/{sk}/{i}", "task": spec,
                        "payload": state_payload(task, st)})
    return out


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def build(task, state, compile_to: str):
    """A builder's result for one candidate, its kernels compiled (not reused)."""
    from ptxforge.autosched.state import candidate_input
    from ptxforge.backend_ptx import compile as backend
    from ptxforge.measure import build as build_mod
    from ptxforge.measure.build import BuildOptions, build_candidate

    build_mod._kernel_caches.clear()
    backend.forget_compiled()
    opts = BuildOptions(target_sm="sm_90a", compile_to=compile_to, keep_sources=True)
    return build_candidate(candidate_input(task, state), opts)


def _in_workers(cands: list, compile_to: str, jobs: int) -> list:
    """Build results of ``cands``, in order, from a pool of ``jobs`` builder workers."""
    import dataclasses

    from ptxforge.autosched.state import candidate_input
    from ptxforge.measure.build import LocalBuilder

    builder = LocalBuilder(timeout=120, n_parallel=jobs, target_sm="sm_90a",
                           compile_to=compile_to)
    builder.options = dataclasses.replace(builder.options, keep_sources=True)
    out: dict = {}
    try:
        for i, (_, task, st) in enumerate(cands):
            builder.submit(i, candidate_input(task, st))
        while len(out) < len(cands):
            for key, res in builder.collect(None):
                out[key] = res
    finally:
        builder.close()
    return [out[i] for i in range(len(cands))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--to", default="ptx", choices=("ir", "ptx", "cubin"))
    ap.add_argument("--only", default="", help="comma-separated substrings of names")
    ap.add_argument("--save", metavar="DIR")
    ap.add_argument("--check", metavar="DIR")
    ap.add_argument("--cpu", action="store_true", help="CPU times instead of wall times")
    ap.add_argument("--profile", type=int, default=0, metavar="N")
    ap.add_argument("--quiet", action="store_true", help="no line per candidate")
    ap.add_argument("--every", type=int, default=1, metavar="K",
                    help="only every K-th state of the corpus")
    ap.add_argument("--ops", action="store_true",
                    help="count the Python operations of each build to device IR (schedule "
                         "and lowering; a traced run, about 50x slower): a figure that the "
                         "machine's load does not move")
    ap.add_argument("--jobs", type=int, default=0, metavar="N",
                    help="build in N builder workers (measure.LocalBuilder, as a tuning run "
                         "does: forked, kernel caches kept per worker) instead of in this "
                         "process; stage times are then the workers' wall times")
    ap.add_argument("--regenerate", action="store_true")
    args = ap.parse_args(argv)
    if args.jobs and (args.cpu or args.profile or args.ops):
        ap.error("--jobs times the workers' wall clock: no --cpu, --profile or --ops")
    from candidate_corpus import (
        _file,
        count_ops,
        cut,
        fingerprint,
        first_difference,
        load_candidates,
    )

    if args.regenerate:
        states = draw_states()
        with open(STATES, "w") as f:
            json.dump(states, f, indent=1)
            f.write("\n")
        print(f"{len(states)} states written to {STATES}")
        return 0
    if args.cpu:
        import types

        from ptxforge import stages

        stages.time = types.SimpleNamespace(perf_counter=time.process_time)
    cands = load_candidates(STATES, args.only)[::args.every]
    for _, task, _ in cands:
        task.task_spec.module()  # as a builder worker has it after its first candidate
    from ptxforge.measure.build import LocalBuilder

    LocalBuilder(n_parallel=0, target_sm="sm_90a")._warm_up()  # as a pool does before forking
    if args.ops:
        build(*cands[0][1:], "ir")  # imports and first-use set-up are not counted
        total = 0
        for name, task, st in cands:
            n = count_ops(task, st)
            total += n
            if not args.quiet:
                print(f"{name:44s} {n / 1e6:8.3f} M ops", flush=True)
        print(f"{len(cands)} candidates: {total / 1e6:.2f} M Python operations, "
              f"{total / 1e6 / len(cands):.3f} M per candidate (schedule and lowering)")
        return 0
    prof = cProfile.Profile() if args.profile else None
    totals: dict = {}
    failed = reused = 0
    t_all = time.perf_counter()
    built = _in_workers(cands, args.to, args.jobs) if args.jobs else None
    for i, (name, task, st) in enumerate(cands):
        c0 = _children_cpu()
        if built is not None:
            res = built[i]
        else:
            if prof:
                prof.enable()
            res = build(task, st, args.to)
            if prof:
                prof.disable()
        times = dict(res.stage_seconds, total=res.time_cost)
        if args.cpu and "ptxas" in times:
            times["ptxas"] = _children_cpu() - c0
        for k, v in times.items():
            totals[k] = totals.get(k, 0.0) + v
        text = fingerprint(res)
        line = f"{name:44s} " + " ".join(f"{k} {1e3 * times.get(k, 0):.0f}" for k in
                                         ("schedule", "lower", "llvm_ir", "opt", "ptx", "ptxas"))
        if args.save:
            os.makedirs(args.save, exist_ok=True)
            with open(_file(args.save, name), "w") as f:
                f.write(text)
        if args.check:
            # a kernel a worker reused from its cache was assembled with another candidate's
            # kernels: the candidate's own are assembled without it, into another cubin of
            # the same kernels, so only its device IR and PTX are compared
            to = args.to
            if to == "cubin" and res.artifact is not None and any(
                    k.cache_hit for k in res.artifact.kernels.values()):
                to, reused = "ptx", reused + 1
            with open(_file(args.check, name)) as f:
                want = cut(f.read(), to)
            if want != cut(text, to):
                failed += 1
                line += "  DIFFERENT: " + first_difference(want, cut(text, to))
            else:
                line += "  identical" + ("" if to == args.to else " (PTX: a kernel reused)")
        if not args.quiet or "DIFFERENT" in line:
            print(line, flush=True)
    n = max(len(cands), 1)
    top = ("schedule", "lower", "llvm_ir", "opt", "ptx", "ptxas")
    clock = "CPU" if args.cpu else "wall"
    print(f"{len(cands)} candidates in {time.perf_counter() - t_all:.1f} s wall; {clock} ms "
          "per candidate: " + ", ".join(f"{k} {1e3 * totals.get(k, 0) / n:.1f}" for k in top)
          + f", sum {1e3 * sum(totals.get(k, 0) for k in top) / n:.1f} (the whole build "
          f"{1e3 * totals.get('total', 0) / n:.1f}, wall)")
    others = sorted(((k, v) for k, v in totals.items() if k not in top + ("total",)),
                    key=lambda kv: -kv[1])
    print("  " + ", ".join(f"{k} {1e3 * v / n:.1f}" for k, v in others if 1e3 * v / n >= 0.1))
    if prof:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(args.profile)
        pstats.Stats(prof).sort_stats("tottime").print_stats(args.profile)
    if args.check:
        print(f"{len(cands) - failed} of {len(cands)} candidates identical to {args.check}"
              f" (to {args.to}" + (f"; {reused} of them to PTX only, a kernel reused from a "
                                   "worker's cache)" if reused else ")"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    sys.exit(main())
