"""Auto-scheduler candidates built whole, timed per stage and checked byte for byte.

A fixed list of search states (``bench/data/candidate_states.json``: task, sketch and slot
values, as records store them) of the sm_90a sketches of the fp16 tasks of ResNet-18 and
BERT: tensor-core, wgmma and CUDA-core sketches of convolutions, dense layers and batch
products. Each is built as a builder builds it (the schedule made from the state, lowered,
LLVM IR, O3, PTX and, where ptxas is found, cubins): ``--save DIR`` writes every
candidate's device IR, PTX and cubin digest to ``DIR/<name>.txt``; ``--check DIR``
compares against those files and exits 1 on any difference, so a change meant only to make
builds cheaper can be shown to build the same kernels. The stage times (CPU ms per
candidate, least of ``--runs``) are printed for the whole corpus; ``--profile N`` prints
the top N functions of a cProfile run of the schedule and lowering stages; ``--ops``
counts the Python operations of each build to device IR (a traced run, about 50x slower),
a figure that does not move with the machine's load.

    PYTHONPATH=<parent of the checkout> python3 bench/candidate_corpus.py [--runs 2]
        [--only resnet-18:3] [--to ptx|cubin|ir] [--save DIR | --check DIR] [--profile 40]
        [--ops] [--cpu]
    python3 bench/candidate_corpus.py --regenerate   # draw the states again (seed 0)

The states were drawn once with :func:`draw_states` and are kept in the file, so the corpus
does not move when the search changes.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import os
import pstats
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
STATES = os.path.join(HERE, "data", "candidate_states.json")
TARGET = "cuda -arch=sm_90a"
TASKS = ("resnet-18:1", "resnet-18:3", "resnet-18:8", "resnet-18:20", "resnet-18:27",
         "bert:1", "bert:2", "bert:4", "bert:7")
"""ResNet-18 3x3 convolutions (64, 128, 256 channels), its dense layer; BERT's dense
layers and its two batch products (NHWC, batch 1, fp16 on float32 networks)."""
PER_SKETCH = 2


def _tasks(specs) -> dict:
    """``{"net:index": SearchTask}`` of the given specs."""
    from ptxforge import autosched
    from ptxforge.graph import GraphPassContext
    from ptxforge.graph.zoo import get_network

    nets: dict = {}
    out = {}
    for spec in specs:
        name, idx = spec.rsplit(":", 1)
        if name not in nets:
            net, params, _, _ = get_network(name, 1, "NHWC", "float32")
            # the states were drawn from BERT's attention as batch products and a softmax
            # (fused from 256 keys then, from 128 now): keep those tasks and their indices
            with GraphPassContext(config={"fused_attention": False}):
                nets[name] = autosched.extract_tasks(net, params, TARGET,
                                                     precision="float16")[0]
        out[spec] = nets[name][int(idx)]
    return out


def draw_states(seed: int = 0, per_sketch: int = PER_SKETCH) -> list[dict]:
    """``per_sketch`` valid random states of every sketch of every task of :data:`TASKS`."""
    from ptxforge import autosched
    from ptxforge.autosched.state import State, state_payload

    out = []
    for spec, task in _tasks(TASKS).items():
        policy = autosched.SketchPolicy(task, autosched.RandomModel(seed=seed), seed=seed,
                                        verbose=0)
        pop = policy.sample_initial_population(64 * len(task.sketches))
        for k, sk in enumerate(task.sketches):
            rows = [r for r in pop if int(r[0]) == k][:per_sketch]
            for i, r in enumerate(rows):
                st = State.from_row(r, task)
                name = f"{spec}/{sk.name.split('(')[0]}/{i}"
                out.append({"name": name, "task": spec, "payload": state_payload(task, st)})
    return out


def load_candidates(path: str = STATES, only: str = "") -> list[tuple]:
    """``[(name, task, State)]`` of the corpus file, those whose name holds one of the
    comma-separated substrings of ``only`` if given."""
    from ptxforge.autosched.state import state_from_payload

    with open(path) as f:
        items = json.load(f)
    if only:
        items = [it for it in items if any(p in it["name"] for p in only.split(","))]
    tasks = _tasks(sorted({it["task"] for it in items}))
    out = []
    for it in items:
        task = tasks[it["task"]]
        st = state_from_payload(task, it["payload"])
        if st is None:
            raise ValueError(f"{it['name']}: the task has no sketch {it['payload']['sketch']}")
        out.append((it["name"], task, st))
    return out


def build(task, state, compile_to: str = "ptx"):
    """A :class:`~ptxforge.measure.BuildResult` of one candidate, built from nothing cached."""
    from ptxforge.autosched.state import candidate_input
    from ptxforge.backend_ptx import compile as backend
    from ptxforge.measure import build as build_mod
    from ptxforge.measure.build import BuildOptions, build_candidate

    build_mod._kernel_caches.clear()  # every build compiles its kernels
    getattr(backend, "forget_compiled", lambda: None)()  # not reused by LLVM IR or PTX
    opts = BuildOptions(target_sm="sm_90a", compile_to=compile_to, keep_sources=True)
    return build_candidate(candidate_input(task, state), opts)


def count_ops(task, state) -> int:
    """Python bytecode operations executed building one candidate to device IR (schedule
    and lowering): unlike time, the count does not depend on the machine's load."""
    n = 0

    def local(frame, event, arg):
        nonlocal n
        if event == "opcode":
            n += 1
        return local

    def trace(frame, event, arg):
        frame.f_trace_opcodes = True
        return local

    sys.settrace(trace)
    try:
        build(task, state, "ir")
    finally:
        sys.settrace(None)
    return n


def fingerprint(res) -> str:
    """What a build made, as text: the error, or the device IR, and each kernel's PTX and
    a digest of its cubin."""
    if res.error_no:
        return f"error {res.error_no}: {res.error_msg.splitlines()[0]}\n"
    art = res.artifact
    parts = [art.device_ir]
    for name in sorted(art.kernels):
        k = art.kernels[name]
        parts.append(f"// ---- PTX of {name}\n{k.sources.get('ptx', '')}")
        if k.cubin is not None:
            parts.append(f"// ---- cubin of {name}: sha256 "
                         f"{hashlib.sha256(k.cubin).hexdigest()}, {k.resources}\n")
    return "\n".join(parts)


def cut(text: str, to: str) -> str:
    """The part of a :func:`fingerprint` that a build stopped after ``to`` makes (a
    corpus saved with cubins checks builds to PTX or device IR too)."""
    if to == "ir":
        return text.split("\n// ---- ", 1)[0]
    if to == "ptx":
        return "\n".join(p for p in text.split("\n") if not p.startswith("// ---- cubin of"))
    return text


def write_fixtures(folder: str, cands: list) -> None:
    """``states.json`` (the candidates' entries of the corpus file) and ``<name>.device.ir``
    for each: what ``tests/test_lowering_candidates.py`` checks."""
    os.makedirs(folder, exist_ok=True)
    with open(STATES) as f:
        entries = {it["name"]: it for it in json.load(f)}
    with open(os.path.join(folder, "states.json"), "w") as f:
        json.dump([entries[name] for name, _, _ in cands], f, indent=1)
        f.write("\n")
    for name, task, st in cands:
        with open(_file(folder, name)[:-4] + ".device.ir", "w") as f:
            f.write(cut(fingerprint(build(task, st, "ir")), "ir"))


def first_difference(a: str, b: str) -> str:
    la, lb = a.splitlines(), b.splitlines()
    for i, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            return f"line {i + 1}:\n  expected: {x}\n  got:      {y}"
    return f"lengths differ: {len(la)} vs {len(lb)} lines"


def _file(folder: str, name: str) -> str:
    return os.path.join(folder, name.replace("/", "__").replace(":", "_") + ".txt")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--only", default="", help="comma-separated substrings of names")
    ap.add_argument("--to", default="ptx", choices=("ir", "ptx", "cubin"))
    ap.add_argument("--save", metavar="DIR")
    ap.add_argument("--check", metavar="DIR")
    ap.add_argument("--profile", type=int, default=0, metavar="N")
    ap.add_argument("--cpu", action="store_true",
                    help="stage times in CPU seconds of this process (time.process_time), "
                         "which other work on the machine disturbs less than wall time; "
                         "ptxas, a child process, is then not counted")
    ap.add_argument("--fixtures", metavar="DIR",
                    help="write the selected states and their device IR there (the data of "
                         "tests/test_lowering_candidates.py)")
    ap.add_argument("--ops", action="store_true",
                    help="count the Python operations of each build to device IR")
    ap.add_argument("--regenerate", action="store_true",
                    help=f"draw the states again and write {STATES}")
    args = ap.parse_args(argv)
    if args.regenerate:
        states = draw_states()
        os.makedirs(os.path.dirname(STATES), exist_ok=True)
        with open(STATES, "w") as f:
            json.dump(states, f, indent=1)
            f.write("\n")
        print(f"{len(states)} states written to {STATES}")
        return 0
    if args.cpu:
        import types

        from ptxforge import stages

        # the stage markers read their clock through the module's ``time``
        stages.time = types.SimpleNamespace(perf_counter=time.process_time)
    cands = load_candidates(only=args.only)
    if args.fixtures:
        write_fixtures(args.fixtures, cands)
        return 0
    for _, task, _ in cands:
        task.task_spec.module()  # parsed once per builder process, not per candidate
    if args.ops:
        build(*cands[0][1:], "ir")  # imports and first-use set-up are not counted
        total = 0
        for name, task, st in cands:
            n = count_ops(task, st)
            total += n
            print(f"{name:44s} {n / 1e6:8.3f} M ops", flush=True)
        print(f"{len(cands)} candidates: {total / 1e6:.2f} M ops, "
              f"{total / 1e6 / len(cands):.3f} M per candidate")
        return 0
    best: dict = {}
    failed = 0
    for run in range(args.runs):
        for name, task, st in cands:
            t = time.process_time()
            res = build(task, st, args.to)
            cpu = time.process_time() - t
            times = dict(res.stage_seconds, cpu=cpu)
            prev = best.setdefault(name, times)
            if prev is not times and cpu < prev["cpu"]:
                best[name] = times
            if run:
                continue
            text = fingerprint(res)
            line = f"{name:44s} {1e3 * cpu:7.1f} ms"
            if args.save:
                os.makedirs(args.save, exist_ok=True)
                with open(_file(args.save, name), "w") as f:
                    f.write(text)
            if args.check:
                with open(_file(args.check, name)) as f:
                    want = f.read()
                want, text = cut(want, args.to), cut(text, args.to)
                if want != text:
                    failed += 1
                    line += "  DIFFERENT: " + first_difference(want, text)
                else:
                    line += "  identical"
            print(line, flush=True)
    n = max(len(best), 1)
    keys = ("schedule", "lower", "llvm_ir", "opt", "ptx", "ptxas", "cpu")
    total = {k: sum(t.get(k, 0.0) for t in best.values()) for k in keys}
    clock = "CPU" if args.cpu else "wall"
    print(f"{len(best)} candidates, ms per candidate (stage {clock} times of the least-CPU "
          "run; cpu: the build's process time): "
          + ", ".join(f"{k} {1e3 * v / n:.1f}" for k, v in total.items()))
    passes: dict = {}
    for t in best.values():
        for k, v in t.items():
            if k.startswith("lower."):
                passes[k] = passes.get(k, 0.0) + v
    print("  lowering passes: " + ", ".join(
        f"{k[6:]} {1e3 * v / n:.1f}" for k, v in sorted(passes.items(), key=lambda kv: -kv[1])
        if 1e3 * v / n >= 0.1))
    if args.profile:
        prof = cProfile.Profile()
        for _, task, st in cands:
            prof.enable()
            build(task, st, "ir")
            prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(args.profile)
        pstats.Stats(prof).sort_stats("tottime").print_stats(args.profile)
    if failed:
        print(f"{failed} candidate(s) differ from {args.check}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    sys.exit(main())
